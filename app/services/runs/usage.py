"""What a run uses: its CPU, its memory against what it asked for, and its
GPUs where the site has GPU telemetry. While it runs, from the samplers
beside it (slurm/batch/usage.py: a usage.<node>.jsonl a node, each line
running totals, so a node's last line is enough); once it has ended, from
Slurm's accounting (sacct's TotalCPU and TRESUsageInMax) where Slurm measured
it, the samplers' where it did not. GPU figures are null, never invented,
where nothing measured them.

Reading is bounded like metrics: the tail of each node's file (a run cannot
write these files: its sandbox never sees them, but a line is checked as
if it could), at most one read a run every few samples."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from divergent.app.models import Run
from divergent.app.services.files.volumes import open_state_fd
from divergent.app.services.money.catalog import gpu_type
from divergent.slurm.records import MOST, JobUsage

USAGE_FILE = re.compile(r"^usage\.([0-9]{1,4})\.jsonl$")
# A node's last line is in its file's last TAIL bytes (a line is ~200 bytes,
# more with many GPUs); a run has at most MAX_NODES files read.
TAIL = 16 * 1024
# The sampler writes whole lines but on a failing share: a reading looks
# this far back past lines that are not samples.
NEWEST_LINES = 8
MAX_NODES = 256
# What the Telemetry tab reads at most of a run's files, all nodes together,
# and at least of each node's, on each refresh (every 2 s while it runs): a
# longer file is read in SPREAD pieces from its start to its end, so the
# charts span the whole run at a coarser grain.
SERIES_BYTES = 1024 * 1024
SPREAD = 64
SPREAD_PIECE = 16 * 1024        # at least: a refresh makes at most 64 reads
# What a chart shows at most, whatever the run's size: its first CHART_NODES
# nodes, CHART_SERIES series (nodes, or their GPUs), CHART_POINTS points in
# time (samples of several nodes at about one moment share one).
CHART_NODES = 16
CHART_SERIES = 32
CHART_POINTS = 1000
GIB = 1 << 30
NO_GPU_TELEMETRY = "no GPU telemetry on this cluster"
# The last line of `div run` says a run over-asked only for one that ran
# this long, and only when it clearly did.
HINT_AFTER_SECONDS = 60
HINT_BELOW = 0.25
HINT_MEMORY_GIB = 8
PUBLIC = ("cpu_efficiency", "max_memory_bytes", "memory_requested_bytes", "gpu_utilization",
          "gpu_memory_max_bytes", "gpu_note", "source")


def _figure(value: object, most: float = MOST) -> float | None:
    """A number a sample may hold: finite, not negative, not absurd."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    # Compared before float(), as JSON's integers have no bound; NaN and
    # the infinities fail the comparison too.
    return float(value) if 0 <= value <= most else None


def parse_sample(line: bytes) -> dict | None:
    """One line of a node's file as a sample, or None."""
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    sample: dict[str, Any] = {key: _figure(raw.get(key)) for key in (
        "time", "start", "attempt", "cpu_s", "memory", "memory_peak",
        "gpu_busy_s", "gpu_s", "gpu_memory_peak")}
    if sample["time"] is None or sample["start"] is None or sample["time"] < sample["start"]:
        return None
    gpus = raw.get("gpus")
    # Each GPU as [utilization %, memory bytes, watts], whatever the line held.
    sample["gpus"] = [[_figure(gpu[i]) if i < len(gpu) else None for i in range(3)]
                      for gpu in gpus[:64] if isinstance(gpu, list)] \
        if isinstance(gpus, list) else None
    return sample


def _files(state_dir: str) -> list[tuple[int, str]]:
    # The state folder is the server's own; only the files in it are the job's.
    try:
        names = os.listdir(state_dir)
    except OSError:
        return []
    found = sorted((int(m.group(1)), name) for name in names if (m := USAGE_FILE.match(name)))
    return found[:MAX_NODES]


def _read(path: str, most: int, pieces: int = 1) -> list[bytes]:
    """At most `most` bytes of a file in the state folder (no link, no
    FIFO): its end, or `pieces` pieces spread from its start to its end,
    each cut to its whole lines."""
    fd = open_state_fd(path)
    if fd is None:
        return []
    try:
        size = os.fstat(fd).st_size
        if size <= most or pieces == 1:
            data = os.pread(fd, most, max(0, size - most))
            return [data if size <= most else data[data.find(b"\n") + 1:]]
        piece = most // pieces
        starts = [(size - piece) * i // (pieces - 1) for i in range(pieces)]
        chunks = [os.pread(fd, piece, start) for start in starts]
        return [c if start == 0 else c[c.find(b"\n") + 1:] for c, start in zip(chunks, starts,
                                                                              strict=True)]
    except OSError:      # the share failing (EIO, ESTALE): nothing read this time
        return []
    finally:
        os.close(fd)


def _samples_in(chunks: list[bytes]) -> list[dict]:
    return [s for chunk in chunks for line in chunk[:chunk.rfind(b"\n") + 1].splitlines()
            if (s := parse_sample(line)) is not None]


def _newest_sample(chunks: list[bytes]) -> dict | None:
    """The last whole line that is a sample, among the last NEWEST_LINES:
    lines hold running totals, so it is all a reading needs (parsing the
    tail's every line was most of the cost of usage in a cycle; a file of
    garbage costs as little)."""
    lines = [line for chunk in chunks for line in chunk[:chunk.rfind(b"\n") + 1].splitlines()]
    for line in reversed(lines[-NEWEST_LINES:]):
        if (sample := parse_sample(line)) is not None:
            return sample
    return None


def last_samples(state_dir: str) -> list[dict]:
    """Each node's newest sample of the run's newest attempt (with the
    node's number, as "node")."""
    samples = []
    for node, name in _files(state_dir):
        found = _newest_sample(_read(os.path.join(state_dir, name), TAIL))
        if found is not None:
            samples.append({**found, "node": node})
    newest = max((s["attempt"] or 0 for s in samples), default=0)
    return [s for s in samples if (s["attempt"] or 0) == newest]


def _sum(samples: list[dict], key: str) -> float | None:
    values = [s[key] for s in samples if s[key] is not None]
    return sum(values) if values else None


def _max(*values: float | None) -> int | None:
    present = [v for v in values if v is not None]
    return int(max(present)) if present else None


def per_node(run: Run) -> tuple[int, int]:
    """A run's cores and memory (GiB) on each of its nodes."""
    nodes = gpu_type(run.gpu_type).nodes_for(run.gpus)
    return -(-run.cpus // nodes), -(-run.memory_gib // nodes)


def _cpu_span(samples: list[dict], cores: int) -> float:
    """Core-seconds the nodes that measured CPU time had to give."""
    return sum(s["time"] - s["start"] for s in samples if s["cpu_s"] is not None) * cores


def _ratio(used: float | None, available: float) -> float | None:
    if used is None or available <= 0:
        return None
    return round(min(1.0, used / available), 3)


def summarize(run: Run, samples: list[dict], accounted: JobUsage | None = None,
              seconds: float | None = None) -> dict:
    """The run's `usage` object from its nodes' samples and, once it has
    ended, Slurm's accounting of its newest attempt (`seconds` long)."""
    cores, memory_gib = per_node(run)
    cpu_efficiency = _ratio(_sum(samples, "cpu_s"), _cpu_span(samples, cores))
    gpu_utilization = _ratio(_sum(samples, "gpu_busy_s"), _sum(samples, "gpu_s") or 0)
    gpu_memory = _max(*(s["gpu_memory_peak"] for s in samples))
    memory = _max(*(s["memory_peak"] for s in samples))
    source = "sampler" if samples else None
    if accounted is not None:
        source = "slurm"
        if accounted.cpu_seconds is not None and seconds:
            # Both fall short of the truth when they miss something (a step
            # accounting never heard of, a sampler started late): the higher.
            slurm = _ratio(accounted.cpu_seconds, seconds * run.cpus)
            cpu_efficiency = slurm if cpu_efficiency is None else max(cpu_efficiency, slurm or 0)
        memory = _max(memory, accounted.max_memory_bytes)
        gpu_memory = _max(gpu_memory, accounted.gpu_memory_bytes)
        if gpu_utilization is None and accounted.gpu_utilization is not None:
            gpu_utilization = round(min(1.0, accounted.gpu_utilization), 3)
    has_gpus = not gpu_type(run.gpu_type).is_cpu
    measured = gpu_utilization is not None or gpu_memory is not None
    return {"cpu_efficiency": cpu_efficiency, "max_memory_bytes": memory,
            "memory_requested_bytes": memory_gib * GIB,
            "gpu_utilization": gpu_utilization if has_gpus else None,
            "gpu_memory_max_bytes": gpu_memory if has_gpus else None,
            "gpu_note": NO_GPU_TELEMETRY if has_gpus and not measured else None,
            "source": source}


def usage_json(run: Run) -> dict:
    """The run's `usage` as its JSON shows it: nothing measured yet is nulls."""
    stored = run.usage or {"memory_requested_bytes": per_node(run)[1] * GIB}
    return {key: stored.get(key) for key in PUBLIC}


def format_gib(size: float) -> str:
    return f"{size / GIB:.1f} GiB"


def over_asked(run: Run) -> str | None:
    """One hint for the last line of a run that clearly asked for more than
    it used, most costly first; None otherwise (and for short runs)."""
    usage = run.usage or {}
    if (run.elapsed_seconds or 0) < HINT_AFTER_SECONDS or usage.get("source") is None:
        return None
    gpu, memory = usage.get("gpu_utilization"), usage.get("max_memory_bytes")
    if gpu is not None and gpu < HINT_BELOW:
        return f"used {gpu:.0%} of its {f'{run.gpus} GPUs' if run.gpus > 1 else 'GPU'}"
    # Cores and memory only where the run chose them: a GPU's included ones
    # cost nothing more, and saying they sat idle is noise.
    included = gpu_type(run.gpu_type)
    chosen_memory = included.is_cpu or run.memory_gib > run.gpus * included.memory_gib
    requested = per_node(run)[1]      # the peak is one node's
    if memory is not None and chosen_memory and requested >= HINT_MEMORY_GIB \
            and memory < HINT_BELOW * requested * GIB:
        return f"peak memory {format_gib(memory)} of {requested} GiB"
    cpu = usage.get("cpu_efficiency")
    chosen_cores = included.is_cpu or run.cpus > run.gpus * included.cores
    if cpu is not None and chosen_cores and run.cpus >= 4 and cpu < HINT_BELOW:
        return f"used {cpu * run.cpus:.1f} of its {run.cpus} cores"
    return None


def totals(samples: list[dict], run: Run, measure: str) -> dict:
    """What the idle policy compares reading to reading: each node's busy
    and available GPU-seconds (`measure` "gpu") or CPU-seconds, of the nodes
    that measured them, by node."""
    cores = per_node(run)[0]
    nodes = {}
    for sample in samples:
        if measure == "gpu" and sample["gpu_busy_s"] is not None and sample["gpu_s"] is not None:
            nodes[str(sample["node"])] = [sample["gpu_busy_s"], sample["gpu_s"]]
        elif measure == "cpu" and sample["cpu_s"] is not None:
            nodes[str(sample["node"])] = [sample["cpu_s"],
                                          (sample["time"] - sample["start"]) * cores]
    return {"time": max((s["time"] for s in samples), default=0.0), "nodes": nodes}


def utilization_since(earlier: dict | None, now: dict) -> float | None:
    """The run's utilisation between two readings of its totals, over the
    nodes both measured (a node missing from one reading never counts its
    whole past as the time between them); None when none did."""
    if earlier is None:
        return None
    busy = spent = 0.0
    for node, (busy_now, span_now) in now["nodes"].items():
        before = earlier.get("nodes", {}).get(node)
        if before is not None and span_now > before[1] and busy_now >= before[0]:
            busy, spent = busy + busy_now - before[0], spent + span_now - before[1]
    return _ratio(busy, spent) if spent > 0 else None


# The Telemetry tab's system charts: (title, what each series is, its value
# from a sample and the one before it).
def _cpu_cores(sample: dict, before: dict | None) -> list[float | None]:
    if before is None or sample["cpu_s"] is None or before["cpu_s"] is None \
            or sample["time"] <= before["time"]:
        return [None]
    return [round((sample["cpu_s"] - before["cpu_s"]) / (sample["time"] - before["time"]), 3)]


def _per_gpu(index: int, scale: float) -> Callable[[dict, dict | None], list[float | None]]:
    def values(sample: dict, _before: dict | None) -> list[float | None]:
        return [None if gpu[index] is None else round(gpu[index] * scale, 3)
                for gpu in sample["gpus"] or []]
    return values


SYSTEM_CHARTS = (
    ("CPU cores in use", "cores", _cpu_cores),
    ("Memory (GiB)", "memory",
     lambda s, _b: [None if s["memory"] is None else round(s["memory"] / GIB, 3)]),
    ("GPU utilization (%)", "gpu", _per_gpu(0, 1)),
    ("GPU memory (GiB)", "gpu memory", _per_gpu(1, 1 / GIB)),
    ("GPU power (W)", "gpu power", _per_gpu(2, 1)),
)


def node_series(state_dir: str) -> list[tuple[int, list[dict]]]:
    """Each node's newest samples of the newest attempt, in order, bounded."""
    files, nodes = _files(state_dir)[:CHART_NODES], []
    budget = SERIES_BYTES // max(1, len(files))
    for node, name in files:
        pieces = max(1, min(SPREAD, budget // SPREAD_PIECE))
        samples = _samples_in(_read(os.path.join(state_dir, name), budget, pieces))
        if samples:
            nodes.append((node, samples))
    newest = max((s["attempt"] or 0 for _, samples in nodes for s in samples), default=0)
    return [(node, kept) for node, samples in nodes
            if (kept := [s for s in samples if (s["attempt"] or 0) == newest])]


def system_charts(state_dir: str) -> list[dict]:
    """uPlot's shape (as telemetry.chart_data): x is seconds since the run
    started on its nodes; a series a node (and a GPU); a chart only for what
    was measured."""
    nodes = node_series(state_dir)
    if not nodes:
        return []
    origin = min(samples[0]["start"] for _, samples in nodes)
    last = max(samples[-1]["time"] for _, samples in nodes)
    grain = max(0.1, (last - origin) / CHART_POINTS)
    charts = []
    for title, what, values in SYSTEM_CHARTS:
        rows: dict[float, dict[str, float | None]] = {}
        names: list[str] = []
        for node, samples in nodes:
            for before, sample in zip([None, *samples], samples, strict=False):
                for i, value in enumerate(values(sample, before)):
                    name = f"node {node}" + (f" gpu {i}" if what.startswith("gpu") else "")
                    if name not in names:
                        if len(names) == CHART_SERIES:
                            continue
                        names.append(name)
                    moment = round(round((sample["time"] - origin) / grain) * grain, 1)
                    rows.setdefault(moment, {})[name] = value
        if not any(v is not None for row in rows.values() for v in row.values()):
            continue
        xs = sorted(rows)
        charts.append({"title": title, "x": "seconds", "metrics": names, "system": True,
                       "data": [xs, *[[rows[x].get(n) for x in xs] for n in names]]})
    return charts
