"""Schedules: a run (or a sweep) the reconciler starts at the times of a
cron expression, read in the schedule's time zone (UTC unless told), so a
team's nightly evaluation needs no crontab on a laptop. The run
is the request `div run` would send, checked when the schedule is made; its
code is the tree uploaded then. Each firing moves `next_at` on before it
submits, so a reconciler that dies mid-way skips a run rather than start
two; a firing that surely started nothing (Slurm's controller away) is
tried again every RETRY until it starts, never later than the next time the
schedule is due (one run for one outage)."""
from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import cast

from flask import current_app

from divergent.app.extensions import db
from divergent.app.models import Org, Run, Schedule, Sweep, User, iso_utc, utcnow
from divergent.app.services.accounts.orgs import all_named, find_named
from divergent.app.services.errors import Conflict, Invalid, ServiceError, Unavailable
from divergent.app.services.runs.cron import describe, parse_cron, parse_zone
from divergent.app.services.runs.interactive import batch_only
from divergent.app.services.runs.request import parse_request
from divergent.app.services.runs.submit import SubmitUnsure, check_run, create_run
from divergent.app.services.runs.sweeps import check_sweep, create_sweep
from divergent.terms import RUN_NAME

log = logging.getLogger("divergent.schedules")


def _cron(text: object, tz: object):
    """The schedule's cron and its first time; a cron that never matches a
    real date ("0 0 31 2 *") is refused with the rest."""
    cron = parse_cron(text)
    return cron, cron.next_after(utcnow(), parse_zone(tz))


def check_schedule(user: User, cron_text: object, run_request: object,
                   name: object = None, tz: object = None) -> tuple[str, datetime, str, str]:
    """What creating the schedule would refuse, asked before `div schedule
    create` uploads anything: its cron and time zone, its name and its run
    or sweep (as `div run` would be checked). Returns the cron, its next
    time, the name and the time zone."""
    tz = "UTC" if tz is None else tz
    cron, next_at = _cron(cron_text, tz)
    req = parse_request(run_request)
    batch_only(req.kind, "a schedule")
    body = cast(dict, run_request)      # parse_request refused anything else
    if req.name is not None:
        raise Invalid("a schedule's runs get names of their own: leave out --name")
    if name is not None and (not isinstance(name, str) or not RUN_NAME.fullmatch(name)):
        raise Invalid(f"invalid schedule name {name!r}: lowercase letters, digits and -")
    name = name or f"sched-{secrets.token_hex(3)}"
    if _find(user.org, name, missing_ok=True) is not None:
        raise Conflict(f"a schedule named {name} already exists")
    # A secret it names must exist now, its GPUs fit, a sweep's size too, ...
    if body.get("sweep") is not None:
        check_sweep(user, req, body["sweep"])
    else:
        check_run(user, req)
    return cron.text, next_at, name, cast(str, tz)      # _cron's parse_zone refused anything else


def create_schedule(user: User, cron_text: object, run_request: object,
                    name: str | None = None, tz: object = None) -> Schedule:
    cron, next_at, name, tz = check_schedule(user, cron_text, run_request, name, tz)
    most = current_app.config["DIV_MAX_SCHEDULES_PER_ORG"]
    if len(schedules_of(user.org)) >= most:
        raise Conflict(f"{user.org.name} has {most} schedules, the most an org may: "
                       "delete one first (div schedule rm)")
    row = Schedule(org_id=user.org_id, user=user, name=name, cron=cron, tz=tz,
                   request=run_request, next_at=next_at)
    db.session.add(row)
    db.session.commit()
    return row


def _find(org: Org, name: str, missing_ok: bool = False) -> Schedule | None:
    return find_named(Schedule, org, name, "schedule", missing_ok)


def schedules_of(org: Org) -> list[Schedule]:
    return all_named(Schedule, org)


def delete_schedule(org: Org, name: str) -> None:
    db.session.delete(_find(org, name))
    db.session.commit()


def schedule_json(row: Schedule) -> dict:
    zone = parse_zone(row.tz)
    next_local = row.next_at.astimezone(zone)
    return {"name": row.name, "cron": row.cron, "tz": row.tz,
            "when": f"{describe(parse_cron(row.cron))}, {row.tz}",
            "next_local": f"{next_local:%Y-%m-%d %H:%M} {next_local.tzname()}",
            "sweep": row.request.get("sweep"), "command": row.request.get("command"),
            "project": row.request.get("project"), "gpu": row.request.get("gpu"),
            "created_by": row.user.username, "next_at": iso_utc(row.next_at),
            "last_at": iso_utc(row.last_at), "last_run": row.last_run_name,
            "last_error": row.last_error}


def _start(row: Schedule) -> Run | Sweep:
    """The schedule's run, or its sweep; either carries the schedule's name
    (its notifications apply to them)."""
    req = parse_request(row.request)
    if row.request.get("sweep") is not None:
        return create_sweep(row.user, req, row.request["sweep"], schedule_name=row.name)
    return create_run(row.user, req, schedule_name=row.name)


# How soon a firing that started nothing is tried again.
RETRY = timedelta(seconds=30)


def started_nothing(exc: ServiceError) -> bool:
    """Slurm was away and surely took nothing (not_taken's 503); not a
    request Slurm refused, nor one whose outcome is unknown (SubmitUnsure:
    its run exists and the reconciler settles it)."""
    return isinstance(exc, Unavailable) and not isinstance(exc, SubmitUnsure)


# A pass starts at most this many of one org's due schedules, the earliest
# due first; the rest wait for the next pass, so every org's fire on time.
FIRED_PER_ORG = 2


def fire_due(now: datetime | None = None) -> int:
    """Starts the runs of the schedules that are due, FIRED_PER_ORG of each
    org's at most; returns how many fired."""
    now = now or utcnow()
    waiting: Iterable[Schedule] = db.session.execute(
        db.select(Schedule).join(User, User.id == Schedule.user_id)
        .where(Schedule.next_at <= now, User.removed_at.is_(None))
        .order_by(Schedule.next_at)).scalars()
    taken: Counter = Counter()
    due = []
    for row in waiting:
        if taken[row.org_id] < FIRED_PER_ORG:
            taken[row.org_id] += 1
            due.append(row)
    for row in due:
        schedule_id = row.id
        row.next_at = parse_cron(row.cron).next_after(now, parse_zone(row.tz))
        row.last_at = now
        db.session.commit()
        try:
            run = _start(row)
        except Exception as exc:   # one schedule's failure never stops the others'
            db.session.rollback()
            found = db.session.get(Schedule, schedule_id)
            if found is None:       # deleted while it fired: nothing to record
                continue
            row = found
            if isinstance(exc, ServiceError):
                row.last_error = exc.message
                if started_nothing(exc):
                    row.next_at = min(row.next_at, now + RETRY)
                    row.last_error += f"; trying again at {row.next_at:%H:%M:%S} UTC"
            else:
                log.exception("schedule %s failed", row.name)
                row.last_error = "the run could not be started (see the reconciler's log)"
            row.last_run_name = None
            log.warning("schedule %s did not start a run: %s", row.name, row.last_error)
        else:
            row.last_run_name, row.last_error = run.name, None
        db.session.commit()
    return len(due)
