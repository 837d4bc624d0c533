"""The site's catalog as users may ask for it: each type it sells (its
name, GPUs a node, what a GPU includes, what a node has to give runs, its
price). The server validates runs against it and serves it (GET
/api/v1/catalog) so that `div` validates against the same before it
uploads anything."""
from __future__ import annotations

from divergent.app.services.errors import Unavailable
from divergent.app.services.money.pricing import current_prices, usd_text
from divergent.app.services.site.slurm_access import slurm_site
from divergent.slurm.jobspec import GpuType, default_catalog


def catalog() -> dict[str, GpuType]:
    return slurm_site().catalog


DOCS = default_catalog()


def gpu_type(name: str) -> GpuType:
    """The catalog's type for a run's words (its hardware in the header), or
    the docs' for one the catalog no longer has, or while the site file is
    broken: showing a run never depends on the site's settings."""
    try:
        known = catalog().get(name)
    except Unavailable:
        known = None
    return known or DOCS.get(name) or GpuType(name, name, "gpu")


def catalog_json() -> dict:
    """Every type, and its price unless the price table is broken (runs are
    refused then anyway, saying so): flags are checked against the rest."""
    try:
        prices = current_prices().per_unit_hour
    except Unavailable:
        prices = {}
    return {"gpu_types": [
        {"name": gpu.name, "gpu": not gpu.is_cpu, "per_node": gpu.per_node, "cores": gpu.cores,
         "memory_gib": gpu.memory_gib, "node_cores": gpu.node_cores, "node_gib": gpu.node_gib,
         "price_per_hour": usd_text(prices[gpu.name]) if gpu.name in prices else None}
        for gpu in catalog().values()]}
