"""What a request may send: query parameters read strictly (a bad one is a
400 that says what is wrong, never a silent default or a 500), and the body
limit of the views that stream their bodies."""
from __future__ import annotations

from flask import request

from app.services.errors import Invalid

# request.max_content_length for views that read their body as a stream
# within limits of their own (MAX_FILE_BYTES, MAX_BUNDLE_BYTES): the app's
# MAX_CONTENT_LENGTH is for bodies read whole.
STREAMED = 1 << 62


def int_arg(name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or len(raw) > 18 or int(raw) < minimum:
        raise Invalid(f"?{name}= must be a whole number of at least {minimum}, not {raw[:40]!r}")
    return int(raw)
