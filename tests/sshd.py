"""Local servers for tests and benchmarks: a free port, and a real OpenSSH
server on 127.0.0.1 with throwaway keys for the SSH transport (the service
user, who runs the admin commands, can read the key)."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

from tests.stack import SERVICE_USER, service_folder


@contextlib.contextmanager
def running_sshd() -> Iterator[dict]:
    """SSHTransport's arguments for a login as root to a fresh sshd."""
    base = service_folder("div-sshd-")
    host_key, user_key = base / "host_key", base / "user_key"
    for key in (host_key, user_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (base / "authorized_keys").write_text((base / "user_key.pub").read_text())
    shutil.chown(user_key, SERVICE_USER, SERVICE_USER)
    port = free_port()
    config = base / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {base}/authorized_keys\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"PidFile {base}/sshd.pid\nStrictModes no\n"
        # The transport sets SLURM_TIME_FORMAT through `env`, so no AcceptEnv.
        "SetEnv PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n")
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen([shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                            stderr=open(base / "sshd.log", "w"))
    try:
        host_pub = (base / "host_key.pub").read_text().split()
        (base / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
        wait_for_port(port)
        yield {"host": "127.0.0.1", "port": port, "user": "root", "key_path": str(user_key),
               "known_hosts": str(base / "known_hosts")}
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int) -> None:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"sshd did not listen on {port}")
