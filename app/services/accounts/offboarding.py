"""Taking people and orgs off the platform without losing what they did:
a removed user's keys are revoked and their password and sessions end,
their runs stay in the org's records and bills; a removed org (refused
while it has live runs) has every user removed and its volumes kept on
the share until an explicit purge."""
from __future__ import annotations

import os
import shutil

import sqlalchemy as sa

from divergent.app.extensions import db, rowcount
from divergent.app.models import LIVE, ApiKey, Notification, NotifyChannel, Org, Run, Schedule, User, utcnow
from divergent.app.services.accounts.unix_users import leave_org
from divergent.app.services.errors import Conflict, Unavailable
from divergent.app.services.files.volumes import org_dir, trees_dir


def remove_user(user: User) -> int:
    """Removes the user; returns how many of their keys were revoked."""
    now = utcnow()
    revoked = rowcount(db.session.execute(sa.update(ApiKey).where(
        ApiKey.user_id == user.id, ApiKey.revoked_at.is_(None)).values(revoked_at=now)))
    # Their schedules would go on starting runs in their name.
    db.session.execute(sa.delete(Schedule).where(Schedule.user_id == user.id))
    user.removed_at = user.removed_at or now
    user.password_hash = None
    user.session_epoch = (user.session_epoch or 0) + 1
    db.session.commit()
    if user.unix_name:      # their own Unix user leaves the org's group
        leave_org(user.org, user.unix_name)
    return revoked


def remove_org(org: Org) -> int:
    """Removes the org, its users and where it hears of runs (its channels
    and their undelivered messages); returns how many users it had still."""
    live = db.session.scalar(sa.select(sa.func.count()).select_from(Run).where(
        Run.org_id == org.id, Run.status.in_(LIVE)))
    if live:
        raise Conflict(f"{org.name} has {live} live run{'s' if live > 1 else ''}: stop them "
                       "(div stop) or let them end first")
    users = list(db.session.execute(sa.select(User).filter_by(
        org_id=org.id, removed_at=None)).scalars())
    for user in users:
        remove_user(user)
    db.session.execute(sa.delete(Notification).where(Notification.org_id == org.id,
                                                     Notification.status == "pending"))
    db.session.execute(sa.delete(NotifyChannel).where(NotifyChannel.org_id == org.id))
    org.removed_at = org.removed_at or utcnow()
    db.session.commit()
    return len(users)


def purge_volumes(org: Org) -> None:
    """Deletes a removed org's volumes and code trees from the share. rmtree
    works through folder descriptors here (it says so), so a link a run left
    in a volume is removed, never followed."""
    if org.removed_at is None:
        raise Conflict(f"{org.name} is not removed: remove it first")
    if not shutil.rmtree.avoids_symlink_attacks:
        raise Unavailable("this platform's rmtree could follow links: purge by hand")
    for folder in (org_dir(org), trees_dir(org)):
        if os.path.islink(folder):
            raise Unavailable(f"{folder} is a link: purge by hand")
        try:
            if os.path.lexists(folder):
                shutil.rmtree(folder)
        except OSError as exc:
            raise Unavailable(f"could not delete all of {folder}: {exc}; the rest is gone, "
                              "run it again or delete what is left by hand") from None
