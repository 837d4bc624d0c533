"""divergent installed as a site runs it: the real nginx from Debian, with
deploy/nginx/divergent.conf as shipped (only names, ports and certificate
paths changed), in front of the stack's gunicorn, TLS signed by a CA made
here; `div` trusts it through DIV_CA_BUNDLE and goes through HTTPS_PROXY
unless NO_PROXY says otherwise. The systemd units pass systemd-analyze."""
from __future__ import annotations

import hashlib
import os
import re
import select
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.sshd import free_port, wait_for_port
from tests.stack import ROOT, running_stack

DEPLOY = ROOT / "deploy"


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca_and_server_cert(folder: Path) -> None:
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=divergent test CA", "-keyout", str(folder / "ca.key"), "-out", str(folder / "ca.pem"))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", str(folder / "privkey.pem"), "-out", str(folder / "server.csr"))
    (folder / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", str(folder / "server.csr"), "-CA", str(folder / "ca.pem"),
            "-CAkey", str(folder / "ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", str(folder / "san.ext"), "-out", str(folder / "fullchain.pem"))


@pytest.fixture(scope="module")
def tls(stack, tmp_path_factory):
    """nginx on a free port with the shipped site file; yields its URL and
    the folder with the CA."""
    yield from nginx_in_front(stack, tmp_path_factory.mktemp("tls"))


def nginx_in_front(stack, folder: Path):
    make_ca_and_server_cert(folder)
    port, plain = free_port(), free_port()
    site = (DEPLOY / "nginx" / "divergent.conf").read_text()
    for shipped, here in (("127.0.0.1:8000", f"127.0.0.1:{stack.port}"),
                          ("listen 443 ssl", f"listen 127.0.0.1:{port} ssl"),
                          ("listen 80", f"listen 127.0.0.1:{plain}"),
                          ("div.example.org", "localhost"),
                          ("/etc/ssl/divergent", str(folder))):
        assert shipped in site, shipped
        site = site.replace(shipped, here)
    (folder / "site.conf").write_text(site)
    (folder / "nginx.conf").write_text(
        f"user root;\nworker_processes 1;\npid {folder}/nginx.pid;\nerror_log {folder}/error.log;\n"
        "events {}\nhttp {\n  access_log off;\n"
        f"  client_body_temp_path {folder}/body;\n  proxy_temp_path {folder}/proxy;\n"
        f"  include {folder}/site.conf;\n}}\n")
    nginx = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-p", str(folder), "-e",
                              str(folder / "error.log"), "-c", str(folder / "nginx.conf"),
                              "-g", "daemon off;"], stderr=subprocess.PIPE)
    try:
        wait_for_port(port)
        yield f"https://localhost:{port}", folder
    finally:
        nginx.terminate()
        nginx.wait(10)


@pytest.fixture(scope="module")
def site_behind_nginx(slurm_cluster, tmp_path_factory):
    """A stack configured as the login-node install of docs/admins/login-node.md (DIV_PROXY_HOPS=1,
    secure cookies) behind the shipped nginx site on a port that is not 443."""
    with running_stack(free_port(), None, settings={"DIV_PROXY_HOPS": "1",
                                                    "DIV_SECURE_COOKIES": "1"}) as proxied:
        front = nginx_in_front(proxied, tmp_path_factory.mktemp("site-tls"))
        try:
            yield proxied, *next(front)
        finally:
            front.close()


def test_the_dashboard_signs_in_through_nginx_on_any_port(site_behind_nginx):
    stack, url, folder = site_behind_nginx
    stack.flask("set-password", "e2e-user", "--password", "nginx-test-password")
    session, ca = requests.Session(), str(folder / "ca.pem")   # per request: the env's bundle loses
    page = session.get(f"{url}/login", verify=ca).text
    token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)
    # As a browser posts the form: with the page it came from as Referer.
    signed_in = session.post(f"{url}/login", headers={"Referer": f"{url}/login"}, verify=ca, data={
        "username": "e2e-user", "password": "nginx-test-password", "csrf_token": token})
    assert signed_in.status_code == 200 and "<h1>Runs</h1>" in signed_in.text, signed_in.text[:300]


def div_env(stack, tls, **extra) -> dict[str, str]:
    url, folder = tls
    env = stack.div_env()
    env.update(DIV_API_URL=url, DIV_CA_BUNDLE=str(folder / "ca.pem"), **extra)
    return env


def test_div_run_logs_and_storage_work_through_nginx_with_tls_verified(stack, tls, project,
                                                                        tmp_path):
    env = div_env(stack, tls)
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "echo", "through-tls",
                     cwd=project, env=env)
    assert done.returncode == 0 and done.stdout == b"through-tls\n", done.stderr
    data = os.urandom(3 * 2**20)
    (tmp_path / "blob.bin").write_bytes(data)
    assert stack.div("storage", "put", "tls-vol", "blob.bin", cwd=tmp_path,
                     env=env).returncode == 0
    got = stack.div("storage", "get", "tls-vol", "blob.bin", str(tmp_path / "back.bin"),
                    cwd=tmp_path, env=env)
    assert got.returncode == 0, got.stderr
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).digest() == \
        hashlib.sha256(data).digest()


def test_a_followed_log_stays_live_through_nginx(stack, tls, project):
    env = div_env(stack, tls)
    name = stack.div("run", "--gpu", "cpu", "--no-upload", "-d", "--", "sh", "-c",
                     "echo first-line; sleep 30", cwd=project, env=env).stdout.decode().strip()
    deadline = time.monotonic() + 60
    while stack.run_json(name)["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.3)
    time.sleep(1)                      # the line is in the log before anyone follows
    started = time.monotonic()
    follower = subprocess.Popen([str(ROOT / ".venv/bin/div"), "logs", name, "-f"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        ready, _, _ = select.select([follower.stdout], [], [], 5)
        first = follower.stdout.readline() if ready else b""
        took = time.monotonic() - started
    finally:
        follower.kill()
        stack.div("stop", name, cwd=project, env=env)
    assert first == b"first-line\n" and took < 1.0, (first, took)


def test_an_untrusted_certificate_is_refused_in_one_line(stack, tls, project):
    env = div_env(stack, tls)
    env.pop("DIV_CA_BUNDLE")
    done = stack.div("ls", cwd=project, env=env)
    assert done.returncode == 1
    assert b"its TLS certificate is not trusted" in done.stderr and b"Traceback" not in done.stderr


class ConnectProxy:
    """An HTTP CONNECT proxy on 127.0.0.1 that counts the tunnels it made."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port, self.tunnels = self.server.getsockname()[1], 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            client, _ = self.server.accept()
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket):
        request = b""
        while b"\r\n\r\n" not in request:
            request += client.recv(4096)
        host, port = request.split()[1].decode().rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        self.tunnels += 1
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pair = {client: upstream, upstream: client}
        while True:
            ready, _, _ = select.select(list(pair), [], [], 30)
            if not ready:
                return
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                pair[sock].sendall(data)


def test_https_proxy_is_used_and_no_proxy_bypasses_it(stack, tls, project):
    proxy = ConnectProxy()
    via = div_env(stack, tls, HTTPS_PROXY=f"http://127.0.0.1:{proxy.port}")
    assert stack.div("ls", cwd=project, env=via).returncode == 0
    assert proxy.tunnels >= 1
    seen = proxy.tunnels
    bypass = {**via, "NO_PROXY": "localhost"}
    assert stack.div("ls", cwd=project, env=bypass).returncode == 0
    assert proxy.tunnels == seen


def test_a_proxy_url_without_a_host_is_one_clear_line(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DIV_TOKEN": "div_0_x",
           "DIV_API_URL": "https://127.0.0.1:9", "HTTPS_PROXY": "http://:3128"}
    done = subprocess.run([str(Path(sys.executable).parent / "div"), "ls"], capture_output=True,
                          text=True, env=env, cwd=tmp_path)
    assert done.returncode == 1 and "no host in the proxy URL 'http://:3128'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_systemd_units_pass_systemd_analyze_verify(tmp_path):
    """As installed: the checkout in /opt/divergent becomes this one."""
    for unit in (DEPLOY / "systemd").glob("*.service"):
        (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/divergent", str(ROOT)))
    env_file = tmp_path / "divergent.env"
    env_file.write_text((DEPLOY / "divergent.env.example").read_text())
    units = sorted(str(p) for p in tmp_path.glob("*.service"))
    for unit in units:
        text = Path(unit).read_text().replace("/etc/divergent/divergent.env", str(env_file))
        Path(unit).write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr.strip(), done.stdout + done.stderr


def test_uploads_that_stall_are_held_by_nginx_never_by_the_server(stack, tls, project, tmp_path):
    url, folder = tls
    port = int(url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(folder / "ca.pem"))
    assert stack.api("POST", "/volumes/stalled/plan", org="other", json={"files": []}).ok
    stalled = []
    for i in range(40):     # more than the org's transfer slots on both workers
        conn = context.wrap_socket(socket.create_connection(("127.0.0.1", port)),
                                   server_hostname="localhost")
        conn.sendall((f"PUT /api/v1/volumes/stalled/files?path=f{i} HTTP/1.1\r\nHost: localhost\r\n"
                      f"Authorization: Bearer {stack.tokens['other']}\r\nX-Div-Sha256: {'0' * 64}\r\n"
                      "Content-Length: 1000000\r\n\r\nab").encode())
        stalled.append(conn)
    try:
        (tmp_path / "data.bin").write_bytes(os.urandom(1 << 20))
        started = time.monotonic()
        put = stack.div("storage", "put", "stalled", "data.bin", cwd=tmp_path, org="other",
                        env=div_env(stack, tls, DIV_TOKEN=stack.tokens["other"]))
        assert put.returncode == 0, put.stderr
        assert time.monotonic() - started < 10       # none of the org's slots was taken
    finally:
        for conn in stalled:
            conn.close()
