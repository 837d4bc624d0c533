"""Runs: create (validate, price, lay out volumes, render, submit), find,
list and stop, every query scoped by org; and a run as the API's JSON."""
from __future__ import annotations

import json
import os
import re
import secrets
import string
from dataclasses import dataclass, field

from flask import current_app
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import selectinload

from app.extensions import db
from app.models import Org, Project, Run, User, iso_utc
from app.services.checks import parse_check
from app.services.errors import Conflict, Invalid, NotFound, Refused, Unavailable
from app.services.pricing import PriceTable, load_prices, micros, minutes_for, usd_text
from app.services.run_text import waiting_text
from app.services.secrets import check_secret_name, seal, values_for_run, write_secrets_file
from app.services.slurm_access import ensure_org_account, slurm_client, slurm_site
from app.services.usage import minutes_left
from app.services.code import stored_tree
from app.services.volumes import (data_path, ensure_volume, org_dir, trees_dir,
                                  volumes_in_command)
from slurm.client import SlurmError, SubmitRefused
from slurm import jobspec
from slurm.jobspec import (DEFAULT_IMAGE, IMAGE_REF, RUN_NAME, InvalidJobSpec, JobSpec,
                           check_env_name)
from slurm.script import render_batch_script

GPU_TYPES = (*jobspec.GPU_TYPES, jobspec.CPU)
MAX_CORES_PER_NODE, MAX_GIB_PER_NODE = 64, 336
LIVE = ("queued", "running")
CODE_REF = re.compile(r"^([a-z0-9_-][a-z0-9._-]{0,62})/code/([0-9a-f]{8,64})$")
MAX_TELEMETRY_BYTES = 64 * 1024


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


def _dollars(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        amount = micros(text.removeprefix("$"))
    except ValueError:
        raise Invalid(f"max_spend {text!r} is not an amount in dollars") from None
    if amount <= 0 or amount % 10_000:
        raise Invalid("max_spend must be more than $0, in whole cents")
    return amount


def parse_request(body: object) -> RunRequest:
    """The server's own check of everything `div run` checked already."""
    if not isinstance(body, dict):
        raise Invalid("send the run as a JSON object")
    env, checks = body.get("env") or {}, body.get("checks") or []
    secrets = body.get("secrets") or []
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise Invalid("env must map names to string values")
    for value, what in ((checks, "checks"), (secrets, "secrets")):
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise Invalid(f"{what} must be a list of strings")
    req = RunRequest(
        project=_str(body, "project") or "", command=_str(body, "command") or "",
        gpu=_str(body, "gpu", "h100"), gpus=_int(body, "gpus", 1),
        cpus=_int(body, "cpu", None), memory_gib=_int(body, "memory", None),
        max_spend_micros=_dollars(_str(body, "max_spend")), name=_str(body, "name"),
        image=_str(body, "image", DEFAULT_IMAGE), env=env, checks=checks,
        telemetry=_str(body, "telemetry"), code_ref=_str(body, "code"), secrets=secrets)
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
    if not req.command.strip() or "\0" in req.command:
        raise Invalid("the run needs a command")
    if req.gpu not in GPU_TYPES:
        raise Invalid(f"gpu must be one of {', '.join(GPU_TYPES)}")
    per_node = slurm_site().gpus_per_node
    if req.gpus < 1 or (req.gpu != "cpu" and req.gpus > per_node and req.gpus % per_node):
        raise Invalid(f"gpus must be 1 to {per_node}, or whole nodes of {per_node}")
    nodes = 1 if req.gpu == "cpu" else -(-req.gpus // per_node)
    if req.cpus is not None and not 1 <= req.cpus <= MAX_CORES_PER_NODE * nodes:
        raise Invalid(f"cpu must be 1 to {MAX_CORES_PER_NODE} cores a node")
    if req.memory_gib is not None and not 1 <= req.memory_gib <= MAX_GIB_PER_NODE * nodes:
        raise Invalid(f"memory must be 1 to {MAX_GIB_PER_NODE} GiB a node")
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
    if req.code_ref is not None and not CODE_REF.fullmatch(req.code_ref):
        raise Invalid(f"invalid code reference {req.code_ref!r}")


def current_prices() -> PriceTable:
    try:
        return load_prices(current_app.config["DIV_PRICES_FILE"])
    except (ValueError, OSError) as exc:
        raise Unavailable(f"the site's price table is broken: {exc}") from None


def _time_limit(org: Org, max_spend: int | None, rate: int) -> tuple[int | None, str | None]:
    """Slurm's --time: what the spend limit buys, capped by what the org's
    monthly limit has left (DESIGN.md "Money"), and which of the two set it."""
    spend_minutes = None
    if max_spend is not None:
        spend_minutes = minutes_for(max_spend, rate)
        if spend_minutes < 1:
            raise Invalid(f"a max spend of {usd_text(max_spend)} buys less than "
                          f"a minute at ${usd_text(rate)}/h")
    org_minutes = minutes_left(org, rate)
    if org_minutes is not None and (spend_minutes is None or org_minutes < spend_minutes):
        return org_minutes, "org"
    return spend_minutes, "spend" if spend_minutes is not None else None


def run_dir(org: Org, name: str) -> str:
    return data_path("runs", org.name, name)


def _project(org: Org, name: str) -> Project:
    project = db.session.execute(
        db.select(Project).filter_by(org_id=org.id, name=name)).scalar_one_or_none()
    if project is None:
        project = Project(org_id=org.id, name=name)
        with db.session.begin_nested():
            db.session.add(project)
    return project


def _generated_name(length: int) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "run-" + "".join(secrets.choice(alphabet) for _ in range(length))


def _insert_with_name(run: Run, wanted: str | None) -> None:
    """Unique in the org: run- and four base-36 characters, longer on collision."""
    for attempt in range(8):
        run.name = wanted or _generated_name(4 + attempt // 2)
        try:
            with db.session.begin_nested():
                db.session.add(run)
            return
        except IntegrityError:
            if wanted:
                raise Conflict(f"a run named {wanted} already exists") from None
    raise Conflict("could not find a free run name; try again")


def create_run(user: User, req: RunRequest) -> Run:
    org = user.org
    prices = current_prices()
    units = req.gpus
    cpus = req.cpus or units
    memory = req.memory_gib or units * prices.included_gib(req.gpu)
    rate = prices.rate(req.gpu, units, cpus, memory)
    minutes, limited_by = _time_limit(org, req.max_spend_micros, rate)
    code_dir = None
    if req.code_ref:
        code_dir = stored_tree(org, req.code_ref)
        if code_dir is None:
            raise NotFound(f"no uploaded code at {req.code_ref}")
    for volume in volumes_in_command(req.command):
        ensure_volume(org, volume)
    secret_values = values_for_run(org, req.secrets)

    run = Run(org_id=org.id, project_id=_project(org, req.project).id, user_id=user.id,
              status="queued", gpu_type=req.gpu, gpus=units, cpus=cpus, memory_gib=memory,
              image=req.image, command=req.command, env=req.env, code_ref=req.code_ref,
              telemetry=req.telemetry, rate_micros_per_hour=rate,
              max_spend_micros=req.max_spend_micros, time_limit_minutes=minutes,
              time_limit_by=limited_by, secret_names=req.secrets,
              secrets_sealed=seal(json.dumps(secret_values)) if secret_values else None,
              checks=[{"check": c, "verdict": None, "value": None} for c in req.checks])
    _insert_with_name(run, req.name)
    state = run_dir(org, run.name)
    os.makedirs(state, exist_ok=True)
    try:
        spec = JobSpec(run_name=run.name, account=org.slurm_account, gpu_type=req.gpu,
                       gpus=units, cpus=cpus, memory_gib=memory, command=req.command,
                       state_dir=state, volumes_dir=org_dir(org), project=req.project,
                       image=req.image, time_limit_minutes=minutes, env=req.env,
                       code_dir=code_dir, trees_dir=trees_dir(org))
        script = render_batch_script(spec, slurm_site())
    except InvalidJobSpec as exc:
        db.session.rollback()
        raise Invalid(str(exc)) from None
    with open(os.path.join(state, "batch.sh"), "w") as f:
        f.write(script)   # for admins: what was submitted (no secret is in it)
    write_secrets_file(state, secret_values)
    run.slurm_job_id = _submit(org, script)
    db.session.commit()
    return run


def _submit(org: Org, script: str) -> str:
    try:
        ensure_org_account(org)
        return slurm_client().submit(script)
    except SubmitRefused as exc:
        db.session.rollback()
        raise Refused(str(exc)) from None
    except SlurmError as exc:
        db.session.rollback()
        raise Unavailable(f"Slurm did not take the run: {exc}; nothing was started, "
                          "try again") from None


def find_run(org: Org, name: str) -> Run:
    run = db.session.execute(
        db.select(Run).filter_by(org_id=org.id, name=name)).scalar_one_or_none()
    if run is None:
        raise NotFound(f"no run named {name!r}")
    return run


def list_runs(org: Org, limit: int = 20, project: str | None = None) -> list[Run]:
    query = db.select(Run).filter_by(org_id=org.id).options(selectinload(Run.project))
    if project:
        query = query.join(Project).filter(Project.name == project)
    query = query.order_by(Run.created_at.desc(), Run.id.desc()).limit(max(1, min(limit, 500)))
    return list(db.session.execute(query).scalars())


def stop_run(run: Run) -> bool:
    """Asks Slurm to cancel; the reconciler settles the status. False when the
    run had already ended."""
    if run.status not in LIVE:
        return False
    try:
        slurm_client().cancel(run.slurm_job_id)
    except SlurmError as exc:
        raise Unavailable(f"Slurm did not cancel the run: {exc}") from None
    return True


def run_json(run: Run) -> dict:
    """The run as the API and `div run --json` show it (README: "A run as JSON")."""
    return {
        "name": run.name, "project": run.project.name, "status": run.status,
        "exit_code": run.exit_code, "waiting": waiting_text(run),
        "gpu": run.gpu_type, "gpus": run.gpus, "cpu": run.cpus, "memory": run.memory_gib,
        "image": run.image, "command": run.command, "env": run.env,
        "secrets": run.secret_names or [], "code": run.code_ref,
        "created_at": iso_utc(run.created_at), "started_at": iso_utc(run.started_at),
        "ended_at": iso_utc(run.ended_at), "duration": run.elapsed_seconds,
        "rate": usd_text(run.rate_micros_per_hour), "cost": usd_text(run.cost_micros),
        "max_spend": usd_text(run.max_spend_micros) if run.max_spend_micros else None,
        "time_limit_minutes": run.time_limit_minutes,
        "metrics": run.metrics or {}, "metrics_points": run.metrics_points or 0,
        "metrics_malformed": run.metrics_malformed or 0, "checks": run.checks or [],
        "slurm_job_id": run.slurm_job_id,
    }


def page_of_runs(org: Org, project: str | None = None, status: str | None = None,
                 gpu: str | None = None, before: int | None = None,
                 size: int = 50) -> tuple[list[Run], int | None]:
    """An org's runs newest first, filtered, one page after the run `before`
    (keyset pagination: as fast on page 2,000 as on page 1). Returns the runs
    and the cursor of the next page, if there is one."""
    query = db.select(Run).filter_by(org_id=org.id).options(selectinload(Run.project))
    if project:
        query = query.join(Project).filter(Project.name == project)
    if status:
        query = query.filter(Run.status == status)
    if gpu:
        query = query.filter(Run.gpu_type == gpu)
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
