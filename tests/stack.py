"""The whole service for end-to-end tests: a fresh PostgreSQL (or SQLite) database, the
API server (gunicorn, as `make up` starts it) on a free port, the reconciler,
and the real `div` command run as a subprocess against them."""
from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import requests
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
SERVICES = ROOT / "scripts" / "services"
# Who the server, the reconciler and admin commands run as (scripts/services).
SERVICE_USER = os.environ.get("DIV_SERVICE_USER", "divergent")
# pytest-xdist's worker (gw0, gw1, ...; "main" without workers): what a
# test makes on a server the workers share (a database, a Slurm account)
# carries it in its name, so that workers never meet.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_stacks_started = itertools.count(1)


def interrupt_as_a_terminal_does() -> None:
    """preexec_fn of a `div` that a test stops with Ctrl-C (SIGINT): Python
    leaves SIGINT ignored when it starts with it ignored, as every command a
    shell starts in the background without job control does; so a test run
    launched that way would send a Ctrl-C nothing hears."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def service_folder(prefix: str) -> Path:
    """A new folder under /tmp that the service user owns: for files the
    server or an admin command reads or writes (pytest's own folders are
    root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o711)
    shutil.chown(folder, SERVICE_USER, SERVICE_USER)
    return folder


def fresh_postgres_database(admin_url: str, name: str) -> str:
    """An empty database `name` (this worker's own) on the server of
    `admin_url`; its URL, with the psycopg driver named for SQLAlchemy."""
    name = f"{name}_{WORKER}"
    admin_url = admin_url.replace("postgresql://", "postgresql+psycopg://")
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return admin_url.rsplit("/", 1)[0] + "/" + name


@dataclass
class Stack:
    base: Path
    port: int
    database_url: str
    tokens: dict[str, str] = field(default_factory=dict)
    # Each org's Slurm account: the stack's own unless the site made one
    # (two stacks' "e2e" share no account, and so no GrpSubmitJobs, no jobs
    # found by name).
    accounts: dict[str, str] = field(default_factory=dict)
    tag: str = WORKER
    # The services' own settings beyond the stack's (a PATH, a grace).
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    def private_folder(self, name: str) -> Path:
        """A folder of the service user's in the stack, for site and price files."""
        folder = self.base / name
        folder.mkdir(exist_ok=True)
        shutil.chown(folder, SERVICE_USER, SERVICE_USER)
        return folder

    @property
    def instance(self) -> Path:
        return self.base / "instance"

    @property
    def server_log(self) -> Path:
        return self.base / "pids" / "server.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIV_")}
        env.update(PORT=str(self.port), DIV_PID_DIR=str(self.base / "pids"),
                   # Its own keys, site and price files: never the checkout's
                   # instance/, which other workers' stacks and the dev stack use.
                   DIV_INSTANCE_PATH=str(self.instance),
                   DATABASE_URL=self.database_url, DIV_DATA_DIR=str(self.data_dir),
                   DIV_RECONCILE_INTERVAL="0.3", FLASK_APP="wsgi.py",
                   # Never the dev stack's services.env (`make up`'s) in a test's stack.
                   DIV_ENV_FILE="",
                   # Tests change partitions' MaxTime with scontrol and expect it at once.
                   DIV_PARTITION_CACHE_SECONDS="0",
                   PATH=f"{VENV_BIN}:{env.get('PATH', '')}")
        env.update(self.settings)
        return env

    def services(self, action: str, what: str = "all") -> None:
        done = subprocess.run([str(SERVICES), action, what], env=self.env(),
                              capture_output=True, text=True)
        assert done.returncode == 0, f"services {action} {what}: {done.stdout}{done.stderr}"

    def flask(self, *args: str, check: bool = True,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """An admin command, run as the server runs (the service user)."""
        return subprocess.run([str(SERVICES), "exec", str(VENV_BIN / "flask"), *args], cwd=ROOT,
                              env={**self.env(), **(env or {})}, capture_output=True,
                              text=True, check=check)

    def add_org(self, org: str, account: str | None = None) -> str:
        """An org with one user and a key; returns the key."""
        self.accounts[org] = account or f"{org}-{self.tag}"
        self.flask("create-org", org, "--account", self.accounts[org])
        self.flask("create-user", org, f"{org}-user")
        self.tokens[org] = self.flask("create-key", f"{org}-user").stdout.split()[-1]
        return self.tokens[org]

    def div_env(self, org: str = "e2e", home: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIV_")}
        env.update(DIV_API_URL=self.url, DIV_TOKEN=self.tokens[org],
                   HOME=str(home or self.base / "home"), PATH=f"{VENV_BIN}:{env.get('PATH', '')}")
        env.pop("XDG_CONFIG_HOME", None)
        return env

    def div(self, *args: str, cwd: Path, org: str = "e2e", env: dict | None = None,
            timeout: float = 120, input: bytes | None = None) -> subprocess.CompletedProcess:
        """`div` as a cron job runs it: no terminal; stdin empty or `input`."""
        stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        return subprocess.run([str(VENV_BIN / "div"), *args], cwd=cwd,
                              env=env or self.div_env(org), capture_output=True,
                              timeout=timeout, **stdin)

    def api(self, method: str, path: str, org: str = "e2e", headers: dict | None = None,
            **kwargs) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.tokens[org]}", **(headers or {})}
        return requests.request(method, f"{self.url}/api/v1{path}", timeout=30,
                                headers=headers, **kwargs)

    def dashboard_session(self, username: str, password: str) -> requests.Session:
        """A signed-in dashboard session (a password set, the CSRF token used)."""
        self.flask("set-password", username, "--password", password)
        session = requests.Session()
        page = session.get(f"{self.url}/login").text
        token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)
        signed_in = session.post(f"{self.url}/login", data={
            "username": username, "password": password, "csrf_token": token})
        assert signed_in.status_code == 200 and "<h1>Runs</h1>" in signed_in.text
        return session

    def run_json(self, name: str, org: str = "e2e") -> dict:
        answer = self.api("GET", f"/runs/{name}", org)
        answer.raise_for_status()
        return answer.json()["run"]


    def wait_for_status(self, name: str, wanted: str, timeout: float = 30,
                        org: str = "e2e") -> dict:
        """The run once it has `wanted` status (the reconciler polls Slurm)."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.run_json(name, org)
            if run["status"] == wanted or time.monotonic() > deadline:
                return run
            time.sleep(0.2)


def read_terminal(controller: int) -> bytes:
    """All a pty's other end saw, until the program on it has closed it."""
    seen = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:   # EIO: nothing holds the terminal any more
            break
        if not chunk:
            break
        seen += chunk
    os.close(controller)
    return seen


# Browsers open notebooks on another name of the server's (its own origin):
# Chromium takes *.localhost as loopback without asking any resolver (and
# the TLS tests' dashboard is at localhost itself).
NOTEBOOK_HOST = "notebooks.localhost"


def dev_job_subnets() -> str:
    """JOB_SUBNETS of the dev cluster's nodes (slurm/dev/up writes it)."""
    conf = Path(os.environ.get("DIV_DEV_SLURM_CONF_DIR", "/etc/slurm")) / "divergent-node.conf"
    for line in conf.read_text().splitlines():
        if line.startswith("JOB_SUBNETS="):
            return line.partition("=")[2].strip('"')
    raise AssertionError(f"{conf} has no JOB_SUBNETS")


def start_stack(port: int, postgres_admin_url: str | None,
                database: str = "divergent_e2e", settings: dict[str, str] | None = None,
                accounts: dict[str, str] | None = None,
                before_start=None) -> Stack:
    """The stack in a folder of its own under /tmp: the service user it runs
    as must reach it, and pytest's own folders are root's alone. A fresh
    PostgreSQL database `database`, or SQLite in that folder without a
    PostgreSQL URL. `before_start(stack)` sets the site up (admin commands,
    `stack.settings`) before the services start; `accounts` maps the orgs
    e2e and other to Slurm accounts the site made."""
    base = service_folder("div-stack-")
    url = (fresh_postgres_database(postgres_admin_url, database) if postgres_admin_url
           else f"sqlite:///{base}/divergent.db")
    stack = Stack(base, port, url, settings=dict(settings or {}),
                  tag=f"{WORKER}-{next(_stacks_started)}")
    (base / "home").mkdir(parents=True, exist_ok=True)
    # The share, as a site mounts it before the server starts (an absent
    # one is a share not mounted: 503).
    stack.private_folder("data")
    stack.private_folder("data/share")
    try:
        stack.flask("db", "upgrade")
        # Interactive runs reach their jobs' addresses, as the nodes number them.
        stack.flask("site", "interactive", "--job-subnets", dev_job_subnets(),
                    "--notebook-host", NOTEBOOK_HOST)
        if before_start is not None:
            before_start(stack)      # the site's settings, made as its admin makes them
        stack.services("start")
        for org in ("e2e", "other"):
            stack.add_org(org, (accounts or {}).get(org))
    except BaseException:
        stop_stack(stack)
        raise
    return stack


def stop_stack(stack: Stack) -> None:
    stack.services("stop")
    shutil.rmtree(stack.base, ignore_errors=True)


@contextlib.contextmanager
def running_stack(*args, **kwargs) -> Iterator[Stack]:
    """start_stack's stack, stopped however the block ends: a fixture that
    fails before its yield leaves no server running after the tests."""
    stack = start_stack(*args, **kwargs)
    try:
        yield stack
    finally:
        stop_stack(stack)
