"""Parsing and checking `div run`'s flags and entrypoint, before anything is
uploaded, against the terms the server checks again (divergent.terms). Each
parser raises click.BadParameter, which click turns into exit 2 with a
message naming the flag and what is allowed."""
from __future__ import annotations

import re
import shlex
from decimal import Decimal

import click

from divergent.cli.catalog import FALLBACK, Shape
from divergent.terms import CHECK, ENV_KEY, IMAGE_REF, NUMBER, RESERVED_ENV, RUN_NAME, S3_BUCKET, VOLUME_NAME

RESERVED_TEXT = ("SLURM_*, DIV_*, BASH_ENV, ENV, BASH_FUNC_* and the names divergent sets "
                 "for a run (NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, "
                 "PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT) are reserved")
MEMORY = re.compile(r"^(\d+)(G|GiB)?$")
USD = re.compile(r"^\$?(\d+(?:\.\d{1,2})?)$")
PY_FILE = re.compile(r"^((?:[A-Za-z_]\w*/)*[A-Za-z_]\w*)\.py$")


def parse_memory(text: str) -> int:
    """Whole GiB: 64, 64G or 64GiB; at least 1, at most a node's 336."""
    match = MEMORY.fullmatch(text.strip())
    if not match:
        raise click.BadParameter(f"{text!r} is not whole GiB: use 64, 64G or 64GiB (at least 1 GiB)")
    gib = int(match.group(1))
    if gib < 1:
        raise click.BadParameter("memory must be at least 1 GiB")
    return gib


def parse_usd(text: str) -> int:
    """Dollars (5, 5.00 or $5) as integer micro-dollars: never a float."""
    match = USD.fullmatch(text.strip())
    if not match:
        raise click.BadParameter(f"{text!r} is not an amount in dollars: use 5, 5.00 or $5")
    micros = int(Decimal(match.group(1)) * 1_000_000)
    if micros <= 0:
        raise click.BadParameter("the spend limit must be more than $0")
    return micros


def check_hardware(gpu: str, gpus: int, cpus: int | None, memory_gib: int | None,
                   shape: Shape = FALLBACK) -> None:
    """A GPU type the site sells; whole nodes above a node's GPUs; cores and
    GiB within what the nodes have."""
    if gpu not in shape.types:
        raise click.BadParameter(f"{gpu!r} is not one of "
                                 f"{', '.join(repr(t) for t in shape.gpu_types)}",
                                 param_hint="'--gpu'")
    if gpus < 1:
        raise click.BadParameter("must be at least 1", param_hint="--gpus")
    hardware = shape.types[gpu]
    per_node = hardware.per_node
    if hardware.gpu and gpus > per_node and gpus % per_node:
        whole = ", ".join(str(per_node * n) for n in (2, 3, 4))
        raise click.BadParameter(
            f"more than {per_node} GPUs come in whole nodes of {per_node}: {whole}, ...",
            param_hint="--gpus")
    nodes = hardware.nodes_for(gpus)
    cores, gib = hardware.node_cores, hardware.node_gib
    cpus = gpus * hardware.cores if cpus is None else cpus
    memory_gib = gpus * hardware.memory_gib if memory_gib is None else memory_gib
    if not 1 <= cpus <= cores * nodes:
        raise click.BadParameter(f"at most {cores} cores a node "
                                 f"({cores * nodes} for this run), at least 1",
                                 param_hint="--cpu")
    if memory_gib > gib * nodes:
        raise click.BadParameter(f"at most {gib} GiB a node ({gib * nodes} GiB for this run)",
                                 param_hint="--memory")


def parse_env(items: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not ENV_KEY.fullmatch(key):
            raise click.BadParameter(
                f"{item!r} is not KEY=value (KEY: letters, digits and _, not starting with a digit)",
                param_hint="--env")
        if RESERVED_ENV.fullmatch(key):
            raise click.BadParameter(f"{key}: {RESERVED_TEXT}", param_hint="--env")
        env[key] = value
    return env


def parse_sweep(items: tuple[str, ...]) -> dict[str, list[str]]:
    """--sweep LR=1e-3,3e-4 (repeatable): each variable with its values."""
    axes: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not ENV_KEY.fullmatch(key):
            raise click.BadParameter(f"{item!r} is not KEY=v1,v2,... (KEY: letters, digits "
                                     "and _, not starting with a digit)", param_hint="--sweep")
        if RESERVED_ENV.fullmatch(key):
            raise click.BadParameter(f"{key}: {RESERVED_TEXT}", param_hint="--sweep")
        split = values.split(",")
        if not all(split) or len(set(split)) != len(split):
            raise click.BadParameter(f"{item!r}: values are comma-separated, none empty, "
                                     "none twice", param_hint="--sweep")
        if key in axes:
            raise click.BadParameter(f"{key} is swept twice", param_hint="--sweep")
        axes[key] = split
    return axes


def parse_secret_name(name: str, flag: str = "--secret") -> str:
    if not ENV_KEY.fullmatch(name):
        raise click.BadParameter(
            f"{name!r}: a secret's name is letters, digits and _, not starting with a digit "
            "(it becomes an environment variable)", param_hint=flag)
    if RESERVED_ENV.fullmatch(name):
        raise click.BadParameter(f"{name}: {RESERVED_TEXT}", param_hint=flag)
    return name


def parse_check(text: str) -> dict[str, object]:
    """`<path><operator><value>`, as the docs' Check syntax."""
    match = CHECK.fullmatch(text.strip())
    if not match:
        raise click.BadParameter(
            f"{text!r} is not <path><operator><value>, such as metrics.accuracy>=0.8 "
            "(operators >=, <=, >, <, ==, !=)", param_hint="--check")
    path, op, raw = match.groups()
    if NUMBER.fullmatch(raw):
        value: object = Decimal(raw)
    elif raw in ("true", "false"):
        value = raw == "true"
    else:
        value = raw
    if op in (">", "<", ">=", "<=") and not isinstance(value, Decimal):
        raise click.BadParameter(f"{text!r}: {op} needs a number", param_hint="--check")
    return {"check": text.strip(), "path": path, "op": op, "value": value}


def parse_name(text: str, flag: str) -> str:
    if not RUN_NAME.fullmatch(text):
        raise click.BadParameter(
            f"{text!r}: use lowercase letters, digits and -, 1 to 63 characters", param_hint=flag)
    return text


def parse_volume(text: str, hint: str = "--volume") -> str:
    if not VOLUME_NAME.fullmatch(text):
        raise click.BadParameter(f"{text!r}: use lowercase letters, digits, -, _ and ., "
                                 "1 to 63 characters, not starting with .", param_hint=hint)
    return text


def parse_s3_url(text: str) -> str:
    """s3://BUCKET/PREFIX; the server checks the rest."""
    bucket = text.removeprefix("s3://").split("/", 1)[0]
    if not text.startswith("s3://") or not S3_BUCKET.fullmatch(bucket):
        raise click.BadParameter(f"{text!r} is not an S3 location such as s3://BUCKET/PREFIX "
                                 "(a bucket name is 3 to 63 letters, digits, ., - and _)")
    return text


def parse_mount(text: str) -> str:
    """s3://BUCKET/PREFIX:/mnt/NAME, whose NAME is a volume's name."""
    url, _, volume = text.rpartition(":/mnt/")
    if not url:
        raise click.BadParameter(f"{text!r}: a mount is s3://BUCKET/PREFIX:/mnt/NAME",
                                 param_hint="--mount")
    try:
        parse_s3_url(url)
        parse_volume(volume.rstrip("/"))
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint="--mount") from None
    return text


def parse_image(text: str) -> str:
    if not IMAGE_REF.fullmatch(text):
        raise click.BadParameter(f"{text!r} is not an image reference such as "
                                 "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime",
                                 param_hint="--image")
    return text


def safe_project_name(folder_name: str) -> str:
    """The folder's name made safe: lowercase, runs of other characters to -."""
    name = re.sub(r"[^a-z0-9]+", "-", folder_name.lower()).strip("-")[:63].rstrip("-")
    if not name:
        raise click.BadParameter(f"the folder name {folder_name!r} makes no project name",
                                 param_hint="--project")
    return name


def command_for(words: tuple[str, ...], after_dashes: bool) -> str:
    """What the run executes, by the docs' Entrypoints table. After `--` the
    command is passed unchanged: one word as the shell string it is, several
    quoted so that the run sees the same argv."""
    if not words:
        raise click.UsageError("say what to run: div run train.py::run, or div run -- <command>")
    if after_dashes:
        return words[0] if len(words) == 1 else shlex.join(words)
    if len(words) > 1:
        raise click.UsageError(f"one entrypoint, or a command after --: got {' '.join(words)!r}")
    entry = python_entrypoint(words, after_dashes)
    if entry is None:
        return words[0]
    file, function = entry
    if function:
        module = file.removesuffix(".py").replace("/", ".")
        return f"python -u -c {shlex.quote(f'from {module} import {function}; {function}()')}"
    return f"python -u {shlex.quote(file)}"


def python_entrypoint(words: tuple[str, ...], after_dashes: bool) -> tuple[str, str] | None:
    """(file, function) for `file.py::function`, (file, "") for `file.py`;
    None for a command (after `--`, or with a space)."""
    if after_dashes or len(words) != 1 or " " in words[0] or not words[0]:
        return None
    text = words[0]
    file, sep, function = text.partition("::")
    match = PY_FILE.fullmatch(file)
    if sep:
        if not match or not function.isidentifier():
            raise click.BadParameter(
                f"{text!r}: use path/to/file.py::function, with Python names",
                param_hint="entrypoint")
        return file, function
    return (file, "") if match else None
