"""A run's log as events with byte offsets (docs/developers/design.md,
"Logs"): stdout and stderr are separate files in the run's state folder; each event carries the
offset of its first byte in its file, so a client that reconnects with the
offsets it has loses nothing and gets nothing twice.

  {"stream": "stdout", "offset": 0, "data": "text"}      (valid UTF-8)
  {"stream": "stdout", "offset": 4, "b64": "..."}        (any other bytes)
  {"stream": "stdout", "offset": 9, "data": "key=***\n", "next": 21}
      (a secret masked: "next" is where the chunk ends in the file)
  {"event": "status", "status": "queued", "waiting": "behind other jobs"}
  {"event": "end", "run": {...}, "summary": "run-k4t9 finished in ..."}
  {"event": "more", "stdout": 16777216, "stderr": 0}
      (a read without follow stops after READ_BYTES: ask again from there)

Both faces read logs here: the API as these events (run_log_events), the
dashboard as windows of text (log_window, log_since)."""
from __future__ import annotations

import base64
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from flask import Flask, current_app
from sqlalchemy.exc import SQLAlchemyError

from divergent.app.extensions import db
from divergent.app.models import LIVE, ApiKey, Org, Run, utcnow
from divergent.app.services.accounts.masking import NO_MASK, Masker
from divergent.app.services.accounts.secrets import log_masker
from divergent.app.services.files.volumes import open_state_file, run_dir, run_is_ending
from divergent.app.services.runs.listing import run_json
from divergent.app.services.runs.text import summary_line, waiting_text

STREAMS = ("stdout", "stderr")
CHUNK = 256 * 1024
POLL_SECONDS = 0.05        # how soon a follower looks for new bytes after some came
IDLE_POLL_SECONDS = 0.5    # and at the slowest, while none come (each look costs)
STATUS_SECONDS = 1.0       # how often it rereads the run's status
ENDING_STATUS_SECONDS = 0.05  # and once the run's command has ended (volumes.run_is_ending)
HEARTBEAT_SECONDS = 5.0    # an event at least this often, so dead peers show
# A read without follow sends at most this much, however large the files (a
# run can write a terabyte of holes in a second): the work of one request
# is bounded, and the client asks again from the offsets it has.
READ_BYTES = 16 << 20


def utf8_prefix(data: bytes) -> int:
    """Length of `data` without a trailing incomplete UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:        # a lead byte or ASCII
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


def chunk_event(stream: str, offset: int, data: bytes) -> dict:
    try:
        return {"stream": stream, "offset": offset, "data": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"stream": stream, "offset": offset, "b64": base64.b64encode(data).decode()}


def read_new(path: str, offset: int, final: bool) -> bytes:
    """Up to CHUNK bytes from `offset`; while the run may still write, a
    character cut in half is left for the next read."""
    f = open_state_file(path)
    if f is None:
        return b""
    with f:
        # An offset past the end reads nothing (seek refuses one past what
        # the filesystem allows: 1e14 on ext4).
        if offset >= os.fstat(f.fileno()).st_size:
            return b""
        f.seek(offset)
        data = f.read(CHUNK)
    return data if final else data[:utf8_prefix(data)]


# What log_events yields between events when it has nothing to send: how
# many seconds until it should be asked again (sooner is fine: when the run's
# state folder changes, say).
Wait = float
LogItem = dict | Wait


def log_events(state_dir: str, offsets: dict[str, int], follow: bool,
               poll_run: Callable[[], tuple[bool, dict]],
               end_event: Callable[[], dict], masker: Masker = NO_MASK,
               ending: Callable[[], bool] = lambda: False,
               heard_end: Callable[[], None] = lambda: None,
               idle_poll: float = IDLE_POLL_SECONDS) -> Iterator[LogItem]:
    """Events from `offsets` on, the run's secrets masked, and a Wait where
    there is nothing yet: it never sleeps itself, so one thread can follow
    many runs (app/web/follow_hub.py; waiting_in_place for one). `poll_run`
    says whether the run has ended and gives its status event; `ending`,
    that its command has: then `heard_end` is called once (the reconciler
    asks Slurm at once) and the status is reread often, so the end comes
    soon. While nothing comes, the files are looked at every `idle_poll`
    at the slowest. Without `follow`, stops at the current end."""
    paths = {s: os.path.join(state_dir, s) for s in STREAMS}
    offsets = {s: max(0, int(offsets.get(s, 0))) for s in STREAMS}
    last_status, last_event, next_poll = None, time.monotonic(), 0.0
    pause = POLL_SECONDS
    ended = not follow
    command_ended = False
    read = 0
    while True:
        # Asked each time: a run Slurm started again has a new attempt's file.
        now_ending = not ended and ending()
        if now_ending and not command_ended:
            next_poll = 0.0
            heard_end()
        command_ended = now_ending
        if not follow and read >= READ_BYTES:
            yield {"event": "more", **offsets}
            return
        sent = False
        for stream in STREAMS:
            shown, used = masker.mask(read_new(paths[stream], offsets[stream], final=ended),
                                      final=ended)
            if used:
                event = chunk_event(stream, offsets[stream], shown)
                if used != len(shown):
                    event["next"] = offsets[stream] + used
                yield event
                offsets[stream] += used
                read += used
                sent = True
        now = time.monotonic()
        if sent:
            last_event, pause = now, POLL_SECONDS
        elif ended:
            yield end_event()
            return
        # The status is reread on time even while bytes flow: it is where a
        # revoked key ends the stream.
        if not ended and now >= next_poll:
            next_poll = now + (ENDING_STATUS_SECONDS if command_ended else STATUS_SECONDS)
            # Ended runs get one more read of both files before the end event.
            ended, status = poll_run()
            if status != last_status or now - last_event >= HEARTBEAT_SECONDS:
                last_status, last_event = status, now
                yield status
            continue
        if sent:
            continue
        yield min(pause, max(0.0, next_poll - now))
        pause = min(ENDING_STATUS_SECONDS if command_ended else idle_poll, pause * 2)


def waiting_in_place(items: Iterator[LogItem]) -> Iterator[dict]:
    """log_events' events for a thread of their own: each Wait slept."""
    for item in items:
        if isinstance(item, dict):
            yield item
        else:
            time.sleep(item)


# The marks that a run's command has ended, written one at a time beside
# the streams: a database slow to take a write (SQLite's lock) never holds
# up the thread that serves every stream of a worker.
_nudges = ThreadPoolExecutor(1, thread_name_prefix="end-heard")
_nudging: set[int] = set()      # runs whose mark waits to be written
_nudging_lock = threading.Lock()


def _mark_end_heard(app: Flask, run_id: int) -> None:
    """Has the reconciler ask Slurm about the run at once. Only sooner: its
    cycle settles the run anyway, so a write the database refuses is dropped."""
    with app.app_context():
        try:
            db.session.execute(db.update(Run).where(Run.id == run_id)
                               .values(end_heard_at=utcnow()))
            db.session.commit()
        except SQLAlchemyError:
            db.session.rollback()
        finally:
            with _nudging_lock:
                _nudging.discard(run_id)


class KeyRevoked(Exception):
    """The key a stream was opened with was revoked while it streamed."""


def run_log_events(org: Org, run: Run, key_id: int, offsets: dict[str, int],
                   follow: bool, idle_poll: float = IDLE_POLL_SECONDS) -> Iterator[LogItem]:
    """A run's log events (its secrets masked) for a client holding API key
    `key_id`: with `follow`, its status while it lives and its end. Raises
    KeyRevoked within a status poll of the key's revocation. Each look at
    the run is a transaction of its own, so the reconciler's commits show
    and none stays open for the life of the stream."""
    # Read now, while the request is at work: the stream reads files only.
    run_id, state_dir, masker = run.id, run_dir(org, run.name), log_masker(run)
    attempt = run.restarts or 0

    def fresh_run() -> Run:
        db.session.rollback()
        # Only a submit that Slurm never got deletes its run, before anyone is told its name.
        return cast(Run, db.session.get(Run, run_id))

    def poll_run():
        nonlocal attempt
        current = fresh_run()
        attempt = current.restarts or 0
        if db.session.get(ApiKey, key_id).revoked_at is not None:
            raise KeyRevoked
        event = {"event": "status", "status": current.status, "waiting": waiting_text(current)}
        ended = current.status not in LIVE
        db.session.rollback()
        return ended, event

    def end_event():
        current = fresh_run()
        event = {"event": "end", "run": run_json(current), "summary": summary_line(current)}
        db.session.rollback()
        return event

    app = current_app._get_current_object()   # type: ignore[attr-defined]

    def heard_end():
        with _nudging_lock:
            if run_id in _nudging:
                return      # one write a run at a time, however many follow it
            _nudging.add(run_id)
        _nudges.submit(_mark_end_heard, app, run_id)

    return log_events(state_dir, offsets, follow, poll_run, end_event, masker,
                      lambda: run_is_ending(state_dir, attempt), heard_end, idle_poll)


WINDOW_BYTES = 64 * 1024


def log_window(org: Org, run: Run, ends: dict[str, int] | None = None):
    """Up to WINDOW_BYTES of each stream ending at `ends` (the files' ends
    when None: the tail), from a line's start, secrets masked. Returns the
    chunks, where they start (for paging backwards) and where they end (for
    following). While the run writes, a character cut in half at the end, or
    what may be the start of a secret, is left for the next poll."""
    state_dir, masker, live = run_dir(org, run.name), log_masker(run), run.status in LIVE
    chunks, starts, stops = [], {}, {}
    for stream in STREAMS:
        path = os.path.join(state_dir, stream)
        size = _size(path)
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


# `div logs --tail N`: at most this many lines of each stream, found in at
# most the last TAIL_SCAN_BYTES (a log of one endless line is not read whole).
MAX_TAIL_LINES = 100_000
TAIL_SCAN_BYTES = 16 << 20


def tail_offsets(org: Org, run: Run, lines: int) -> dict[str, int]:
    """Where each stream's last `lines` lines start (a line not yet ended
    counts as one), read backwards a block at a time."""
    state_dir = run_dir(org, run.name)
    return {stream: _line_start_from_end(os.path.join(state_dir, stream), lines)
            for stream in STREAMS}


def _line_start_from_end(path: str, lines: int) -> int:
    """Past TAIL_SCAN_BYTES back, the first line that starts within them."""
    f = open_state_file(path)
    if f is None:
        return 0
    with f:
        end = pos = f.seek(0, os.SEEK_END)
        floor = max(0, end - TAIL_SCAN_BYTES)
        # A last line without its newline yet is a line too.
        wanted = lines + (1 if end and _byte_at(f, end - 1) == b"\n" else 0)
        earliest = None
        while pos > floor:
            start = max(floor, pos - WINDOW_BYTES)
            f.seek(start)
            block = f.read(pos - start)
            cut = len(block)
            while wanted > 0 and (cut := block.rfind(b"\n", 0, cut)) >= 0:
                wanted -= 1
                earliest = start + cut + 1
            if wanted == 0:     # lines >= 1: the newline that made it 0 set earliest
                return cast(int, earliest)
            pos = start
        return earliest if floor and earliest is not None else floor


def _size(path: str) -> int:
    """A log's size; 0 when it is not there or not a plain file."""
    try:
        found = os.lstat(path)
    except OSError:
        return 0
    return found.st_size if stat.S_ISREG(found.st_mode) else 0


def _byte_at(f, offset: int) -> bytes:
    f.seek(offset)
    return f.read(1)


def _read_range(path: str, start: int, end: int) -> bytes:
    f = open_state_file(path)
    if f is None:
        return b""
    with f:
        f.seek(start)
        return f.read(end - start)


def masked_stream(org: Org, run: Run, stream: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    """One stream of the run's log as it is now, whole, its secrets masked:
    read a chunk at a time (a log of gigabytes is never in memory), a tail
    that may start a secret carried into the next."""
    path, masker = os.path.join(run_dir(org, run.name), stream), log_masker(run)

    def chunks() -> Iterator[bytes]:
        held = b""
        f = open_state_file(path)
        if f is None:
            return
        with f:
            while True:
                data = f.read(chunk)
                shown, used = masker.mask(held + data, final=not data)
                held = (held + data)[used:]
                if shown:
                    yield shown
                if not data:
                    return
    return chunks()


def log_since(org: Org, run: Run, offsets: dict[str, int]):
    """What each stream gained since `offsets`, as text, and the new offsets;
    once the run has ended, to the files' ends."""
    state_dir, masker, final = run_dir(org, run.name), log_masker(run), run.status not in LIVE
    chunks = []
    for stream in STREAMS:
        shown, used = masker.mask(read_new(os.path.join(state_dir, stream), offsets[stream], final),
                                  final)
        if shown:
            chunks.append((stream, shown.decode("utf-8", "replace")))
        offsets[stream] += used
    return chunks, offsets
