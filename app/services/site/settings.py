"""The site's Slurm settings, kept in instance/site.toml (DIV_SITE_FILE) and
changed with `flask site`: the catalog of hardware the site sells (each
type's partition, GRES, GPUs a node, what a GPU includes, QoS), the
container runtime, node scratch, and how the server reaches Slurm (its
commands on this host or on a login node over SSH, or its C API here
through pyslurm: kind = "pyslurm"). Without the file, the docs' catalog and the
local transport.

A site that keeps the docs' five types only renames their partitions and
GRES (and may set GPUs a node for all four GPU types):

    [slurm]
    runtime = "pyxis"
    gpus_per_node = 8
    scratch_root = "/local/scratch"
    bind_paths = ["/opt/conda"]
    qos = "normal"             # every job's, unless its type names one
    make_accounts = false      # orgs use accounts the site's admins made
    run_network = "isolated"   # each run's own network (slurm/node/), or "shared"
    org_nodes = "exclusive"    # orgs never share a node (Slurm's mcs/account), or "shared"
    [partitions]
    h100 = "gpu-h100"
    [gres]
    h100 = "nvidia_h100_80gb"

A site with its own hardware lists every type it sells instead (`flask site
gpu add`), and [partitions], [gres] and gpus_per_node then change nothing:

    [gpu.a100]
    partition = "gpu"
    gres = "gpu:a100"          # or "gpu" (untyped): the partition or constraint says which
    per_node = 4
    cores = 8                  # what one GPU includes
    memory = 64
    node_cores = 32            # what a node has to give runs
    node_memory = 240
    qos = "normal"             # optional, and constraint = "feature"
    [gpu.cpu]
    partition = "batch"        # no gres: a cpu type
    memory = 2

    [identity]
    submit_as = "org"          # each org's jobs as its own Unix user; "member": a mapped
                               # member's own; "service": the server's (before migrating)
    org_user = "div-{org}"     # the org's Unix user (and group), from its name
    make_users = true          # made through deploy/divergent-org-user; false: the
                               # site's directory (LDAP) has them

    [transport]
    kind = "ssh"
    host = "login1.cluster"
    user = "divergent"
    key_path = "/etc/divergent/id_ed25519"
    known_hosts = "/etc/divergent/known_hosts"
"""
from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from typing import cast

from flask import current_app

from divergent.app.services.errors import Invalid
from divergent.app.services.images.site import ImageSettings, ImageSettingsError, image_settings
from divergent.app.services.instance_files import replace_file
from divergent.app.services.site.interactive import (
    InteractiveSettings,
    InteractiveSettingsError,
    interactive_settings,
)
from divergent.app.services.site.usage import UsageSettings, UsageSettingsError, usage_settings
from divergent.slurm.client import SlurmClient
from divergent.slurm.jobspec import (
    GPU_NAME,
    GRES,
    STATE_PATH,
    GpuType,
    InvalidJobSpec,
    SlurmSite,
    default_catalog,
)
from divergent.slurm.transport import LocalTransport, SSHTransport
from divergent.terms import CPU, GPU_TYPES

TRANSPORTS = ("local", "ssh", "pyslurm")
# Partition and GRES names go into #SBATCH lines: plain names only.
SLURM_NAME = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
# [slurm] settings: SlurmSite's own, and the docs' types' GPUs a node.
RUNTIME_KEYS = ("runtime", "scratch_root", "bind_paths", "qos", "make_accounts", "run_network",
                "org_nodes")
SLURM_KEYS = (*RUNTIME_KEYS, "gpus_per_node")
DEFAULT_PER_NODE = 8
SSH_KEYS = ("host", "user", "key_path", "port", "known_hosts")
# A [gpu.NAME] table's keys, as GpuType's fields.
GPU_KEYS = {"partition": "partition", "gres": "gres", "per_node": "per_node",
            "constraint": "constraint", "qos": "qos", "cores": "cores", "memory": "memory_gib",
            "node_cores": "node_cores", "node_memory": "node_gib"}


class SiteConfigError(Invalid):
    """The site file holds something Slurm or we could not use; says what."""


@dataclass(frozen=True)
class Transport:
    kind: str = "local"
    host: str | None = None
    user: str | None = None
    key_path: str | None = None
    port: int = 22
    known_hosts: str | None = None

    def describe(self) -> str:
        if self.kind == "ssh":
            return f"ssh {self.user}@{self.host}:{self.port}"
        return "this host" + (" (pyslurm)" if self.kind == "pyslurm" else "")

    def connect(self):
        if self.kind == "ssh":
            return SSHTransport(self.host, self.user, self.key_path, self.port, self.known_hosts)
        return LocalTransport()

    def client(self) -> SlurmClient:
        """A SlurmClient this way in; SlurmUnreachable when pyslurm is chosen
        and does not import."""
        if self.kind == "pyslurm":
            # Optional: imported by the sites that chose it, alone.
            from divergent.slurm.pyslurm_client import PyslurmClient
            return PyslurmClient(self.connect())
        return SlurmClient(self.connect())


SUBMIT_AS = ("org", "member", "service")
# deploy/identity's groups: the sudoers rule's Runas group, and the members
# root lets the server act as. No org's user may be named as one.
RESERVED_GROUPS = ("div-orgs", "div-members")
# A Unix user name (and so a group's) as useradd takes it by default.
UNIX_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Identity:
    """Whose Unix user a job runs as (docs/admins/identity.md): the org's
    own (`org_user` with the org's name in it), a mapped member's own
    (`member`), or the server's (`service`, a site not yet migrated)."""

    submit_as: str = "org"
    org_user: str = "div-{org}"
    make_users: bool = True

    def user_of_org(self, org_name: str) -> str:
        """The org's Unix user; Invalid when the site's template makes of
        this name one that Unix would not take."""
        name = self.org_user.replace("{org}", org_name)
        if name in RESERVED_GROUPS:
            raise Invalid(f"org {org_name!r} would run as {name!r}, a group of divergent's own: "
                          "another org name")
        if not UNIX_NAME.fullmatch(name):
            raise Invalid(f"org {org_name!r} would run as Unix user {name!r}, which is not a "
                          "Unix name (at most 32 lowercase letters, digits, - and _): a "
                          "shorter org name, or the site's org_user (flask site --org-user)")
        return name


def _identity(table: object) -> Identity:
    if not isinstance(table, dict):
        raise SiteConfigError("[identity] must be a table")
    unknown = set(table) - {f.name for f in fields(Identity)}
    if unknown:
        raise SiteConfigError(f"[identity]: unknown setting {sorted(unknown)[0]!r}")
    identity = Identity(**table)
    if identity.submit_as not in SUBMIT_AS:
        raise SiteConfigError(f"[identity] submit_as: one of {', '.join(SUBMIT_AS)}")
    if not isinstance(identity.make_users, bool):
        raise SiteConfigError("[identity] make_users: true or false")
    template = identity.org_user
    if not isinstance(template, str) or template.count("{org}") != 1 or not UNIX_NAME.fullmatch(
            template.replace("{org}", "o")):
        raise SiteConfigError("[identity] org_user: a Unix name with {org} in it once, "
                              "as div-{org}")
    return identity


@dataclass(frozen=True)
class Site:
    slurm: SlurmSite = field(default_factory=SlurmSite)
    transport: Transport = field(default_factory=Transport)
    identity: Identity = field(default_factory=Identity)
    images: ImageSettings = field(default_factory=ImageSettings)
    interactive: InteractiveSettings = field(default_factory=InteractiveSettings)
    usage: UsageSettings = field(default_factory=UsageSettings)


def site_file() -> str:
    return current_app.config["DIV_SITE_FILE"] or os.path.join(current_app.instance_path,
                                                                "site.toml")


def _plain_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or set(value) - set(SLURM_NAME):
        raise SiteConfigError(f"{what}: {value!r} is not a Slurm name (letters, digits, _ . -)")
    return value


def _names(table: object, types: tuple[str, ...], what: str) -> dict[str, str]:
    if not isinstance(table, dict):
        raise SiteConfigError(f"[{what}] must be a table")
    unknown = set(table) - set(types)
    if unknown:
        raise SiteConfigError(f"[{what}]: unknown GPU type {sorted(unknown)[0]!r} "
                              f"(known: {', '.join(types)})")
    return {k: _plain_name(v, f"[{what}] {k}") for k, v in table.items()}


def parse_site(data: dict) -> Site:
    slurm, transport = data.get("slurm", {}), data.get("transport", {})
    default = SlurmSite()
    unknown = set(slurm) - set(SLURM_KEYS)
    if unknown:
        raise SiteConfigError(f"[slurm]: unknown setting {sorted(unknown)[0]!r}")
    bind_paths = slurm.get("bind_paths", list(default.bind_paths))
    if not isinstance(bind_paths, list) or not all(
            isinstance(p, str) and STATE_PATH.fullmatch(p) for p in bind_paths):
        raise SiteConfigError("[slurm] bind_paths: a list of absolute paths")
    scratch = slurm.get("scratch_root", default.scratch_root)
    if not isinstance(scratch, str) or not STATE_PATH.fullmatch(scratch):
        raise SiteConfigError(f"[slurm] scratch_root: {scratch!r} is not an absolute path")
    per_node = slurm.get("gpus_per_node", DEFAULT_PER_NODE)
    if not isinstance(per_node, int) or not 1 <= per_node <= 64:
        raise SiteConfigError("[slurm] gpus_per_node: a whole number from 1 to 64")
    if "gpu" in data:
        catalog = _catalog(data["gpu"])
    else:
        catalog = default_catalog(
            per_node, _names(data.get("partitions", {}), (*GPU_TYPES, CPU), "partitions"),
            _names(data.get("gres", {}), GPU_TYPES, "gres"))
    qos = slurm.get("qos")
    if qos is not None:
        _plain_name(qos, "[slurm] qos")
    make_accounts = slurm.get("make_accounts", default.make_accounts)
    if not isinstance(make_accounts, bool):
        raise SiteConfigError("[slurm] make_accounts: true or false")
    try:
        site = SlurmSite(catalog=catalog, runtime=slurm.get("runtime", default.runtime),
                         scratch_root=scratch, bind_paths=tuple(bind_paths), qos=qos,
                         make_accounts=make_accounts,
                         run_network=slurm.get("run_network", default.run_network),
                         org_nodes=slurm.get("org_nodes", default.org_nodes))
    except InvalidJobSpec as exc:
        raise SiteConfigError(f"[slurm] {exc}") from None
    try:
        images = image_settings(data.get("images", {}))
        interactive = interactive_settings(data.get("interactive", {}))
        usage = usage_settings(data.get("usage", {}))
    except (ImageSettingsError, InteractiveSettingsError, UsageSettingsError) as exc:
        raise SiteConfigError(str(exc)) from None
    return Site(site, _transport(transport), _identity(data.get("identity", {})), images,
                interactive, usage)


def _catalog(table: object) -> dict[str, GpuType]:
    if not isinstance(table, dict) or not table:
        raise SiteConfigError("[gpu]: at least one [gpu.NAME] table")
    catalog = {}
    for name, values in table.items():
        if not GPU_NAME.fullmatch(name):
            raise SiteConfigError(f"[gpu.{name}]: a name is lowercase letters, digits, - and _")
        if not isinstance(values, dict):
            raise SiteConfigError(f"[gpu.{name}] must be a table")
        catalog[name] = _gpu_type(name, values)
    return catalog


def _gpu_type(name: str, values: dict) -> GpuType:
    what = f"[gpu.{name}]"
    unknown = set(values) - set(GPU_KEYS)
    if unknown:
        raise SiteConfigError(f"{what}: unknown setting {sorted(unknown)[0]!r} "
                              f"(known: {', '.join(GPU_KEYS)})")
    if "partition" not in values:
        raise SiteConfigError(f"{what}: partition is required")
    for key in ("partition", "constraint", "qos"):
        if key in values:
            _plain_name(values[key], f"{what} {key}")
    if "gres" in values and not (isinstance(values["gres"], str) and GRES.fullmatch(values["gres"])):
        raise SiteConfigError(f"{what} gres: {values['gres']!r} is not gpu or gpu:TYPE")
    try:
        return GpuType(name, **{GPU_KEYS[key]: value for key, value in values.items()})
    except InvalidJobSpec as exc:
        raise SiteConfigError(f"{what} {exc}") from None


def _transport(table: dict) -> Transport:
    kind = table.get("kind", "local")
    if kind not in TRANSPORTS:
        raise SiteConfigError(f"[transport] kind: one of {', '.join(TRANSPORTS)}")
    unknown = set(table) - {"kind", *SSH_KEYS}
    if unknown:
        raise SiteConfigError(f"[transport]: unknown setting {sorted(unknown)[0]!r}")
    if kind != "ssh":
        unused = set(table) - {"kind"}
        if unused:
            raise SiteConfigError(f"[transport] {sorted(unused)[0]!r} is for kind = \"ssh\"")
        return Transport(kind)
    missing = [key for key in ("host", "user", "key_path") if not table.get(key)]
    if missing:
        raise SiteConfigError(f"[transport] kind = \"ssh\" needs {', '.join(missing)}")
    port = table.get("port", 22)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise SiteConfigError("[transport] port: 1 to 65535")
    return Transport("ssh", str(table["host"]), str(table["user"]), str(table["key_path"]),
                     port, table.get("known_hosts"))


_cache: dict[str, tuple[float, Site]] = {}


def load_site() -> Site:
    """The site file's settings, reread when the file changes."""
    path = site_file()
    try:
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:
        return Site()
    cached = _cache.get(path)
    if cached and cached[0] == mtime:
        return cached[1]
    try:
        with open(path, "rb") as f:
            site = parse_site(tomllib.load(f))
    except tomllib.TOMLDecodeError as exc:
        raise SiteConfigError(f"{path}: {exc}") from None
    _cache[path] = (mtime, site)
    return site


def _toml(value) -> str:
    # Strings as JSON writes them are TOML basic strings; ints and lists too.
    return json.dumps(value)


def site_data(site: Site) -> dict:
    """The settings as the site file holds them: what differs from the
    defaults, table by table; the catalog as renamed docs' types when it is
    one, else every type in a [gpu.NAME] table."""
    default, slurm, transport = SlurmSite(), site.slurm, site.transport
    data = {"slurm": {key: list(value) if isinstance(value, tuple) else value
                      for key in RUNTIME_KEYS
                      if (value := getattr(slurm, key)) != getattr(default, key)}}
    renamed = _as_renamed_docs(slurm.catalog)
    if renamed is None:
        data["gpu"] = {name: _gpu_values(gpu) for name, gpu in slurm.catalog.items()}
    else:
        per_node, data["partitions"], data["gres"] = renamed
        if per_node != DEFAULT_PER_NODE:
            data["slurm"]["gpus_per_node"] = per_node
    data["transport"] = {f.name: value for f in fields(Transport)
                         if (value := getattr(transport, f.name)) is not None
                         and (transport.kind == "ssh" or f.name == "kind")}
    data["identity"] = {f.name: value for f in fields(Identity)
                        if (value := getattr(site.identity, f.name)) != f.default}
    for table, settings in (("images", site.images), ("interactive", site.interactive),
                            ("usage", site.usage)):
        default_settings = type(settings)()
        data[table] = {f.name: list(value) if isinstance(value, tuple) else value
                       for f in fields(settings)
                       if (value := getattr(settings, f.name)) != getattr(default_settings, f.name)}
    return data


def _as_renamed_docs(catalog: dict[str, GpuType]) -> tuple[int, dict, dict] | None:
    """(GPUs a node, partitions, GRES names) when `catalog` is the docs' with
    names changed; None when it is a catalog of the site's own."""
    if list(catalog) != [*GPU_TYPES, CPU] or not catalog[CPU].is_cpu or any(
            catalog[t].is_cpu or catalog[t].gres == "gpu" for t in GPU_TYPES):
        return None
    per_node = catalog[GPU_TYPES[0]].per_node
    partitions = {n: gpu.partition for n, gpu in catalog.items() if gpu.partition != n}
    # Each a GPU type's (not is_cpu, so gres is set), and not the untyped "gpu".
    gres = {n: cast(str, catalog[n].gres).split(":", 1)[1] for n in GPU_TYPES
            if catalog[n].gres != f"gpu:{n}"}
    if default_catalog(per_node, partitions, gres) != catalog:
        return None
    return per_node, partitions, gres


def _gpu_values(gpu: GpuType) -> dict:
    return {key: value for key, name in GPU_KEYS.items()
            if (value := getattr(gpu, name)) is not None}


def save_site(site: Site) -> str:
    """Writes the site file; returns its path."""
    lines = ["# divergent's site settings (flask site). The server and the reconciler",
             "# reread this file when it changes."]
    for table, values in site_data(site).items():
        if table == "gpu":      # names are GPU_NAME: bare TOML keys
            for name, gpu in values.items():
                lines.append(f"[gpu.{name}]")
                lines += [f"{key} = {_toml(value)}" for key, value in gpu.items()]
            continue
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml(value)}" for key, value in values.items()
                  if not isinstance(value, dict)]
        for key, value in values.items():
            if isinstance(value, dict):     # [images.logins]: registries are quoted keys, as nodes
                lines.append(f"[{table}.{key}]")
                lines += [f"{_toml(name)} = {_toml(item)}" for name, item in value.items()]
    path = site_file()
    replace_file(path, "\n".join(lines) + "\n")
    return path


def with_changes(site: Site, slurm: dict, transport: dict | None,
                 identity: dict | None = None) -> Site:
    """`site` with some settings changed (`flask site`'s: partitions and GRES
    names of catalog types, GPUs a node for every GPU type, the runtime...),
    checked as a file would be."""
    changes = dict(slurm)
    catalog = _renamed(site.slurm.catalog, changes.pop("partitions", {}),
                       changes.pop("gres", {}), changes.pop("gpus_per_node", None))
    data = site_data(replace(site, slurm=replace(site.slurm, catalog=catalog)))
    data["slurm"].update(changes)
    data["identity"].update(identity or {})
    if transport is not None:
        data["transport"] = transport
    return parse_site(data)


def _renamed(catalog: dict[str, GpuType], partitions: dict[str, str], gres: dict[str, str],
             per_node: int | None) -> dict[str, GpuType]:
    renamed = dict(catalog)
    for what, names in (("partitions", partitions), ("gres", gres)):
        for name, value in names.items():
            if name not in renamed or (what == "gres" and renamed[name].is_cpu):
                raise SiteConfigError(f"[{what}]: unknown GPU type {name!r} "
                                      f"(known: {', '.join(catalog)})")
            _plain_name(value, f"[{what}] {name}")
            renamed[name] = (replace(renamed[name], partition=value) if what == "partitions"
                             else replace(renamed[name], gres=f"gpu:{value}"))
    if per_node is not None:
        renamed = {n: gpu if gpu.is_cpu else replace(gpu, per_node=per_node)
                   for n, gpu in renamed.items()}
    return renamed


def with_catalog(site: Site, catalog: dict[str, GpuType]) -> Site:
    """`site` selling `catalog` and nothing else."""
    return _with_gpu_tables(site, {n: _gpu_values(gpu) for n, gpu in catalog.items()})


def _with_gpu_tables(site: Site, tables: dict[str, dict]) -> Site:
    data = site_data(site)
    for key in ("partitions", "gres"):
        data.pop(key, None)
    data["slurm"].pop("gpus_per_node", None)
    data["gpu"] = tables
    return parse_site(data)


def with_gpu_type(site: Site, name: str, values: dict | None) -> Site:
    """`site` with the catalog's type `name` set to `values` (a [gpu.NAME]
    table), or removed when `values` is None."""
    tables = {n: _gpu_values(gpu) for n, gpu in site.slurm.catalog.items()}
    if values is not None:
        tables[name] = values
    elif tables.pop(name, None) is None:
        raise SiteConfigError(f"the catalog has no {name!r} (it has {', '.join(tables)})")
    return _with_gpu_tables(site, tables)
