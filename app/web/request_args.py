"""What a request may send: query parameters read strictly (a bad one is a
400 that says what is wrong, never a silent default or a 500), JSON bodies
whose strings are real text, and the body limit of the views that stream
their bodies."""
from __future__ import annotations

from typing import TypeVar

from flask import request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import BadRequest

from divergent.app.services.errors import Invalid

# request.max_content_length for views that read their body as a stream
# within limits of their own (MAX_FILE_BYTES, MAX_BUNDLE_BYTES): the app's
# MAX_CONTENT_LENGTH is for bodies read whole.
STREAMED = 1 << 62

# int_arg's default: with an int one, the answer is always an int.
_Default = TypeVar("_Default", int, None)


def int_arg(name: str, default: _Default, minimum: int = 0) -> int | _Default:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18 or int(raw) < minimum:
        raise Invalid(f"?{name}= must be a whole number of at least {minimum}, not {raw[:40]!r}")
    return int(raw)


def flag_arg(name: str) -> bool:
    """?name=1 or true (or 0, false, absent: no)."""
    raw = request.args.get(name, "")
    if raw not in ("", "0", "1", "true", "false"):
        raise Invalid(f"?{name}= is 1 or 0, not {raw[:40]!r}")
    return raw in ("1", "true")


def json_object() -> dict:
    """The request's body as a JSON object, or a 400 that says so."""
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise Invalid("send a JSON object")
    return body


class StrictJSONProvider(DefaultJSONProvider):
    """Request bodies as JSON, refused (400) when nested too deep for the
    parser or when a string holds a lone surrogate ("\\ud800") or a NUL: such
    a string can be neither written to a file, a batch script or the
    database nor shown, so it never gets past the request. Answers keep
    their keys' order (a sweep's variables, as the user gave them)."""

    sort_keys = False

    def loads(self, s, **kwargs):
        try:
            value = super().loads(s, **kwargs)
        except RecursionError:
            raise BadRequest("the JSON body is nested too deeply") from None
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, str):
                try:
                    item.encode()
                except UnicodeEncodeError:
                    raise BadRequest("the JSON body holds text that is not valid Unicode "
                                     "(a lone surrogate)") from None
                if "\0" in item:   # PostgreSQL's text holds no NUL
                    raise BadRequest("the JSON body holds a NUL character") from None
        return value
