"""Metrics a run reports by appending JSON objects, one a line, to the file
named by $DIV_METRICS (the state folder's metrics.jsonl). The run's
`metrics` are the last value of each key; the file itself stays as the time
series the Telemetry tab draws (each line a point, with its step and time).
Malformed lines are skipped and counted, never fatal. Read incrementally:
the reconciler keeps the byte offset it has read to."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

from divergent.app.services.files.volumes import open_state_fd

# What one reconciler cycle reads of one run, and of all of one org's runs:
# a run that floods its file delays only its own settling (and an org with
# many, only its own runs'), never the cycle every org's runs share.
CYCLE_BUDGET = 512 * 1024
ORG_CYCLE_BUDGET = 4 * CYCLE_BUDGET
# A line longer than this is malformed; a run keeps at most MAX_KEYS keys,
# each at most MAX_KEY_CHARS, and strings of at most MAX_STRING_CHARS, so
# that its JSON stays small whatever it writes.
MAX_LINE = 64 * 1024
MAX_KEYS = 1000
MAX_KEY_CHARS = 128
MAX_STRING_CHARS = 1024


@dataclass
class MetricsRead:
    last: dict = field(default_factory=dict)
    points: int = 0
    malformed: int = 0
    offset: int = 0
    # Whether the read reached the file's end.
    caught_up: bool = True


def _usable(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return len(value) <= MAX_STRING_CHARS and _encodable(value)
    return isinstance(value, (int, bool))


def _encodable(text: str) -> bool:
    """JSON can carry lone surrogates ("\\ud800"), which no UTF-8 column or
    answer can: such a value is left out."""
    try:
        text.encode()
        return True
    except UnicodeEncodeError:
        return False


def read_metrics(path: str, state: MetricsRead, final: bool = False,
                 budget: int = CYCLE_BUDGET) -> MetricsRead:
    """Adds at most `budget` bytes of what the file holds past state.offset;
    a last line without its newline waits for the next read unless the run
    has ended (`final`) and the read reached the file's end."""
    fd = open_state_fd(path)
    if fd is None:
        return state
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, budget, state.offset)
    finally:
        os.close(fd)
    state.caught_up = state.offset + len(data) >= size
    end = len(data) if final and state.caught_up else data.rfind(b"\n") + 1
    if end == 0 and len(data) == budget:
        end = len(data)   # one line longer than a whole read: malformed, skipped
    for line in data[:end].splitlines():
        if line.strip():
            _add_point(state, line)
    state.offset += end
    return state


def parse_point(line: bytes) -> dict | None:
    """One line of a metrics file as a point, or None when it is not one."""
    try:
        point = json.loads(line) if len(line) <= MAX_LINE else None
    except (ValueError, RecursionError):   # RecursionError: [[[[… nested too deep
        return None
    return point if isinstance(point, dict) else None


def read_points(path: str, max_bytes: int, max_points: int) -> list[dict]:
    """The points of the first `max_bytes` of a metrics file (the Telemetry
    tab's series), read as the reconciler reads it: no link, no FIFO, no
    line longer than MAX_LINE."""
    fd = open_state_fd(path)
    if fd is None:
        return []
    try:
        data = os.pread(fd, max_bytes, 0)
    finally:
        os.close(fd)
    points = []
    for line in data[:data.rfind(b"\n") + 1].splitlines():
        point = parse_point(line) if line.strip() else None
        if point is not None:
            points.append(point)
            if len(points) >= max_points:
                break
    return points


def _add_point(state: MetricsRead, line: bytes) -> None:
    point = parse_point(line)
    if point is None:
        state.malformed += 1
        return
    state.points += 1
    for key, value in point.items():
        if len(key) > MAX_KEY_CHARS or not _encodable(key) or not _usable(value):
            continue
        if key in state.last or len(state.last) < MAX_KEYS:
            state.last[key] = value
