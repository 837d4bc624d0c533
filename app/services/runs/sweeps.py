"""Sweeps: one run for each combination of some env values (`div run
--sweep LR=1e-3,3e-4 --sweep BS=32,64`), submitted as ONE Slurm job array.
Each member is a run of its own (its log, metrics, checks and cost), named
<sweep>-<index>, with its values in its env and its JSON. The sweep and its
runs are committed before sbatch, and the runs get their job ids
("87_0", "87_1", ...) after; a server that dies in between leaves runs the
reconciler adopts by the sweep's job name (app/services/runs/submissions.py)."""
from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import cast

import sqlalchemy as sa
from sqlalchemy.orm import selectinload

from divergent.app.extensions import db
from divergent.app.models import LIVE, Org, Run, Sweep, User, iso_utc
from divergent.app.services.accounts.secrets import remove_secrets_file, write_secrets_file
from divergent.app.services.errors import Conflict, Invalid, NotFound, Refused
from divergent.app.services.files.volumes import data_path, make_state_dir, run_dir, write_state_file
from divergent.app.services.money.pricing import usd_text
from divergent.app.services.money.usage import minutes_left
from divergent.app.services.runs.images import run_image, write_registry_login
from divergent.app.services.runs.interactive import batch_only
from divergent.app.services.runs.listing import run_json
from divergent.app.services.runs.names import free_name
from divergent.app.services.runs.refusals import refused_by_slurm
from divergent.app.services.runs.request import SWEEP_PREFIX, RunRequest
from divergent.app.services.runs.sizing import Sizing, size_run, sized_under_lock
from divergent.app.services.runs.submit import (
    SubmitUnsure,
    check_may_start,
    check_run,
    job_script,
    new_run,
    not_taken,
    prepare,
)
from divergent.app.services.site.slurm_access import slurm_client
from divergent.slurm.client import SlurmError, SubmitNotReceived, SubmitRefused, array_of
from divergent.slurm.jobspec import ArrayMember, InvalidJobSpec, check_env_name

MAX_KEYS = 8
MAX_VALUE_CHARS = 1024


def parse_axes(value: object) -> dict[str, list[str]]:
    """{"LR": ["1e-3", "3e-4"], ...}: env names, each with distinct values."""
    if not isinstance(value, dict) or not value:
        raise Invalid('a sweep is {"KEY": ["value", ...], ...}')
    if len(value) > MAX_KEYS:
        raise Invalid(f"a sweep varies at most {MAX_KEYS} variables")
    for key, values in value.items():
        try:
            check_env_name(key, "sweep variable")
        except InvalidJobSpec as exc:
            raise Invalid(str(exc)) from None
        if not isinstance(values, list) or not values or not all(
                isinstance(v, str) and 0 < len(v) <= MAX_VALUE_CHARS and "\0" not in v
                for v in values):
            raise Invalid(f"{key}: a list of values, each 1 to {MAX_VALUE_CHARS} characters")
        if len(set(values)) != len(values):
            raise Invalid(f"{key}: a value is given twice")
    return value


def combinations(axes: dict[str, list[str]]) -> list[dict[str, str]]:
    """Member i's values: the i-th of every combination, the last key
    varying fastest."""
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def validated(req: RunRequest, axes_value: object) -> dict[str, list[str]]:
    """The sweep's values, checked as every start checks them (POST /sweeps
    and a schedule's firing as much as the check before upload): its size
    is counted before a single combination is made, so no request makes the
    server build (or record) more runs than Slurm would take."""
    batch_only(req.kind, "a sweep")
    axes = parse_axes(axes_value)
    size = math.prod(len(values) for values in axes.values())
    client = slurm_client()
    if not client.submits_arrays:
        raise Invalid("this site's Slurm client (pyslurm) cannot submit sweeps; "
                      "an admin sets `flask site --transport local` or ssh")
    limit = client.max_array_size()
    if size > limit:
        raise Invalid(f"a sweep of {size} runs is more than this cluster's MaxArraySize "
                      f"({limit}): sweep fewer values")
    clash = [key for key in axes if key in req.env or key in req.secrets]
    if clash:
        raise Invalid(f"{clash[0]} is both swept and set by --env or --secret")
    if req.name is not None:
        raise Invalid("a sweep's runs are named after it: leave out --name")
    if req.mounts:
        raise Invalid("--mount does not go with --sweep yet: import the bucket first "
                      "(div storage import)")
    return axes


def check_sweep(user: User, req: RunRequest, axes_value: object) -> None:
    """What starting the sweep would refuse, before anything is uploaded:
    its values and size, and its runs as `div run` would check one of them
    (Slurm's --test-only included)."""
    axes = validated(req, axes_value)
    check_may_start(user, math.prod(len(values) for values in axes.values()))
    check_run(user, replace(req, env={**req.env, **combinations(axes)[0]}))


def _member_sizing(org: Org, sizing: Sizing, size: int) -> Sizing:
    """Each member's --time: its spend limit's, and at most an equal share
    of what the org's monthly limit has left, so the whole sweep stays
    within it however many members run at once."""
    left = minutes_left(org, sizing.rate)
    if left is None:
        return sizing
    share = left // size
    if share < 1:
        raise Refused(f"the org's monthly limit leaves less than a minute for each of "
                      f"{size} runs")
    if sizing.minutes is None or share < sizing.minutes:
        return replace(sizing, minutes=share, limited_by="org")
    return sizing


def sweep_dir(org: Org, name: str) -> str:
    """The sweep's folder: its batch script and Slurm's own log of each member."""
    return data_path("sweeps", org.name, name)


def _insert(org: Org, request_key: str | None,
            make: Callable[[str], tuple[Sweep, list[Run]]]) -> tuple[Sweep, list[Run]] | None:
    """The sweep and its runs, made by `make` for a free name and committed
    together (a run's own name never starts with sweep-, so a free sweep
    name frees its members' names). None when a request with the same key
    made its sweep meanwhile (a retry that came while the first request was
    still at work)."""
    sweep, runs = make(free_name(SWEEP_PREFIX, lambda name: _sweep_named(org.id, name)))
    db.session.add(sweep)
    db.session.add_all(runs)
    try:
        db.session.commit()
        return sweep, runs
    except sa.exc.IntegrityError:
        db.session.rollback()
        if sweep_for_request_key(org.id, request_key) is not None:
            return None
        raise Conflict(f"a sweep named {sweep.name} was made at the same time; try again") \
            from None


def _sweep_named(org_id: int, name: str) -> bool:
    return db.session.execute(
        db.select(Sweep.id).filter_by(org_id=org_id, name=name)).first() is not None


def create_sweep(user: User, req: RunRequest, axes_value: object,
                 request_key: str | None = None, schedule_name: str | None = None) -> Sweep:
    """Every member is a run on record before the one sbatch; then each gets
    its member's job id."""
    org = user.org
    axes = validated(req, axes_value)
    members = combinations(axes)
    check_may_start(user, len(members))
    run_sizing = size_run(org, req)
    _member_sizing(org, run_sizing, len(members))       # refused before anything is made
    code_dir, secret_values, project_id, unix_user = prepare(user, req)
    # As create_run does: sized again under the org's lock.
    sizing = _member_sizing(org, sized_under_lock(org, req, run_sizing), len(members))

    def make(name: str) -> tuple[Sweep, list[Run]]:
        sweep = Sweep(org_id=org.id, user_id=user.id, name=name, axes=axes,
                      size=len(members), schedule_name=schedule_name, request_key=request_key)
        return sweep, [new_run(user, replace(req, env={**req.env, **values}), sizing,
                               project_id, secret_values, name=f"{name}-{index}", sweep=sweep,
                               sweep_index=index, sweep_values=values,
                               schedule_name=schedule_name, unix_user=unix_user)
                       for index, values in enumerate(members)]
    # Resolved before any row is made: a registry away is one refusal, no sweep.
    image = run_image(org, req.image)
    inserted = _insert(org, request_key, make)
    if inserted is None:    # the key's sweep, which _insert has just found
        return cast(Sweep, sweep_for_request_key(org.id, request_key))
    sweep, runs = inserted
    folder = sweep_dir(org, sweep.name)
    try:
        script = job_script(org, sweep.name, req, sizing, code_dir, image, folder, tuple(
            ArrayMember(run.name, run_dir(org, run.name), run.env) for run in runs))
        # For admins: what was submitted (no secret is in it).
        write_state_file(make_state_dir(folder), "batch.sh", script)
        for run in runs:
            write_secrets_file(make_state_dir(run_dir(org, run.name)), secret_values)
            write_registry_login(run_dir(org, run.name), image)
    except (Invalid, Conflict):
        _forget(org, sweep, runs)
        raise
    record_array(sweep, _submit(org, sweep, runs, script))
    return sweep


def _submit(org: Org, sweep: Sweep, runs: list[Run], script: str) -> str:
    try:
        return slurm_client(runs[0].unix_user).submit(script)
    except SubmitRefused as exc:
        _forget(org, sweep, runs)
        raise refused_by_slurm(exc, runs[0].gpu_type, runs[0].gpus) from None
    except SubmitNotReceived as exc:
        _forget(org, sweep, runs)
        raise not_taken(exc) from None
    except SlurmError as exc:
        raise SubmitUnsure(f"Slurm did not say whether it took {sweep.name}: {exc}; it is "
                           "not lost: within minutes its runs run or end failed; see "
                           f"`div sweep {sweep.name}` before you start it again") from None


def record_array(sweep: Sweep, job_id: str) -> None:
    """Each member still waiting for one gets its task of the array as its
    job id; a member stopped meanwhile is canceled in Slurm too."""
    db.session.execute(sa.update(Run).where(
        Run.sweep_id == sweep.id, Run.status == "queued", Run.slurm_job_id.is_(None)
    ).values(slurm_job_id=sa.literal(f"{job_id}_") + sa.cast(Run.sweep_index, sa.String)))
    db.session.commit()
    stopped: Iterable[Run] = db.session.execute(db.select(Run).where(
        Run.sweep_id == sweep.id, Run.slurm_job_id.is_(None))).scalars()
    for run in stopped:
        with contextlib.suppress(SlurmError):
            slurm_client(run.unix_user).cancel(f"{job_id}_{run.sweep_index}")


def _forget(org: Org, sweep: Sweep, runs: list[Run]) -> None:
    """A sweep Slurm certainly never got: not kept."""
    for run in runs:
        db.session.delete(run)
        remove_secrets_file(run_dir(org, run.name))
        with contextlib.suppress(OSError):
            os.rmdir(run_dir(org, run.name))
    db.session.delete(sweep)
    db.session.commit()
    shutil.rmtree(sweep_dir(org, sweep.name), ignore_errors=True)


def sweep_for_request_key(org_id: int, key: str | None) -> Sweep | None:
    if key is None:
        return None
    return db.session.execute(
        db.select(Sweep).filter_by(org_id=org_id, request_key=key)).scalar_one_or_none()


def find_sweep(org: Org, name: str) -> Sweep:
    sweep = db.session.execute(
        db.select(Sweep).filter_by(org_id=org.id, name=name)).scalar_one_or_none()
    if sweep is None:
        raise NotFound(f"no sweep named {name!r}")
    return sweep


def members_of(sweep: Sweep) -> list[Run]:
    return list(db.session.execute(db.select(Run).filter_by(
        org_id=sweep.org_id, sweep_id=sweep.id).options(
        selectinload(Run.project), selectinload(Run.user))
        .order_by(Run.sweep_index)).scalars())


def sweep_json(sweep: Sweep, runs: list[Run] | None = None) -> dict:
    """The sweep with its runs, and what they come to."""
    runs = members_of(sweep) if runs is None else runs
    ended = [run for run in runs if run.status not in LIVE]
    passed = [run for run in ended if run.checks and all(
        check.get("verdict") == "passed" for check in run.checks)]
    first_failing = next((run for run in runs if run.status not in LIVE + ("succeeded",)), None)
    return {
        "name": sweep.name, "size": sweep.size, "axes": sweep.axes,
        # The array's: each member's job is one of its tasks ("87_3"), also
        # when the reconciler adopted them after a submit it never heard of.
        "slurm_job_id": next((array_of(run.slurm_job_id) for run in runs
                              if run.slurm_job_id), None),
        "schedule": sweep.schedule_name,
        "created_at": iso_utc(sweep.created_at),
        # Ended: succeeded (every member), failed (none), partial (some).
        "status": ("queued" if all(run.status == "queued" for run in runs) else
                   "running" if len(ended) < len(runs) else
                   "succeeded" if first_failing is None else
                   "failed" if not any(run.status == "succeeded" for run in runs) else "partial"),
        "ended": len(ended), "succeeded": sum(run.status == "succeeded" for run in runs),
        "passed_checks": len(passed), "with_checks": sum(bool(run.checks) for run in runs),
        "cost": usd_text(sum(run.cost_micros or 0 for run in runs)),
        "runs": [run_json(run) for run in runs],
    }


def sweeps_of(org: Org, limit: int = 20) -> list[Sweep]:
    return list(db.session.execute(db.select(Sweep).filter_by(org_id=org.id).order_by(
        Sweep.created_at.desc(), Sweep.id.desc()).limit(max(1, min(limit, 500)))).scalars())
