"""Log followers held by one thread a server process, not a worker thread
each: a follower that is only waiting for its run costs no thread another
request needs, and no work until its run writes or its status is due.

The API's follow view (app/api/runs.py) hands the stream to the hub when
the server runs under app/web/gunicorn_worker.py: the worker writes nothing
for that request and lets the connection go; the hub holds a duplicate of
its socket, writes the response's head, then each event as a chunk of its
own (HTTP/1.1 chunked encoding), never blocking: what a client does not
read waits in its buffer, and a client that reads nothing for
DIV_CLIENT_IDLE_SECONDS is cut off, as every connection is
(app/web/gunicorn_conf.py).

The hub's thread asks each stream for its next events when its Wait is
over (app/services/runs/logs.py), or at once when its run's state folder
changes: inotify tells, where that folder is on a local filesystem (a
network filesystem's inotify does not see other hosts' writes; there the
streams look at their files as often as they would on a thread)."""
from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import json
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate

from flask import Flask
from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

from divergent.app.extensions import db
from divergent.app.services.runs.logs import POLL_SECONDS, KeyRevoked, LogItem
from divergent.app.web.gunicorn_conf import IDLE_SECONDS

log = logging.getLogger("divergent.follow_hub")

# What the hub holds unsent for a client before it stops reading that
# client's run (the client reads slower than the run writes), beyond the
# kernel's socket buffer: an event at most past it.
MAX_UNSENT = 64 << 10
# A run that writes all the time wakes its streams at most this often.
MIN_GAP_SECONDS = POLL_SECONDS
# A run's folder changes: its logs grew, its exit file was written (the
# names that matter to a stream; metrics.jsonl and the rest wake nothing).
CHANGES = inotify_flags.MODIFY | inotify_flags.CREATE | inotify_flags.MOVED_TO
WATCH = CHANGES | inotify_flags.DONT_FOLLOW | inotify_flags.ONLYDIR
# Filesystems whose inotify sees every write (those of the server's host).
LOCAL_FILESYSTEMS = {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay"}


def local_filesystem(path: str) -> bool:
    """Whether `path` is on a filesystem of this host's (the longest mount
    point above it in /proc/self/mounts)."""
    path = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open("/proc/self/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                point = fields[1].replace("\\040", " ")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return False
    return kind in LOCAL_FILESYSTEMS


@dataclass(eq=False)
class Stream:
    sock: socket.socket
    items: Iterator[LogItem]
    folder: str
    give_back: Callable[[], None]
    chunked: bool
    unsent: bytearray = field(default_factory=bytearray)
    ending: bool = False          # the last chunk is in `unsent`: close once it is sent
    held_back: bool = False       # not asked for more until the client reads what it has
    stalled_since: float | None = None
    due: float = 0.0              # when it is next asked for events
    asked: float = 0.0            # when it was last asked


# Where the worker offers the hub to the app (the request's environ), and
# where the app leaves a stream for it: (items, folder, give_back).
HUB = "divergent.follow_hub"
HAND_OFF = "divergent.follow_hub.stream"


def response_head(status: str, headers: list[tuple[str, str]], chunked: bool) -> bytes:
    """The status line and headers of a streamed response the hub writes:
    chunked (HTTP/1.1) or to the connection's close (HTTP/1.0)."""
    lines = [f"HTTP/1.1 {status}", f"Date: {formatdate(usegmt=True)}"]
    lines += [f"{name}: {value}" for name, value in headers
              if name.lower() not in ("content-length", "connection", "transfer-encoding", "date")]
    lines += ["Transfer-Encoding: chunked"] if chunked else []
    lines += ["Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


def _chunk(data: bytes, chunked: bool) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if chunked else data


class FollowHub:
    """One server process's log streams, served by one thread (started with
    the first stream)."""

    def __init__(self, app: Flask, watch_changes: bool | None = None):
        self.app = app
        self.selector = selectors.DefaultSelector()
        self.lock = threading.Lock()
        self.adopted: list[Stream] = []
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.selector.register(self.wake_r, selectors.EVENT_READ, None)
        self.streams: set[Stream] = set()
        self.timers: list[tuple[float, int, Stream]] = []
        self.order = itertools.count()
        self.watches: dict[str, int] = {}          # folder: watch descriptor
        self.watched: dict[int, set[Stream]] = {}  # watch descriptor: its streams
        self.inotify = self._inotify(app, watch_changes)
        self.thread: threading.Thread | None = None
        self.next_cut = 0.0
        # inotify's descriptor is in the selector while folders are watched,
        # and out of it for MIN_GAP_SECONDS after each read of its events.
        self.listening = False
        self.deaf_until = 0.0

    @staticmethod
    def _inotify(app: Flask, watch_changes: bool | None) -> INotify | None:
        if watch_changes is None:
            watch_changes = local_filesystem(app.config["DIV_DATA_DIR"])
        if not watch_changes:
            return None
        try:
            return INotify(nonblocking=True)
        except OSError as exc:      # the host's inotify instances used up: look, as threads do
            log.warning("no inotify (%s): log streams look at their files on a timer", exc)
            return None

    @property
    def sees_changes(self) -> bool:
        """Whether a stream is woken by its run's writes (so it need not look often)."""
        return self.inotify is not None

    def adopt(self, sock: socket.socket, head: bytes, items: Iterator[LogItem], folder: str,
              give_back: Callable[[], None], chunked: bool = True) -> None:
        """Serves a response from now on: `head` (status line and headers),
        then `items` as NDJSON; gives its slot back when it is over. Safe from
        any thread; `sock` is the hub's from now on."""
        sock.setblocking(False)
        stream = Stream(sock, items, folder, give_back, chunked, bytearray(head))
        with self.lock:
            self.adopted.append(stream)
            if self.thread is None:
                self.thread = threading.Thread(target=self._serve, name="follow-hub", daemon=True)
                self.thread.start()
        try:
            os.write(self.wake_w, b"x")
        except BlockingIOError:
            pass    # the pipe is full of wakes the thread has yet to read: it will

    # The hub's thread from here on.

    def _serve(self) -> None:
        with self.app.app_context():
            while True:
                try:
                    self._turn()
                except Exception:   # one stream's surprise never stops the others
                    log.exception("the log streams' thread went on after an error")
                    db.session.rollback()

    def _turn(self) -> None:
        now = time.monotonic()
        until = [self.timers[0][0]] if self.timers else []
        if self.watched and not self.listening:
            until.append(self.deaf_until)
        timeout = min([1.0] + [max(0.0, t - now) for t in until])
        for key, events in self.selector.select(timeout):
            if key.data is None:
                self._take_adopted()
            elif key.data == "inotify":
                self._changed()
            elif events & selectors.EVENT_READ and self._client_left(key.data):
                self._close(key.data)
            elif events & selectors.EVENT_WRITE:
                self._send(key.data)
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            _, _, stream = heapq.heappop(self.timers)
            if stream in self.streams and stream.due <= now:
                self._advance(stream)
        if now >= self.next_cut:
            self.next_cut = now + 1.0
            self._cut_stalled(now)
        self._listen(now)

    def _listen(self, now: float) -> None:
        """inotify's descriptor in the selector when there are folders to
        watch and its last read is MIN_GAP_SECONDS past."""
        if self.inotify is None:
            return
        wanted = bool(self.watched) and now >= self.deaf_until
        if wanted and not self.listening:
            self.selector.register(self.inotify.fileno(), selectors.EVENT_READ, "inotify")
        elif self.listening and not wanted:
            self.selector.unregister(self.inotify.fileno())
        self.listening = wanted

    def _take_adopted(self) -> None:
        try:
            os.read(self.wake_r, 4096)
        except BlockingIOError:
            pass
        with self.lock:
            adopted, self.adopted = self.adopted, []
        for stream in adopted:
            self.streams.add(stream)
            try:
                self.selector.register(stream.sock, selectors.EVENT_READ | selectors.EVENT_WRITE,
                                       stream)
                self._watch(stream)
            except Exception:      # its connection already gone, say: the others go on
                log.exception("could not take a log stream")
                self._close(stream)
                continue
            self._wake(stream, 0.0)

    def _watch(self, stream: Stream) -> None:
        if self.inotify is None:
            return
        wd = self.watches.get(stream.folder)
        if wd is None:
            try:
                wd = self.inotify.add_watch(stream.folder, WATCH)
            except OSError as exc:     # gone, not a folder, or the host's watches used up
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ENOSPC):
                    log.warning("cannot watch %s: %s", stream.folder, exc)
                return
            self.watches[stream.folder] = wd
        self.watched.setdefault(wd, set()).add(stream)

    def _unwatch(self, stream: Stream) -> None:
        wd = self.watches.get(stream.folder)
        if wd is None or self.inotify is None:
            return
        streams = self.watched.get(wd, set())
        streams.discard(stream)
        if not streams:
            self._forget(wd)
            try:
                self.inotify.rm_watch(wd)
            except OSError:      # the folder went, and its watch with it
                pass

    def _forget(self, wd: int) -> None:
        self.watched.pop(wd, None)
        for folder in [f for f, known in self.watches.items() if known == wd]:
            del self.watches[folder]

    def _changed(self) -> None:
        """Wakes the streams whose logs or exit file changed; then hears no
        more for MIN_GAP_SECONDS, so a run that writes all the time costs
        this thread a look that often, not one a write."""
        assert self.inotify is not None
        now = time.monotonic()
        woken: set[Stream] = set()
        for event in self.inotify.read(timeout=0):
            if event.mask & inotify_flags.Q_OVERFLOW:       # some events lost: every stream looks
                woken.update(self.streams)
            elif event.mask & inotify_flags.IGNORED:        # its folder went
                self._forget(event.wd)
            elif event.name in ("stdout", "stderr") or event.name.startswith("exit."):
                woken.update(self.watched.get(event.wd, ()))
        for stream in woken:
            self._wake(stream, max(0.0, stream.asked + MIN_GAP_SECONDS - now))
        self.deaf_until = now + MIN_GAP_SECONDS
        self._listen(now)

    def _wake(self, stream: Stream, after: float) -> None:
        """Asks the stream for events in `after` seconds, or sooner if it
        was to be asked sooner already."""
        now = time.monotonic()
        when = now + after
        if stream.due <= now or when < stream.due:
            stream.due = when
            heapq.heappush(self.timers, (when, next(self.order), stream))

    def _advance(self, stream: Stream) -> None:
        """The stream's events up to its next Wait, into its buffer."""
        if stream.ending or stream.held_back:
            return
        stream.asked = time.monotonic()
        try:
            for item in stream.items:
                if not isinstance(item, dict):
                    self._wake(stream, item)
                    break
                line = json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "\n"
                stream.unsent += _chunk(line.encode(), stream.chunked)
                if len(stream.unsent) >= MAX_UNSENT:
                    stream.held_back = True     # _send wakes it once the client has read
                    break
            else:
                self._finish(stream)
        except KeyRevoked:
            db.session.rollback()
            self._finish(stream)
        except Exception:
            log.exception("a log stream failed; its client reconnects")
            db.session.rollback()
            self._close(stream)
            return
        self._send(stream)

    def _finish(self, stream: Stream) -> None:
        if stream.chunked:
            stream.unsent += b"0\r\n\r\n"
        stream.ending = True

    def _send(self, stream: Stream) -> None:
        if stream not in self.streams:
            return
        try:
            while stream.unsent:
                sent = stream.sock.send(stream.unsent)
                del stream.unsent[:sent]
                stream.stalled_since = None
        except BlockingIOError:
            stream.stalled_since = stream.stalled_since or time.monotonic()
        except OSError:
            self._close(stream)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if stream.unsent else 0)
        self.selector.modify(stream.sock, events, stream)
        if not stream.unsent:
            if stream.ending:
                self._close(stream)
            elif stream.held_back:
                stream.held_back = False
                self._wake(stream, 0.0)

    @staticmethod
    def _client_left(stream: Stream) -> bool:
        """Whether the client closed its side, or sent more after its request
        (a follower has nothing more to say: the connection closes rather
        than read what it sends forever)."""
        try:
            stream.sock.recv(1)
        except BlockingIOError:
            return False
        except OSError:
            pass
        return True

    def _cut_stalled(self, now: float) -> None:
        for stream in [s for s in self.streams
                       if s.stalled_since is not None and now - s.stalled_since > IDLE_SECONDS]:
            self._close(stream)

    def _close(self, stream: Stream) -> None:
        if stream not in self.streams:
            return
        self.streams.discard(stream)
        try:
            self._unwatch(stream)
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(stream.sock)
            stream.sock.close()
            close = getattr(stream.items, "close", None)
            if close is not None:
                close()
        finally:
            stream.give_back()     # whatever the closing met: the org's slot is never lost
