"""Creating a run: checked (before `div run` uploads anything), prepared
(code, volumes, secrets, the org's account), put on record, rendered and
submitted. A run with mounts has each bucket copied first, by a transfer
run of its own that its job waits for."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import replace
from datetime import timedelta
from typing import cast

import sqlalchemy as sa
from flask import current_app

from divergent.app.extensions import db
from divergent.app.models import LIVE, Org, Project, Run, User, utcnow
from divergent.app.services.accounts.secrets import (
    remove_secrets_file,
    seal,
    values_for_run,
    write_secrets_file,
)
from divergent.app.services.accounts.unix_users import ready_for_jobs
from divergent.app.services.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    ServiceError,
    TooManySubmits,
    Unavailable,
)
from divergent.app.services.files.code import stored_tree
from divergent.app.services.files.quota import check_room
from divergent.app.services.files.volumes import (
    ensure_volume,
    make_state_dir,
    org_dir,
    run_dir,
    trees_dir,
    volumes_in_command,
    write_state_file,
)
from divergent.app.services.money.catalog import catalog
from divergent.app.services.rows import add_unique
from divergent.app.services.runs.images import RunImage, run_image, write_registry_login
from divergent.app.services.runs.interactive import interactive_spec, new_token
from divergent.app.services.runs.names import insert_run, run_for_request_key
from divergent.app.services.runs.refusals import refused_by_slurm
from divergent.app.services.runs.request import RunRequest, transfer_request
from divergent.app.services.runs.sizing import Sizing, size_run, sized_under_lock
from divergent.app.services.runs.stop import stop_run
from divergent.app.services.runs.submissions import record_job
from divergent.app.services.runs.transfers import Transfer, run_fields
from divergent.app.services.site.settings import load_site
from divergent.app.services.site.slurm_access import slurm_client, slurm_site
from divergent.slurm.client import SlurmError, SubmitNotReceived, SubmitRefused
from divergent.slurm.jobspec import ArrayMember, InvalidJobSpec, JobSpec
from divergent.slurm.script import render_batch_script


def job_script(org: Org, name: str, req: RunRequest, sizing: Sizing,
               code_dir: str | None, image: RunImage | None, state_dir: str | None = None,
               array: tuple[ArrayMember, ...] = ()) -> str:
    """The batch script of a run, or (with `array`) of a sweep's runs,
    which have no shells beside them (one job, a token for each)."""
    interactive = None if array else interactive_spec(req.kind, name)
    try:
        return render_batch_script(JobSpec(
            run_name=name, account=org.slurm_account, gpu_type=req.gpu, gpus=req.gpus,
            cpus=sizing.cpus, memory_gib=sizing.memory_gib, command=req.command,
            state_dir=state_dir or run_dir(org, name), volumes_dir=org_dir(org),
            project=req.project, array=array,
            image=req.image, time_limit_minutes=sizing.minutes, env=req.env,
            code_dir=code_dir, trees_dir=trees_dir(org),
            has_secrets=bool(req.secrets) or interactive is not None,
            after_jobs=tuple(req.after_jobs),
            image_source=image.source if image else None, image_size=image.size if image else 0,
            image_private=bool(image and image.login),
            interactive=interactive, usage_interval=load_site().usage.interval_seconds),
            slurm_site())
    except InvalidJobSpec as exc:
        raise Invalid(str(exc)) from None


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
    script = job_script(org, req.name or "run-check", req, sizing, None,
                        run_image(org, req.image))
    try:
        slurm_client(ready_for_jobs(user)).test_submit(script)
    except SubmitRefused as exc:
        raise refused_by_slurm(exc, req.gpu, req.gpus) from None
    except SlurmError as exc:
        raise not_taken(exc) from None


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
        # Each copy has its job id: `waiting` was empty.
        return create_run(user, replace(req, copies=[copy.name for copy in copies], after_jobs=[
            cast(str, copy.slurm_job_id) for copy in copies]), request_key)


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
    live: int = db.session.execute(db.select(sa.func.count(Run.id)).where(
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
    started: int = db.session.execute(db.select(sa.func.count(Run.id)).where(
        Run.org_id == org.id, Run.created_at >= since)).scalar_one()
    if started + adding > most:
        raise TooManySubmits(f"{org.name} started {started} runs in the last {window // 60:g} "
                             f"minutes, at most {most}: Slurm keeps each job for {window:g} s "
                             "after it ends; try again in a few minutes")


def prepare(user: User, req: RunRequest) -> tuple[str | None, dict[str, str], int, str | None]:
    """What a run's job needs before it is on record: the Unix user it runs
    as, ready (its org's folders opened to it, first, before volumes are
    made in them; the org's account), its code's folder, its volumes made,
    its secrets' values and its project."""
    org = user.org
    # Before the run is on record: its grace is for sbatch alone.
    unix_user = ready_for_jobs(user)
    code_dir = req.tool_dir
    if req.code_ref:
        code_dir = stored_tree(org, req.code_ref)
        if code_dir is None:
            raise NotFound(f"no uploaded code at {req.code_ref}")
    for volume in volumes_in_command(req.command) if req.volumes is None else req.volumes:
        ensure_volume(org, volume)
    secret_values = values_for_run(org, req.secrets)
    project_id = _project(org, req.project).id
    return code_dir, secret_values, project_id, unix_user


def _project(org: Org, name: str) -> Project:
    query = db.select(Project).filter_by(org_id=org.id, name=name)
    project: Project | None = db.session.execute(query).scalar_one_or_none()
    if project is None:
        add_unique(Project(org_id=org.id, name=name))   # or made now by another request
        project = db.session.execute(query).scalar_one()
    return project


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
               mounts=[], kind=req.kind, allow_idle=req.allow_idle, **fields)


def create_run(user: User, req: RunRequest, request_key: str | None = None,
               schedule_name: str | None = None) -> Run:
    """The run is committed (with the job name it will have) before sbatch,
    and its job id after: a server that dies in between leaves a run the
    reconciler adopts by job name, or settles as failed when Slurm never got
    it (app/services/runs/submissions.py). The caller has looked for a run of
    the same `request_key` first (run_for_request_key)."""
    org = user.org
    check_may_start(user)
    if req.mounts and not req.copies:
        return _create_with_mounts(user, req, request_key)
    sizing = size_run(org, req)
    image = run_image(org, req.image)
    code_dir, secret_values, project_id, unix_user = prepare(user, req)
    secret_values |= new_token()        # the server's way in (app/services/runs/interactive.py)
    sizing = sized_under_lock(org, req, sizing)
    run = new_run(user, req, sizing, project_id, secret_values, request_key,
                  schedule_name=schedule_name, unix_user=unix_user)
    run.mounts = [{"url": location.url, "path": f"/mnt/{volume}", "copy": copy}
                  for (location, volume), copy in zip(req.mounts, req.copies, strict=True)]
    made = insert_run(run, req.name)
    if made is not None:
        return made
    state = run_dir(org, run.name)
    try:
        script = job_script(org, run.name, req, sizing, code_dir, image)
        # For admins: what was submitted (no secret is in it).
        write_state_file(make_state_dir(state), "batch.sh", script)
    except (Invalid, Conflict):
        _forget(run, state)
        raise
    write_secrets_file(state, secret_values)
    write_registry_login(state, image)
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
        return slurm_client(run.unix_user).submit(script)
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
