"""The terms the CLI, the server and slurm/ share, so that each side checks
and shows a value the same way and no copy needs a test to stay equal: the
patterns names and checks must match, the docs' default catalog, and values
as people read them. A leaf: it imports nothing of ours, and the CLI takes
it without any of the server's dependencies."""
from __future__ import annotations

import re

RUN_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
VOLUME_NAME = re.compile(r"^[a-z0-9_-][a-z0-9._-]{0,62}$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Names Slurm, bash or divergent give meaning to, and the ones the platform
# sets for every run: a run's env and secrets may not use them. The run's
# values only ever reach its sandbox, so this is defence in depth.
RESERVED_ENV = re.compile(
    r"^(?:(?:SLURM|SLURMD|SRUN|SBATCH|SALLOC|SPANK|DIV|div|BASH_FUNC)_.*"
    r"|BASH_ENV|ENV|SHELLOPTS|BASHOPTS|PS4|NNODES|NODE_RANK|MASTER_ADDR|MASTER_PORT"
    r"|PET_NNODES|PET_NODE_RANK|PET_MASTER_ADDR|PET_MASTER_PORT|WORLD_SIZE|RANK)$")
# Images are passed quoted, but a strict shape keeps odd refs out of logs too.
IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")
# S3's bucket names (and the older, laxer ones some stores still allow).
S3_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{2,62}$")
# A check, as the docs' Check syntax: `<path><operator><value>`.
CHECK = re.compile(r"^([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)(>=|<=|==|!=|>|<)(.+)$")
NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")

DEFAULT_IMAGE = "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime"
# The docs' table, the catalog of a site that names none (and the CLI's
# stand-in for a server that does not serve its own): these GPU types, 8 a
# node, each with 1 core and 8 GiB; the cpu type's unit with 2 GiB; nodes
# of 64 cores and 336 GiB.
GPU_TYPES = ("b300", "h200", "h100", "l40s")
CPU = "cpu"
GPUS_PER_NODE = 8
CORES_PER_UNIT = 1
GIB_PER_GPU = 8
GIB_PER_CPU = 2
NODE_CORES = 64
NODE_GIB = 336


def format_bytes(size: int) -> str:
    """38.2 KB: decimal units, one decimal place."""
    if size < 1000:
        return f"{size} B"
    shown_size = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        shown_size /= 1000
        if shown_size < 1000 or unit == "TB":
            return f"{shown_size:.1f} {unit}"
    raise AssertionError("unreachable")


def shown(text: object) -> str:
    """A value as one line of plain text: a newline, an escape sequence or
    another control character someone put in a value (a sweep's, a webhook
    server's error) is written out, never sent to the terminal; a byte of a
    file name that is not UTF-8 (PEP 383's lone surrogate) as \\xNN."""
    return "".join(c if c.isprintable() else
                   f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff" else repr(c)[1:-1]
                   for c in str(text))
