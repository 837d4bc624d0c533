"""Named leases: a lock held until it expires unless its holder renews it.
One UPDATE decides who holds it, which is atomic on SQLite and PostgreSQL
alike, so no advisory-lock dialect is needed."""
from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from divergent.app.extensions import db, rowcount
from divergent.app.models import Lease, utcnow

# The lease whose holder is the one reconciler acting (app/reconciler.py);
# `flask doctor` reads it to say whether one is running.
RECONCILER = "reconciler"


def acquire(name: str, holder: str, ttl_seconds: float) -> bool:
    """Takes or renews the lease; False while another holder's is unexpired."""
    now = utcnow()
    expires = now + timedelta(seconds=ttl_seconds)
    taken = rowcount(db.session.execute(
        sa.update(Lease)
        .where(Lease.name == name, sa.or_(Lease.holder == holder, Lease.expires_at < now))
        .values(holder=holder, expires_at=expires)))
    if taken:
        db.session.commit()
        return True
    try:
        db.session.add(Lease(name=name, holder=holder, expires_at=expires))
        db.session.commit()
        return True
    except IntegrityError:
        db.session.rollback()
        return False


def release(name: str, holder: str) -> None:
    db.session.execute(sa.delete(Lease).where(Lease.name == name, Lease.holder == holder))
    db.session.commit()
