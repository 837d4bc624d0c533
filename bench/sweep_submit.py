"""A 20-member sweep's submission: divergent's one job array (the script
slurm/script.py renders, through SlurmClient.submit) against 20 single
submissions of the same run's script, and against raw `sbatch --array`
in the same run. Every job is held (--hold) and canceled: nothing runs.

Run by hand on a machine with the dev cluster up:  .venv/bin/python bench/sweep_submit.py
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import jobs_cancelled_after, record  # noqa: E402
from divergent.slurm.client import SlurmClient  # noqa: E402
from divergent.slurm.jobspec import ArrayMember, JobSpec, SlurmSite  # noqa: E402
from divergent.slurm.script import render_batch_script  # noqa: E402

MEMBERS, ROUNDS = 20, 5


def held(script: str) -> str:
    """The script with --hold among its directives: measured, never run."""
    return script.replace("#SBATCH --export=NONE", "#SBATCH --export=NONE\n#SBATCH --hold", 1)


def timed(submit) -> float:
    started = time.perf_counter()
    submit()
    return time.perf_counter() - started


def main() -> None:
    client, site = SlurmClient(), SlurmSite()
    with tempfile.TemporaryDirectory(dir="/var/lib/div-dev") as tmp:
        for folder in ("state", "org"):
            Path(tmp, folder).mkdir()
        base = dict(account="dev", gpu_type="cpu", gpus=1, cpus=1, memory_gib=1,
                    command="true", volumes_dir=f"{tmp}/org", project="bench")
        singles = [held(render_batch_script(JobSpec(
            run_name=f"sweep-bench-{i}", state_dir=f"{tmp}/state", env={"N": str(i)}, **base),
            site)) for i in range(MEMBERS)]
        array = held(render_batch_script(JobSpec(
            run_name="sweep-bench", state_dir=f"{tmp}/state", array=tuple(
                ArrayMember(f"sweep-bench-{i}", f"{tmp}/state", {"N": str(i)})
                for i in range(MEMBERS)), **base), site))
        raw = ["sbatch", "--parsable", "--hold", "-A", "dev", "-p", "cpu",
               "-o", f"{tmp}/raw-%A_%a", f"--array=0-{MEMBERS - 1}", "--wrap", "true"]
        one_by_one, as_array, raw_array = [], [], []
        names = ["div-sweep-bench", "wrap"] + [f"div-sweep-bench-{i}" for i in range(MEMBERS)]
        with jobs_cancelled_after(*names):
            for _ in range(ROUNDS):     # interleaved, so each sees the same cluster
                one_by_one.append(timed(lambda: [client.submit(s) for s in singles]))
                as_array.append(timed(lambda: client.submit(array)))
                raw_array.append(timed(lambda: subprocess.run(raw, check=True,
                                                              capture_output=True)))

    singles_ms = statistics.median(one_by_one) * 1e3
    array_ms = statistics.median(as_array) * 1e3
    raw_ms = statistics.median(raw_array) * 1e3
    print(f"{MEMBERS} members, median of {ROUNDS} rounds:")
    print(f"  {MEMBERS} single submissions     {singles_ms:8.1f} ms")
    print(f"  one job array (divergent)  {array_ms:8.1f} ms   "
          f"{singles_ms / array_ms:5.1f}x faster than {MEMBERS} singles")
    print(f"  raw sbatch --array         {raw_ms:8.1f} ms   "
          f"divergent's array is {array_ms / raw_ms:.2f}x raw sbatch")
    record(f"a {MEMBERS}-member sweep, one job array", f"{array_ms:.1f} ms", "",
           f"{MEMBERS} single submissions {singles_ms:.1f} ms",
           f"{singles_ms / array_ms:.1f}x faster")
    record(f"a {MEMBERS}-member sweep vs raw sbatch --array", f"{array_ms:.1f} ms", "",
           f"raw sbatch --array {raw_ms:.1f} ms", f"{array_ms / raw_ms:.2f}x")


if __name__ == "__main__":
    main()
