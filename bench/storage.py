"""`div storage put/get` against `cp -r` of the same tree onto the share,
measured in the same run:
- put and get of 1 GiB in 16 files of 64 MiB (target: at least 70% of cp's rate);
- put of 10,000 files of 4 KiB (target: at least 30% of cp's rate);
- put again of the unchanged 10,000 files (target: under 2 s).

  make up && .venv/bin/python bench/storage.py
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import DIV, ROOT, div_env  # noqa: E402

SHARE = ROOT / "instance" / "data" / "share" / "dev"


def timed(argv: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=div_env(), check=True, capture_output=True)
    return time.perf_counter() - t0


def make_tree(folder: Path, files: int, size: int) -> None:
    folder.mkdir(parents=True)
    block = os.urandom(size)
    for i in range(files):
        sub = folder / f"d{i % 100:02d}" if files > 100 else folder
        sub.mkdir(exist_ok=True)
        # Different bytes in each file, so nothing is deduplicated by content.
        (sub / f"f{i:05d}.bin").write_bytes(i.to_bytes(8, "little") + block[8:])


def compare(label: str, ours: float, theirs: float, nbytes: int) -> None:
    print(f"{label:34s} div {nbytes / ours / 1e6:8.1f} MB/s ({ours:6.2f} s)  "
          f"cp -r {nbytes / theirs / 1e6:8.1f} MB/s ({theirs:6.2f} s)  "
          f"= {theirs / ours * 100:5.1f}% of cp's rate")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-storage-", dir=ROOT / "instance") as tmp:
        work = Path(tmp)
        big, small = work / "big", work / "small"
        make_tree(big, 16, 64 << 20)
        make_tree(small, 10_000, 4 << 10)
        for vol in ("bench-cp", "bench-put"):
            subprocess.run([DIV, "storage", "rm", vol, "--yes"], env=div_env(), capture_output=True)
        (SHARE / "bench-cp").mkdir(parents=True, exist_ok=True)

        cp_put = timed(["cp", "-r", str(big), str(SHARE / "bench-cp" / "big")], work)
        div_put = timed([DIV, "storage", "put", "bench-put", str(big)], work)
        compare("put 1 GiB in 16 x 64 MiB", div_put, cp_put, 16 << 26)

        cp_get = timed(["cp", "-r", str(SHARE / "bench-put" / "big"), str(work / "cp-got")], work)
        div_get = timed([DIV, "storage", "get", "bench-put", "big", str(work / "div-got")], work)
        compare("get 1 GiB in 16 x 64 MiB", div_get, cp_get, 16 << 26)

        cp_small = timed(["cp", "-r", str(small), str(SHARE / "bench-cp" / "small")], work)
        div_small = timed([DIV, "storage", "put", "bench-put", str(small)], work)
        compare("put 10,000 x 4 KiB", div_small, cp_small, 10_000 * 4096)
        again = timed([DIV, "storage", "put", "bench-put", str(small)], work)
        print(f"put again, 10,000 unchanged files: {again:.2f} s (target < 2 s)")

        shutil.rmtree(SHARE / "bench-cp", ignore_errors=True)
        subprocess.run([DIV, "storage", "rm", "bench-put", "--yes"], env=div_env(),
                       capture_output=True)


if __name__ == "__main__":
    main()
