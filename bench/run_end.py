"""A trivial function, end to end: `div run --gpu cpu t.py::fn` against
submitit's `executor.submit(fn)` then `job.result()` (what a Slurm user
would pick instead), interleaved round by round on the same cluster, and
how long after the run's command exited (its exit file's time) `div run`
printed its last line. Targets: the median at most 1.3x submitit's; the
last line within 0.5 s of the exit in 9 runs of 10.

  make up && .venv/bin/python bench/run_end.py [--rounds 10]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import submitit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import DIV, ROOT, div, div_env, jobs_cancelled_after, record, summary  # noqa: E402

DATA = Path(os.environ.get("DIV_DATA_DIR", ROOT / "instance" / "data"))
ORG = "dev"   # the dev org (flask dev-bootstrap)
LAST_LINE_GOAL = 0.5


def trivial() -> int:
    print("hi", flush=True)
    return 42


def through_submitit(executor: submitit.SlurmExecutor) -> float:
    t0 = time.perf_counter()
    job = executor.submit(trivial)
    assert job.result() == 42
    return time.perf_counter() - t0


def through_div(project: Path) -> tuple[float, float]:
    """The run's time end to end, and how long after its command exited
    `div run` printed its last line."""
    t0 = time.perf_counter()
    done = subprocess.run([DIV, "run", "--gpu", "cpu", "t.py::fn"], cwd=project, env=div_env(),
                          capture_output=True, check=True)
    took, printed = time.perf_counter() - t0, time.time()
    header = done.stderr.decode().splitlines()[1]   # the upload line, then the run's
    name = header.split()[0]
    exited = (DATA / "runs" / ORG / name / "exit.0.0").stat().st_mtime
    return took, printed - exited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory(prefix="bench-run-end-") as tmp:
        os.chmod(tmp, 0o755)
        project = Path(tmp) / "bench-run-end"
        project.mkdir()
        (project / "t.py").write_text("def fn():\n    print('hi', flush=True)\n")
        div("run", "--gpu", "cpu", "t.py::fn", cwd=project)    # the first upload, not measured
        executor = submitit.SlurmExecutor(folder=Path(tmp) / "submitit")
        executor.update_parameters(partition="cpu", account="dev", time=5, cpus_per_task=1,
                                   mem="2G", job_name="div-bench-submitit")
        theirs, ours, after_exit = [], [], []
        with jobs_cancelled_after("div-bench-submitit"):
            for _ in range(rounds):
                theirs.append(through_submitit(executor))
                took, late = through_div(project)
                ours.append(took)
                after_exit.append(late)
    print(f"submitit submit + result   {summary(theirs)}")
    print(f"div run t.py::fn           {summary(ours)}")
    print("last line after the exit   " + " ".join(f"{late:.2f}" for late in after_exit))
    ratio = statistics.median(ours) / statistics.median(theirs)
    on_time = sum(late <= LAST_LINE_GOAL for late in after_exit)
    print(f"div run is {ratio:.2f}x submitit at the median (target <= 1.3x); "
          f"last line within {LAST_LINE_GOAL} s of the exit in {on_time} of {len(after_exit)}")
    record("trivial run end to end", f"{statistics.median(ours):.2f} s", "<= 1.3x submitit",
           f"submitit {statistics.median(theirs):.2f} s", f"{ratio:.2f}x")
    record("last line after the command's exit", f"{on_time}/{len(after_exit)} within 0.5 s",
           "9 of 10", "", f"median {statistics.median(after_exit):.2f} s")


if __name__ == "__main__":
    main()
