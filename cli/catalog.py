"""The cluster's shape as the server serves it (GET /catalog): the GPU
types the site sells, GPUs a node, a node's cores and GiB. `div run` checks
its flags against it before uploading anything. The answer is kept under
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

from cli.api import ApiError, ApiUnreachable

CACHE_SECONDS = 60


@dataclass(frozen=True)
class Shape:
    gpu_types: tuple[str, ...] = ("b300", "h200", "h100", "l40s", "cpu")
    gpus_per_node: int = 8
    max_cores_per_node: int = 64
    max_gib_per_node: int = 336

    def nodes_for(self, gpu: str, gpus: int) -> int:
        return 1 if gpu == "cpu" else -(-gpus // self.gpus_per_node)


FALLBACK = Shape()


def shape_of(answer: object) -> Shape | None:
    """A Shape from the server's JSON, or None for anything else."""
    if not isinstance(answer, dict):
        return None
    types, numbers = answer.get("gpu_types"), [answer.get(k) for k in (
        "gpus_per_node", "max_cores_per_node", "max_gib_per_node")]
    if not (isinstance(types, list) and types and all(isinstance(t, str) for t in types)
            and all(isinstance(n, int) and n >= 1 for n in numbers)):
        return None
    return Shape(tuple(types), *numbers)


def cluster_shape(api) -> Shape:
    path = _cache_path(api.url)
    try:
        if 0 <= time.time() - path.stat().st_mtime < CACHE_SECONDS:
            cached = shape_of(json.loads(path.read_text()))
            if cached is not None:
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


def _keep(path: Path, answer: dict) -> None:
    """Written whole under another name, then renamed: a `div` starting
    meanwhile reads the old answer or the new, never half of one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f"{path.name}.{os.getpid()}")
        temp.write_text(json.dumps(answer))
        os.replace(temp, path)
    except OSError:
        pass   # a read-only home: ask again next time
