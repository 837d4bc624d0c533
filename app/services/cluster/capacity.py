"""The cluster as a site admin sees it: nodes and GPUs per type, used and
free (one sinfo)."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import cast

from flask import current_app

from divergent.app.services.errors import Unavailable
from divergent.app.services.site.slurm_access import cached, slurm_client
from divergent.slurm.client import SlurmError
from divergent.slurm.jobspec import SlurmSite
from divergent.slurm.records import NodeRecord


@dataclass
class GpuCapacity:
    gpu_type: str
    total: int = 0
    used: int = 0
    free: int = 0          # on nodes that can take jobs now
    unavailable: int = 0   # idle GPUs on nodes that are down, drained, not responding


def cluster_nodes() -> list[NodeRecord]:
    """The nodes, by name, each with its partitions in order: from one sinfo
    every DIV_CLUSTER_CACHE_SECONDS at most per server process, however
    many admins watch the Cluster page (it refreshes every 5 s)."""
    try:
        nodes = cached("nodes", current_app.config["DIV_CLUSTER_CACHE_SECONDS"],
                       lambda: slurm_client().nodes())
    except SlurmError as exc:
        raise Unavailable(f"Slurm did not answer: {exc}") from None
    return [replace(node, partitions=sorted(node.partitions))
            for _, node in sorted(nodes.items(), key=lambda item: _natural(item[0]))]


def _natural(name: str) -> list:
    """gpu-2 before gpu-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def gpu_capacity(nodes: list[NodeRecord], site: SlurmSite) -> list[GpuCapacity]:
    """Per GPU type of the catalog: a node's typed GRES counts for the type
    of that GRES name, its untyped GPUs for the type sold from a partition
    it is in."""
    capacity = {name: GpuCapacity(name) for name, gpu in site.catalog.items() if not gpu.is_cpu}
    for node in nodes:
        for name in capacity:
            gpu = site.catalog[name]
            kind = cast(str, gpu.gres).partition(":")[2]      # not is_cpu: it has a GRES
            if kind not in node.gpus or (not kind and gpu.partition not in node.partitions):
                continue
            count = node.gpus[kind]
            row = capacity[name]
            used = min(count, node.gpus_used.get(kind, 0))
            row.total += count
            row.used += used
            if node.schedulable:
                row.free += count - used
            else:
                row.unavailable += count - used
    return [row for row in capacity.values() if row.total]
