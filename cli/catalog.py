"""The site's catalog as the server serves it (GET /catalog): each type it
sells, with GPUs a node, what one includes and what a node has. `div run`
checks its flags against it before uploading anything. The answer is kept under
~/.cache/div for CACHE_SECONDS, so most runs do not ask; FALLBACK (the docs'
cluster, which tests hold equal to a default server's answer) stands in for
a server that does not answer: the run's own request then says why."""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable
from divergent.terms import (
    CORES_PER_UNIT,
    CPU,
    GIB_PER_CPU,
    GIB_PER_GPU,
    GPU_TYPES,
    GPUS_PER_NODE,
    NODE_CORES,
    NODE_GIB,
)

CACHE_SECONDS = 60


@dataclass(frozen=True)
class Hardware:
    """One type of the catalog, as the CLI checks flags against it."""
    gpu: bool = True
    per_node: int = GPUS_PER_NODE
    cores: int = CORES_PER_UNIT
    memory_gib: int = GIB_PER_GPU
    node_cores: int = NODE_CORES
    node_gib: int = NODE_GIB

    def nodes_for(self, units: int) -> int:
        return -(-units // self.per_node) if self.gpu else 1


@dataclass(frozen=True)
class Shape:
    types: dict[str, Hardware]

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(self.types)


# The docs' table.
FALLBACK = Shape({**{t: Hardware() for t in GPU_TYPES}, CPU: Hardware(gpu=False, memory_gib=GIB_PER_CPU)})
NUMBERS = ("per_node", "cores", "memory_gib", "node_cores", "node_gib")


def shape_of(answer: object) -> Shape | None:
    """A Shape from the server's JSON, or None for anything else."""
    rows = answer.get("gpu_types") if isinstance(answer, dict) else None
    if not isinstance(rows, list) or not rows:
        return None
    types = {}
    for row in rows:
        if not (isinstance(row, dict) and isinstance(row.get("name"), str)
                and isinstance(row.get("gpu"), bool)
                and all(isinstance(row.get(k), int) and row[k] >= 1 for k in NUMBERS)):
            return None
        types[row["name"]] = Hardware(row["gpu"], *(row[k] for k in NUMBERS))
    return Shape(types)


def cluster_shape(api: ApiClient, gpu_type: str | None = None) -> Shape:
    """The catalog, from the cache while it is young and knows `gpu_type`:
    a type the site began to sell within the minute is asked for, never
    refused on the cache's word."""
    path = _cache_path(api.url)
    try:
        if 0 <= time.time() - path.stat().st_mtime < CACHE_SECONDS:
            cached = shape_of(json.loads(path.read_text()))
            if cached is not None and (gpu_type is None or gpu_type in cached.types):
                return cached
    except (OSError, ValueError):
        pass
    try:
        answer = api.get("/catalog")
    except (ApiError, ApiUnreachable, ValueError):    # ValueError: not JSON (a proxy's page)
        return FALLBACK
    shape = shape_of(answer)
    if shape is None:
        return FALLBACK
    _keep(path, answer)
    return shape


def _cache_path(api_url: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "div" / f"catalog-{hashlib.sha256(api_url.encode()).hexdigest()[:16]}.json"


def _keep(path: Path, answer: dict[str, Any]) -> None:
    """Written whole under another name, then renamed: a `div` starting
    meanwhile reads the old answer or the new, never half of one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f"{path.name}.{os.getpid()}")
        temp.write_text(json.dumps(answer))
        os.replace(temp, path)
    except OSError:
        pass   # a read-only home: ask again next time
