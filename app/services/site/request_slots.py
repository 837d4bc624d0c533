"""Long requests hold a worker thread each for as long as they last: log
followers, terminals and notebooks (interactive runs' connections), and
transfers (file and blob uploads, downloads, plain log reads, which a slow
or stalled client can stretch to their deadlines). Each
kind may take only part of a worker's threads, so some always answer
everything else, and no org may take all of a kind's. Counted per server
process (each gunicorn worker has its own threads); a request without a slot
gets a 429 (its org has its share) or a 503 (the worker has its share), with
Retry-After, and `div` tries again."""
from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from flask import current_app

from divergent.app.services.errors import ServiceError
from divergent.app.services.site.gauges import followers_file, note_followers


class NoSlot(ServiceError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.headers = {"Retry-After": "5"}


@dataclass(frozen=True)
class Kind:
    per_worker_setting: str
    per_org_setting: str
    doing: str             # "follows 64 logs", "moves 32 files"
    # The followers' count is a /metrics gauge.
    counted_for_metrics: bool = False


FOLLOW = Kind("DIV_FOLLOWERS_PER_WORKER", "DIV_FOLLOWERS_PER_ORG", "follows {} logs", True)
TRANSFER = Kind("DIV_TRANSFERS_PER_WORKER", "DIV_TRANSFERS_PER_ORG", "moves {} files or logs")
# Terminals and notebook requests passed to interactive runs (app/web/run_proxy.py).
INTERACTIVE = Kind("DIV_INTERACTIVE_PER_WORKER", "DIV_INTERACTIVE_PER_ORG",
                   "holds {} terminal and notebook connections")

_lock = threading.Lock()
log = logging.getLogger("divergent.slots")
_held: dict[Kind, Counter] = {FOLLOW: Counter(), TRANSFER: Counter(), INTERACTIVE: Counter()}


def held(kind: Kind) -> int:
    """This process's slots of a kind now in use."""
    return sum(_held[kind].values())


def take_slot(kind: Kind, org_id: int) -> Callable[[], None]:
    """A slot of `kind` for one request of the org's, or NoSlot; returns
    what gives it back (once, when the response closes)."""
    config = current_app.config
    per_worker, per_org = config[kind.per_worker_setting], config[kind.per_org_setting]
    by_org = _held[kind]
    # The response closes outside the app's context.
    path = followers_file() if kind.counted_for_metrics else None
    with _lock:
        if sum(by_org.values()) >= per_worker:
            raise NoSlot(503, f"the server {kind.doing.format(per_worker)} at once already; "
                              "try again in a few seconds")
        if by_org[org_id] >= per_org:
            raise NoSlot(429, f"your org {kind.doing.format(per_org)} at once on this "
                              "server already; try again in a few seconds")
        by_org[org_id] += 1
        _noted(path, sum(by_org.values()))
    given_back = threading.Event()

    def give_back() -> None:
        with _lock:
            if not given_back.is_set():
                given_back.set()
                by_org[org_id] -= 1
                _noted(path, sum(by_org.values()))
    return give_back


def _noted(path: str | None, count: int) -> None:
    """The followers' count for /metrics, best effort: a file that cannot be
    written (a full disk) must never keep a slot from being taken or given back."""
    if path is None:
        return
    try:
        note_followers(path, count)
    except OSError as exc:
        log.warning("could not note the log followers for /metrics: %s", exc)
