"""`flask doctor`: checks the setup end to end and says what is wrong in
plain words: the site's settings, the database's migrations, Slurm through
the configured transport (controller, accounting, partitions and GRES), the
share (writable here, present where Slurm runs), the Unix users jobs run as,
a reconciler at work, the prices and the secrets' keys."""
from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from flask import current_app

from divergent.app.extensions import db
from divergent.app.models import Lease, utcnow
from divergent.app.services import leases
from divergent.app.services.accounts.orgs import live_orgs
from divergent.app.services.accounts.secrets import seal, unseal
from divergent.app.services.errors import Invalid, ServiceError
from divergent.app.services.files.volumes import data_path
from divergent.app.services.money.pricing import current_prices
from divergent.app.services.site.settings import Site, SiteConfigError, load_site, site_file
from divergent.slurm.client import SlurmClient, SlurmError, SlurmUnreachable
from divergent.slurm.pyslurm_client import INSTALL_HINT, load_pyslurm, series
from divergent.slurm.script import RUNTIME_PROBES
from divergent.slurm.transport import LocalTransport, TransportError


@dataclass
class Finding:
    ok: bool
    what: str
    says: str


class Problem(Exception):
    """A check that failed; the message says what is wrong and what to do."""


def _site(_: dict) -> str:
    try:
        site = load_site()
    except SiteConfigError as exc:
        raise Problem(f"{exc}; fix it with `flask site` or by hand") from None
    path = site_file()
    where = path if os.path.exists(path) else "defaults (no site file)"
    return f"{where}: runtime {site.slurm.runtime}, Slurm on {site.transport.describe()}"


def missing_database() -> str | None:
    """What is wrong with the database the settings name, asked without
    making one: a SQLite file that is not there, or no divergent tables."""
    url = db.engine.url
    if url.get_backend_name() == "sqlite" and url.database and not os.path.exists(url.database):
        return f"there is no database at {url.database}"
    if not sa.inspect(db.engine).has_table("user"):
        return f"the database {url.render_as_string(hide_password=True)} has no divergent tables"
    return None


def _database(_: dict) -> str:
    migrations = current_app.extensions["migrate"].directory
    config = current_app.extensions["migrate"].migrate.get_config(migrations)
    head = ScriptDirectory.from_config(config).get_current_head()
    with db.engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    if current != head:
        raise Problem(f"at revision {current or 'none'}, the code needs {head}: "
                      "run `flask db upgrade`")
    return f"{db.engine.url.get_backend_name()}, migrated to {head}"


def _slurm(state: dict) -> str:
    site: Site = load_site()
    state["client"] = None
    try:
        client = site.transport.client()
    except SlurmUnreachable as exc:
        raise Problem(str(exc)) from None
    state["client"] = client
    try:
        answer = client.ping()
    except SlurmError as exc:
        state["client"] = None
        raise Problem(f"Slurm's controller does not answer through {site.transport.describe()}"
                      f" ({exc}); is slurmctld running, and can this host reach it?") from None
    return f"{answer} (through {site.transport.describe()})"


def _pyslurm(state: dict) -> str:
    """Whether pyslurm imports and was built for the cluster's Slurm; a
    problem only where the site chose it."""
    chosen = load_site().transport.kind == "pyslurm"

    def finding(text: str, unused: str) -> str:
        if chosen:
            raise Problem(text)
        return text + unused
    try:
        module = load_pyslurm()
    except SlurmUnreachable as exc:
        return finding(str(exc), "") if chosen else \
            "not installed (the site does not use it; `make pyslurm` to try it)"
    try:
        # The cluster's release, from the client the Slurm check made.
        cluster = (state.get("client") or SlurmClient(LocalTransport())).version()
    except SlurmError as exc:
        return finding(f"pyslurm {module.__version__} imports; the cluster's Slurm release "
                       f"is unknown ({exc})", "")
    if series(module.__version__) != series(cluster):
        return finding(f"pyslurm {module.__version__} is for Slurm {series(module.__version__)}, "
                       f"the cluster runs {cluster}: {INSTALL_HINT}", " (the site does not use it)")
    use = "in use" if chosen else "not in use: `flask site --transport pyslurm`"
    return f"pyslurm {module.__version__} matches Slurm {cluster} ({use})"


def _needs_slurm(check: Callable[[SlurmClient, dict], str]) -> Callable[[dict], str]:
    def run(state: dict) -> str:
        if state.get("client") is None:
            raise Problem("not checked: Slurm does not answer")
        return check(state["client"], state)
    return run


@_needs_slurm
def _accounting(client: SlurmClient, _: dict) -> str:
    try:
        clusters = client.clusters()
    except SlurmError as exc:
        raise Problem(f"slurmdbd does not answer ({exc}): runs cannot be billed; "
                      "is slurmdbd running and its database up?") from None
    return f"slurmdbd answers (cluster {', '.join(clusters) or '?'})"


@_needs_slurm
def _partitions(client: SlurmClient, _: dict) -> str:
    catalog = load_site().slurm.catalog
    partitions = {gpu.partition for gpu in catalog.values()}
    missing = sorted(partitions - client.partitions())
    if missing:
        raise Problem(f"no partition named {', '.join(missing)}: map each GPU type to one "
                      "Slurm has with `flask site --partition h100=<name>` (or `flask site gpu add`)")
    gres = {kind for node in client.nodes().values() for kind in node.gpus}
    # Not is_cpu: each has a GRES.
    gpus = {name: cast(str, gpu.gres).partition(":")[2] for name, gpu in catalog.items()
            if not gpu.is_cpu}
    absent = sorted(name for name, kind in gpus.items() if kind not in gres)
    if gpus and len(absent) == len(gpus):
        raise Problem("no node has a GPU GRES that any GPU type maps to: "
                      "set them with `flask site --gres h100=<gres type>`")
    note = f"; no node has GPUs for {', '.join(absent)}" if absent else ""
    return f"partitions {', '.join(sorted(partitions))} exist{note}"


@_needs_slurm
def _share(client: SlurmClient, _: dict) -> str:
    share = data_path("share")
    if not os.path.isdir(data_path()):
        raise Problem(f"{data_path()} is not there: is the share mounted (DIV_DATA_DIR)?")
    if not os.path.isdir(share):
        raise Problem(f"{data_path()} is there but has no share/ folder yet: make it as the "
                      f"service user (`mkdir -m 0700 {share}`)")
    probe = os.path.join(share, f".doctor-{secrets.token_hex(4)}")
    try:
        with open(probe, "w") as f:
            f.write("ok")
            f.flush()
            os.fsync(f.fileno())
        os.unlink(probe)
    except OSError as exc:
        raise Problem(f"cannot write to {share}: {exc.strerror}") from None
    if not client.sees_folder(share):
        raise Problem(f"{share} is writable here but not there on "
                      f"{load_site().transport.describe()}: every node must see the same path")
    return f"{share} is writable, and seen where Slurm runs"


@_needs_slurm
def _run_network(client: SlurmClient, _: dict) -> str:
    if load_site().slurm.run_network == "shared":
        return ("shared: runs use their node's network and may reach its ports and other "
                "runs' (`flask site --run-network isolated` once slurm/node/ is on every node)")
    config = client.config()
    if "--div-isolate" not in client.srun_options():
        raise Problem("isolated, but srun has no --div-isolate: install divergent's SPANK "
                      "plugin (slurm/node/spank_divergent.c) in plugstack.conf, or every run fails")
    if config.get("Prolog", "(null)") == "(null)" or "Alloc" not in config.get("PrologFlags", ""):
        raise Problem("isolated, but slurm.conf lacks Prolog=<slurm/node/prolog>, "
                      "Epilog=<slurm/node/epilog> and PrologFlags=Alloc: every run fails")
    return f"isolated: each run in its own job's network ({config['Prolog']})"


@_needs_slurm
def _runtime(client: SlurmClient, _: dict) -> str:
    """The runtime where Slurm's commands run (pyxis and divergent's plugin
    add srun's options) and on a node of each partition, where a one-minute
    step of the first org's account asks for its parts."""
    site = load_site()
    runtime = site.slurm.runtime
    if runtime == "none":
        return "none: runs use the nodes' own software (`div run --image` says it is not used)"
    if runtime == "pyxis":
        _pyxis_options(client.srun_options())
    orgs = live_orgs()
    if not orgs:
        return f"{runtime}: the nodes are checked once there is an org, in whose account a step runs"
    found = []
    for partition in sorted({gpu.partition for gpu in site.slurm.catalog.values()}):
        try:
            found.append(client.probe(partition, orgs[0].slurm_account, RUNTIME_PROBES[runtime]))
        except SlurmError as exc:
            if "Unable to allocate resources" in str(exc):
                found.append(f"{partition} not checked (no node free within 30 s)")
                continue
            raise Problem(f"{runtime} is not ready on partition {partition}: {exc}") from None
    return f"{runtime}: " + "; ".join(dict.fromkeys(found))


def _pyxis_options(options: str) -> None:
    if "--container-image" not in options:
        raise Problem("pyxis, but srun has no --container-image: add pyxis to plugstack.conf "
                      "where Slurm's commands run and on every node (docs/admins/images.md)")
    if "--div-container" not in options:
        raise Problem("pyxis, but srun has no --div-container: add divergent's SPANK plugin "
                      "(slurm/node/spank_divergent.c) to plugstack.conf after pyxis, or every "
                      "run in an image fails")


@_needs_slurm
def _org_nodes(client: SlurmClient, _: dict) -> str:
    if load_site().slurm.org_nodes == "shared":
        return "shared: runs of different orgs may share a node"
    config = client.config()
    if config.get("MCSPlugin") != "mcs/account" or "select" not in config.get("MCSParameters", ""):
        raise Problem("exclusive, but Slurm does not keep accounts apart: slurm.conf needs "
                      "MCSPlugin=mcs/account and MCSParameters=ondemand,select")
    return f"exclusive: orgs never share a node (mcs/account, {config['MCSParameters']})"


@_needs_slurm
def _accounts(client: SlurmClient, _: dict) -> str:
    user = client.transport.user
    if not load_site().slurm.make_accounts:
        return (f"orgs use accounts the site's admins made (flask org-account ORG ACCOUNT), "
                f"each with {user} in it")
    try:
        level = client.admin_level()
    except SlurmError as exc:
        raise Problem(f"could not ask slurmdbd about {user}: {exc}") from None
    if level not in ("Operator", "Administrator"):
        raise Problem(f"{user} is not a Slurm Operator (AdminLevel {level}), so it cannot make "
                      f"each org's account: `sacctmgr -i modify user {user} set "
                      "adminlevel=Operator`, or have orgs use accounts you make "
                      "(flask site --accounts existing, flask org-account)")
    return f"{user} makes each org's account (AdminLevel {level})"


@_needs_slurm
def _job_users(client: SlurmClient, _: dict) -> str:
    """Every org's Unix user, and every mapped member's: there where Slurm's
    commands run, reached by the submit path (sudo), in the org's account."""
    site = load_site()
    server = client.transport.user
    if site.identity.submit_as == "service":
        raise Problem(f"jobs run as {server}, the server's own Unix user: a run that escaped "
                      "its sandbox could read every org's data; `flask site --submit-as org`")
    checked, waiting = 0, []
    for org in live_orgs():
        try:
            names = [site.identity.user_of_org(org.name)]
        except Invalid as exc:
            raise Problem(exc.message) from None
        if site.identity.submit_as == "member":
            names += [u.unix_name for u in org.users if u.unix_name and u.removed_at is None]
        for name in dict.fromkeys(names):
            if not _known_to(client, name):
                if name == names[0] and site.identity.make_users:
                    waiting.append(name)        # made by its org's first run
                    continue
                raise Problem(f"{name} (of {org.name}) is no Unix user where Slurm's "
                              f"commands run ({site.transport.describe()})")
            try:
                client.as_user(name).submitter_version()
            except SlurmError as exc:
                raise Problem(f"{server} cannot submit as {name} (of {org.name}): {exc}") from None
            if not client.in_account(org.slurm_account, name) and not site.slurm.make_accounts:
                raise Problem(f"{name} is not in {org.slurm_account}, {org.name}'s account: "
                              f"`sacctmgr add user {name} account={org.slurm_account}`, or make "
                              f"{server} its coordinator")
            checked += 1
    later = f"; {len(waiting)} made on their org's first run" if waiting else ""
    users = f"{checked} Unix user{'' if checked == 1 else 's'}"
    return (f"{users} reached through sudo as {server}{later} (the nodes must know them too: "
            "the site's directory)")


def _known_to(client: SlurmClient, name: str) -> bool:
    try:
        return client.transport.run(["getent", "passwd", name]).returncode == 0
    except TransportError as exc:
        raise Problem(f"could not look {name} up: {exc}") from None


def _reconciler(_: dict) -> str:
    lease = db.session.get(Lease, leases.RECONCILER)
    if lease is None:
        raise Problem("no reconciler has run yet: runs will not move or be billed until one "
                      "does (systemctl enable --now divergent-reconciler, or scripts/services "
                      "start)")
    if lease.expires_at < utcnow():
        raise Problem("no reconciler is running: runs will not move or be billed; "
                      "start one with `flask reconcile` (or scripts/services start)")
    return f"running ({lease.holder})"


def _prices(_: dict) -> str:
    try:
        prices = current_prices()
    except ServiceError as exc:
        raise Problem(exc.message) from None
    unpriced = [name for name in load_site().slurm.catalog if name not in prices.per_unit_hour]
    if unpriced:
        raise Problem(f"no price for {', '.join(unpriced)}: their runs are refused until "
                      f"`flask prices --set {unpriced[0]}=USD`")
    path = current_app.config["DIV_PRICES_FILE"]
    source = path if os.path.exists(path) else "the docs' table (no price file)"
    return f"{len(prices.per_unit_hour)} GPU and CPU prices from {source}"


def _secrets_keys(_: dict) -> str:
    try:
        if unseal(seal("doctor")) != "doctor":
            raise Problem("the secrets' key does not give back what it sealed")
    except ServiceError as exc:
        raise Problem(exc.message) from None
    return "secrets can be sealed and opened"


CHECKS = (("site settings", _site), ("database", _database), ("Slurm", _slurm),
          ("accounting", _accounting), ("accounts", _accounts), ("pyslurm", _pyslurm),
          ("partitions and GPUs", _partitions),
          ("share", _share), ("run network", _run_network), ("org nodes", _org_nodes),
          ("runtime", _runtime),
          ("job users", _job_users),
          ("reconciler", _reconciler), ("prices", _prices),
          ("secrets", _secrets_keys))


def examine() -> Iterator[Finding]:
    state: dict = {}
    for what, check in CHECKS:
        try:
            yield Finding(True, what, check(state))
        except Problem as exc:
            db.session.rollback()
            yield Finding(False, what, str(exc))
        except SiteConfigError:
            yield Finding(False, what, "not checked: the site settings are broken")
