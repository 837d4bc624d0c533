"""Slurm's refusal of a run in the user's terms. Slurm says "Node count
specification invalid" for more GPUs than the cluster has, and "Requested
node configuration is not available" both for a request no node can hold
and for nodes that are not back yet (a controller restart): the cluster's
nodes, asked at once, tell the two apart. More than the cluster has is the
request's fault (422, exit 2) and says what the cluster has; what fits the
cluster but not its state now is a moment's trouble (503, exit 1)."""
from __future__ import annotations

from typing import cast

from divergent.app.services.cluster.capacity import gpu_capacity
from divergent.app.services.errors import Refused, ServiceError, Unavailable
from divergent.app.services.site.slurm_access import slurm_client, slurm_site
from divergent.slurm.client import SlurmError, SubmitRefused

# What Slurm says when a job asks for more nodes than it finds (and, for
# the second, when nodes are not back yet). Too many cores or too much
# memory for any node is the request's alone, and stays in Slurm's words.
SIZE_REFUSALS = ("Node count specification invalid",
                 "Requested node configuration is not available")
RETRY = "nothing was started, try again in a minute"


def refused_by_slurm(exc: SubmitRefused, gpu_type: str, gpus: int) -> ServiceError:
    text = str(exc)
    if not any(refusal in text for refusal in SIZE_REFUSALS):
        return Refused(text)
    try:
        nodes = list(slurm_client().nodes().values())
    except SlurmError as down:
        return Unavailable(f"{text}; Slurm does not answer now ({down}): {RETRY}")
    site = slurm_site()
    gpu = site.catalog[gpu_type]
    if gpu.is_cpu:
        fitting = [node for node in nodes if gpu.partition in node.partitions]
        label, has = "cpu", f"{len(fitting)} nodes in partition {gpu.partition}"
        too_big = not fitting
    else:
        capacity = next((row for row in gpu_capacity(nodes, site) if row.gpu_type == gpu_type),
                        None)
        kind = cast(str, gpu.gres).partition(":")[2]      # not is_cpu: it has a GRES
        fitting = [node for node in nodes if node.gpus.get(kind) and
                   (kind or gpu.partition in node.partitions)]
        total = capacity.total if capacity else 0
        label = gpu_type.upper()
        has = f"{total} {label} on {len(fitting)} node{'s' if len(fitting) != 1 else ''}"
        too_big = gpus > total or gpu.nodes_for(gpus) > len(fitting)
    if too_big:
        return Refused(f"the cluster has {has}: --gpu {gpu_type} --gpus {gpus} asks for more "
                       f"(Slurm: {text.removeprefix('Slurm refused the job: ')})")
    if any(not node.schedulable for node in fitting):
        return Unavailable(f"Slurm cannot place the run now: some of the {has} are down or "
                           f"not responding (a controller restart?); {RETRY}")
    return Refused(text)
