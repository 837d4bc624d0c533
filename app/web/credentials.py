"""Who a request comes from, as the API, the dashboard and /metrics all
read it: an API key sent as `Authorization: Bearer div_…`, or the
dashboard's signed-in session. A wrong key is counted against the key it
names (its prefix) or the address, and answered 429 past the limit
(app/services/accounts/throttle.py)."""
from __future__ import annotations

from flask import request, session

from divergent.app.models import ApiKey, User
from divergent.app.services.accounts import throttle
from divergent.app.services.accounts.keys import api_key_for, key_prefix
from divergent.app.services.accounts.passwords import user_for_session


def bearer_key() -> str | None:
    """The key a request presents, or None when it sends no bearer token."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    key = key.strip()
    return key if scheme.lower() == "bearer" and key else None


def key_row(key: str) -> ApiKey | None:
    """The live key row `key` names; a wrong one is counted."""
    row = api_key_for(key)
    if row is None:
        count_wrong_key(key)
    return row


def count_wrong_key(key: str) -> None:
    prefix = key_prefix(key)
    subject = throttle.key_subject(prefix, request.remote_addr)
    throttle.check([subject])
    throttle.record_failure(subject, f"a wrong API key ({prefix})", request.remote_addr)


def signed_in_user() -> User | None:
    return user_for_session(session.get("user_id"), session.get("epoch"))
