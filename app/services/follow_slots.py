"""Log followers hold a worker thread each for as long as they follow, so
they may take only part of a worker's threads: some always answer everything
else, and no org can take every follower slot. Counted per server process
(each gunicorn worker has its own threads); a follower without a slot gets a
429 (its org has its share) or a 503 (the worker has its share), with
Retry-After, and `div` tries again."""
from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable

from flask import current_app

from app.services.errors import ServiceError
from app.services.site_gauges import followers_file, note_followers


class NoFollowerSlot(ServiceError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.headers = {"Retry-After": "5"}


_lock = threading.Lock()
log = logging.getLogger("divergent.followers")
_by_org: Counter = Counter()


def _limits() -> tuple[int, int]:
    config = current_app.config
    return config["DIV_FOLLOWERS_PER_WORKER"], config["DIV_FOLLOWERS_PER_ORG"]


def take_follower_slot(org_id: int) -> Callable[[], None]:
    """A slot for one follow stream, or NoFollowerSlot; returns what gives
    it back (once, when the response closes)."""
    per_worker, per_org = _limits()
    with _lock:
        if sum(_by_org.values()) >= per_worker:
            raise NoFollowerSlot(503, f"the server follows {per_worker} logs at once already; "
                                      "try again in a few seconds")
        if _by_org[org_id] >= per_org:
            raise NoFollowerSlot(429, f"your org follows {per_org} logs at once on this "
                                      "server already; try again in a few seconds")
        _by_org[org_id] += 1
        _noted(followers_file(), sum(_by_org.values()))
    given_back = threading.Event()
    path = followers_file()    # the response closes outside the app's context

    def give_back() -> None:
        with _lock:
            if not given_back.is_set():
                given_back.set()
                _by_org[org_id] -= 1
                _noted(path, sum(_by_org.values()))
    return give_back


def _noted(path: str, count: int) -> None:
    """The count for /metrics, best effort: a file that cannot be written
    (a full disk) must never keep a slot from being taken or given back."""
    try:
        note_followers(path, count)
    except OSError as exc:
        log.warning("could not note the log followers for /metrics: %s", exc)
