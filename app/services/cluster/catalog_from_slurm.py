"""A catalog proposed from what the cluster's Slurm has (`flask site init
--from-slurm`): one type per typed GPU GRES, one per partition of nodes
with untyped GPUs, and cpu; GPUs a node, cores and GiB from the smallest
node that has them. Each GPU includes the docs' 1 core and 8 GiB (cpu: 2
GiB); the admin prices each type, and changes what they like, after."""
from __future__ import annotations

import re

from divergent.app.services.errors import Invalid
from divergent.slurm.jobspec import GpuType, InvalidJobSpec
from divergent.slurm.records import NodeRecord
from divergent.terms import CPU

DOCS_NODE_GIB = GpuType(CPU, CPU).node_gib


def propose(nodes: list[NodeRecord]) -> dict[str, GpuType]:
    try:
        return _propose(nodes)
    except InvalidJobSpec as exc:
        raise Invalid(f"Slurm names something divergent cannot put in a batch script: {exc}; "
                      "add that type by hand (flask site gpu add)") from None


def _propose(nodes: list[NodeRecord]) -> dict[str, GpuType]:
    catalog: dict[str, GpuType] = {}
    kinds = sorted({kind for node in nodes for kind in node.gpus if kind})
    for kind in kinds:
        having = [node for node in nodes if kind in node.gpus]
        name = _name(kind)
        catalog[name] = _sized(GpuType(name, _partition(nodes, having, name), f"gpu:{kind}"),
                               having, min(node.gpus[kind] for node in having))
    untyped = [node for node in nodes if node.gpus.get("")]
    for partition in sorted({p for node in untyped for p in node.partitions}):
        having = _members(nodes, partition)
        if not all(node.gpus.get("") for node in having):
            continue     # a partition of other nodes too: not where these GPUs are sold
        catalog[_name(partition)] = _sized(GpuType(_name(partition), partition, "gpu"), having,
                                           min(node.gpus[""] for node in having))
    cpu_partition = _cpu_partition(nodes)
    if cpu_partition is not None:
        having = [node for node in nodes if cpu_partition in node.partitions]
        catalog[CPU] = _sized(GpuType(CPU, cpu_partition, None, memory_gib=2), having, 8)
    return catalog


def _name(text: str) -> str:
    """A Slurm name as users would type it: A100-SXM4 -> a100-sxm4."""
    name = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_")[:32] or "gpu"
    return name if name[0].isalnum() else f"g{name}"[:32]


def _members(nodes: list[NodeRecord], partition: str) -> list[NodeRecord]:
    return [node for node in nodes if partition in node.partitions]


def _partition(nodes: list[NodeRecord], having: list[NodeRecord], name: str) -> str:
    """A partition every node with the GRES is in: one of those nodes alone
    first, then the one named like the type, then the first by name."""
    shared = set(having[0].partitions).intersection(*(node.partitions for node in having))
    candidates = sorted(shared) or having[0].partitions
    names = {node.name for node in having}
    only = [p for p in candidates if {node.name for node in _members(nodes, p)} <= names]
    return name if name in (only or candidates) else (only or candidates)[0]


def _cpu_partition(nodes: list[NodeRecord]) -> str | None:
    """`cpu` if there is one; else a partition of nodes without GPUs; else
    the partition over the most nodes."""
    partitions = sorted({p for node in nodes for p in node.partitions})
    if CPU in partitions:
        return CPU
    without_gpus = sorted({p for node in nodes if not node.gpus for p in node.partitions})
    if without_gpus:
        return without_gpus[0]
    return max(partitions, key=lambda p: len(_members(nodes, p)), default=None)


def _sized(gpu: GpuType, nodes: list[NodeRecord], per_node: int) -> GpuType:
    # A node that does not say its memory (RealMemory unset) counts as the docs'.
    gib = min(node.memory_mib // 1024 or DOCS_NODE_GIB for node in nodes)
    return GpuType(gpu.name, gpu.partition, gpu.gres, per_node=max(1, min(per_node, 64)),
                   memory_gib=gpu.memory_gib, node_cores=max(1, min(n.cpus_total for n in nodes)),
                   node_gib=gib)
