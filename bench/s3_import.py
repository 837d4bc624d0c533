"""`div storage import` of 1 GiB in 16 objects of 64 MiB from the dev S3
server, against what `aws s3 cp --recursive` does (boto3's download_file of
each object, in parallel, each in parallel 8 MiB ranges) onto the same
share, measured in the same run. Target: at least 80% of boto3's rate.

Two numbers for div: the whole command (submit, Slurm starting the job,
the sandbox, following the log) and the transfer alone, as its last line
reports it. Three rounds, each tool in turn, medians.

  make up && .venv/bin/python bench/s3_import.py
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import DIV, ROOT, div_env, record  # noqa: E402
from tests.buckets import s3_client  # noqa: E402

SHARE = ROOT / "instance" / "data" / "share" / "dev"
OBJECTS, OBJECT_BYTES = 16, 64 << 20
ROUNDS = 3
S3_SECRETS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


def settings() -> dict[str, str]:
    env = div_env()
    return {name: env[name] for name in S3_SECRETS}


def give_org_the_keys() -> None:
    for name, value in settings().items():
        subprocess.run([DIV, "secrets", "set", name], input=value.encode(), env=div_env(),
                       check=True, capture_output=True)


def fill_bucket(s3) -> str:
    bucket = f"bench-{secrets.token_hex(4)}"
    s3.create_bucket(Bucket=bucket)
    block = os.urandom(OBJECT_BYTES)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket=bucket, Key=f"gib/{i:02d}.bin",
                                              Body=i.to_bytes(8, "little") + block[8:]),
                      range(OBJECTS)))
    return bucket


def boto3_download(s3, bucket: str, folder: Path) -> float:
    """aws s3 cp --recursive's way: every object at once through boto3's
    download_file (its default config: 8 MiB ranges, 10 at a time)."""
    folder.mkdir(parents=True)
    os.sync()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(OBJECTS) as pool:
        list(pool.map(lambda i: s3.download_file(bucket, f"gib/{i:02d}.bin",
                                                 str(folder / f"{i:02d}.bin")), range(OBJECTS)))
    return time.perf_counter() - t0


def div_import(bucket: str, path: str) -> tuple[float, float]:
    """The whole command's seconds, and the transfer's own (its last line)."""
    os.sync()
    t0 = time.perf_counter()
    done = subprocess.run([DIV, "storage", "import", f"bench-s3/{path}", f"s3://{bucket}/gib"],
                          env=div_env(), capture_output=True, text=True)
    whole = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"div storage import failed:\n{done.stderr}")
    moved = re.search(r"^imported 16 files \(.*\) in ([\d.]+)s", done.stderr, re.M)
    return whole, float(moved.group(1))


def rate(seconds: float) -> str:
    return f"{OBJECTS * OBJECT_BYTES / seconds / 1e6:7.1f} MB/s ({seconds:5.2f} s)"


def main() -> None:
    give_org_the_keys()
    s3 = s3_client(settings())
    bucket = fill_bucket(s3)
    theirs, whole, alone = [], [], []
    try:
        for round_ in range(ROUNDS):
            target = SHARE / f"bench-boto3-{round_}"
            theirs.append(boto3_download(s3, bucket, target))
            shutil.rmtree(target)
            seconds, transfer = div_import(bucket, f"r{round_}")
            whole.append(seconds)
            alone.append(transfer)
            shutil.rmtree(SHARE / "bench-s3" / f"r{round_}")
            print(f"round {round_ + 1}: boto3 {rate(theirs[-1])}  div {rate(whole[-1])}  "
                  f"transfer alone {rate(alone[-1])}", flush=True)
    finally:
        subprocess.run([DIV, "storage", "rm", "bench-s3", "--yes"], env=div_env(), capture_output=True)
    base = statistics.median(theirs)
    print(f"1 GiB in 16 x 64 MiB: boto3 download_file {rate(base)}")
    for label, samples in (("div storage import", whole), ("its transfer alone", alone)):
        ratios = sorted(t / o * 100 for o, t in zip(samples, theirs, strict=True))
        record(f"{label}, 1 GiB in 16 x 64 MiB", rate(statistics.median(samples)).strip(), "",
               f"boto3 download_file {rate(base).strip()}", f"{statistics.median(ratios):.0f}%")
        print(f"{label:22s} {rate(statistics.median(samples))} = "
              f"{statistics.median(ratios):5.1f}% of boto3's rate "
              f"(rounds: {', '.join(f'{r:.0f}%' for r in ratios)})")


if __name__ == "__main__":
    main()
