"""One reconciler query of 5,000 live jobs on the real dev cluster, through
each way in: Slurm's commands here (squeue + sacct), the same over SSH, and
pyslurm. Target: pyslurm at least 5x faster than squeue + sacct.

The jobs are submitted held, so none runs, and cancelled at the end; the
controller keeps them MinJobAge (300 s) more, and with them half of its
MaxJobCount (10,000): give it five minutes before the tests.

  .venv/bin/python bench/slurm_query.py     # as root; the dev cluster up, pyslurm built
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import jobs_cancelled_after, record  # noqa: E402
from divergent.slurm.client import SlurmClient  # noqa: E402
from divergent.slurm.pyslurm_client import PyslurmClient  # noqa: E402
from divergent.slurm.transport import SSHTransport  # noqa: E402
from tests.sshd import running_sshd  # noqa: E402

JOBS = 5_000
ROUNDS = 5
NAME = "div-bench-query"


def submit_held(pyslurm, count: int) -> list[str]:
    """`count` held one-minute jobs, through pyslurm (sbatch would take
    minutes for as many)."""
    ids = []
    while len(ids) < count:
        held = pyslurm.JobSubmitDescription(
            name=NAME, partitions="cpu", priority=0, time_limit=1, script="#!/bin/sh\ntrue\n",
            working_directory="/tmp", standard_output="/dev/null", environment="NONE")
        try:
            ids.append(str(held.submit()))
        except pyslurm.RPCError as exc:      # the controller asks to slow down
            print(f"  submit: {exc.msg}; again", file=sys.stderr)
            time.sleep(0.5)
        if len(ids) % 1000 == 0:
            print(f"  {len(ids)} held", file=sys.stderr)
    return ids


def timed(query, ids: list[str]) -> tuple[float, int]:
    samples, found = [], 0
    for _ in range(ROUNDS):
        started = time.perf_counter()
        found = len(query(ids))
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), found


def main() -> None:
    pyslurm_client = PyslurmClient()
    with jobs_cancelled_after(NAME):
        started = time.perf_counter()
        ids = submit_held(pyslurm_client.pyslurm, JOBS)
        print(f"{JOBS} held jobs submitted in {time.perf_counter() - started:.1f} s",
              file=sys.stderr)
        with running_sshd() as login:
            ssh = SSHTransport(**login)
            ways = {"squeue + sacct here": SlurmClient().query,
                    "squeue + sacct over SSH": SlurmClient(ssh).query,
                    "pyslurm": pyslurm_client.query,
                    "  of which the controller": lambda wanted: pyslurm_client._controller(
                        set(wanted))[0]}
            results = {way: timed(query, ids) for way, query in ways.items()}
            ssh.close()
    baseline = results["squeue + sacct here"][0]
    print(f"\none query of {JOBS} live (held) jobs, median of {ROUNDS}")
    print(f"{'way in':28s} {'time':>9s} {'jobs':>6s} {'vs squeue + sacct':>18s}")
    for way, (seconds, found) in results.items():
        print(f"{way:28s} {seconds * 1000:7.1f} ms {found:6d} {baseline / seconds:17.1f}x")
    pyslurm_ratio = baseline / results["pyslurm"][0]
    record(f"one reconciler query of {JOBS} live jobs, pyslurm",
           f"{results['pyslurm'][0] * 1000:.1f} ms", ">= 5x faster",
           f"squeue + sacct {baseline * 1000:.1f} ms", f"{pyslurm_ratio:.1f}x faster")
    print(f"\npyslurm is {pyslurm_ratio:.1f}x faster than squeue + sacct (target: 5x) "
          f"{'PASS' if pyslurm_ratio >= 5 else 'FAIL'}")
    print("the cancelled jobs leave the controller in 300 s (MinJobAge)", file=sys.stderr)


if __name__ == "__main__":
    main()
