"""A run's log on its page: the tail rendered with the page (readable with
JavaScript off), then new bytes appended by HTMX polling from the offsets
the page already shows; earlier windows are paged in above it on request.
stdout and stderr are told apart by class and mark."""
from __future__ import annotations

import os

from flask import g, render_template, request

from app.dashboard import bp
from app.dashboard.auth import login_required
from app.request_args import int_arg
from app.services.logs import STREAMS, read_new, utf8_prefix
from app.services.masking import Masker
from app.services.runs import LIVE, find_run, run_dir
from app.services.secrets import log_masker

WINDOW_BYTES = 64 * 1024


def log_window(state_dir: str, masker: Masker, ends: dict[str, int] | None = None,
               live: bool = False):
    """Up to WINDOW_BYTES of each stream ending at `ends` (the files' ends
    when None: the tail), from a line's start, secrets masked. Returns the
    chunks, where they start (for paging backwards) and where they end (for
    following). While the run writes, a character cut in half at the end, or
    what may be the start of a secret, is left for the next poll."""
    chunks, starts, stops = [], {}, {}
    for stream in STREAMS:
        path = os.path.join(state_dir, stream)
        size = os.path.getsize(path) if os.path.exists(path) else 0
        end = size if ends is None else min(max(0, ends[stream]), size)
        start = max(0, end - WINDOW_BYTES)
        data = _read_range(path, start, end) if end > start else b""
        following = ends is None and live
        if following:
            data = data[:utf8_prefix(data)]
        if start and b"\n" in data:
            cut = data.index(b"\n") + 1
            data, start = data[cut:], start + cut
        shown, used = masker.mask(data, final=not following)
        if shown:
            chunks.append((stream, shown.decode("utf-8", "replace")))
        starts[stream], stops[stream] = start, start + used
    return chunks, starts, stops


def _read_range(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def log_since(state_dir: str, masker: Masker, offsets: dict[str, int], final: bool):
    chunks = []
    for stream in STREAMS:
        shown, used = masker.mask(read_new(os.path.join(state_dir, stream), offsets[stream], final),
                                  final)
        if shown:
            chunks.append((stream, shown.decode("utf-8", "replace")))
        offsets[stream] += used
    return chunks, offsets


@bp.get("/runs/<name>/log")
@login_required
def run_log(name: str):
    """New log bytes from ?stdout=&stderr= on, appended to the page's log,
    and the next poll (none once the run has ended and all is shown)."""
    run = find_run(g.user.org, name)
    offsets = {s: int_arg(s, 0) for s in STREAMS}
    ended = run.status not in LIVE
    chunks, offsets = log_since(run_dir(g.user.org, run.name), log_masker(run), offsets,
                                final=ended)
    return render_template("_log_poll.html", run=run, chunks=chunks, offsets=offsets,
                           polling=not ended or bool(chunks))


@bp.get("/runs/<name>/log/earlier")
@login_required
def run_log_earlier(name: str):
    """The window of each stream before ?stdout=&stderr=: put above the log
    by HTMX, or a page of its own with JavaScript off."""
    run = find_run(g.user.org, name)
    ends = {s: int_arg(s, 0) for s in STREAMS}
    chunks, starts, _ = log_window(run_dir(g.user.org, run.name), log_masker(run), ends)
    template = "_log_earlier_swap.html" if request.headers.get("HX-Request") else "log_earlier.html"
    return render_template(template, run=run, chunks=chunks, starts=starts)
