"""The server's way to Slurm: the site's settings (app/services/site/settings.py) and
a client over the configured transport, one per process and transport, so a
changed site file takes effect without a restart. standing_in() puts
another client in their place (a scripted Slurm for unit tests of the
reconciler and for benchmarks)."""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import cast

from flask import current_app

from divergent.app.models import Org
from divergent.app.services.errors import Unavailable
from divergent.app.services.site.gauges import count_slurm_error
from divergent.app.services.site.settings import Site, SiteConfigError, Transport, load_site
from divergent.slurm.client import SlurmClient, SlurmError, SubmitRefused
from divergent.slurm.jobspec import SlurmSite

_lock = threading.Lock()
_clients: dict[Transport, SlurmClient] = {}
_accounts_known: set[tuple[str, ...]] = set()
_stand_in: SlurmClient | None = None
# What Slurm said of partitions and nodes, kept a few seconds (cached()).
_cache: dict[tuple[str, Transport | None], tuple[float, object]] = {}
_cache_lock = threading.Lock()
_cache_locks: dict[tuple[str, Transport | None], threading.Lock] = {}
_failures: dict[tuple[str, Transport | None], tuple[float, SlurmError]] = {}
log = logging.getLogger("divergent.slurm")


def current_site() -> Site:
    try:
        return load_site()
    except SiteConfigError as exc:
        raise Unavailable(f"the site's settings are broken: {exc}") from None


def slurm_site() -> SlurmSite:
    return current_site().slurm


@contextlib.contextmanager
def standing_in(client: SlurmClient) -> Iterator[SlurmClient]:
    """Every caller in this process gets `client` as its Slurm client until
    the block ends, whatever the site file says."""
    global _stand_in
    previous, _stand_in = _stand_in, client
    _cache.clear()
    _failures.clear()
    try:
        yield client
    finally:
        _stand_in = previous
        # What the stand-in's Slurm said is not the site's.
        _accounts_known.clear()
        _cache.clear()
        _failures.clear()


def is_standing_in() -> bool:
    """Whether a stand-in answers for Slurm: it has no Unix users to act as."""
    return _stand_in is not None


def slurm_client(as_user: str | None = None) -> SlurmClient:
    """The client, each of whose calls that fails is counted for /metrics;
    with `as_user`, its commands run as that Unix user (a job's owner's:
    submit, cancel, shorten), through sudo."""
    # Counted passes every call through: to its callers it is a SlurmClient.
    if _stand_in is not None:
        return cast(SlurmClient, Counted(_stand_in))
    transport = current_site().transport
    with _lock:
        if transport not in _clients:
            _clients[transport] = transport.client()
        return cast(SlurmClient, Counted(_clients[transport].as_user(as_user)))


class Counted:
    """A SlurmClient whose calls that fail are counted by call
    (divergent_slurm_call_errors_total): Slurm down, slow or saying it
    cannot; not a job it refuses, which a user can ask for at will.
    Everything else passes through."""

    def __init__(self, client: SlurmClient):
        self._client = client

    def __getattr__(self, name: str):
        value = getattr(self._client, name)
        if not callable(value):
            return value

        def counted(*args, **kwargs):
            try:
                return value(*args, **kwargs)
            except SubmitRefused:
                raise           # Slurm answered: it will not take what a user asked for
            except SlurmError:
                try:
                    count_slurm_error(name)
                except Exception:   # the database away too: the Slurm error is what to say
                    log.exception("could not count a failed Slurm call")
                raise
        return counted


def ensure_org_account(org: Org, users: tuple[str, ...] = ()) -> None:
    """Each org submits under its own Slurm account, with the Unix users
    its jobs run as (`users`) in it; made on first use (or, where the
    site's admins make accounts, the users added to it: the service user is
    its coordinator), then remembered for the life of the process."""
    known = (org.slurm_account, *users)
    if known in _accounts_known or not (slurm_site().make_accounts or users):
        return
    try:
        if slurm_site().make_accounts:
            slurm_client().ensure_account(org.slurm_account,
                                          current_app.config["DIV_MAX_LIVE_RUNS_PER_ORG"], users)
        else:   # the site's account: its users added as its coordinator may
            slurm_client().add_users(org.slurm_account, users)
    except SlurmError as exc:
        # Accounting down (slurmdbd): an account made before still works,
        # and sbatch itself refuses one that was never made.
        log.warning("could not make sure Slurm account %s exists: %s", org.slurm_account, exc)
        return
    _accounts_known.add(known)




def partition_max_minutes(partition: str) -> int | None:
    """The partition's MaxTime in minutes (None: unlimited or unknown), from
    one sinfo every DIV_PARTITION_CACHE_SECONDS at most: a run's --time never
    goes past it."""
    try:
        limits = cached("max_times", current_app.config["DIV_PARTITION_CACHE_SECONDS"],
                        lambda: slurm_client().partition_max_minutes())
    except SlurmError as exc:
        log.warning("could not read partitions' MaxTime: %s", exc)
        return None
    return limits.get(partition)


def cached(what: str, seconds: float, ask):
    """ask()'s answer, kept `seconds` per transport in this process; while
    one caller asks Slurm the others wanting the same wait for its answer
    rather than ask too (each kind of answer has a lock of its own). When
    Slurm does not answer, what it said last is served if there is one."""
    key = (what, current_site().transport if _stand_in is None else None)
    with _cache_lock:
        lock = _cache_locks.setdefault(key, threading.Lock())
    with lock:
        kept = _cache.get(key)
        if kept is not None and time.monotonic() - kept[0] < seconds:
            return kept[1]
        failed = _failures.get(key)
        if kept is None and failed is not None and time.monotonic() - failed[0] < seconds:
            raise failed[1]     # Slurm just failed to answer: not asked again by each waiter
        try:
            answer = ask()
        except SlurmError as exc:
            if kept is None:
                _failures[key] = (time.monotonic(), exc)
                raise
            log.warning("Slurm did not answer (%s); using what it said before", exc)
            # The others wait out `seconds` on it too, not a timeout each.
            _cache[key] = (time.monotonic(), kept[1])
            return kept[1]
        _cache[key] = (time.monotonic(), answer)
        _failures.pop(key, None)
        return answer
