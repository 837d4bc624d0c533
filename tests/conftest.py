"""Fixtures over real parts: the dev Slurm cluster (slurm/dev/up), the dev
S3 server (s3/dev/up), an OpenSSH server on 127.0.0.1 for the SSH
transport, SQLite and PostgreSQL; and the app in-process (`app`, `client`,
`runner`, as in Flask's tutorial).

A missing cluster, S3 server or database is a failure here, never a skip:
`make test` brings them up first. Tests that reach the cluster through
`slurm_cluster` (every server stack does) or the S3 server through
`s3_server` are marked `cluster`; `make test-fast` runs the rest."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from flask_migrate import upgrade

from divergent.app import create_app
from divergent.app.extensions import db
from divergent.slurm.client import SlurmClient
from divergent.slurm.pyslurm_client import PyslurmClient
from divergent.slurm.transport import LocalTransport, SSHTransport
from tests.cluster_turns import cluster_turn
from tests.sshd import free_port, running_sshd
from tests.stack import fresh_postgres_database

# The groups and order workers get tests in (pytest-xdist): hooks of this conftest.
from tests.turn_order import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_collection_modifyitems_in_turns,
)

DEV_STATE = Path(os.environ.get("DIV_DEV_STATE", "/var/lib/div-dev"))
CHECKOUT_INSTANCE = Path(__file__).resolve().parent.parent / "instance"
INSTANCE_BEFORE = pytest.StashKey[set]()
POSTGRES_URL = os.environ.get("DIV_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/postgres")


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: needs the dev Slurm cluster (and so, the "
                                       "server) or the dev S3 server")
    config.addinivalue_line("markers", "cluster_wide: changes what every cluster test sees "
                                       "(stops a Slurm daemon, changes a partition) or holds "
                                       "every GPU of a type: has the cluster alone "
                                       "(tests/cluster_turns.py)")
    config.addinivalue_line("markers", "site2: needs the dev cluster's site2 profile "
                                       "(make test brings it up and runs them after the rest)")


def _checkout_instance_files() -> set[Path]:
    return set(CHECKOUT_INSTANCE.rglob("*")) if CHECKOUT_INSTANCE.is_dir() else set()


def pytest_sessionstart(session):
    session.config.stash[INSTANCE_BEFORE] = _checkout_instance_files()


def pytest_sessionfinish(session):
    """Tests are hermetic: what they make lives under their own folders, so
    a run beside a developer's dev stack neither reads its files nor leaves
    any in the checkout's instance/. The dev server's own files belong to
    the service user; what is new there and the tests' user's is a leak."""
    before = session.config.stash.get(INSTANCE_BEFORE, set())
    leaked = sorted(str(path) for path in _checkout_instance_files() - before
                    if path.lstat().st_uid == os.getuid())
    if leaked:
        session.config.get_terminal_writer().line(
            "tests left files in the checkout's instance/: " + ", ".join(leaked), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def process_alive(pid: int) -> bool:
    """The process exists and is not a zombie: this machine's init reaps
    orphans slowly, so a dead daemon lingers as Z for a while."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def pytest_terminal_summary(terminalreporter, exitstatus):
    """When tests failed, what became of the dev cluster: a daemon that died
    mid-run (slurmdbd ends itself on some database errors) fails every
    later test that waits for Slurm, and CI keeps no logs but this output."""
    if exitstatus == 0 or not (DEV_STATE / "run").is_dir():
        return
    for pid_file in sorted((DEV_STATE / "run").glob("*.up.pid")):
        daemon = pid_file.name.removesuffix(".up.pid")
        if not process_alive(int(pid_file.read_text())):
            terminalreporter.write_line(f"dev cluster: {daemon} is not running", red=True)
    for log in sorted((DEV_STATE / "log").glob("*.log")):
        with log.open(errors="replace") as lines:
            for line in (line for line in lines if "fatal:" in line):
                terminalreporter.write_line(f"dev cluster: {log.name}: {line.rstrip()}", red=True)


@pytest.fixture
def app_config(tmp_path) -> dict:
    """What `app` is made with; a module overrides it to change a setting."""
    return {"TESTING": True, "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/t.db",
            "DIV_DATA_DIR": str(tmp_path / "data")}


@pytest.fixture
def make_app(tmp_path):
    """How every test builds an app: its instance folder (secret keys,
    follower files, SQLite, data) under the test's own tmp_path, never the
    checkout's instance/, where a developer's dev stack (`make up`) lives."""
    def make(config: dict):
        return create_app({"TESTING": True, **config}, instance_path=str(tmp_path / "instance"))
    return make


@pytest.fixture
def app(app_config, make_app):
    """The app on a fresh SQLite database, with its own instance folder.
    Outside any app context, as in the server: each request gets its own
    (Flask-WTF keeps a token in `g`, which one long context would share
    between clients)."""
    app = make_app(app_config)
    with app.app_context():
        db.create_all()
    yield app
    with app.app_context():
        db.engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def migrated_app(request, tmp_path, make_app):
    """An app whose schema comes from the migrations (not create_all), on
    both databases, inside its app context: for the tests of the schema
    itself and of what reads it as the server does."""
    url = (f"sqlite:///{tmp_path / 'test.db'}" if request.param == "sqlite"
           else fresh_postgres_database(POSTGRES_URL, "divergent_test"))
    app = make_app({"SQLALCHEMY_DATABASE_URI": url})
    with app.app_context():
        upgrade()
        yield app
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def app_context(app):
    """For tests that call services directly."""
    with app.app_context():
        yield app
        db.session.remove()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def runner(app):
    """Admin commands in-process: runner.invoke(args=["orgs"])."""
    return app.test_cli_runner()


@pytest.fixture(autouse=True)
def _cluster_turn(request):
    """Cluster tests run side by side (pytest-xdist), each in its turn."""
    if request.node.get_closest_marker("cluster") is None:
        yield
        return
    alone = request.node.get_closest_marker("cluster_wide") is not None
    with cluster_turn(DEV_STATE / "run", alone):
        yield


@pytest.fixture(scope="session")
def slurm_cluster():
    """The dev cluster must answer; `make test` starts it."""
    done = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    assert done.returncode == 0 and "UP" in done.stdout, (
        "the dev Slurm cluster is not up: run `make test` or slurm/dev/up\n" + done.stdout + done.stderr)
    return True


@pytest.fixture(scope="session")
def s3_server() -> dict[str, str]:
    """The dev S3 server's endpoint and keys, as `make up` gives them
    (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...); `make test` starts it."""
    env_file = Path(os.environ.get("DIV_S3_BASE", "/var/lib/div-s3")) / "s3.env"
    assert env_file.exists(), f"the dev S3 server is not up (no {env_file}): run `make test` or s3/dev/up"
    settings = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if line)
    health = subprocess.run(["curl", "-s", "-m", "2", settings["AWS_ENDPOINT_URL"] + "/healthcheck"],
                            capture_output=True, text=True)
    assert health.stdout == "OK", f"the dev S3 server does not answer: s3/dev/up ({health.stderr})"
    return settings


@pytest.fixture(scope="session")
def sshd():
    """A real OpenSSH server on 127.0.0.1 (tests/sshd.py)."""
    with running_sshd() as login:
        yield login


@pytest.fixture(scope="session", params=["local", "ssh", "pyslurm"])
def slurm(request, slurm_cluster):
    """A SlurmClient through each transport."""
    if request.param == "local":
        yield SlurmClient(LocalTransport())
        return
    if request.param == "pyslurm":
        yield PyslurmClient()      # `make test` installs pyslurm: its absence fails
        return
    transport = SSHTransport(**request.getfixturevalue("sshd"))
    yield SlurmClient(transport)
    transport.close()


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, driven by Playwright (never its own
    download), for the dashboard's tests and single sign-on's."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield chromium
        chromium.close()


@pytest.fixture
def job_dirs(tmp_path):
    """A state folder, an org folder with one volume, and a code folder, on a
    path every node sees."""
    state, volumes, code = tmp_path / "state", tmp_path / "org", tmp_path / "code"
    for d in (state, volumes / "data", code):
        d.mkdir(parents=True)
    return state, volumes, code


@pytest.fixture(scope="session")
def stack(slurm_cluster):
    """The API server and reconciler on a fresh PostgreSQL database, with two
    orgs (e2e and other), each with a key."""
    from tests.stack import running_stack
    with running_stack(free_port(), POSTGRES_URL, settings=notification_settings()) as running:
        yield running


def notification_settings() -> dict[str, str]:
    """The stack's SMTP server is one a test starts on 127.0.0.1 at this
    port (aiosmtpd); webhooks may reach 127.0.0.1, where the tests'
    receivers listen; a failed delivery is tried again after 1, 2, 4 s."""
    return {"DIV_SMTP_HOST": "127.0.0.1", "DIV_SMTP_PORT": str(free_port()),
            "DIV_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8", "DIV_NOTIFY_RETRY_SECONDS": "1"}


S3_ORG = "s3org"
S3_SECRETS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
              "AWS_DEFAULT_REGION")


# The dev cluster's registries (slurm/dev/containers): the one nodes pull
# from, which is also the dev site's mirror, and the same images behind a
# login (USER:PASSWORD in DEV_STATE/registry-private.login).
REGISTRY = "10.77.0.1:5000"
PRIVATE_REGISTRY = "10.77.0.1:5001"
IMAGE = f"{REGISTRY}/div/python:3.11"


def images_site(stack) -> None:
    """before_start of a stack whose site runs images (runtime pyxis) from
    the dev registries, as make up sets the dev site; S3 copies in div/python."""
    stack.settings["DIV_TRANSFER_IMAGE"] = IMAGE
    stack.flask("site", "--runtime", "pyxis")
    stack.flask("site", "images", "--mirror", REGISTRY, "--insecure", REGISTRY,
                "--insecure", PRIVATE_REGISTRY, "--login", f"{PRIVATE_REGISTRY}=REGISTRY")


@pytest.fixture(scope="module")
def pyxis_stack(slurm_cluster):
    """Another stack like `stack` on a site whose runtime is pyxis: a
    module's own, so that its tests run in one worker."""
    from tests.stack import running_stack
    with running_stack(free_port(), POSTGRES_URL, database="divergent_pyxis",
                       settings=notification_settings(), before_start=images_site) as running:
        yield running


@pytest.fixture(scope="module", params=["none", "pyxis"])
def sandbox_stack(request):
    """Each runtime's stack in turn: a sandbox's guarantees hold on both."""
    return request.getfixturevalue("stack" if request.param == "none" else "pyxis_stack")


@pytest.fixture(scope="session")
def s3_org(stack, s3_server) -> str:
    """An org whose secrets hold the dev S3 server's endpoint and keys, as
    a user sets them (div secrets set)."""
    stack.add_org(S3_ORG)
    for name in S3_SECRETS:
        done = stack.div("secrets", "set", name, cwd=stack.base, org=S3_ORG,
                         input=s3_server[name].encode())
        assert done.returncode == 0, done.stderr
    return S3_ORG


@pytest.fixture
def project(tmp_path):
    """A code folder named like a user's project."""
    folder = tmp_path / "very-cool-classifier"
    folder.mkdir()
    return folder
