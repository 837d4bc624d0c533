"""Inserting a row that another request may insert at the same moment."""
from __future__ import annotations

from sqlalchemy.exc import IntegrityError

from divergent.app.extensions import db


def add_unique(row) -> bool:
    """Adds and commits `row`; False, with the session rolled back, when a
    unique constraint refuses it. A commit of its own and never a SAVEPOINT:
    with pysqlite a SAVEPOINT that opens the transaction is committed when
    it is released, so a rollback after it undoes nothing on SQLite while it
    undoes everything on PostgreSQL."""
    db.session.add(row)
    try:
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        return False
    return True
