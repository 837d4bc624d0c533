"""Sweeps: start (the body of POST /runs with "sweep": {KEY: [values]}),
check, get (with every member run) and list."""
from __future__ import annotations

from flask import g, jsonify, request

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.services.errors import Invalid
from divergent.app.services.runs.names import REQUEST_KEY
from divergent.app.services.runs.request import parse_request, request_notes
from divergent.app.services.runs.sweeps import (
    check_sweep,
    create_sweep,
    find_sweep,
    sweep_for_request_key,
    sweep_json,
    sweeps_of,
)
from divergent.app.web.request_args import int_arg


def _body() -> dict:
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or body.get("sweep") is None:
        raise Invalid('send the run as POST /runs takes it, with "sweep": {"KEY": ["v1", "v2"]}')
    return body


@bp.post("/sweeps/check")
@token_required
def sweeps_check():
    """Whether POST /sweeps would take this, before its code is uploaded."""
    body = _body()
    run_request = parse_request(body)
    check_sweep(g.user, run_request, body["sweep"])
    return jsonify(ok=True, notes=request_notes(run_request))


@bp.post("/sweeps")
@token_required
def sweeps_create():
    """With an Idempotency-Key, a retry gets the sweep the first request made."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not REQUEST_KEY.fullmatch(key):
        raise Invalid("Idempotency-Key must be 16 to 64 letters, digits, - or _")
    made = sweep_for_request_key(g.user.org_id, key)
    if made is not None:
        return jsonify(sweep=sweep_json(made)), 200
    body = _body()
    sweep = create_sweep(g.user, parse_request(body), body["sweep"], key)
    return jsonify(sweep=sweep_json(sweep)), 201


@bp.get("/sweeps")
@token_required
def sweeps_list():
    return jsonify(sweeps=[sweep_json(sweep) for sweep in
                           sweeps_of(g.user.org, int_arg("limit", 20, minimum=1))])


@bp.get("/sweeps/<name>")
@token_required
def sweeps_get(name: str):
    return jsonify(sweep=sweep_json(find_sweep(g.user.org, name)))
