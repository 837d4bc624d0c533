"""Slows brute force on API keys and passwords: failures are counted per
subject in the database, so every worker of every server process counts the
same. A wrong key counts against the key it names (its prefix; a token that
names none, against the client's address), a wrong password against its
username and address. After `DIV_AUTH_MAX_FAILURES` failures within `DIV_AUTH_WINDOW`
seconds, that subject's wrong attempts are answered 429 until the window has
passed. A right key is always served, so nobody's failures (on a shared
login node, say) lock anyone else out. Each failure is logged with the
subject, the address and the count."""
from __future__ import annotations

from datetime import timedelta
from typing import cast

import sqlalchemy as sa
from flask import current_app
from sqlalchemy.exc import IntegrityError

from divergent.app.extensions import db, rowcount
from divergent.app.models import ApiKey, AuthFailure, utcnow
from divergent.app.services.errors import ServiceError


class Throttled(ServiceError):
    status = 429

    def __init__(self, seconds: int):
        super().__init__(f"too many failed attempts: try again in {seconds} s")
        self.headers = {"Retry-After": str(seconds)}


def key_subject(prefix: str | None, address: str | None) -> str:
    """A wrong key counts against the key its prefix names; made-up prefixes
    (which would each make a row) count against the address they come from."""
    known = prefix is not None and db.session.execute(
        sa.select(ApiKey.id).filter_by(prefix=prefix)).first() is not None
    return f"key {prefix}" if known else f"address {address}"


def user_subject(username: str, address: str | None) -> str:
    """Wrong passwords count per user and address: a guesser elsewhere never
    locks the user out of their own sign-in."""
    return f"user {username} from {address}"


def _window() -> timedelta:
    return timedelta(seconds=current_app.config["DIV_AUTH_WINDOW"])


def check(subjects: list[str]) -> None:
    """Throttled if any subject has used up its failures in this window."""
    now, window = utcnow(), _window()
    rows = db.session.execute(sa.select(AuthFailure).where(
        AuthFailure.subject.in_(subjects),
        AuthFailure.failures >= current_app.config["DIV_AUTH_MAX_FAILURES"],
        AuthFailure.window_start > now - window)).scalars().all()
    if rows:
        ends = max(row.window_start for row in rows) + window
        raise Throttled(max(1, int((ends - now).total_seconds()) + 1))


def record_failure(subject: str, what: str, address: str | None) -> None:
    count = _count_one(subject)
    current_app.logger.warning("auth: %s from address %s (%s: %d in the window)",
                               what, address, subject, count)


def _count_one(subject: str) -> int:
    # A mapped class's table is a Table (typed as any FromClause).
    now, table = utcnow(), cast(sa.Table, AuthFailure.__table__)
    for _ in range(3):
        # In the window: one more. Out of it (or new): start a new window.
        if not rowcount(db.session.execute(table.update().where(
                table.c.subject == subject, table.c.window_start > now - _window())
                .values(failures=table.c.failures + 1))):
            if not rowcount(db.session.execute(table.update().where(table.c.subject == subject)
                                               .values(failures=1, window_start=now))):
                try:
                    db.session.execute(table.insert().values(subject=subject, failures=1,
                                                             window_start=now))
                except IntegrityError:      # another worker inserted it first
                    db.session.rollback()
                    continue
        db.session.commit()
        row = db.session.get(AuthFailure, subject, populate_existing=True)
        # None when a right password forgot the subject since the commit.
        return row.failures if row is not None else 0
    raise RuntimeError(f"could not count a failure for {subject}")


def forget(subject: str) -> None:
    """After a right password: that subject's count starts again."""
    db.session.execute(sa.delete(AuthFailure).where(AuthFailure.subject == subject))
    db.session.commit()
