"""The log stream: how soon a line the job prints reaches `div run`'s
stdout (p95 of 50 lines; target under 1 s), and how fast `div logs` streams
a finished 200 MB log against reading the file directly (target at least
50 MB/s), plain and with a secret to mask in every line.

  make up && .venv/bin/python bench/log_stream.py
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import DIV, ROOT, div_env, record, summary  # noqa: E402

LINES = 50
LOG_MB = 200

PRINTER = f"""import time
time.sleep(1)
for i in range({LINES}):
    print(repr(time.time()), flush=True)
    time.sleep(0.2)
"""

WRITER = f"""import os, sys
secret = os.environ.get("BENCH_TOKEN", "").encode()
line = secret + b"0123456789abcdef" * (64 - len(secret) // 16) + b"\\n"
block = line * 1024
for _ in range({LOG_MB}):
    sys.stdout.buffer.write(block)
"""
SECRET = "bench-token-0123456789abcdef0123"


def line_latency(project: Path) -> list[float]:
    (project / "printer.py").write_text(PRINTER)
    proc = subprocess.Popen([DIV, "run", "--gpu", "cpu", "printer.py"], cwd=project,
                            env=div_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    delays = [time.time() - float(line) for line in proc.stdout]
    proc.wait()
    return delays


def throughput(project: Path, masked: bool) -> None:
    (project / "writer.py").write_text(WRITER)
    secret = ["--secret", "BENCH_TOKEN"] if masked else []
    done = subprocess.run([DIV, "run", "--gpu", "cpu", "--memory", "4", *secret, "writer.py"],
                          cwd=project, env=div_env(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, check=True)
    name = done.stderr.decode().splitlines()[1].split()[0]
    log = ROOT / "instance" / "data" / "runs" / "dev" / name / "stdout"
    size = log.stat().st_size
    t0 = time.perf_counter()
    with open(log, "rb") as f:
        while f.read(1 << 20):
            pass
    direct = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([DIV, "logs", name], env=div_env(), stdout=subprocess.DEVNULL, check=True)
    streamed = time.perf_counter() - t0
    mb = size / 1e6
    what = "a secret masked in every line" if masked else "nothing to mask"
    print(f"{mb:.0f} MB log, {what}: read directly {mb / direct:8.0f} MB/s; "
          f"div logs {mb / streamed:6.0f} MB/s ({direct / streamed:.3f}x of direct); target >= 50 MB/s")
    record(f"div logs of {mb:.0f} MB, {what}", f"{mb / streamed:.0f} MB/s", ">= 50 MB/s",
           f"read directly {mb / direct:.0f} MB/s", f"{direct / streamed:.3f}x")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-logs-") as tmp:
        project = Path(tmp) / "bench-logs"
        project.mkdir()
        delays = line_latency(project)
        print(f"line printed -> div run's stdout: {summary(delays)}; target p95 < 1 s")
        ordered = sorted(delays)
        record("a printed line reaches div run's stdout (p95)",
               f"{ordered[int(len(ordered) * 0.95)] * 1000:.0f} ms", "< 1 s")
        throughput(project, masked=False)
        subprocess.run([DIV, "secrets", "set", "BENCH_TOKEN"], input=SECRET.encode(),
                       env=div_env(), check=True, capture_output=True)
        throughput(project, masked=True)


if __name__ == "__main__":
    main()
