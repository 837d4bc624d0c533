"""What a run asks for (RunRequest): the API's JSON checked again on the
server (everything `div run` checked already), a rerun's request from the
run it repeats, and an S3 transfer's."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from divergent.app.models import Org, Run
from divergent.app.services.accounts.secrets import (
    check_secret_name,
)
from divergent.app.services.errors import (
    Invalid,
)
from divergent.app.services.money.catalog import catalog
from divergent.app.services.money.pricing import micros
from divergent.app.services.runs.checks import parse_check
from divergent.app.services.runs.interactive import (
    BATCH,
    DEFAULT_SHELL,
    NOTEBOOK,
    NOTEBOOK_COMMAND,
    SHELL,
    TERM,
    check_interactive,
)
from divergent.app.services.runs.telemetry import parse_layout
from divergent.app.services.runs.transfers import PROJECT as TRANSFER_PROJECT
from divergent.app.services.runs.transfers import S3Location, Transfer, parse_mount, run_fields
from divergent.app.services.site.slurm_access import slurm_site
from divergent.slurm.jobspec import GpuType, InvalidJobSpec, check_env_name
from divergent.terms import DEFAULT_IMAGE, IMAGE_REF, RUN_NAME

CODE_REF = re.compile(r"^([a-z0-9_-][a-z0-9._-]{0,62})/code/([0-9a-f]{8,64})$")


MAX_TELEMETRY_BYTES = 64 * 1024


# Each mount is a job submitted with the run's: a bound on what one request
# (or one schedule's firing, in the reconciler) submits.
MAX_MOUNTS = 8


# Sweeps and their runs are named sweep-<id>[-<index>] (app/services/runs/sweeps.py).
SWEEP_PREFIX = "sweep-"


@dataclass
class RunRequest:
    project: str
    command: str
    gpu: str = "h100"
    gpus: int = 1
    cpus: int | None = None
    memory_gib: int | None = None
    max_spend_micros: int | None = None
    name: str | None = None
    image: str = DEFAULT_IMAGE
    env: dict[str, str] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    telemetry: str | None = None
    code_ref: str | None = None
    secrets: list[str] = field(default_factory=list)
    # Set by the server alone, never from a request: code of its own (a
    # transfer's program), the volumes to make (None: those the command
    # names) and jobs that must end well before this one starts.
    tool_dir: str | None = None
    volumes: list[str] | None = None
    after_jobs: list[str] = field(default_factory=list)
    # Buckets copied into volumes before the run starts (--mount), and the
    # names of the transfer runs that copy them.
    mounts: list[tuple[S3Location, str]] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)
    # "batch", or an interactive "shell" or "notebook" (div shell, div notebook).
    kind: str = BATCH
    # The site's idle policy leaves it alone (div run --allow-idle).
    allow_idle: bool = False


def _int(body: dict, key: str, default):
    value = body.get(key, default)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise Invalid(f"{key} must be a whole number")
    return value


def _str(body: dict, key: str, default=None) -> str | None:
    value = body.get(key, default)
    if value is not None and not isinstance(value, str):
        raise Invalid(f"{key} must be a string")
    return value


def _bool(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if value is not None and not isinstance(value, bool):
        raise Invalid(f"{key} must be true or false")
    return bool(value)


def _str_or(body: dict, key: str, default: str) -> str:
    """A string that has a default: null (as the API's description allows) means it."""
    value = _str(body, key)
    return default if value is None else value


def dollars(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        amount = micros(text.removeprefix("$"))
    except Invalid:
        raise Invalid(f"max_spend {text!r} is not an amount in dollars") from None
    if amount <= 0 or amount % 10_000:
        raise Invalid("max_spend must be more than $0, in whole cents")
    return amount


def parse_request(body: object) -> RunRequest:
    """The server's own check of everything `div run` checked already."""
    if not isinstance(body, dict):
        raise Invalid("send the run as a JSON object")
    env, checks = body.get("env") or {}, body.get("checks") or []
    secrets, mounts = body.get("secrets") or [], body.get("mounts") or []
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise Invalid("env must map names to string values")
    for value, what in ((checks, "checks"), (secrets, "secrets"), (mounts, "mounts")):
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise Invalid(f"{what} must be a list of strings")
    req = RunRequest(
        project=_str(body, "project") or "", command=_str(body, "command") or "",
        gpu=_str_or(body, "gpu", "h100"), gpus=_int(body, "gpus", 1),
        cpus=_int(body, "cpu", None), memory_gib=_int(body, "memory", None),
        max_spend_micros=dollars(_str(body, "max_spend")), name=_str(body, "name"),
        image=_str_or(body, "image", DEFAULT_IMAGE), env=env, checks=checks,
        telemetry=_str(body, "telemetry"), code_ref=_str(body, "code"), secrets=secrets,
        mounts=[parse_mount(mount) for mount in mounts], kind=_str_or(body, "kind", BATCH),
        allow_idle=_bool(body, "allow_idle"))
    if req.kind == NOTEBOOK:
        req.command = NOTEBOOK_COMMAND
    elif req.kind == SHELL:
        req.command = req.command or DEFAULT_SHELL
        req.env = {"TERM": TERM, **req.env}
    _validate(req)
    return req


def _validate(req: RunRequest) -> None:
    for value, pattern, what in ((req.project, RUN_NAME, "project"),
                                 (req.image, IMAGE_REF, "image")):
        if not pattern.fullmatch(value):
            raise Invalid(f"invalid {what} {value!r}")
    if req.name is not None and not RUN_NAME.fullmatch(req.name):
        raise Invalid(f"invalid run name {req.name!r}: lowercase letters, digits and -, "
                      "1 to 63 characters")
    if req.name is not None and req.name.startswith(SWEEP_PREFIX):
        # A sweep's job is found by its name: no run's may be the same.
        raise Invalid(f"run names starting with {SWEEP_PREFIX} are a sweep's")
    if not req.command.strip() or "\0" in req.command:
        raise Invalid("the run needs a command")
    _validate_hardware(req, catalog())
    check_interactive(req.kind, req.gpu, req.gpus)
    if req.kind != BATCH and req.mounts:
        raise Invalid("an interactive run cannot --mount: copy the bucket with div storage import first")
    for key, value in req.env.items():
        try:
            check_env_name(key)
        except InvalidJobSpec as exc:
            raise Invalid(str(exc)) from None
        if "\0" in value:
            raise Invalid(f"{key}: values must not contain NUL bytes")
    for check in req.checks:
        parse_check(check)
    for name in req.secrets:
        check_secret_name(name)
        if name in req.env:
            raise Invalid(f"{name} is both an env variable and a secret")
    if len(set(req.secrets)) != len(req.secrets):
        raise Invalid("a secret is named twice")
    if req.telemetry is not None and len(req.telemetry.encode()) > MAX_TELEMETRY_BYTES:
        raise Invalid("telemetry.toml may be at most 64 KiB")
    _, bad_layout = parse_layout(req.telemetry)
    if bad_layout:
        raise Invalid(bad_layout)
    if req.code_ref is not None and not CODE_REF.fullmatch(req.code_ref):
        raise Invalid(f"invalid code reference {req.code_ref!r}")
    volumes = [volume for _, volume in req.mounts]
    if len(volumes) > MAX_MOUNTS:
        raise Invalid(f"at most {MAX_MOUNTS} mounts a run")
    if len(set(volumes)) != len(volumes):
        raise Invalid("two mounts name the same /mnt/NAME")


# More nodes than any run asks for: a bound on the numbers that reach sbatch.
MAX_NODES = 256


def _validate_hardware(req: RunRequest, types: dict[str, GpuType]) -> None:
    gpu = types.get(req.gpu)
    if gpu is None:
        raise Invalid(f"gpu must be one of {', '.join(types)}")
    per_node = gpu.per_node
    most = gpu.node_cores if gpu.is_cpu else per_node * MAX_NODES
    if not 1 <= req.gpus <= most or (not gpu.is_cpu and req.gpus > per_node
                                     and req.gpus % per_node):
        raise Invalid(f"gpus must be 1 to {per_node}, or whole nodes of {per_node} "
                      f"(at most {most})")
    nodes = gpu.nodes_for(req.gpus)
    if req.cpus is not None and not 1 <= req.cpus <= gpu.node_cores * nodes:
        raise Invalid(f"cpu must be 1 to {gpu.node_cores} cores a node")
    if req.memory_gib is not None and not 1 <= req.memory_gib <= gpu.node_gib * nodes:
        raise Invalid(f"memory must be 1 to {gpu.node_gib} GiB a node")


def request_notes(req: RunRequest) -> list[str]:
    """What the user should hear before the run starts although nothing is
    wrong with it: an image this site does not use."""
    if slurm_site().runtime == "none" and req.image != DEFAULT_IMAGE:
        return [f"this site runs commands without a container runtime: --image {req.image} "
                "is not used; the run gets the nodes' own software"]
    return []


def rerun_request(run: Run) -> RunRequest:
    """A new run of what `run` ran: the same code, command, image, hardware,
    env (a sweep member's values included), secrets, checks, telemetry,
    mounts and spend limit; a name of its own."""
    if run.project.name == TRANSFER_PROJECT and run.code_ref is None:
        raise Invalid(f"{run.name} is an S3 copy: start it again with div storage import or export")
    req = RunRequest(
        project=run.project.name, command=run.command, gpu=run.gpu_type, gpus=run.gpus,
        cpus=run.cpus, memory_gib=run.memory_gib, max_spend_micros=run.max_spend_micros,
        image=run.image, env={**(run.env or {}), **(run.sweep_values or {})},
        checks=[c["check"] for c in run.checks or []], telemetry=run.telemetry,
        code_ref=run.code_ref, secrets=list(run.secret_names or []),
        mounts=[parse_mount(f"{m['url']}:{m['path']}") for m in run.mounts or []],
        kind=run.kind, allow_idle=bool(run.allow_idle))
    _validate(req)
    return req


def transfer_request(org: Org, transfer: Transfer,
                     max_spend_micros: int | None = None) -> RunRequest:
    """An S3 transfer as a run of its own (app/services/runs/transfers.py)."""
    return RunRequest(**run_fields(org, transfer, catalog()), max_spend_micros=max_spend_micros)
