"""The org's spend this month (or ?month=YYYY-MM), by project and GPU type."""
from __future__ import annotations

from flask import g, jsonify, request

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.services.money.pricing import usd_text
from divergent.app.services.money.usage import usage_report


def _dollars(micros: int | None) -> str | None:
    return None if micros is None else usd_text(micros)


@bp.get("/usage")
@token_required
def usage():
    report = usage_report(g.user.org, request.args.get("month"))
    return jsonify(
        month=report["month"], spent=_dollars(report["spent_micros"]),
        limit=_dollars(report["limit_micros"]), left=_dollars(report["left_micros"]),
        projects=[{"project": p["project"], "cost": _dollars(p["cost_micros"]), "runs": p["runs"]}
                  for p in report["projects"]],
        gpus=[{"gpu": r["gpu"], "cost": _dollars(r["cost_micros"]), "runs": r["runs"]}
              for r in report["gpus"]],
        users=[{"user": r["user"], "cost": _dollars(r["cost_micros"]), "runs": r["runs"]}
               for r in report["users"]])
