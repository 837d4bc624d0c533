"""Orgs and their users."""
from __future__ import annotations

import re

from app.extensions import db
from app.models import ROLES, Org, User
from app.services.errors import Invalid, NotFound

ORG_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
USERNAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class InvalidName(ValueError):
    pass


def get_or_create_org(name: str) -> Org:
    if not ORG_NAME.fullmatch(name):
        raise InvalidName(f"org names are lowercase letters, digits, - and _: {name!r}")
    org = db.session.execute(db.select(Org).filter_by(name=name)).scalar_one_or_none()
    if org is None:
        # The org's Slurm account carries its name, so sacct and fair share see orgs.
        org = Org(name=name, slurm_account=name)
        db.session.add(org)
        db.session.commit()
    return org


def find_org(name: str) -> Org:
    org = db.session.execute(db.select(Org).filter_by(name=name)).scalar_one_or_none()
    if org is None:
        raise NotFound(f"no org named {name!r}")
    return org


def add_user(org: Org, username: str, role: str = "member") -> User:
    """A user of `org` (made if new): the admin's create-user, from the
    command line or the Orgs page."""
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}")
    try:
        user = get_or_create_user(org, username, role=role)
    except InvalidName as exc:
        raise Invalid(str(exc)) from None
    if user.org_id != org.id:
        raise Invalid(f"{username!r} belongs to another org")
    return user


def get_or_create_user(org: Org, username: str, role: str = "member") -> User:
    if not USERNAME.fullmatch(username):
        raise InvalidName(f"usernames are lowercase letters, digits, ., - and _: {username!r}")
    user = db.session.execute(db.select(User).filter_by(username=username)).scalar_one_or_none()
    if user is None:
        user = User(org=org, username=username, role=role)
        db.session.add(user)
        db.session.commit()
    return user


def find_named(model, org: Org, name: str, what: str, missing_ok: bool = False):
    """An org's row of `model` (a secret, a schedule...) by its name: the
    query is scoped by org, so another org's row is as good as absent."""
    row = db.session.execute(db.select(model).filter_by(org_id=org.id, name=name)
                             ).scalar_one_or_none()
    if row is None and not missing_ok:
        raise NotFound(f"no {what} named {name!r}")
    return row


def all_named(model, org: Org) -> list:
    """An org's rows of `model`, by name."""
    return list(db.session.execute(db.select(model).filter_by(org_id=org.id)
                                   .order_by(model.name)).scalars())
