"""What a run's own Python environment costs (runtime `none`): the batch
script's PYTHON_ENV inside a bubblewrap sandbox like a run's, against the
same sandbox running nothing, in the same run.

Run by hand on a machine with bubblewrap and python3:  .venv/bin/python bench/python_env.py
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import record  # noqa: E402
from divergent.slurm.script import PYTHON_ENV  # noqa: E402

ROUNDS = 20


def sandboxed(script: str) -> float:
    with tempfile.TemporaryDirectory() as python:
        argv = ["bwrap", "--die-with-parent", "--unshare-user", "--unshare-pid",
                "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
                "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
                "--tmpfs", "/tmp", "--bind", python, "/div/python",
                "/bin/bash", "-c", script]
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, env={"PATH": "/usr/bin:/bin"})
        return time.perf_counter() - t0


def main() -> None:
    bare, with_env = [], []
    for _ in range(ROUNDS):   # alternating, so both see the same machine
        bare.append(sandboxed("true"))
        with_env.append(sandboxed(PYTHON_ENV + "\ntest -x /div/python/bin/pip"))
    b, e = statistics.median(bare), statistics.median(with_env)
    print(f"sandbox alone            median {b * 1000:6.1f} ms")
    print(f"sandbox + Python env     median {e * 1000:6.1f} ms")
    print(f"the Python env costs     {(e - b) * 1000:6.1f} ms a node ({e / b:.2f}x the bare sandbox)")
    record("a run's Python environment, a node", f"{(e - b) * 1000:.1f} ms", "",
           f"bare sandbox {b * 1000:.1f} ms", f"{e / b:.2f}x")


if __name__ == "__main__":
    main()
