"""S3 transfers (div storage import/export): each starts a transfer run,
answered as POST /runs answers, so `div` follows it as it follows a run."""
from __future__ import annotations

from flask import g, jsonify, request

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.services.runs.listing import run_json
from divergent.app.services.runs.names import run_for_request_key
from divergent.app.services.runs.request import dollars, transfer_request
from divergent.app.services.runs.submit import check_run, start_transfer
from divergent.app.services.runs.text import header_line
from divergent.app.services.runs.transfers import parse_transfer


@bp.post("/transfers")
@token_required
def transfers_create():
    """{"direction": "import"|"export", "volume", "path", "url": "s3://B/P",
    "max_spend"}; with an Idempotency-Key, a retry gets the run the first
    request made (200)."""
    key = request.headers.get("Idempotency-Key")
    run = run_for_request_key(g.user.org_id, key)
    if run is not None:
        return jsonify(run=run_json(run), header=header_line(run)), 200
    body = request.get_json(silent=True)
    transfer = parse_transfer(body)
    run = start_transfer(g.user, transfer, key, dollars(body.get("max_spend")))
    return jsonify(run=run_json(run), header=header_line(run)), 201


@bp.post("/transfers/check")
@token_required
def transfers_check():
    """Whether POST /transfers would take it: the org's S3 secrets, the
    volume, Slurm's word on a cpu run."""
    body = request.get_json(silent=True)
    transfer = parse_transfer(body)
    check_run(g.user, transfer_request(g.user.org, transfer, dollars(body.get("max_spend"))))
    return jsonify(ok=True)
