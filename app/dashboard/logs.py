"""A run's log on its page: the tail rendered with the page (readable with
JavaScript off), then new bytes appended by HTMX polling from the offsets
the page already shows. stdout and stderr are told apart by class and mark."""
from __future__ import annotations

import os

from flask import g, render_template, request

from app.dashboard import bp
from app.dashboard.auth import login_required
from app.services.logs import STREAMS, read_new
from app.services.runs import LIVE, find_run, run_dir

TAIL_BYTES = 64 * 1024


def log_tail(state_dir: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The last TAIL_BYTES of each stream, from a line's start, and the
    offsets where they end."""
    chunks, offsets = [], {}
    for stream in STREAMS:
        path = os.path.join(state_dir, stream)
        size = os.path.getsize(path) if os.path.exists(path) else 0
        start = max(0, size - TAIL_BYTES)
        data = read_new(path, start, final=True)[: size - start]
        if start and b"\n" in data:
            cut = data.index(b"\n") + 1
            data, start = data[cut:], start + cut
        if data:
            chunks.append((stream, data.decode("utf-8", "replace")))
        offsets[stream] = start + len(data)
    return chunks, offsets


def log_since(state_dir: str, offsets: dict[str, int], final: bool):
    chunks = []
    for stream in STREAMS:
        data = read_new(os.path.join(state_dir, stream), offsets[stream], final)
        if data:
            chunks.append((stream, data.decode("utf-8", "replace")))
            offsets[stream] += len(data)
    return chunks, offsets


@bp.get("/runs/<name>/log")
@login_required
def run_log(name: str):
    """New log bytes from ?stdout=&stderr= on, appended to the page's log,
    and the next poll (none once the run has ended and all is shown)."""
    run = find_run(g.user.org, name)
    offsets = {s: max(0, request.args.get(s, 0, type=int)) for s in STREAMS}
    ended = run.status not in LIVE
    chunks, offsets = log_since(run_dir(g.user.org, run.name), offsets, final=ended)
    return render_template("_log_poll.html", run=run, chunks=chunks, offsets=offsets,
                           polling=not ended or bool(chunks))
