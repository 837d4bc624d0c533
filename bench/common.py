"""What the `div` benchmarks share: the dev services `make up` started, and
the real `div` run as a subprocess against them."""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIV = str(ROOT / ".venv" / "bin" / "div")


def div_env() -> dict[str, str]:
    """The environment `set -a; . ./.div-dev.env` gives: `make up` first."""
    env = dict(os.environ)
    env_file = ROOT / ".div-dev.env"
    if not env_file.exists():
        raise SystemExit("run `make up` first: no .div-dev.env")
    for line in env_file.read_text().splitlines():
        key, _, value = line.partition("=")
        env[key] = value
    return env


def div(*args: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([DIV, *args], cwd=cwd, env=div_env(), capture_output=True,
                          check=True, **kwargs)


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return (f"median {statistics.median(ordered) * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  "
            f"(n={len(ordered)})")


def record(figure: str, value: str, goal: str = "", baseline: str = "", ratio: str = "") -> None:
    """One row of `make bench`'s table (bench/all.py collects them from
    DIV_BENCH_RESULTS); a benchmark run by hand prints its own lines only."""
    path = os.environ.get("DIV_BENCH_RESULTS")
    if path:
        row = {"bench": Path(sys.argv[0]).stem, "figure": figure, "goal": goal,
               "value": value, "baseline": baseline, "ratio": ratio}
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


@contextlib.contextmanager
def jobs_cancelled_after(*names: str) -> Iterator[None]:
    """Every job of these names (a benchmark's own) is cancelled when the
    block ends, however it ends, and gone from the queue before the next
    benchmark starts."""
    try:
        yield
    finally:
        cancel_jobs(names)


def cancel_jobs(names: tuple[str, ...], wait: float = 30.0) -> None:
    # scancel --name takes one name; squeue a list.
    def listed() -> list[str]:
        return subprocess.run(["squeue", "--noheader", f"--name={','.join(names)}", "--format=%A"],
                              capture_output=True, text=True).stdout.split()
    jobs = listed()
    if jobs:
        subprocess.run(["scancel", *jobs], check=False)
    deadline = time.monotonic() + wait
    while listed() and time.monotonic() < deadline:
        time.sleep(0.2)
