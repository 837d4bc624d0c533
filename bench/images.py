"""What a run's image costs on runtime pyxis (docs/admins/images.md), medians
of 5 each, the baselines measured in the same run:
- a job step in a cached image as runs start it (srun --div-container
  --container-image=<its squashfs>) against a plain `srun`: when the
  command starts, and the whole step;
- `div run` of a trivial command in a cached image against the same run on
  runtime none (the dev site switched for each baseline run, then back:
  the two alternate, so that neither gets a quieter minute);
- the first pull of an image on a node (div/pull-test:1, its cached copy
  removed before each) against the run in it once cached.

Run by hand on a machine where `make up` ran:  .venv/bin/python bench/images.py
"""
from __future__ import annotations

import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, div, div_env, record  # noqa: E402

ROUNDS = 5
IMAGE_CACHE = Path(os.environ.get("DIV_DEV_STATE", "/var/lib/div-dev")) / "images" / "shared"
PULL = "/usr/local/lib/divergent/image-pull"
FLASK = [str(ROOT / "scripts" / "services"), "exec", str(ROOT / ".venv" / "bin" / "flask")]


def registry() -> str:
    return div_env()["DIV_DEV_REGISTRY"]


def source(repository: str, tag: str) -> str:
    """REGISTRY#REPOSITORY@DIGEST, as the server resolves it for the nodes."""
    digest = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
         f"docker://{registry()}/{repository}:{tag}"],
        capture_output=True, text=True, check=True).stdout.strip()
    return f"{registry()}#{repository}@{digest}"


def cached_file(source: str) -> Path:
    """The nodes' file of a public image, named by its registry and digest
    (image-pull)."""
    key = f"{source.partition('#')[0]}#{source.rpartition('@')[2]}"
    return IMAGE_CACHE / f"{hashlib.sha256(key.encode()).hexdigest()}.sqsh"


def step(*flags: str) -> tuple[float, float]:
    """Seconds to the command's start, and to the step's end, of one srun."""
    started = time.time()
    out = subprocess.run(["srun", "-A", "dev", "-p", "cpu", "-w", "node1", *flags,
                          "date", "+%s.%N"], capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1]) - started, time.time() - started


def run_seconds(project: Path, *flags: str) -> float:
    started = time.perf_counter()
    div("run", "--gpu", "cpu", "--no-upload", *flags, "--", "true", cwd=project)
    return time.perf_counter() - started


def site_runtime(runtime: str) -> None:
    subprocess.run([*FLASK, "site", "--runtime", runtime], check=True, capture_output=True)


def medians(samples: list[tuple[float, ...]]) -> tuple[float, ...]:
    return tuple(statistics.median(column) for column in zip(*samples, strict=True))


def main() -> None:
    python = source("div/python", "3.11")
    image = subprocess.run([PULL, python], capture_output=True, text=True,
                           check=True).stdout.strip()
    plain = medians([step() for _ in range(ROUNDS)])
    contained = medians([step("--div-container", f"--container-image={image}")
                         for _ in range(ROUNDS)])
    print(f"srun: command starts {plain[0]:.2f} s, step ends {plain[1]:.2f} s; in the image: "
          f"{contained[0]:.2f} s and {contained[1]:.2f} s")

    pull_test = source("div/pull-test", "1")
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        cached_image = f"{registry()}/div/python:3.11"
        in_image, on_none = [], []
        for _ in range(ROUNDS):
            in_image.append(run_seconds(project, "--image", cached_image))
            site_runtime("none")
            try:
                on_none.append(run_seconds(project))
            finally:
                site_runtime("pyxis")
        cached, none = statistics.median(in_image), statistics.median(on_none)
        pulls = []
        for _ in range(ROUNDS):
            cached_file(pull_test).unlink(missing_ok=True)
            pulls.append(run_seconds(project, "--image", f"{registry()}/div/pull-test:1"))
        first = statistics.median(pulls)
    print(f"div run -- true: on none {none:.2f} s, in a cached image {cached:.2f} s, "
          f"first pull {first:.2f} s")
    for figure, value, goal, baseline, named in (
            ("image step: command starts (srun)", contained[0], "within 0.5 s of plain",
             plain[0], "plain srun"),
            ("image step: whole step (srun)", contained[1], "", plain[1], "plain srun"),
            ("div run in a cached image", cached, "within 0.5 s of none", none, "runtime none"),
            ("div run with the first pull (~85 MB)", first, "", cached, "cached")):
        record(figure, f"{value:.2f} s", goal, f"{baseline:.2f} s ({named})",
               f"+{value - baseline:.2f} s")

if __name__ == "__main__":
    main()
