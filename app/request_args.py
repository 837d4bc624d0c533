"""Query parameters read strictly: a bad one is a 400 that says what is
wrong, never a silent default or a 500."""
from __future__ import annotations

from flask import request

from app.services.errors import Invalid


def int_arg(name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or len(raw) > 18 or int(raw) < minimum:
        raise Invalid(f"?{name}= must be a whole number of at least {minimum}, not {raw[:40]!r}")
    return int(raw)
