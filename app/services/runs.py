"""Runs: create (validate, price, lay out volumes, render, submit), find,
list and stop, every query scoped by org; and a run as the API's JSON."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta

import sqlalchemy as sa
from flask import current_app
from sqlalchemy.orm import selectinload

from app.extensions import db
from app.models import LIVE, RUN_STATUSES, Org, Project, Run, User, iso_utc, utcnow
from app.services.catalog import catalog
from app.services.checks import parse_check
from app.services.code import stored_tree
from app.services.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    ServiceError,
    TooManySubmits,
    Unavailable,
)
from app.services.pricing import current_prices, format_usd, micros, minutes_for, usd_text
from app.services.quota import check_room
from app.services.refusals import refused_by_slurm
from app.services.rows import add_unique
from app.services.run_text import waiting_text
from app.services.secrets import (
    check_secret_name,
    remove_secrets_file,
    seal,
    values_for_run,
    write_secrets_file,
)
from app.services.slurm_access import (
    ensure_org_account,
    partition_max_minutes,
    slurm_client,
    slurm_site,
)
from app.services.submissions import (
    adopt_job,
    end_dropped_member,
    record_job,
    settle_without_job,
)
from app.services.telemetry import parse_layout
from app.services.transfers import PROJECT as TRANSFER_PROJECT
from app.services.transfers import S3Location, Transfer, parse_mount, run_fields
from app.services.usage import hold_spend, minutes_left
from app.services.volumes import ensure_volume, org_dir, run_dir, trees_dir, volumes_in_command
from divergent.terms import DEFAULT_IMAGE, IMAGE_REF, RUN_NAME
from slurm.client import SlurmError, SubmitNotReceived, SubmitRefused
from slurm.jobspec import ArrayMember, GpuType, InvalidJobSpec, JobSpec, check_env_name
from slurm.script import render_batch_script

REQUEST_KEY = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
CODE_REF = re.compile(r"^([a-z0-9_-][a-z0-9._-]{0,62})/code/([0-9a-f]{8,64})$")
MAX_TELEMETRY_BYTES = 64 * 1024
# Each mount is a job submitted with the run's: a bound on what one request
# (or one schedule's firing, in the reconciler) submits.
MAX_MOUNTS = 8
# Sweeps and their runs are named sweep-<id>[-<index>] (app/services/sweeps.py).
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
        gpu=_str(body, "gpu", "h100"), gpus=_int(body, "gpus", 1),
        cpus=_int(body, "cpu", None), memory_gib=_int(body, "memory", None),
        max_spend_micros=dollars(_str(body, "max_spend")), name=_str(body, "name"),
        image=_str(body, "image", DEFAULT_IMAGE), env=env, checks=checks,
        telemetry=_str(body, "telemetry"), code_ref=_str(body, "code"), secrets=secrets,
        mounts=[parse_mount(mount) for mount in mounts])
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


def _time_limit(org: Org, max_spend: int | None, rate: int,
                max_time: int | None) -> tuple[int | None, str | None]:
    """Slurm's --time: what the spend limit buys, capped by what the org's
    monthly limit has left (DESIGN.md "Money") and by the partition's
    MaxTime, and which of them set it ("spend", "org", "maxtime")."""
    minutes, by = _money_limit(org, max_spend, rate)
    if max_time is not None and (minutes is None or max_time < minutes):
        return max_time, "maxtime"
    return minutes, by


def _money_limit(org: Org, max_spend: int | None, rate: int) -> tuple[int | None, str | None]:
    spend_minutes = None
    if max_spend is not None:
        spend_minutes = minutes_for(max_spend, rate)
        if spend_minutes < 1:
            least_cents = -(-rate // (60 * 10_000))    # a minute, rounded up to the cent
            raise Invalid(f"a max spend of ${usd_text(max_spend)} buys less than a minute at "
                          f"${usd_text(rate)}/h: the least is {format_usd(least_cents * 10_000)}")
    org_minutes = minutes_left(org, rate)
    if org_minutes is not None and (spend_minutes is None or org_minutes < spend_minutes):
        return org_minutes, "org"
    return spend_minutes, "spend" if spend_minutes is not None else None


def _project(org: Org, name: str) -> Project:
    query = db.select(Project).filter_by(org_id=org.id, name=name)
    project = db.session.execute(query).scalar_one_or_none()
    if project is None:
        add_unique(Project(org_id=org.id, name=name))   # or made now by another request
        project = db.session.execute(query).scalar_one()
    return project


def free_name(prefix: str, taken: Callable[[str], bool]) -> str:
    """A generated name that `taken` finds free: the prefix and four base-36
    characters, longer after collisions. Asked under the org's hold
    (sized_under_lock), which every insert of a run or sweep takes, so the
    name is still free at the commit: no insert fails on a name, rolls
    back (which ends the hold) and is tried again unheld."""
    alphabet = string.ascii_lowercase + string.digits
    for attempt in range(8):
        name = prefix + "".join(secrets.choice(alphabet) for _ in range(4 + attempt // 2))
        if not taken(name):
            return name
    raise Conflict("could not find a free name; try again")


def _run_named(org_id: int, name: str) -> bool:
    return db.session.execute(
        db.select(Run.id).filter_by(org_id=org_id, name=name)).first() is not None


def insert_run(run: Run, wanted: str | None) -> Run | None:
    """Unique in the org, committed: the run is on record before its job
    exists. Returns the run a request with the same key made meanwhile, if
    one did (a retry that came while the first request was still at work)."""
    run.name = wanted or free_name("run-", lambda name: _run_named(run.org_id, name))
    if add_unique(run):
        return None
    made = run_for_request_key(run.org_id, run.request_key)
    if made is not None:
        return made
    raise Conflict(f"a run named {run.name} already exists")


@dataclass
class Sizing:
    """What a request comes to: its hardware, its price and its --time."""
    cpus: int
    memory_gib: int
    rate: int
    minutes: int | None
    limited_by: str | None
    # The partition's MaxTime, as Slurm said it when the run was sized.
    max_time: int | None = None


def size_run(org: Org, req: RunRequest) -> Sizing:
    gpu = catalog()[req.gpu]
    cpus = req.cpus or req.gpus * gpu.cores
    memory = req.memory_gib or req.gpus * gpu.memory_gib
    rate = current_prices().rate(gpu, req.gpus, cpus, memory)
    max_time = partition_max_minutes(gpu.partition)
    return Sizing(cpus, memory, rate, *_time_limit(org, req.max_spend_micros, rate, max_time),
                  max_time=max_time)


def sized_under_lock(org: Org, req: RunRequest, sizing: Sizing) -> Sizing:
    """The run's --time again, with the org's row locked until the run is
    on record (usage.hold_spend): what live runs may still spend is
    reserved against the org's limit, and nothing asks Slurm meanwhile."""
    hold_spend(org)
    minutes, by = _time_limit(org, req.max_spend_micros, sizing.rate, sizing.max_time)
    return replace(sizing, minutes=minutes, limited_by=by)


def job_script(org: Org, name: str, req: RunRequest, sizing: Sizing,
               code_dir: str | None, state_dir: str | None = None,
               array: tuple[ArrayMember, ...] = ()) -> str:
    """The batch script of a run, or (with `array`) of a sweep's runs."""
    try:
        return render_batch_script(JobSpec(
            run_name=name, account=org.slurm_account, gpu_type=req.gpu, gpus=req.gpus,
            cpus=sizing.cpus, memory_gib=sizing.memory_gib, command=req.command,
            state_dir=state_dir or run_dir(org, name), volumes_dir=org_dir(org),
            project=req.project, array=array,
            image=req.image, time_limit_minutes=sizing.minutes, env=req.env,
            code_dir=code_dir, trees_dir=trees_dir(org), has_secrets=bool(req.secrets),
            after_jobs=tuple(req.after_jobs)),
            slurm_site())
    except InvalidJobSpec as exc:
        raise Invalid(str(exc)) from None


def request_notes(req: RunRequest) -> list[str]:
    """What the user should hear before the run starts although nothing is
    wrong with it: an image this site does not use."""
    if slurm_site().runtime == "none" and req.image != DEFAULT_IMAGE:
        return [f"this site runs commands without a container runtime: --image {req.image} "
                "is not used; the run gets the nodes' own software"]
    return []


def image_used() -> bool | None:
    """Whether this site runs a run in its image (the run's JSON says so);
    None while the site's settings are broken: showing a run never
    depends on them."""
    try:
        return slurm_site().runtime != "none"
    except ServiceError:
        return None


def check_run(user: User, req: RunRequest) -> None:
    """What creating the run would refuse, asked before `div run` uploads
    anything: its secrets exist, its name is free, its spend buys a minute,
    and Slurm would take the job (sbatch --test-only: the GPUs fit a
    partition, the account may use it)."""
    org = user.org
    sizing = size_run(org, req)
    values_for_run(org, req.secrets)
    for location, volume in req.mounts:
        run_fields(org, Transfer("import", volume, "", location), catalog())
    if req.name is not None and db.session.execute(db.select(Run.id).filter_by(
            org_id=org.id, name=req.name)).first() is not None:
        raise Conflict(f"a run named {req.name} already exists")
    script = job_script(org, req.name or "run-check", req, sizing, None)
    try:
        ensure_org_account(org)
        slurm_client().test_submit(script)
    except SubmitRefused as exc:
        raise refused_by_slurm(exc, req.gpu, req.gpus) from None
    except SlurmError as exc:
        raise not_taken(exc) from None


def run_for_request_key(org_id: int, key: str | None) -> Run | None:
    """The run an earlier POST /runs with this Idempotency-Key made, if any."""
    if key is None:
        return None
    if not REQUEST_KEY.fullmatch(key):
        raise Invalid("Idempotency-Key must be 16 to 64 letters, digits, - or _")
    return db.session.execute(
        db.select(Run).filter_by(org_id=org_id, request_key=key)).scalar_one_or_none()


def transfer_request(org: Org, transfer: Transfer,
                     max_spend_micros: int | None = None) -> RunRequest:
    """An S3 transfer as a run of its own (app/services/transfers.py)."""
    return RunRequest(**run_fields(org, transfer, catalog()), max_spend_micros=max_spend_micros)


def start_transfer(user: User, transfer: Transfer, request_key: str | None = None,
                   max_spend_micros: int | None = None) -> Run:
    return create_run(user, transfer_request(user.org, transfer, max_spend_micros), request_key)


def _copy_key(request_key: str | None, index: int) -> str | None:
    """The Idempotency-Key of a run's index-th copy: a retry of the run's
    request gets the copies the first one made, never a second set."""
    if request_key is None:
        return None
    return hashlib.sha256(f"{request_key}/mount/{index}".encode()).hexdigest()[:32]


def _create_with_mounts(user: User, req: RunRequest, request_key: str | None) -> Run:
    """Each mount's copy first, as a transfer run (with the run's spend
    limit, each); then the run, whose job waits for theirs (afterok: a copy
    that fails ends it unstarted). A run that is not made takes its copies
    with it."""
    copies: list[Run] = []
    with _stopped_on_error(copies):
        for index, (location, volume) in enumerate(req.mounts):
            key = _copy_key(request_key, index)
            copies.append(run_for_request_key(user.org_id, key) or start_transfer(
                user, Transfer("import", volume, "", location), key, req.max_spend_micros))
    waiting = [copy.name for copy in copies if copy.slurm_job_id is None]
    if waiting:     # a retry's copy whose submit is still being settled: it goes on
        raise Unavailable(f"the copy {waiting[0]} has no Slurm job yet; try again in a minute")
    with _stopped_on_error(copies):
        return create_run(user, replace(req, copies=[copy.name for copy in copies], after_jobs=[
            copy.slurm_job_id for copy in copies]), request_key)


@contextlib.contextmanager
def _stopped_on_error(copies: list[Run]):
    """Stops the copies when the run they were for is not made. A run whose
    submit Slurm did not answer is kept (SubmitUnsure), and waits for them."""
    try:
        yield
    except SubmitUnsure:
        raise
    except Exception:
        for copy in copies:
            with contextlib.suppress(ServiceError):
                stop_run(copy)
        raise


def check_may_start(user: User, adding: int = 1) -> None:
    """The user may start runs, and their org has room for `adding` more
    live ones (DIV_MAX_LIVE_RUNS_PER_ORG)."""
    if user.removed_at is not None or user.org.removed_at is not None:
        raise Forbidden(f"{user.username} was removed: no new runs")
    check_room(user.org)     # a run or a copy writes to the org's volumes
    most = current_app.config["DIV_MAX_LIVE_RUNS_PER_ORG"]
    live = db.session.execute(db.select(sa.func.count(Run.id)).where(
        Run.org_id == user.org_id, Run.status.in_(LIVE))).scalar_one()
    if live + adding > most:
        raise Conflict(f"{user.org.name} has {live} runs queued or running; at most {most} "
                      f"at once: {adding} more do not fit")
    _check_submit_window(user.org, adding)


def _check_submit_window(org: Org, adding: int) -> None:
    """Slurm keeps a finished job's record for MinJobAge (300 s), counted in
    the cluster's one job table (MaxJobCount) for every org: an org may start
    at most DIV_MAX_SUBMITS_PER_WINDOW runs in that time, however quickly
    they end."""
    window = current_app.config["DIV_SUBMIT_WINDOW_SECONDS"]
    most = current_app.config["DIV_MAX_SUBMITS_PER_WINDOW"]
    since = utcnow() - timedelta(seconds=window)
    started = db.session.execute(db.select(sa.func.count(Run.id)).where(
        Run.org_id == org.id, Run.created_at >= since)).scalar_one()
    if started + adding > most:
        raise TooManySubmits(f"{org.name} started {started} runs in the last {window // 60:g} "
                             f"minutes, at most {most}: Slurm keeps each job for {window:g} s "
                             "after it ends; try again in a few minutes")


def prepare(org: Org, req: RunRequest) -> tuple[str | None, dict[str, str], int]:
    """What a run's job needs before it is on record: its code's folder, its
    volumes made, its secrets' values, its project and the org's account."""
    code_dir = req.tool_dir
    if req.code_ref:
        code_dir = stored_tree(org, req.code_ref)
        if code_dir is None:
            raise NotFound(f"no uploaded code at {req.code_ref}")
    for volume in volumes_in_command(req.command) if req.volumes is None else req.volumes:
        ensure_volume(org, volume)
    secret_values = values_for_run(org, req.secrets)
    project_id = _project(org, req.project).id
    ensure_org_account(org)   # before the run is on record: its grace is for sbatch alone
    return code_dir, secret_values, project_id


def new_run(user: User, req: RunRequest, sizing: Sizing, project_id: int,
            secret_values: dict[str, str], request_key: str | None = None, **fields) -> Run:
    """The run's row, queued and not yet added."""
    return Run(org_id=user.org_id, project_id=project_id, user_id=user.id,
               status="queued", gpu_type=req.gpu, gpus=req.gpus, cpus=sizing.cpus,
               memory_gib=sizing.memory_gib, image=req.image, command=req.command,
               env=req.env, code_ref=req.code_ref, telemetry=req.telemetry,
               rate_micros_per_hour=sizing.rate, max_spend_micros=req.max_spend_micros,
               time_limit_minutes=sizing.minutes, time_limit_by=sizing.limited_by,
               secret_names=req.secrets, request_key=request_key,
               secrets_sealed=seal(json.dumps(secret_values)) if secret_values else None,
               checks=[{"check": c, "verdict": None, "value": None} for c in req.checks],
               mounts=[], **fields)


def create_run(user: User, req: RunRequest, request_key: str | None = None,
               schedule_name: str | None = None) -> Run:
    """The run is committed (with the job name it will have) before sbatch,
    and its job id after: a server that dies in between leaves a run the
    reconciler adopts by job name, or settles as failed when Slurm never got
    it (app/services/submissions.py). The caller has looked for a run of
    the same `request_key` first (run_for_request_key)."""
    org = user.org
    check_may_start(user)
    if req.mounts and not req.copies:
        return _create_with_mounts(user, req, request_key)
    sizing = size_run(org, req)
    code_dir, secret_values, project_id = prepare(org, req)
    sizing = sized_under_lock(org, req, sizing)
    run = new_run(user, req, sizing, project_id, secret_values, request_key,
                  schedule_name=schedule_name)
    run.mounts = [{"url": location.url, "path": f"/mnt/{volume}", "copy": copy}
                  for (location, volume), copy in zip(req.mounts, req.copies, strict=True)]
    made = insert_run(run, req.name)
    if made is not None:
        return made
    state = run_dir(org, run.name)
    try:
        script = job_script(org, run.name, req, sizing, code_dir)
    except Invalid:
        _forget(run, state)
        raise
    os.makedirs(state, exist_ok=True)
    with open(os.path.join(state, "batch.sh"), "w") as f:
        f.write(script)   # for admins: what was submitted (no secret is in it)
    write_secrets_file(state, secret_values)
    _record_job(run, _submit(run, org, state, script))
    return run


def _forget(run: Run, state: str) -> None:
    """A run Slurm certainly never got: not kept, so that nothing shows a
    run that never was and its name is free for the corrected retry."""
    db.session.delete(run)
    db.session.commit()
    remove_secrets_file(state)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(state, "batch.sh"))
    with contextlib.suppress(OSError):
        os.rmdir(state)


def _submit(run: Run, org: Org, state: str, script: str) -> str:
    try:
        return slurm_client().submit(script)
    except SubmitRefused as exc:
        _forget(run, state)
        raise refused_by_slurm(exc, run.gpu_type, run.gpus) from None
    except SubmitNotReceived as exc:
        _forget(run, state)
        raise not_taken(exc) from None
    except SlurmError as exc:
        # sbatch may have reached the controller: the run stays, and the
        # reconciler adopts its job or settles it as never submitted.
        raise SubmitUnsure(f"Slurm did not say whether it took {run.name}: {exc}; it is "
                          f"not lost: within minutes it runs or ends failed; see `div logs "
                          f"{run.name} -f` before you start it again") from None


class SubmitUnsure(Unavailable):
    """Slurm did not say whether it took the run, which is kept: the
    reconciler adopts its job or settles it."""


def not_taken(exc: SlurmError) -> Unavailable:
    return Unavailable(f"Slurm did not take the run: {exc}; nothing was started, try again")


def _record_job(run: Run, job_id: str) -> None:
    """The job id, unless the run was settled meanwhile (stopped while
    sbatch ran, or given up by the reconciler): then the job goes."""
    if not record_job(run, job_id):
        raise Conflict(f"{run.name} was {run.status} before Slurm took it; its job "
                       f"{job_id} is canceled")


def find_run(org: Org, name: str) -> Run:
    run = db.session.execute(
        db.select(Run).filter_by(org_id=org.id, name=name)).scalar_one_or_none()
    if run is None:
        raise NotFound(f"no run named {name!r}")
    return run


def list_runs(org: Org, limit: int = 20, project: str | None = None,
              status: str | None = None, username: str | None = None) -> list[Run]:
    """An org's runs newest first: of one project, in one status, by one user."""
    query = runs_query(org, project=project, status=status, username=username)
    query = query.order_by(Run.created_at.desc(), Run.id.desc()).limit(max(1, min(limit, 500)))
    return list(db.session.execute(query).scalars())


def runs_query(org: Org, project: str | None = None, status: str | None = None,
               username: str | None = None, gpu: str | None = None,
               name: str | None = None):
    """The select of an org's runs with these filters: one project, status,
    user (by username) or GPU type, and a name containing `name`."""
    if status and status not in RUN_STATUSES:
        raise Invalid(f"no status {status!r}; one of {', '.join(RUN_STATUSES)}")
    query = db.select(Run).filter_by(org_id=org.id).options(
        selectinload(Run.project), selectinload(Run.user))
    if project:
        query = query.join(Project).filter(Project.name == project)
    if status:
        query = query.filter(Run.status == status)
    if username:
        user_id = db.session.execute(db.select(User.id).filter_by(
            org_id=org.id, username=username)).scalar_one_or_none()
        if user_id is None:
            raise NotFound(f"no user named {username!r} in {org.name}")
        query = query.filter(Run.user_id == user_id)
    if gpu:
        query = query.filter(Run.gpu_type == gpu)
    if name:
        query = query.filter(Run.name.contains(name, autoescape=True))
    return query


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
        mounts=[parse_mount(f"{m['url']}:{m['path']}") for m in run.mounts or []])
    _validate(req)
    return req


def stop_run(run: Run) -> bool:
    """Asks Slurm to cancel; the reconciler settles the status. False when the
    run had already ended."""
    if run.status not in LIVE:
        return False
    try:
        # Without a job id yet: canceled now, and a submit still going then
        # cancels the job it makes; unless it recorded one meanwhile.
        if run.slurm_job_id is None and not adopt_job(run):
            if settle_without_job(run, "canceled"):
                return True
            if run.slurm_job_id is None:   # reread: the reconciler ended it meanwhile
                return False
        slurm_client().cancel(run.slurm_job_id)
        if run.sweep_id and run.started_at is None and \
                run.slurm_job_id not in slurm_client().query([run.slurm_job_id]):
            end_dropped_member(run, "canceled")    # Slurm dropped the waiting member
    except SlurmError as exc:
        raise Unavailable(f"Slurm did not cancel the run: {exc}") from None
    db.session.commit()
    if run.started_at is None:
        for copy in _live_copies(run):    # no run waits for them now
            with contextlib.suppress(ServiceError):
                stop_run(copy)
    return True


def _live_copies(run: Run) -> list[Run]:
    names = [mount["copy"] for mount in run.mounts or []]
    if not names:
        return []
    return list(db.session.execute(db.select(Run).where(
        Run.org_id == run.org_id, Run.name.in_(names), Run.status.in_(LIVE))).scalars())


def run_json(run: Run) -> dict:
    """The run as the API and `div run --json` show it (README: "A run as JSON")."""
    return {
        "name": run.name, "project": run.project.name, "user": run.user.username,
        "status": run.status,
        "exit_code": run.exit_code, "waiting": waiting_text(run),
        "gpu": run.gpu_type, "gpus": run.gpus, "cpu": run.cpus, "memory": run.memory_gib,
        "image": run.image, "image_used": image_used(), "command": run.command,
        "env": run.env,
        "secrets": run.secret_names or [], "code": run.code_ref,
        "created_at": iso_utc(run.created_at), "started_at": iso_utc(run.started_at),
        "ended_at": iso_utc(run.ended_at), "duration": run.elapsed_seconds,
        "rate": usd_text(run.rate_micros_per_hour), "cost": usd_text(run.cost_micros),
        "max_spend": usd_text(run.max_spend_micros) if run.max_spend_micros else None,
        "time_limit_minutes": run.time_limit_minutes,
        "metrics": run.metrics or {}, "metrics_points": run.metrics_points or 0,
        "metrics_malformed": run.metrics_malformed or 0, "checks": run.checks or [],
        "slurm_job_id": run.slurm_job_id, "restarts": run.restarts or 0,
        "mounts": run.mounts or [],
        "sweep": run.sweep.name if run.sweep_id else None,
        "sweep_index": run.sweep_index, "sweep_values": run.sweep_values,
        "schedule": run.schedule_name,
    }


def page_of_runs(org: Org, before: int | None = None, size: int = 50,
                 **filters: str | None) -> tuple[list[Run], int | None]:
    """An org's runs newest first, filtered (runs_query's filters), one page
    after the run `before` (keyset pagination: as fast on page 2,000 as on
    page 1). Returns the runs and the cursor of the next page, if there is
    one."""
    query = runs_query(org, **filters)
    if before is not None:
        cursor = db.session.execute(db.select(Run.created_at, Run.id).filter_by(
            org_id=org.id, id=before)).first()
        if cursor is not None:
            query = query.filter(sa.or_(Run.created_at < cursor.created_at,
                                        sa.and_(Run.created_at == cursor.created_at,
                                                Run.id < cursor.id)))
    rows = list(db.session.execute(
        query.order_by(Run.created_at.desc(), Run.id.desc()).limit(size + 1)).scalars())
    return rows[:size], rows[size - 1].id if len(rows) > size else None
