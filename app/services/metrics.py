"""Metrics a run reports by appending JSON objects, one a line, to the file
named by $DIV_METRICS (the state folder's metrics.jsonl). The run's
`metrics` are the last value of each key; the file itself stays as the time
series the Telemetry tab draws (each line a point, with its step and time).
Malformed lines are skipped and counted, never fatal. Read incrementally:
the reconciler keeps the byte offset it has read to."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

MAX_READ = 64 * 1024 * 1024


@dataclass
class MetricsRead:
    last: dict = field(default_factory=dict)
    points: int = 0
    malformed: int = 0
    offset: int = 0


def _usable(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (int, str, bool))


def read_metrics(path: str, state: MetricsRead, final: bool = False) -> MetricsRead:
    """Adds what the file holds past state.offset; a last line without its
    newline waits for the next read unless the run has ended (`final`)."""
    try:
        with open(path, "rb") as f:
            f.seek(state.offset)
            data = f.read(MAX_READ)
    except FileNotFoundError:
        return state
    end = len(data) if final else data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        try:
            point = json.loads(line)
        except ValueError:
            state.malformed += 1
            continue
        if not isinstance(point, dict):
            state.malformed += 1
            continue
        state.points += 1
        for key, value in point.items():
            if isinstance(key, str) and _usable(value):
                state.last[key] = value
    state.offset += end
    return state
