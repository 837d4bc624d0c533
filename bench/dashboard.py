"""Server time of the dashboard's heaviest pages (issue 6's targets): the
runs page with 100,000 runs in the database (under 150 ms) and a run page
with a 100 MB log (under 100 ms); and the Cluster page (issue 20: under
100 ms, Slurm asked at most every few seconds), against one raw `sinfo`
of the dev cluster measured in the same run; and a Prometheus scrape of
/metrics over those runs. Through Flask's test client,
so only the server's work is timed; SQLite, or DATABASE_URL.

  .venv/bin/python bench/dashboard.py
"""
from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.app_setup import bench_app, fresh_org  # noqa: E402
from bench.common import record  # noqa: E402
from divergent.app.extensions import db  # noqa: E402
from divergent.app.models import Run  # noqa: E402
from divergent.app.services.accounts.passwords import set_password  # noqa: E402

RUNS = 100_000
PASSWORD = "bench password 1"


def timed(client, path: str, rounds: int = 10) -> list[float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        assert client.get(path).status_code == 200
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        app = bench_app(tmp)
        with app.app_context():
            org, user, project = fresh_org()
            set_password(user, PASSWORD)
            user.role = "site_admin"
            start = datetime(2026, 1, 1, tzinfo=UTC)
            db.session.execute(db.insert(Run), [dict(
                org_id=org.id, project_id=project.id, user_id=user.id, name=f"run-{i:06d}",
                status="succeeded", gpu_type="h100", gpus=1, cpus=1, memory_gib=8, image="img",
                command="true", env={}, checks=[], metrics={}, rate_micros_per_hour=4_800_000,
                cost_micros=80_000, elapsed_seconds=60, created_at=start + timedelta(seconds=i))
                for i in range(RUNS)])
            db.session.commit()
        log = Path(tmp) / "data" / "runs" / "bench" / "run-099999"
        log.mkdir(parents=True)
        line = b"step 000000 loss 0.123456 accuracy 0.987654 lr 0.0003 tokens/s 123456\n"
        with open(log / "stdout", "wb") as f:
            for _ in range(100_000_000 // (len(line) * 1000)):
                f.write(line * 1000)
        (log / "stderr").write_bytes(b"")

        client = app.test_client()
        page = client.get("/login").get_data(as_text=True)
        token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)
        client.post("/login", data={"username": "bench", "password": PASSWORD, "csrf_token": token})
        first = timed(client, "/")
        deep = client.get("/?before=50000").status_code
        later = timed(client, "/?before=50000")
        run_page = timed(client, "/runs/run-099999")
        size = (log / "stdout").stat().st_size / 1e6
        print(f"runs page, {RUNS} runs: median {statistics.median(first) * 1000:.1f} ms "
              f"(page 1), {statistics.median(later) * 1000:.1f} ms (deep page, {deep}); "
              f"target < 150 ms")
        print(f"run page, {size:.0f} MB log: median {statistics.median(run_page) * 1000:.1f} ms; "
              f"target < 100 ms")
        app.config["DIV_CLUSTER_CACHE_SECONDS"] = 0
        asking = timed(client, "/cluster", rounds=5)
        app.config["DIV_CLUSTER_CACHE_SECONDS"] = 60
        kept = timed(client, "/cluster", rounds=20)
        sinfo = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run(["sinfo", "--noheader"], capture_output=True, check=True)
            sinfo.append(time.perf_counter() - t0)
        print(f"cluster page: median {statistics.median(kept) * 1000:.1f} ms with the view kept, "
              f"{statistics.median(asking) * 1000:.1f} ms asking Slurm each time; raw sinfo "
              f"{statistics.median(sinfo) * 1000:.1f} ms; target < 100 ms")
        scrape = timed(client, "/metrics")
        print(f"/metrics, {RUNS} runs: median {statistics.median(scrape) * 1000:.1f} ms")
        record(f"runs page, {RUNS} runs (deep page)", f"{statistics.median(later) * 1000:.1f} ms",
               "< 150 ms")
        record(f"run page, {size:.0f} MB log", f"{statistics.median(run_page) * 1000:.1f} ms",
               "< 100 ms")
        record("Cluster page, view kept", f"{statistics.median(kept) * 1000:.1f} ms", "< 100 ms",
               f"raw sinfo {statistics.median(sinfo) * 1000:.1f} ms")
        record(f"/metrics scrape, {RUNS} runs", f"{statistics.median(scrape) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
