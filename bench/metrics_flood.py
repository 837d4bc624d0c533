"""One org's metrics flood against another org's runs: how long the
reconciler takes to settle an ended run (cycles until its end is committed)
while a live run of another org has 128 MB of metric lines in its
metrics.jsonl, against settling the same run with no flood (the baseline,
the median of 3, measured first in the same run).

As in bench/reconciler.py, the cycles are real but for Slurm itself: squeue
and sacct answer from GeneratedSlurm, the database is real (SQLite, or
DATABASE_URL).

  .venv/bin/python bench/metrics_flood.py
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.app_setup import bench_app, fresh_org  # noqa: E402
from bench.common import record  # noqa: E402
from divergent.app.extensions import db  # noqa: E402
from divergent.app.models import LIVE, Project, Run  # noqa: E402
from divergent.app.reconciler import reconcile_once  # noqa: E402
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user  # noqa: E402
from divergent.app.services.files.volumes import run_dir  # noqa: E402
from divergent.app.services.site import slurm_access  # noqa: E402
from divergent.slurm.client import SlurmClient  # noqa: E402
from divergent.slurm.transport import CommandResult  # noqa: E402

FLOOD_MB = 128
NORMAL_POINTS = 100
DEADLINE_SECONDS = 120
ENDED, FLOODING = "1", "2"   # the two runs' Slurm job ids


class GeneratedSlurm:
    """squeue and sacct as Slurm answers them: job ENDED completed a moment
    ago (gone from squeue, final in sacct), job FLOODING still running."""

    def run(self, argv, stdin=None, env=None):
        now = int(time.time())
        out = f"{FLOODING}|RUNNING|None|{now - 600}|node2|div-run||1\n"
        if argv[0] == "sacct":
            out = (f"{ENDED}|COMPLETED|0:0|{now - 600}|{now - 5}|595|node1|None|div-run|\n"
                   f"{FLOODING}|RUNNING|0:0|{now - 600}|Unknown|600|node2|None|div-run|\n")
        return CommandResult(0, out, "")


def add_run(org, user, project, name: str, job_id: str) -> Run:
    run = Run(org_id=org.id, project_id=project.id, user_id=user.id, name=name,
              status="running", slurm_job_id=job_id, gpu_type="h100", gpus=1, cpus=1,
              memory_gib=8, image="img", command="python train.py",
              rate_micros_per_hour=4_800_000)
    db.session.add(run)
    Path(run_dir(org, name)).mkdir(parents=True, exist_ok=True)
    return run


def write_flood(path: Path) -> None:
    target, step = FLOOD_MB * 2**20, 0
    with open(path, "w") as f:
        while f.tell() < target:
            f.write("".join(f'{{"step": {n}, "loss": 0.5}}\n' for n in range(step, step + 100_000)))
            step += 100_000


def settle_time(flood: bool) -> tuple[float, int, float]:
    """Seconds and cycles until the ended run's end is committed, and how many
    MB of the flood the reconciler had read by then."""
    org, user, project = fresh_org()
    other = get_or_create_org("flood")
    other_project = Project(org_id=other.id, name="flood")
    db.session.add(other_project)
    db.session.flush()
    flooder = add_run(other, get_or_create_user(other, "flood"), other_project, "flooding",
                      FLOODING)
    normal = add_run(org, user, project, "normal", ENDED)
    db.session.commit()
    with open(Path(run_dir(org, "normal")) / "metrics.jsonl", "w") as f:
        f.writelines(f'{{"step": {n}, "loss": 0.5}}\n' for n in range(NORMAL_POINTS))
    flood_file = Path(run_dir(other, "flooding")) / "metrics.jsonl"
    flood_file.unlink(missing_ok=True)
    if flood:
        write_flood(flood_file)
    t0, cycles, status = time.perf_counter(), 0, "running"
    while status in LIVE:
        assert time.perf_counter() - t0 < DEADLINE_SECONDS, "the ended run never settled"
        reconcile_once()
        cycles += 1
        with db.engine.connect() as conn:   # what other processes see: committed rows only
            status = conn.execute(db.select(Run.status).where(Run.id == normal.id)).scalar_one()
    took = time.perf_counter() - t0
    db.session.expire_all()
    assert (normal.status, normal.exit_code, normal.metrics_points) == ("succeeded", 0,
                                                                         NORMAL_POINTS)
    return took, cycles, flooder.metrics_offset / 2**20


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-metrics-flood-") as tmp:
        with bench_app(tmp).app_context(), slurm_access.standing_in(SlurmClient(GeneratedSlurm())):
            quiet, cycles, _ = sorted(settle_time(flood=False) for _ in range(3))[1]
            print(f"ended run settled, no flood ({db.engine.dialect.name}, median of 3): "
                  f"{quiet * 1000:8.1f} ms in {cycles} cycle(s)")
            flooded, cycles, read_mb = settle_time(flood=True)
            print(f"ended run settled, another org flooding {FLOOD_MB} MB of metrics: "
                  f"{flooded * 1000:8.1f} ms in {cycles} cycle(s), {read_mb:.1f} MB of the flood "
                  f"read by then")
            print(f"flooded / baseline: {flooded / quiet:.0f}x")
            record(f"a run settles while another org floods {FLOOD_MB} MB of metrics",
                   f"{flooded * 1000:.0f} ms", "", f"no flood {quiet * 1000:.0f} ms",
                   f"{flooded / quiet:.0f}x")


if __name__ == "__main__":
    main()
