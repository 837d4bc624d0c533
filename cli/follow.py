"""Following a run's log: the stream's bytes to our own stdout and stderr,
unchanged; why the run waits, on a terminal, in one line updated in place;
and, when the connection drops, a reconnect from the byte offsets already
written, so nothing is lost or printed twice."""
from __future__ import annotations

import base64
import sys
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar, overload

import click

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable

# The server's answers when it follows as many logs as it will at once
# (app/services/site/request_slots.py): wait and try again, as for a lost API.
BUSY = (429, 503)

# How long to keep trying when the API goes away mid-run (a server restart).
RECONNECT_SECONDS = 300

T = TypeVar("T")


class WaitingLine:
    """`run-k4t9 queued: waiting for 8 x H100` on stderr, rewritten in place;
    only on a terminal, so logs and cron mail never see it."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\033[K{text}")
            sys.stderr.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


class LogWriter:
    """Writes the stream's chunks to stdout and stderr unchanged, each byte
    once, and knows how far into each stream's file it has written. With
    `stdout_free` (--json), the run's stdout goes to stderr too, so that our
    stdout holds one JSON document alone."""

    def __init__(self, stdout_free: bool = False):
        out = sys.stderr.buffer if stdout_free else sys.stdout.buffer
        self.files = {"stdout": out, "stderr": sys.stderr.buffer}
        self.offsets = {"stdout": 0, "stderr": 0}
        self.last = {"stdout": b"\n", "stderr": b"\n"}
        # On one terminal both streams are one screen: what matters is the
        # last byte written to either.
        self.one_screen = stdout_free or (sys.stdout.isatty() and sys.stderr.isatty())
        self.last_on_screen = b"\n"

    def write(self, event: dict[str, Any]) -> None:
        stream = event["stream"]
        data = base64.b64decode(event["b64"]) if "b64" in event else event["data"].encode("utf-8")
        # Where the chunk ends in the run's file: "next" when a masked secret
        # made the text shorter or longer than the bytes it stands for.
        end = event.get("next", event["offset"] + len(data))
        # After a reconnect the server starts where we asked; never write a byte twice.
        skip = self.offsets[stream] - event["offset"]
        if skip > 0:
            data = data[skip:] if "next" not in event else b""
        if data:
            self.files[stream].write(data)
            self.files[stream].flush()
            self.last[stream] = self.last_on_screen = data[-1:]
        self.offsets[stream] = max(self.offsets[stream], end)

    def end_line(self) -> None:
        """What follows on stderr starts a line of its own, even after a log
        that ended without a newline."""
        last = self.last_on_screen if self.one_screen else self.last["stderr"]
        if last != b"\n":
            self.files["stderr"].write(b"\n")


# Followed to its end, a run's log ends with the end event, never None.
@overload
def follow(api: ApiClient, name: str, follow_to_end: Literal[True] = True,
           tail: int | None = None, stdout_free: bool = False) -> dict[str, Any]: ...


@overload
def follow(api: ApiClient, name: str, follow_to_end: bool = True,
           tail: int | None = None, stdout_free: bool = False) -> dict[str, Any] | None: ...


def follow(api: ApiClient, name: str, follow_to_end: bool = True,
           tail: int | None = None, stdout_free: bool = False) -> dict[str, Any] | None:
    """Writes the run's log and returns its end event ({"run", "summary"}),
    or None without `follow_to_end` (what is there now, then stop). With
    `tail`, each stream's last `tail` lines first; with `stdout_free`, all of
    it on stderr."""
    log = LogWriter(stdout_free)
    waiting = WaitingLine(follow_to_end and sys.stderr.isatty())
    lost_since = None
    while True:
        try:
            # The tail is asked for once; a reconnect goes on from the offsets.
            start = {"tail": tail} if tail and log.offsets == {"stdout": 0, "stderr": 0} \
                else log.offsets
            params = dict(start, follow="1" if follow_to_end else "0")
            for event in api.events(f"/runs/{name}/logs", params):
                lost_since = None
                if "stream" in event:
                    waiting.clear()
                    log.write(event)
                elif event.get("event") == "status":
                    if event.get("waiting"):
                        waiting.show(f"{name} queued: {event['waiting']}")
                    else:
                        waiting.clear()
                elif event.get("event") == "end":
                    waiting.clear()
                    if not follow_to_end:
                        return None
                    log.end_line()
                    return event
        except (ApiUnreachable, ApiError) as exc:
            if isinstance(exc, ApiError) and exc.status not in BUSY:
                raise
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since > RECONNECT_SECONDS:
                waiting.clear()
                raise click.ClickException(
                    f"{exc}; the run goes on: div logs {name} -f") from None
            waiting.show(f"{name}: {exc}; reconnecting")
            time.sleep(5 if isinstance(exc, ApiError) else 1)


def through_restarts(call: Callable[[], T]) -> T:
    """call(), tried again every second while the API is away (a server
    restart) for up to RECONNECT_SECONDS."""
    lost_since = None
    while True:
        try:
            return call()
        except ApiUnreachable:
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since > RECONNECT_SECONDS:
                raise
            time.sleep(1)
