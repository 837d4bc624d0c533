"""Ways to run Slurm's commands: on this host (a login node) or over SSH to
one, and either of those as another Unix user through sudo (an org's jobs
are its own user's, never the server's). Each takes an argv and optional
stdin and gives back a CommandResult."""
from __future__ import annotations

import os
import pwd
import shlex
import subprocess
import threading
from dataclasses import dataclass
from typing import Protocol

import paramiko


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


class TransportError(RuntimeError):
    """Slurm's commands could not be reached at all."""


class CommandNotRun(TransportError):
    """The command certainly never ran (sudo refused to run it): nothing
    reached Slurm."""


class SlurmTransport(Protocol):
    """What SlurmClient runs Slurm's commands through: LocalTransport,
    SSHTransport, or slurm/scripted.py's ScriptedTransport in tests."""

    @property
    def user(self) -> str: ...

    def run(self, argv: list[str], stdin: str | None = None,
            env: dict[str, str] | None = None) -> CommandResult: ...


class LocalTransport:
    @property
    def user(self) -> str:
        """Who Slurm's commands run as: this process's own user."""
        return pwd.getpwuid(os.geteuid()).pw_name

    def run(self, argv: list[str], stdin: str | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        full_env = {**os.environ, **(env or {})}
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                                  env=full_env, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TransportError(f"{argv[0]}: {exc}") from exc
        return CommandResult(done.returncode, done.stdout, done.stderr)


class SSHTransport:
    """One SSH connection to a login node, opened on first use and reopened
    when it drops. The host key must be known: no trust on first use."""

    def __init__(self, host: str, user: str, key_path: str, port: int = 22,
                 known_hosts: str | None = None, timeout: float = 10.0):
        self.host, self.user, self.key_path = host, user, key_path
        self.port, self.known_hosts, self.timeout = port, known_hosts, timeout
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    def _connect(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if self.known_hosts:
            client.load_host_keys(self.known_hosts)
        else:
            client.load_system_host_keys()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(self.host, port=self.port, username=self.user,
                       key_filename=self.key_path, timeout=self.timeout,
                       allow_agent=False, look_for_keys=False)
        return client

    def _session(self) -> paramiko.SSHClient:
        transport = self._client.get_transport() if self._client else None
        if transport is None or not transport.is_active():
            self._client = self._connect()
        return self._client

    def run(self, argv: list[str], stdin: str | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        # The remote side runs a shell: every word is quoted.
        words = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
        command = " ".join((["env", *words] if words else []) + [shlex.quote(a) for a in argv])
        try:
            with self._lock:
                session = self._session()
            stdin_f, stdout_f, stderr_f = session.exec_command(command, timeout=60)
            if stdin is not None:
                stdin_f.write(stdin)
            stdin_f.channel.shutdown_write()
            out = stdout_f.read().decode()
            err = stderr_f.read().decode()
            code = stdout_f.channel.recv_exit_status()
        except (paramiko.SSHException, OSError) as exc:
            self._client = None
            raise TransportError(f"ssh {self.user}@{self.host}:{self.port}: {exc}") from exc
        return CommandResult(code, out, err)

    def close(self) -> None:
        if self._client:
            self._client.close()
            self._client = None


# sudo's own failures, told from the command's by these openings of its
# stderr: the command never ran.
SUDO_REFUSALS = ("sudo: a password is required", "sudo: unknown user", "Sorry, user ",
                 "sudo: sorry, ",
                 "sudo: a terminal is required", "sudo: command not found",
                 "sudo: you do not exist")


class SudoTransport:
    """Another transport's commands run as `user`: `sudo -n -u USER --
    COMMAND`, which the site's sudoers rule allows for Slurm's submit,
    cancel and update commands alone (deploy/sudoers). sudo resets the
    environment, so the command sees none of the server's."""

    def __init__(self, inner: SlurmTransport, user: str) -> None:
        self.inner, self._user = inner, user

    @property
    def user(self) -> str:
        return self._user

    def run(self, argv: list[str], stdin: str | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        result = self.inner.run(["sudo", "-n", "-u", self._user, "--", *argv], stdin, env)
        if result.returncode != 0 and result.stderr.lstrip().startswith(SUDO_REFUSALS):
            raise CommandNotRun(f"{self.inner.user} may not run {argv[0]} as {self._user} "
                                f"({result.stderr.strip().splitlines()[0]}): the site's "
                                "sudoers rule for divergent (docs/admins/identity.md)")
        return result
