"""`make bench`: every benchmark in bench/ on the dev stack `make up`
started, one after another (they would measure each other side by side),
then one table of what each measured: figure, goal, this run's value, the
baseline measured in the same run, and the ratio. Each benchmark's own
output goes to artifacts/bench/<name>.log, the table also to
artifacts/bench/table.md.

  .venv/bin/python bench/all.py [--only storage,submit]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "artifacts" / "bench"
# slurm_query last: the 5,000 jobs it cancels stay in the controller for
# MinJobAge (300 s) and would crowd the others' submissions.
BENCHES = ("submit", "sweep_submit", "run_detach", "run_end", "log_stream", "storage", "s3_import",
           "reconciler", "metrics_flood", "dashboard", "followers", "python_env", "images",
           "interactive", "usage", "slurm_query", "run_network")
TIMEOUT = 1800
COLUMNS = ("bench", "figure", "goal", "value", "baseline", "ratio")
HEADINGS = ("benchmark", "figure", "goal", "this run", "baseline (same run)", "ratio")


def run(name: str, results: Path) -> tuple[int, float]:
    started = time.monotonic()
    with open(OUT / f"{name}.log", "w") as log:
        try:
            done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py")], cwd=ROOT,
                                  env={**os.environ, "DIV_BENCH_RESULTS": str(results)},
                                  stdout=log, stderr=subprocess.STDOUT, timeout=TIMEOUT)
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = -1
    return code, time.monotonic() - started


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(HEADINGS) + " |", "|" + "---|" * len(HEADINGS)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated benchmark names")
    names = parser.parse_args().only
    chosen = [n for n in BENCHES if names is None or n in names.split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    failed, began = [], time.monotonic()
    with tempfile.NamedTemporaryFile(prefix="bench-results-", suffix=".jsonl") as results:
        for name in chosen:
            print(f"{name}: running (log in artifacts/bench/{name}.log)", file=sys.stderr,
                  flush=True)
            code, took = run(name, Path(results.name))
            print(f"{name}: {'done' if code == 0 else f'FAILED ({code})'} in {took:.0f} s",
                  file=sys.stderr, flush=True)
            if code:
                failed.append(name)
        rows = [json.loads(line) for line in Path(results.name).read_text().splitlines()]
    rows += [{"bench": name, "figure": "FAILED: see its log"} for name in failed]
    text = table(rows)
    (OUT / "table.md").write_text(text + "\n")
    print(text)
    print(f"\n{len(chosen)} benchmarks in {(time.monotonic() - began) / 60:.1f} minutes",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
