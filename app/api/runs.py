"""Runs: create, get, list, stop, and the log as an NDJSON stream."""
from __future__ import annotations

import json

from flask import Response, g, jsonify, request, stream_with_context

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.extensions import db
from divergent.app.services.files.volumes import run_dir
from divergent.app.services.runs.listing import find_run, list_runs, run_json
from divergent.app.services.runs.logs import (
    IDLE_POLL_SECONDS,
    MAX_TAIL_LINES,
    STATUS_SECONDS,
    STREAMS,
    KeyRevoked,
    run_log_events,
    tail_offsets,
    waiting_in_place,
)
from divergent.app.services.runs.names import run_for_request_key
from divergent.app.services.runs.request import parse_request, request_notes, rerun_request
from divergent.app.services.runs.stop import stop_run
from divergent.app.services.runs.submit import check_run, create_run
from divergent.app.services.runs.text import header_line, summary_line
from divergent.app.services.site.request_slots import FOLLOW, TRANSFER, take_slot
from divergent.app.web.follow_hub import HAND_OFF, HUB
from divergent.app.web.request_args import flag_arg, int_arg


@bp.post("/runs")
@token_required
def runs_create():
    return _created(lambda: parse_request(request.get_json(silent=True)))


@bp.post("/runs/<name>/rerun")
@token_required
def runs_rerun(name: str):
    """A new run of what the run `name` ran (`div rerun`)."""
    return _created(lambda: rerun_request(find_run(g.user.org, name)))


def _created(run_request):
    """With an Idempotency-Key, a retry of a request whose answer was lost
    (the server restarted) gets the run the first one made: 200, not 201."""
    key = request.headers.get("Idempotency-Key")
    run = run_for_request_key(g.user.org_id, key)
    if run is not None:
        return jsonify(run=run_json(run), header=header_line(run)), 200
    run = create_run(g.user, run_request(), key)
    return jsonify(run=run_json(run), header=header_line(run)), 201


@bp.post("/runs/check")
@token_required
def runs_check():
    """Whether POST /runs would take this run, before its code is uploaded,
    and what `div run` should say before it uploads (`notes`)."""
    run_request = parse_request(request.get_json(silent=True))
    check_run(g.user, run_request)
    return jsonify(ok=True, notes=request_notes(run_request))


@bp.get("/runs")
@token_required
def runs_list():
    """?project=, ?status=, ?user= (a username) and ?mine=1 (the key's user)."""
    mine = flag_arg("mine")
    runs = list_runs(g.user.org, limit=int_arg("limit", 20, minimum=1),
                     project=request.args.get("project"), status=request.args.get("status"),
                     username=g.user.username if mine else request.args.get("user"))
    return jsonify(runs=[run_json(run) for run in runs])


@bp.get("/runs/<name>")
@token_required
def runs_get(name: str):
    run = find_run(g.user.org, name)
    return jsonify(run=run_json(run), summary=summary_line(run))


@bp.post("/runs/<name>/stop")
@token_required
def runs_stop(name: str):
    run = find_run(g.user.org, name)
    stopping = stop_run(run)
    return jsonify(run=run_json(run), stopping=stopping)


@bp.get("/runs/<name>/logs")
@token_required
def runs_logs(name: str):
    """NDJSON events (app/services/runs/logs.py). ?stdout=&stderr= are the byte
    offsets to start from, or ?tail=N: each stream's last N lines; ?follow=1
    streams until the run ends."""
    run = find_run(g.user.org, name)
    tail = int_arg("tail", None, minimum=1)
    offsets = (tail_offsets(g.user.org, run, min(tail, MAX_TAIL_LINES)) if tail is not None
               else {s: int_arg(s, 0) for s in STREAMS})
    # A HEAD is answered at once: it has no body to follow the run in.
    follow = request.args.get("follow", "") in ("1", "true") and request.method == "GET"
    hub = request.environ.get(HUB) if follow else None
    # Woken by the run's writes, a stream held by the hub need not look often.
    idle_poll = STATUS_SECONDS if hub is not None and hub.sees_changes else IDLE_POLL_SECONDS
    events = run_log_events(g.user.org, run, g.api_key.id, offsets, follow, idle_poll)
    give_back = take_slot(FOLLOW if follow else TRANSFER, run.org_id)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    if hub is not None:
        # The hub's thread writes it (app/web/follow_hub.py), and gives the slot back.
        request.environ[HAND_OFF] = (events, run_dir(g.user.org, run.name), give_back)
        return Response(mimetype="application/x-ndjson", headers=headers)

    def lines():
        try:
            for event in waiting_in_place(events):
                yield json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n"
        except KeyRevoked:
            db.session.rollback()

    response = Response(stream_with_context(lines()), mimetype="application/x-ndjson",
                        headers=headers)
    response.call_on_close(give_back)
    return response

