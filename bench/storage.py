"""`div storage put/get` against `cp -r` of the same tree onto the share,
measured in the same run. A put is durable (on disk before it is
acknowledged), so its baseline is `cp -r` followed by one `sync`; a get
lands in the page cache, as `cp -r` does:
- put of 1 GiB in 16 files of 64 MiB (goal: at least 80% of cp + sync);
- get of the same (goal: at least 60% of cp);
- put of 10,000 files of 4 KiB (goal: at least 50% of cp -r + one sync);
- put again of the unchanged 10,000 files (goal: under 0.5 s).
Three rounds, each tool in turn, medians: a single round on a small VM's
disk says more about its writeback than about either tool. Nothing is
deleted until the last round: ext4 makes new files slow for a while after
many are deleted.

Before each timed command the page cache is primed (prime_page_cache):
this VM hands free memory back to its host a few seconds after it is
freed, and the next first write into it costs a host page fault, 2.8 s
a GiB against 0.2 s into memory freed just before (measured). Unprimed,
whichever tool ran after a free paid for it, not for its own work. The
run also measures sha256 on both cores (the check both sides keep), the
floor under any put or get.

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import DIV, ROOT, div_env, record  # noqa: E402
from divergent.cli.hash_cache import file_sha256  # noqa: E402

SHARE = ROOT / "instance" / "data" / "share" / "dev"
ROUNDS = 3


def prime_page_cache(nbytes: int = 3 << 29) -> None:
    """Writes and deletes a file larger than any timed command writes, so
    that command's page cache lands in memory this VM has just used."""
    block = os.urandom(1 << 20)
    path = ROOT / "instance" / ".bench-prime"
    with open(path, "wb") as f:
        for _ in range(nbytes >> 20):
            f.write(block)
    path.unlink()


def timed(argv: list[str], cwd: Path) -> float:
    prime_page_cache()
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


def hash_floor(folder: Path) -> float:
    """sha256 of every file in `folder`, two at a time (this VM's two
    cores), as the CLI hashes: what checking the bytes costs one side, at
    best."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(file_sha256, sorted(folder.iterdir())))
    return time.perf_counter() - t0


def remove_volumes(names: list[str]) -> None:
    for name in names:
        subprocess.run([DIV, "storage", "rm", name, "--yes"], env=div_env(), capture_output=True)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-storage-", dir=ROOT / "instance") as tmp:
        work = Path(tmp)
        big, small = work / "big", work / "small"
        make_tree(big, 16, 64 << 20)
        make_tree(small, 10_000, 4 << 10)
        put_cp, put_div, get_cp, get_div, small_cp, small_div, again, hashed = (
            [] for _ in range(8))
        # Nothing is deleted until the end: ext4 makes new files slow for a
        # while after many are deleted (it skips recently freed inodes), and
        # a delete before one tool and not the other was the noise.
        # The org's folder is the service user's (the server writes there);
        # only cp's own folder in it is root's.
        subprocess.run([str(ROOT / "scripts" / "services"), "exec", "mkdir", "-p", str(SHARE)],
                       check=True, capture_output=True)
        volumes = [f"bench-put-{r}" for r in range(ROUNDS)]
        remove_volumes(volumes)
        try:
            for vol in volumes:
                cp_dir = SHARE / "bench-cp" / vol
                cp_dir.mkdir(parents=True)
                put_cp.append(timed(["sh", "-c", 'cp -r "$0" "$1" && sync', str(big),
                                     str(cp_dir / "big")], work))
                put_div.append(timed([DIV, "storage", "put", vol, str(big)], work))
                get_cp.append(timed(["cp", "-r", str(SHARE / vol / "big"),
                                     str(work / f"cp-got-{vol}")], work))
                get_div.append(timed([DIV, "storage", "get", vol, "big",
                                      str(work / f"div-got-{vol}")], work))
                small_cp.append(timed(["sh", "-c", 'cp -r "$0" "$1" && sync', str(small),
                                       str(cp_dir / "small")], work))
                small_div.append(timed([DIV, "storage", "put", vol, str(small)], work))
                again.append(timed([DIV, "storage", "put", vol, str(small)], work))
                hashed.append(hash_floor(big))
        finally:
            remove_volumes(volumes)
            shutil.rmtree(SHARE / "bench-cp", ignore_errors=True)
        compare("put 1 GiB in 16 x 64 MiB", put_div, put_cp, 16 << 26, "cp -r + sync", 80)
        compare("get 1 GiB in 16 x 64 MiB", get_div, get_cp, 16 << 26, "cp -r", 60)
        compare("put 10,000 x 4 KiB", small_div, small_cp, 10_000 * 4096, "cp -r + sync", 50)
        print(f"put again, 10,000 unchanged files: median {statistics.median(again):.2f} s "
              f"(rounds: {', '.join(f'{a:.2f}' for a in again)}; goal < 0.5 s)")
        record("put again, 10,000 unchanged files", f"{statistics.median(again):.2f} s", "< 0.5 s")
        # The floors: a get hashes once (the client), a put twice (client
        # and server), each pass at best on both cores, before any copy.
        floor, cp_get, cp_put = (statistics.median(x) for x in (hashed, get_cp, put_cp))
        print(f"sha256 of 1 GiB on both cores: {floor:.2f} s ({(16 << 26) / floor / 1e6:.0f} MB/s): "
              f"{floor / cp_get * 100:.0f}% of cp -r's time for the get, twice that "
              f"{2 * floor / cp_put * 100:.0f}% of cp -r + sync's for the put")
        record("sha256 of the 1 GiB on both cores (a get's check)", f"{floor:.2f} s", "",
               f"cp -r {cp_get:.2f} s", f"{floor / cp_get * 100:.0f}% of its time")
        record("sha256 twice (a put's: client and server)", f"{2 * floor:.2f} s", "",
               f"cp -r + sync {cp_put:.2f} s", f"{2 * floor / cp_put * 100:.0f}% of its time")


if __name__ == "__main__":
    main()
