"""Paths in a volume are byte strings: a run may name a file with any bytes
but / and NUL, UTF-8 or not. Inside the server such a path is a str in
PEP 383's form (os.fsdecode's: a byte that is not UTF-8 is a lone surrogate
U+DC80..U+DCFF), which the os module turns back into the same bytes. This
module is that form's edges: read from a URL's percent-encoded bytes and
written into URLs the same way. To show one, cli.output.shown writes such a
byte as \\xNN (a page cannot encode it raw)."""
from __future__ import annotations

from urllib.parse import parse_qsl, quote_from_bytes

from flask import request


def path_bytes(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def path_arg(name: str = "path") -> str:
    """?name= as the bytes it percent-encodes (Werkzeug's request.args keeps
    %FF as the three characters, which would name another file)."""
    pairs = parse_qsl(request.query_string.decode("ascii", "surrogateescape"),
                      keep_blank_values=True, encoding="utf-8", errors="surrogateescape")
    return next((value for key, value in pairs if key == name), "")


def path_query(path: str) -> str:
    """The path percent-encoded for a URL's query, byte for byte."""
    return quote_from_bytes(path_bytes(path), safe="/")
