"""What a run's network of its own costs (slurm/node/): the prolog and
epilog a job's node runs, against a raw `sbatch --wait` of `srun true` in
the same run, and TCP throughput between a job's two nodes inside the
job's network (srun --div-isolate) against the nodes' own network.

Run by hand on a machine with the dev cluster up:  .venv/bin/python bench/run_network.py
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import record  # noqa: E402

NODE_PARTS = os.environ.get("DIV_DEV_NODE_PARTS", "/usr/local/lib/divergent")
ROUNDS = 10
MIB = 512

# Rank 0 takes MIB MiB from rank 1 and prints the rate.
THROUGHPUT = f"""
import os, socket, time
port = 29500
if os.environ["SLURM_NODEID"] == "0":
    server = socket.create_server(("0.0.0.0", port))
    server.settimeout(60)
    conn, _ = server.accept()
    got, started, view = 0, time.perf_counter(), memoryview(bytearray(1 << 20))
    while n := conn.recv_into(view):
        got += n
    print("RATE", got / (time.perf_counter() - started) / 1e6, flush=True)
else:
    time.sleep(1)
    # In the job's network the peer is its address there (the sandbox's
    # /etc/hosts); on the nodes' own, the node's.
    hosts = f"/run/divergent/jobs/{{os.environ['SLURM_JOB_ID']}}/hosts"
    peer = socket.gethostbyname(os.environ["PEER"])
    if os.environ.get("ISOLATED") == "1":
        peer = next(line.split()[0] for line in open(hosts)
                    if line.split()[1:] == [os.environ["PEER"]] and "." in line.split()[0]
                    and not line.startswith("::"))
    conn = socket.create_connection((peer, port), timeout=30)
    chunk = b"x" * (1 << 20)
    for _ in range({MIB}):
        conn.sendall(chunk)
    conn.close()
"""


def prolog_and_epilog(job: int) -> float:
    """Seconds the node parts take for one job on node1, run as slurmd runs them."""
    env = dict(os.environ, SLURM_JOB_ID=str(job), SLURMD_NODENAME="node1",
               SLURM_JOB_NODELIST="node1,node2")
    slurmd = subprocess.run(["pgrep", "-f", "slurmd -D -N node1"], capture_output=True,
                            text=True, check=True).stdout.split()[0]
    enter = ["nsenter", f"--target={slurmd}", "--net", "--mount", "--uts"]
    started = time.perf_counter()
    subprocess.run([*enter, f"{NODE_PARTS}/prolog"], env=env, check=True)
    subprocess.run([*enter, f"{NODE_PARTS}/epilog"], env=env, check=True)
    return time.perf_counter() - started


def raw_job(folder: str) -> float:
    started = time.perf_counter()
    subprocess.run(["sbatch", "--wait", "-A", "dev", "-p", "cpu", "-o", f"{folder}/raw-%j",
                    "--wrap", "srun true"], check=True, capture_output=True)
    return time.perf_counter() - started


def throughput(folder: str, isolate: bool) -> float:
    script = Path(folder) / "rate.py"
    script.write_text(THROUGHPUT)
    out = Path(folder) / f"rate-{isolate}.out"
    flag = "--div-isolate " if isolate else ""
    subprocess.run(["sbatch", "--wait", "-A", "dev", "-p", "cpu", "-N", "2", "-w", "node1,node2",
                    "-o", str(out), "--wrap",
                    f"srun {flag}bash -c 'PEER=node1 ISOLATED={int(isolate)} python3 {script}'"],
                   check=True, capture_output=True, timeout=300)
    return float(re.search(r"RATE ([0-9.]+)", out.read_text()).group(1))


def main() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        os.chmod(folder, 0o755)
        parts = [prolog_and_epilog(4_000_000_000 + i) for i in range(ROUNDS)]
        jobs = [raw_job(folder) for _ in range(ROUNDS)]
        plain = statistics.median(throughput(folder, False) for _ in range(3))
        isolated = statistics.median(throughput(folder, True) for _ in range(3))
    part, job = statistics.median(parts), statistics.median(jobs)
    print(f"prolog + epilog, one node   median {part * 1000:6.1f} ms")
    print(f"raw sbatch --wait srun true median {job * 1000:6.1f} ms   ratio {part / job:.2f}")
    print(f"TCP between two nodes       {isolated:7.0f} MB/s in the job's network, "
          f"{plain:7.0f} MB/s on the nodes' own: ratio {isolated / plain:.2f}")
    record("a job's network: prolog + epilog a node", f"{part * 1000:.0f} ms", "",
           f"{job * 1000:.0f} ms (raw sbatch --wait)", f"{part / job:.2f}")
    record("TCP between a job's nodes", f"{isolated:.0f} MB/s", "",
           f"{plain:.0f} MB/s (the nodes' network)", f"{isolated / plain:.2f}")


if __name__ == "__main__":
    main()
