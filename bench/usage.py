"""What the usage sampler beside each run costs its node (goal: under 1% of
a core), on the dev stack: a run keeps a core busy while the sampler beside
it is found on its node and its own CPU time read from /proc over a minute,
at the site's default interval and at 1 s. The baseline, measured in the
same run, is the run's own busy core over the same minute. And what it adds
to a run's start and end: `div run -- true` with the sampler against
without (the site's interval 0), in turn, medians of ROUNDS.

(The reconciler's cost of reading 5,000 runs' usage is bench/reconciler.py's.)

Run by hand on a machine where `make up` ran:  .venv/bin/python bench/usage.py
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, div, record  # noqa: E402

FLASK = [str(ROOT / "scripts" / "services"), "exec", str(ROOT / ".venv" / "bin" / "flask")]
WINDOW = 60
TICKS = os.sysconf("SC_CLK_TCK")
BUSY = "end=$((SECONDS + 90)); while [ $SECONDS -lt $end ]; do :; done"


def cpu_seconds(pid: int) -> float:
    """A process's own and its waited-for children's CPU time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICKS


def processes(marker: str, run: str) -> list[int]:
    """Pids whose command line holds `marker` and the run's name."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if entry.name.isdigit() and marker.encode() in cmdline and run.encode() in cmdline:
            found.append(int(entry.name))
    return found


def measure(interval: int, folder: Path) -> tuple[float, float]:
    """(the sampler's share of a core, the run's) over WINDOW seconds."""
    subprocess.run([*FLASK, "site", "usage", "--interval", str(interval)], check=True,
                   capture_output=True)
    name = f"bench-usage-{interval}-{int(time.time())}"
    div("run", "--gpu", "cpu", "--cpu", "2", "--no-upload", "-d", "--name", name, "--",
        BUSY, cwd=folder)
    deadline = time.monotonic() + 120
    # The sampler, and the run's busy shell (the bash whose command line is BUSY).
    while not (samplers := processes("DIV_USAGE_PROGRAM", name)) or \
            not (busy := processes("SECONDS + 90", "")):
        if time.monotonic() > deadline:
            raise SystemExit(f"no sampler, or no busy shell, in {name}")
        time.sleep(0.5)
    sampler = samplers[0]
    time.sleep(5)
    before = cpu_seconds(sampler), sum(cpu_seconds(p) for p in busy)
    started = time.monotonic()
    time.sleep(WINDOW)
    after = cpu_seconds(sampler), sum(cpu_seconds(p) for p in busy)
    wall = time.monotonic() - started
    div("stop", name, cwd=folder)
    return (after[0] - before[0]) / wall, (after[1] - before[1]) / wall


ROUNDS = 10


def trivial_runs(folder: Path) -> dict[int, float]:
    """The median seconds of `div run -- true` by the site's interval."""
    taken: dict[int, list[float]] = {0: [], 10: []}
    for _ in range(ROUNDS):
        for interval, times in taken.items():
            subprocess.run([*FLASK, "site", "usage", "--interval", str(interval)], check=True,
                           capture_output=True)
            started = time.monotonic()
            div("run", "--gpu", "cpu", "--no-upload", "--", "true", cwd=folder)
            times.append(time.monotonic() - started)
    return {interval: statistics.median(times) for interval, times in taken.items()}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-usage-") as tmp:
        try:
            runs = trivial_runs(Path(tmp))
            print(f"div run -- true: {runs[10]:.2f} s with the sampler, {runs[0]:.2f} s without")
            record("div run -- true, sampler beside it", f"{runs[10]:.2f} s (median of {ROUNDS})",
                   "unchanged", f"without: {runs[0]:.2f} s", f"{runs[10] / runs[0]:.2f}x")
            for interval in (10, 1):
                sampler, run = measure(interval, Path(tmp))
                print(f"sampler at {interval} s: {sampler:.3%} of a core; the run beside it "
                      f"{run:.1%} (ratio {sampler / run:.4f})")
                record(f"usage sampler at {interval} s, busy node", f"{sampler:.3%} of a core",
                       "< 1% of a core", f"the run {run:.0%} of a core", f"{sampler / run:.4f}x")
        finally:
            subprocess.run([*FLASK, "site", "usage", "--interval", "10"], capture_output=True)


if __name__ == "__main__":
    main()
