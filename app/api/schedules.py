"""The org's schedules: create (a cron expression and the run `div run`
would send), list, delete."""
from __future__ import annotations

from flask import g, jsonify, request

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.services.errors import Invalid
from divergent.app.services.runs.schedules import (
    check_schedule,
    create_schedule,
    delete_schedule,
    schedule_json,
    schedules_of,
)


@bp.get("/schedules")
@token_required
def schedules_list():
    return jsonify(schedules=[schedule_json(row) for row in schedules_of(g.user.org)])


def _schedule_body() -> dict:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise Invalid('send {"cron": "0 3 * * *", "run": {...}}')
    return body


@bp.post("/schedules/check")
@token_required
def schedules_check():
    """Whether POST /schedules would take this, before its code is uploaded."""
    body = _schedule_body()
    check_schedule(g.user, body.get("cron"), body.get("run"), body.get("name"), body.get("tz"))
    return jsonify(ok=True)


@bp.post("/schedules")
@token_required
def schedules_create():
    body = _schedule_body()
    row = create_schedule(g.user, body.get("cron"), body.get("run"), body.get("name"),
                          body.get("tz"))
    return jsonify(schedule=schedule_json(row)), 201


@bp.delete("/schedules/<name>")
@token_required
def schedules_delete(name: str):
    delete_schedule(g.user.org, name)
    return jsonify(deleted=name)
