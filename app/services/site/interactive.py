"""The site's interactive runs (div shell, div notebook), [interactive] in
its site file:

    [interactive]
    port = 62888               # where they serve in their job's network
                               # (INTERACTIVE_PORT in divergent-node.conf): above
                               # Linux's ephemeral ports and every MASTER_PORT,
                               # and no program's own (a batch run's Jupyter: 8888)
    idle_minutes = 15          # a shell nobody is attached to, a notebook
                               # nobody uses, ends after this long
    gpu_types = ["cpu", "a100"]   # the types they may ask for; all when unset
    notebook_host = "nb.div.example.org"   # where browsers open notebooks: another name
                               # of this server's, so that a notebook's pages (the
                               # org's own code) never share the dashboard's origin
    [interactive.job_subnets]  # each node's jobs' /16, as JOB_SUBNETS says
    node1 = "10.81"

The server reaches a run only at its job's address on its node, which it
works out from these and Slurm's record of the job (never from anything a
request or a run says). Without job_subnets, a site has no interactive runs."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PREFIX = re.compile(r"^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])$")
KEYS = ("port", "idle_minutes", "gpu_types", "job_subnets", "notebook_host")
HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


class InteractiveSettingsError(ValueError):
    """Says which [interactive] value is wrong."""


@dataclass(frozen=True)
class InteractiveSettings:
    port: int = 62888
    idle_minutes: int = 15
    # None: every type the site sells.
    gpu_types: tuple[str, ...] | None = None
    job_subnets: dict[str, str] = field(default_factory=dict)
    notebook_host: str | None = None

    def allows(self, gpu_type: str) -> bool:
        return self.gpu_types is None or gpu_type in self.gpu_types

    def job_address(self, node: str, job_id: int) -> str | None:
        """The job's address on `node` (the prolog's: the node's prefix and
        the job id's two low bytes), or None for a node the site did not list."""
        prefix = self.job_subnets.get(node)
        if prefix is None:
            return None
        return f"{prefix}.{(job_id >> 8) & 255}.{job_id & 255}"


def interactive_settings(table: object) -> InteractiveSettings:
    if not isinstance(table, dict):
        raise InteractiveSettingsError("[interactive] must be a table")
    unknown = set(table) - set(KEYS)
    if unknown:
        raise InteractiveSettingsError(f"[interactive]: unknown settings {', '.join(sorted(unknown))}")
    default = InteractiveSettings()
    port, idle = table.get("port", default.port), table.get("idle_minutes", default.idle_minutes)
    if not isinstance(port, int) or isinstance(port, bool) or not 1024 <= port <= 65535:
        raise InteractiveSettingsError("[interactive] port: 1024 to 65535")
    if not isinstance(idle, int) or isinstance(idle, bool) or not 1 <= idle <= 7 * 24 * 60:
        raise InteractiveSettingsError("[interactive] idle_minutes: 1 to 10080 (a week)")
    types = table.get("gpu_types")
    if types is not None and (not isinstance(types, list)
                              or not all(isinstance(t, str) for t in types)):
        raise InteractiveSettingsError("[interactive] gpu_types: a list of GPU type names")
    subnets = table.get("job_subnets", {})
    if not isinstance(subnets, dict):
        raise InteractiveSettingsError("[interactive.job_subnets]: a table of node = \"10.81\"")
    for node, prefix in subnets.items():
        if not NODE_NAME.fullmatch(node) or not isinstance(prefix, str) or not PREFIX.fullmatch(prefix):
            raise InteractiveSettingsError(f"[interactive.job_subnets] {node}: {prefix!r} is not "
                                           "a node's /16 prefix (10.81)")
    host = table.get("notebook_host")
    if host is not None and (not isinstance(host, str) or not HOST.fullmatch(host)):
        raise InteractiveSettingsError(f"[interactive] notebook_host: {host!r} is not a host name")
    return InteractiveSettings(port=port, idle_minutes=idle,
                               gpu_types=None if types is None else tuple(types),
                               job_subnets=dict(subnets), notebook_host=host)


def parse_subnets(text: str) -> dict[str, str]:
    """JOB_SUBNETS as divergent-node.conf writes it: "node1=10.81 node2=10.82"."""
    pairs = dict(entry.partition("=")[::2] for entry in text.split())
    return interactive_settings({"job_subnets": pairs}).job_subnets
