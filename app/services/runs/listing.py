"""Finding and listing an org's runs (every query scoped by its org), the
runs every org has waiting (the admins' Cluster page), and a run as the
API's JSON."""
from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy.orm import selectinload

from divergent.app.extensions import db
from divergent.app.models import RUN_STATUSES, Org, Project, Run, User, iso_utc
from divergent.app.services.errors import (
    Invalid,
    NotFound,
    ServiceError,
)
from divergent.app.services.money.pricing import usd_text
from divergent.app.services.runs.interactive import NOTEBOOK, notebook_path
from divergent.app.services.runs.text import hardware, waiting_text
from divergent.app.services.runs.usage import usage_json
from divergent.app.services.site.slurm_access import slurm_site


def find_run(org: Org, name: str) -> Run:
    run = db.session.execute(
        db.select(Run).filter_by(org_id=org.id, name=name)).scalar_one_or_none()
    if run is None:
        raise NotFound(f"no run named {name!r}")
    return run


def list_runs(org: Org, limit: int = 20, project: str | None = None,
              status: str | None = None, username: str | None = None) -> list[Run]:
    """An org's newest runs (1 to 500): of one project, in one status, by one user."""
    return page_of_runs(org, size=max(1, min(limit, 500)), project=project, status=status,
                        username=username)[0]


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
    rows: list[Run] = list(db.session.execute(
        query.order_by(Run.created_at.desc(), Run.id.desc()).limit(size + 1)).scalars())
    return rows[:size], rows[size - 1].id if len(rows) > size else None


def run_json(run: Run) -> dict:
    """The run as the API and `div run --json` show it (docs/users/div.md, "A run as JSON")."""
    return {
        "name": run.name, "project": run.project.name, "user": run.user.username,
        "status": run.status, "kind": run.kind,
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
        "usage": usage_json(run), "allow_idle": bool(run.allow_idle),
        "slurm_job_id": run.slurm_job_id, "restarts": run.restarts or 0,
        "mounts": run.mounts or [],
        "sweep": run.sweep.name if run.sweep_id else None,
        "sweep_index": run.sweep_index, "sweep_values": run.sweep_values,
        "schedule": run.schedule_name,
        # An interactive run's own page (its notebook), below the server's root.
        "url": notebook_path(run.name) if run.kind == NOTEBOOK else None,
    }


def image_used() -> bool | None:
    """Whether this site runs a run in its image (the run's JSON says so);
    None while the site's settings are broken: showing a run never
    depends on them."""
    try:
        return slurm_site().runtime != "none"
    except ServiceError:
        return None


# The Cluster page shows the oldest waiting runs and counts the rest.
QUEUED_SHOWN = 200


def queued_runs() -> tuple[list[tuple[Run, str, str, str]], int]:
    """The oldest waiting runs of every org, with their org's name, what they
    asked for and why they wait, in words; and how many wait in all."""
    waiting = sa.select(Run, Org.name).join(Org, Run.org_id == Org.id).where(
        Run.status == "queued")
    # A count always has a row; a queued run always has words for its wait.
    count = cast(int, db.session.scalar(sa.select(sa.func.count()).select_from(waiting.subquery())))
    rows = db.session.execute(waiting.order_by(Run.created_at, Run.id).limit(QUEUED_SHOWN)).all()
    return [(run, org, hardware(run), cast(str, waiting_text(run))) for run, org in rows], count
