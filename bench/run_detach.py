"""`div run --detach` of an unchanged 200-file, 20 MB project against raw
`sbatch --wrap true`, measured in the same run. Target: at most 0.5 s above.

  make up && .venv/bin/python bench/run_detach.py
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
from bench.common import div, jobs_cancelled_after, record, summary  # noqa: E402

ROUNDS = 15
SETTLE_SECONDS = 1.5


def make_project(folder: Path) -> None:
    for i in range(200):
        sub = folder / f"pkg{i % 10}"
        sub.mkdir(exist_ok=True)
        (sub / f"mod{i}.py").write_bytes(os.urandom(50_000).hex().encode())   # 100 KB each
    (folder / "main.py").write_text("print('ok')\n")


def timed(argv: list[str], **kwargs) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, **kwargs)
    return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-detach-") as tmp:
        project = Path(tmp) / "bench-project"
        project.mkdir()
        make_project(project)
        first = div("run", "--gpu", "cpu", "--detach", "main.py", cwd=project)
        print(first.stderr.decode().splitlines()[0], "(first upload)")
        raw, ours = [], []
        with jobs_cancelled_after("wrap"):
            for _ in range(ROUNDS):
                raw.append(timed(["sbatch", "--parsable", "-A", "dev", "-p", "cpu",
                                  "-o", f"{tmp}/raw-%j", "--wrap", "true"]))
                t0 = time.perf_counter()
                div("run", "--gpu", "cpu", "--detach", "main.py", cwd=project)
                ours.append(time.perf_counter() - t0)
                # Let the run just started get going, so that rounds do not
                # measure each other: on a small machine its start competes.
                time.sleep(SETTLE_SECONDS)
        print(f"raw sbatch --wrap true      {summary(raw)}")
        print(f"div run --detach (unchanged) {summary(ours)}")
        above = statistics.median(ours) - statistics.median(raw)
        print(f"div run --detach is {above:.3f} s above raw sbatch at the median "
              f"({statistics.median(ours) / statistics.median(raw):.1f}x); target <= 0.25 s")
        record("div run --detach, unchanged project", f"{statistics.median(ours):.3f} s",
               "<= 0.25 s above raw sbatch", f"raw sbatch {statistics.median(raw):.3f} s",
               f"+{above:.3f} s")


if __name__ == "__main__":
    main()
