"""Orgs and their users: made, found by name, listed for the site's admins
(`flask orgs`, `flask users` and the Orgs page read the same rows)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import sqlalchemy as sa

from divergent.app.extensions import db
from divergent.app.models import ROLES, Org, User
from divergent.app.services.errors import Invalid, NotFound
from divergent.app.services.money.pricing import monthly_limit
from divergent.app.services.money.usage import month_spend
from divergent.slurm.jobspec import ACCOUNT_NAME

ORG_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
USERNAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class InvalidName(Invalid):
    """A name an org or user may not have."""


def get_or_create_org(name: str, account: str | None = None) -> Org:
    """The org named `name`, made if new with Slurm account `account` (its
    name by default, so sacct and fair share see orgs). An account is one
    org's alone: bills and limits are read per account."""
    if not ORG_NAME.fullmatch(name):
        raise InvalidName(f"org names are lowercase letters, digits, - and _: {name!r}")
    if account is not None and not ACCOUNT_NAME.fullmatch(account):
        raise InvalidName(f"Slurm account names are lowercase letters, digits, - and _: "
                          f"{account!r}")
    org = db.session.execute(db.select(Org).filter_by(name=name)).scalar_one_or_none()
    if org is None:
        account = account or name
        if db.session.execute(db.select(Org).filter_by(slurm_account=account)).first():
            raise Invalid(f"Slurm account {account!r} is another org's")
        org = Org(name=name, slurm_account=account)
        db.session.add(org)
        db.session.commit()
    elif account is not None and account != org.slurm_account:
        raise Invalid(f"{name} uses Slurm account {org.slurm_account!r} already")
    elif org.removed_at is not None:
        raise Invalid(f"{name} was removed; its records keep the name")
    return org


def live_orgs() -> list[Org]:
    """Every org not removed, by name."""
    return list(db.session.execute(db.select(Org).where(Org.removed_at.is_(None))
                                   .order_by(Org.name)).scalars())


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
    if org.removed_at is not None:
        raise Invalid(f"{org.name} was removed")
    user = get_or_create_user(org, username, role=role)
    if user.removed_at is not None:
        raise Invalid(f"{username!r} was removed; pick another username")
    if user.org_id != org.id:
        raise Invalid(f"{username!r} belongs to another org")
    return user


def get_or_create_user(org: Org, username: str, role: str = "member") -> User:
    if not USERNAME.fullmatch(username):
        raise InvalidName(f"usernames are lowercase letters, digits, ., - and _: {username!r}")
    user = user_named(username)
    if user is None:
        user = User(org=org, username=username, role=role)
        db.session.add(user)
        db.session.commit()
    return user


def members_of(org_id: int) -> list[User]:
    return list(db.session.execute(db.select(User).filter_by(org_id=org_id)
                                   .order_by(User.username)).scalars())


def user_named(username: str) -> User | None:
    return db.session.execute(db.select(User).filter_by(username=username)).scalar_one_or_none()


def find_user(username: str) -> User:
    user = user_named(username)
    if user is None:
        raise NotFound(f"no user named {username!r}")
    return user


@dataclass(frozen=True)
class OrgSummary:
    org: Org
    users: int
    month_spend_micros: int


def all_orgs() -> list[Org]:
    return list(db.session.execute(sa.select(Org).order_by(Org.name)).scalars())


def org_summaries() -> list[OrgSummary]:
    """Every org, by name, with its users (those not removed) and this
    month's spend."""
    counts = dict(db.session.execute(sa.select(User.org_id, sa.func.count())
                                     .where(User.removed_at.is_(None))
                                     .group_by(User.org_id)).all())
    return [OrgSummary(org, counts.get(org.id, 0), month_spend(org)) for org in all_orgs()]


def users_by_org(org_name: str | None = None) -> list[tuple[User, str]]:
    """Users with their org's name, by org then username; one org's alone
    when `org_name` is given."""
    query = (sa.select(User, Org.name).join(Org, User.org_id == Org.id)
             .order_by(Org.name, User.username))
    if org_name:
        query = query.where(Org.name == org_name)
    return [(user, org) for user, org in db.session.execute(query).all()]


def set_org_account(org: Org, account: str) -> Org:
    """Maps the org to another Slurm account (one the site made): its next
    runs are submitted and billed under it."""
    if not ACCOUNT_NAME.fullmatch(account):
        raise InvalidName(f"Slurm account names are lowercase letters, digits, - and _: "
                          f"{account!r}")
    other = db.session.execute(db.select(Org).filter_by(slurm_account=account)).scalar_one_or_none()
    if other is not None and other.id != org.id:
        raise Invalid(f"Slurm account {account!r} is another org's")
    org.slurm_account = account
    db.session.commit()
    return org


def set_monthly_limit(org: Org, text: str) -> Org:
    """An org's monthly limit as an admin writes it: dollars, or none."""
    org.monthly_limit_micros = monthly_limit(text)
    db.session.commit()
    return org


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
