"""The cluster's shape as users may ask for it: the GPU types the site
sells, GPUs on each node, the cores and GiB a node has, and each type's
price. The server validates runs against it, and serves it (GET
/api/v1/catalog) so that `div` validates against the same before it
uploads anything."""
from __future__ import annotations

from dataclasses import dataclass

from app.services.errors import Unavailable
from app.services.pricing import current_prices, usd_text
from app.services.slurm_access import slurm_site
from slurm import jobspec

GPU_TYPES = (*jobspec.GPU_TYPES, jobspec.CPU)
# What one of the docs' nodes has: 64 cores and 336 GiB to give runs.
MAX_CORES_PER_NODE, MAX_GIB_PER_NODE = 64, 336


@dataclass(frozen=True)
class ClusterShape:
    gpu_types: tuple[str, ...]
    gpus_per_node: int
    max_cores_per_node: int
    max_gib_per_node: int

    def nodes_for(self, gpu: str, gpus: int) -> int:
        return 1 if gpu == jobspec.CPU else -(-gpus // self.gpus_per_node)


def cluster_shape() -> ClusterShape:
    return ClusterShape(GPU_TYPES, slurm_site().gpus_per_node, MAX_CORES_PER_NODE,
                        MAX_GIB_PER_NODE)


def catalog_json() -> dict:
    """The shape, and the prices unless the price table is broken (runs are
    refused then anyway, saying so): flags are checked against the shape."""
    shape = cluster_shape()
    try:
        prices = current_prices()
    except Unavailable:
        prices = None
    return {"gpu_types": list(shape.gpu_types), "gpus_per_node": shape.gpus_per_node,
            "max_cores_per_node": shape.max_cores_per_node,
            "max_gib_per_node": shape.max_gib_per_node,
            "price_per_hour": prices and {gpu: usd_text(prices.per_unit_hour[gpu])
                                          for gpu in shape.gpu_types}}
