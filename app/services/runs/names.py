"""A run's name, unique in its org: generated names, the insert that
claims one, and the run an Idempotency-Key already made."""
from __future__ import annotations

import re
import secrets
import string
from collections.abc import Callable

from divergent.app.extensions import db
from divergent.app.models import Run
from divergent.app.services.errors import (
    Conflict,
    Invalid,
)
from divergent.app.services.rows import add_unique

REQUEST_KEY = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


def free_name(prefix: str, taken: Callable[[str], bool]) -> str:
    """A generated name that `taken` finds free: the prefix and four base-36
    characters, longer after collisions. Asked under the org's hold
    (sized_under_lock), which every insert of a run or sweep takes, so the
    name is still free at the commit: no insert fails on a name, rolls
    back (which ends the hold) and is tried again unheld."""
    alphabet = string.ascii_lowercase + string.digits
    for attempt in range(8):
        name = prefix + "".join(secrets.choice(alphabet) for _ in range(4 + attempt // 2))
        if not taken(name):
            return name
    raise Conflict("could not find a free name; try again")


def _run_named(org_id: int, name: str) -> bool:
    return db.session.execute(
        db.select(Run.id).filter_by(org_id=org_id, name=name)).first() is not None


def insert_run(run: Run, wanted: str | None) -> Run | None:
    """Unique in the org, committed: the run is on record before its job
    exists. Returns the run a request with the same key made meanwhile, if
    one did (a retry that came while the first request was still at work)."""
    run.name = wanted or free_name("run-", lambda name: _run_named(run.org_id, name))
    if add_unique(run):
        return None
    made = run_for_request_key(run.org_id, run.request_key)
    if made is not None:
        return made
    raise Conflict(f"a run named {run.name} already exists")


def run_for_request_key(org_id: int, key: str | None) -> Run | None:
    """The run an earlier POST /runs with this Idempotency-Key made, if any."""
    if key is None:
        return None
    if not REQUEST_KEY.fullmatch(key):
        raise Invalid("Idempotency-Key must be 16 to 64 letters, digits, - or _")
    return db.session.execute(
        db.select(Run).filter_by(org_id=org_id, request_key=key)).scalar_one_or_none()
