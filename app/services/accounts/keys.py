"""API keys: `div_<id>_<secret>`, shown once, stored as the id (to find the
row, and to recognise a leaked key) plus a SHA-256 of the whole key. The
secret is 32 random bytes, so a slow KDF would add nothing but latency."""
from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from datetime import timedelta

from sqlalchemy.exc import OperationalError

from divergent.app.extensions import db
from divergent.app.models import ApiKey, User, utcnow
from divergent.app.services.errors import Invalid

log = logging.getLogger("divergent.keys")

PREFIX = "div_"


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


MAX_KEY_DAYS = 3650


def create_key(user: User, name: str = "", expires_in_days: int | None = None) -> str:
    """Creates a key for `user` and returns it: the only time it is seen.
    With `expires_in_days`, it stops working by itself then."""
    if not isinstance(name, str) or len(name) > 64:
        raise Invalid("a key's name is a string of at most 64 characters")
    if expires_in_days is not None and (not isinstance(expires_in_days, int)
                                        or isinstance(expires_in_days, bool)
                                        or not 1 <= expires_in_days <= MAX_KEY_DAYS):
        raise Invalid(f"a key expires in 1 to {MAX_KEY_DAYS} days")
    if user.removed_at is not None:
        raise Invalid(f"{user.username} was removed: no new keys")
    key_id = secrets.token_hex(6)
    key = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    expires = None if expires_in_days is None else utcnow() + timedelta(days=expires_in_days)
    db.session.add(ApiKey(user=user, prefix=f"{PREFIX}{key_id}", key_hash=_hash(key), name=name,
                          expires_at=expires))
    db.session.commit()
    return key


def key_prefix(key: str) -> str | None:
    """`div_<id>`: the part of a key that is stored as it is and shown."""
    if not key.startswith(PREFIX) or key.count("_") < 2:
        return None
    return key[: key.index("_", len(PREFIX))]


LAST_USED_PRECISION = timedelta(minutes=1)


def api_key_for(key: str) -> ApiKey | None:
    """The key's row, if the key is valid and not revoked; marks it used."""
    prefix = key_prefix(key)
    if prefix is None:
        return None
    row = db.session.execute(db.select(ApiKey).filter_by(prefix=prefix)).scalar_one_or_none()
    if row is None or row.revoked_at is not None or not hmac.compare_digest(row.key_hash, _hash(key)):
        return None
    now = utcnow()
    if (row.expires_at is not None and row.expires_at <= now) or row.user.removed_at is not None:
        return None
    # A write a minute at most: every request otherwise writes, and on
    # SQLite each write waits for the one before.
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_PRECISION:
        row.last_used_at, prefix = now, row.prefix
        try:
            db.session.commit()
        except OperationalError as exc:
            # A read never needs a write: with the database unwritable the
            # key still works where the database still reads.
            db.session.rollback()
            log.warning("could not record the use of key %s: %s", prefix, exc.orig)
    return row


def user_for_key(key: str) -> User | None:
    row = api_key_for(key)
    return None if row is None else row.user


ADMINS = ("org_admin", "site_admin")


def _keys_seen_by(user: User, whole_org: bool):
    """A user's own keys; an org admin's `whole_org`: every key of the org."""
    query = db.select(ApiKey)
    if whole_org and user.role in ADMINS:
        return query.join(User, ApiKey.user_id == User.id).where(User.org_id == user.org_id)
    return query.where(ApiKey.user_id == user.id)


def keys_of(user: User, whole_org: bool = False) -> list[ApiKey]:
    return list(db.session.execute(_keys_seen_by(user, whole_org)
                                   .order_by(ApiKey.created_at.desc())).scalars())


def revoke_key(user: User, prefix: str) -> bool:
    """Revokes one of the user's own keys, or, for an org admin, any key of
    the org (someone left, a laptop was lost); False if there is none such."""
    row = db.session.execute(_keys_seen_by(user, whole_org=True)
                             .where(ApiKey.prefix == prefix)).scalar_one_or_none()
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    db.session.commit()
    return True
