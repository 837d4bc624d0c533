"""Submit latency through the adapter against raw `sbatch --wrap true` in the
same run, the same submit as an org's own Unix user (sudo, as the server
submits) against the adapter's own, submit-to-RUNNING, and sacct parsing
speed.

Run by hand on a machine with the dev cluster up:  .venv/bin/python bench/submit.py
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import jobs_cancelled_after, record  # noqa: E402
from divergent.app.services.accounts.unix_users import HELPER  # noqa: E402
from divergent.slurm.client import SlurmClient  # noqa: E402
from divergent.slurm.jobspec import JobSpec, SlurmSite  # noqa: E402
from divergent.slurm.records import parse_sacct  # noqa: E402
from divergent.slurm.script import render_batch_script  # noqa: E402

ROUNDS = 30
# An org's Unix user and its account, made as an org's first run makes them.
ORG_USER, ORG_ACCOUNT = "div-bench", "bench-org"


def raw_sbatch(out_dir: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(["sbatch", "--parsable", "-A", "dev", "-p", "cpu", "-o", f"{out_dir}/raw-%j",
                    "--wrap", "true"], check=True, capture_output=True)
    return time.perf_counter() - t0


def adapter_submit(client: SlurmClient, spec: JobSpec, site: SlurmSite) -> tuple[float, str]:
    t0 = time.perf_counter()
    job = client.submit(render_batch_script(spec, site))
    return time.perf_counter() - t0, job


def until_running(job: str, t_submitted: float) -> float:
    # squeue alone (about 4 ms), so the poll does not blur what it measures.
    while True:
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                               text=True).stdout.strip()
        if state != "PENDING":
            return time.perf_counter() - t_submitted
        time.sleep(0.01)


def sacct_lines(n: int) -> str:
    return "".join(f"{i}|COMPLETED|0:0|1796059887|1796059899|12|node[1-2]|None|div-run|\n"
                   for i in range(1, n + 1))


def main() -> None:
    client, site = SlurmClient(), SlurmSite()
    subprocess.run([HELPER, "make", ORG_USER], check=True)
    client.ensure_account(ORG_ACCOUNT, users=(ORG_USER,))
    with tempfile.TemporaryDirectory(dir="/var/lib/div-dev") as tmp:
        for d in ("state", "org"):
            Path(tmp, d).mkdir()
        # The org user's jobs write their state as the share's ACLs let them.
        subprocess.run(["setfacl", "-R", "-m", f"g:{ORG_USER}:rwx", "-m",
                        f"d:g:{ORG_USER}:rwx", tmp], check=True)
        spec = JobSpec(run_name="run-bench", account="dev", gpu_type="cpu", gpus=1, cpus=1,
                       memory_gib=1, command="true", state_dir=f"{tmp}/state",
                       volumes_dir=f"{tmp}/org", project="bench")
        as_org, org_spec = client.as_user(ORG_USER), replace(spec, account=ORG_ACCOUNT)
        raw, ours, org_users, to_running = [], [], [], []
        # Gone before their folder is.
        with jobs_cancelled_after("div-run-bench", "wrap"):
            for _ in range(ROUNDS):  # interleaved, so all see the same cluster load
                raw.append(raw_sbatch(tmp))
                ours.append(adapter_submit(client, spec, site)[0])
                org_users.append(adapter_submit(as_org, org_spec, site)[0])
            time.sleep(2)
            for _ in range(ROUNDS // 2):  # one at a time, onto an idle cluster
                seconds, job = adapter_submit(client, spec, site)
                to_running.append(until_running(job, time.perf_counter() - seconds))
                time.sleep(0.3)

    text = sacct_lines(10_000)
    parse_times = []
    for _ in range(10):
        t0 = time.perf_counter()
        records = parse_sacct(text)
        parse_times.append(time.perf_counter() - t0)
    assert len(records) == 10_000

    raw_ms, ours_ms = statistics.median(raw) * 1e3, statistics.median(ours) * 1e3
    print(f"raw sbatch --wrap true  median {raw_ms:7.1f} ms  ({ROUNDS} submits)")
    print(f"adapter submit          median {ours_ms:7.1f} ms  ratio {ours_ms / raw_ms:.2f}x (target <= 1.2x)")
    org_ms = statistics.median(org_users) * 1e3
    print(f"as the org's Unix user  median {org_ms:7.1f} ms  ratio {org_ms / ours_ms:.2f}x "
          "the adapter's own (target <= 1.1x)")
    print(f"submit -> RUNNING       median {statistics.median(to_running) * 1e3:7.1f} ms")
    print(f"parse 10,000 sacct rows median {statistics.median(parse_times) * 1e3:7.1f} ms (target < 100 ms)")
    record("one submit through the adapter", f"{ours_ms:.1f} ms", "<= 1.2x raw sbatch",
           f"raw sbatch {raw_ms:.1f} ms", f"{ours_ms / raw_ms:.2f}x")
    record("one submit as the org's Unix user (sudo)", f"{org_ms:.1f} ms",
           "<= 1.1x the adapter's own", f"adapter {ours_ms:.1f} ms", f"{org_ms / ours_ms:.2f}x")
    record("submit -> RUNNING", f"{statistics.median(to_running) * 1e3:.0f} ms")
    record("parse 10,000 sacct rows", f"{statistics.median(parse_times) * 1e3:.1f} ms", "< 100 ms")


if __name__ == "__main__":
    main()
