"""Dashboard passwords, hashed with scrypt (werkzeug); never stored plain."""
from __future__ import annotations

from werkzeug.security import check_password_hash, generate_password_hash

from divergent.app.extensions import db
from divergent.app.models import User
from divergent.app.services.accounts.orgs import user_named
from divergent.app.services.errors import Invalid


def set_password(user: User, password: str) -> None:
    if user.removed_at is not None:
        raise Invalid(f"{user.username} was removed")
    if len(password) < 12:
        raise Invalid("a password needs at least 12 characters")
    user.password_hash = generate_password_hash(password, method="scrypt")
    user.session_epoch = (user.session_epoch or 0) + 1   # signed in with the old one: no more
    db.session.commit()


def user_for_session(user_id: object, epoch: object) -> User | None:
    """The user a dashboard session names, while no sign-out or new
    password has ended its sessions since it began."""
    user = db.session.get(User, user_id) if isinstance(user_id, int) else None
    if user is None or user.removed_at is not None or epoch != user.session_epoch:
        return None
    return user


def end_sessions(user: User) -> None:
    """Every session of the user's ends: a copied cookie stops working too."""
    user.session_epoch += 1
    db.session.commit()


def user_for_password(username: str, password: str) -> User | None:
    user = user_named(username)
    if user is None or not user.password_hash:
        # Same work either way, so timing does not say which usernames exist.
        check_password_hash(generate_password_hash("x", method="scrypt"), password)
        return None
    return user if check_password_hash(user.password_hash, password) else None
