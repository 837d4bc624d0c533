"""Turns on the dev cluster for tests that run side by side (pytest-xdist's
workers, and any other test session on this machine): a readers-writer
lock in the cluster's own state folder. Most cluster tests share the
cluster; one that changes what every test sees (stops a Slurm daemon,
changes a partition or the service user's Slurm level) or holds every GPU
of a type takes it alone, once the tests in flight have ended.

flock(2) alone lets new readers overtake a waiting writer for ever; the
turnstile, held by a writer while it waits, makes new readers queue
behind it. A process that shares the cluster already (a module's fixture
whose runs outlive each test) shares it again without queueing: behind
a writer that waits for it, it would wait for ever."""
from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

_shared_here = 0


@contextlib.contextmanager
def cluster_turn(state: Path, alone: bool) -> Iterator[None]:
    global _shared_here
    if alone and _shared_here:
        raise RuntimeError("a test that needs the cluster alone runs while this process shares it "
                           "(a fixture's runs): it would wait on itself")
    if not alone and _shared_here:
        _shared_here += 1
        try:
            yield
        finally:
            _shared_here -= 1
        return
    with open(state / "tests.turnstile", "a") as turnstile, open(state / "tests.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            _shared_here += 1
        try:
            yield        # closing both files lets go of both locks
        finally:
            if not alone:
                _shared_here -= 1
