"""`div storage put/get` against `cp -r` of the same tree onto the share,
measured in the same run. A put is durable (on disk before it is
acknowledged), so its baseline is `cp -r` followed by one `sync`; a get
lands in the page cache, as `cp -r` does:
- put of 1 GiB in 16 files of 64 MiB (goal: at least 80% of cp + sync);
- get of the same (goal: at least 70% of cp);
- put of 10,000 files of 4 KiB (goal: at least 50% of cp -r + one sync);
- put again of the unchanged 10,000 files (goal: under 0.5 s).
Three rounds, each tool in turn, medians: a single round on a small VM's
disk says more about its writeback than about either tool.

  make up && .venv/bin/python bench/storage.py
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import DIV, ROOT, div_env, record  # noqa: E402

SHARE = ROOT / "instance" / "data" / "share" / "dev"
ROUNDS = 3


def timed(argv: list[str], cwd: Path) -> float:
    # Start each one with nothing left to write back from the one before.
    os.sync()
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


def compare(label: str, ours: list[float], theirs: list[float], nbytes: int, baseline: str,
            goal: int) -> None:
    """Medians of rounds taken alternately, since this disk's speed drifts."""
    ours_s, theirs_s = statistics.median(ours), statistics.median(theirs)
    ratios = sorted(t / o * 100 for o, t in zip(ours, theirs, strict=True))
    print(f"{label:26s} div {nbytes / ours_s / 1e6:7.1f} MB/s ({ours_s:5.2f} s)  "
          f"{baseline} {nbytes / theirs_s / 1e6:7.1f} MB/s ({theirs_s:5.2f} s)  "
          f"= {statistics.median(ratios):5.1f}% of its rate "
          f"(rounds: {', '.join(f'{r:.0f}%' for r in ratios)}; goal {goal}%)")
    record(label, f"{nbytes / ours_s / 1e6:.0f} MB/s", f">= {goal}% of {baseline}",
           f"{baseline} {nbytes / theirs_s / 1e6:.0f} MB/s", f"{statistics.median(ratios):.0f}%")


def fresh(vol: str) -> None:
    subprocess.run([DIV, "storage", "rm", vol, "--yes"], env=div_env(), capture_output=True)
    shutil.rmtree(SHARE / "bench-cp", ignore_errors=True)
    # The org's folder is the service user's (the server writes there); only
    # cp's own folder in it is root's.
    subprocess.run([str(ROOT / "scripts" / "services"), "exec", "mkdir", "-p", str(SHARE)],
                   check=True, capture_output=True)
    (SHARE / "bench-cp").mkdir(exist_ok=True)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-storage-", dir=ROOT / "instance") as tmp:
        work = Path(tmp)
        big, small = work / "big", work / "small"
        make_tree(big, 16, 64 << 20)
        make_tree(small, 10_000, 4 << 10)
        put_cp, put_div, get_cp, get_div, small_cp, small_div, again = ([] for _ in range(7))
        for _ in range(ROUNDS):
            fresh("bench-put")
            shutil.rmtree(work / "cp-got", ignore_errors=True)
            shutil.rmtree(work / "div-got", ignore_errors=True)
            put_cp.append(timed(["sh", "-c", 'cp -r "$0" "$1" && sync', str(big),
                                 str(SHARE / "bench-cp" / "big")], work))
            put_div.append(timed([DIV, "storage", "put", "bench-put", str(big)], work))
            get_cp.append(timed(["cp", "-r", str(SHARE / "bench-put" / "big"),
                                 str(work / "cp-got")], work))
            get_div.append(timed([DIV, "storage", "get", "bench-put", "big",
                                  str(work / "div-got")], work))
            small_cp.append(timed(["sh", "-c", 'cp -r "$0" "$1" && sync', str(small),
                                   str(SHARE / "bench-cp" / "small")], work))
            small_div.append(timed([DIV, "storage", "put", "bench-put", str(small)], work))
            again.append(timed([DIV, "storage", "put", "bench-put", str(small)], work))
        compare("put 1 GiB in 16 x 64 MiB", put_div, put_cp, 16 << 26, "cp -r + sync", 80)
        compare("get 1 GiB in 16 x 64 MiB", get_div, get_cp, 16 << 26, "cp -r", 70)
        compare("put 10,000 x 4 KiB", small_div, small_cp, 10_000 * 4096, "cp -r + sync", 50)
        print(f"put again, 10,000 unchanged files: median {statistics.median(again):.2f} s "
              f"(rounds: {', '.join(f'{a:.2f}' for a in again)}; goal < 0.5 s)")
        record("put again, 10,000 unchanged files", f"{statistics.median(again):.2f} s", "< 0.5 s")
        fresh("bench-put")
        shutil.rmtree(SHARE / "bench-cp", ignore_errors=True)


if __name__ == "__main__":
    main()
