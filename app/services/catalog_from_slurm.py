"""A catalog proposed from what the cluster's Slurm has (`flask site init
--from-slurm`): one type per typed GPU GRES, one per partition of nodes
with untyped GPUs, and cpu; GPUs a node, cores and GiB from the smallest
node that has them. Each GPU includes the docs' 1 core and 8 GiB (cpu: 2
GiB); the admin prices each type, and changes what they like, after."""
from __future__ import annotations

import re

from slurm.jobspec import CPU, GpuType
from slurm.records import NodeRecord


def propose(nodes: list[NodeRecord]) -> dict[str, GpuType]:
    catalog: dict[str, GpuType] = {}
    kinds = sorted({kind for node in nodes for kind in node.gpus if kind})
    for kind in kinds:
        having = [node for node in nodes if kind in node.gpus]
        name = _name(kind)
        catalog[name] = _sized(GpuType(name, _partition(having, name), f"gpu:{kind}"),
                               having, min(node.gpus[kind] for node in having))
    typed_partitions = {gpu.partition for gpu in catalog.values()}
    untyped = [node for node in nodes if node.gpus.get("")]
    for partition in sorted({p for node in untyped for p in node.partitions} - typed_partitions):
        having = [node for node in untyped if partition in node.partitions]
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


def _partition(nodes: list[NodeRecord], name: str) -> str:
    """A partition every node with the GRES is in, the one named like the
    type when there is one."""
    shared = set(nodes[0].partitions).intersection(*(node.partitions for node in nodes))
    candidates = sorted(shared) or nodes[0].partitions
    return name if name in candidates else candidates[0]


def _cpu_partition(nodes: list[NodeRecord]) -> str | None:
    partitions = {p for node in nodes for p in node.partitions}
    if CPU in partitions:
        return CPU
    without_gpus = sorted({p for node in nodes if not node.gpus for p in node.partitions})
    return without_gpus[0] if without_gpus else None


def _sized(gpu: GpuType, nodes: list[NodeRecord], per_node: int) -> GpuType:
    gib = min(node.memory_mib for node in nodes) // 1024
    return GpuType(gpu.name, gpu.partition, gpu.gres, per_node=max(1, min(per_node, 64)),
                   memory_gib=gpu.memory_gib, node_cores=max(1, min(n.cpus_total for n in nodes)),
                   node_gib=max(1, gib))
