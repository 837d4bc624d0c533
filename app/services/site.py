"""The site's Slurm settings, kept in instance/site.toml (DIV_SITE_FILE) and
changed with `flask site`: what this cluster calls each GPU type's
partition and GRES, the container runtime, node scratch, and how the server
reaches Slurm (on this host, or a login node over SSH). Without the file,
the dev cluster's names and the local transport.

    [slurm]
    runtime = "pyxis"
    gpus_per_node = 8
    scratch_root = "/local/scratch"
    bind_paths = ["/opt/conda"]
    [partitions]
    h100 = "gpu-h100"
    [gres]
    h100 = "nvidia_h100_80gb"
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
import tomllib
from dataclasses import dataclass, field, fields

from flask import current_app

from app.services.errors import Invalid
from app.services.instance_files import replace_file
from slurm.jobspec import CPU, GPU_TYPES, STATE_PATH, InvalidJobSpec, SlurmSite
from slurm.transport import LocalTransport, SSHTransport

TRANSPORTS = ("local", "ssh")
# Partition and GRES names go into #SBATCH lines: plain names only.
SLURM_NAME = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
SLURM_KEYS = ("runtime", "gpus_per_node", "scratch_root", "bind_paths")
SSH_KEYS = ("host", "user", "key_path", "port", "known_hosts")


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
        return ("this host" if self.kind == "local"
                else f"ssh {self.user}@{self.host}:{self.port}")

    def connect(self):
        if self.kind == "local":
            return LocalTransport()
        return SSHTransport(self.host, self.user, self.key_path, self.port, self.known_hosts)


@dataclass(frozen=True)
class Site:
    slurm: SlurmSite = field(default_factory=SlurmSite)
    transport: Transport = field(default_factory=Transport)


def site_file() -> str:
    return current_app.config["DIV_SITE_FILE"] or os.path.join(current_app.instance_path,
                                                                "site.toml")


def _plain_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or set(value) - set(SLURM_NAME):
        raise SiteConfigError(f"{what}: {value!r} is not a Slurm name (letters, digits, _ . -)")
    return value


def _names(table: object, default: dict[str, str], types: tuple[str, ...],
           what: str) -> dict[str, str]:
    if not isinstance(table, dict):
        raise SiteConfigError(f"[{what}] must be a table")
    unknown = set(table) - set(types)
    if unknown:
        raise SiteConfigError(f"[{what}]: unknown GPU type {sorted(unknown)[0]!r} "
                              f"(known: {', '.join(types)})")
    return {**default, **{k: _plain_name(v, f"[{what}] {k}") for k, v in table.items()}}


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
    per_node = slurm.get("gpus_per_node", default.gpus_per_node)
    if not isinstance(per_node, int) or not 1 <= per_node <= 64:
        raise SiteConfigError("[slurm] gpus_per_node: a whole number from 1 to 64")
    try:
        site = SlurmSite(
            partitions=_names(data.get("partitions", {}), default.partitions,
                              (*GPU_TYPES, CPU), "partitions"),
            gres_types=_names(data.get("gres", {}), default.gres_types, GPU_TYPES, "gres"),
            gpus_per_node=per_node, runtime=slurm.get("runtime", default.runtime),
            scratch_root=scratch, bind_paths=tuple(bind_paths))
    except InvalidJobSpec as exc:
        raise SiteConfigError(f"[slurm] {exc}") from None
    return Site(site, _transport(transport))


def _transport(table: dict) -> Transport:
    kind = table.get("kind", "local")
    if kind not in TRANSPORTS:
        raise SiteConfigError(f"[transport] kind: one of {', '.join(TRANSPORTS)}")
    unknown = set(table) - {"kind", *SSH_KEYS}
    if unknown:
        raise SiteConfigError(f"[transport]: unknown setting {sorted(unknown)[0]!r}")
    if kind == "local":
        return Transport()
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
    defaults, table by table."""
    default, slurm, transport = SlurmSite(), site.slurm, site.transport
    return {
        "slurm": {key: list(value) if isinstance(value, tuple) else value
                  for key in SLURM_KEYS
                  if (value := getattr(slurm, key)) != getattr(default, key)},
        "partitions": {k: v for k, v in slurm.partitions.items() if default.partitions.get(k) != v},
        "gres": {k: v for k, v in slurm.gres_types.items() if default.gres_types.get(k) != v},
        "transport": {f.name: value for f in fields(Transport)
                      if (value := getattr(transport, f.name)) is not None
                      and (transport.kind == "ssh" or f.name == "kind")},
    }


def save_site(site: Site) -> str:
    """Writes the site file; returns its path."""
    lines = ["# divergent's site settings (flask site). The server and the reconciler",
             "# reread this file when it changes."]
    for table, values in site_data(site).items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml(value)}" for key, value in values.items()]
    path = site_file()
    replace_file(path, "\n".join(lines) + "\n")
    return path


def with_changes(site: Site, slurm: dict, transport: dict | None) -> Site:
    """`site` with some settings changed, checked as a file would be."""
    data = site_data(site)
    for key, value in slurm.items():
        if key in ("partitions", "gres"):
            data[key].update(value)
        else:
            data["slurm"][key] = value
    if transport is not None:
        data["transport"] = transport
    return parse_site(data)
