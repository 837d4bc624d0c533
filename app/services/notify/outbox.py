"""The sender: delivers the outbox's due messages beside the reconciler, in
a thread of its own, so a slow or dead receiver never holds up a cycle. A
message is claimed with one UPDATE before it is sent, so two senders (a
reconciler and its standby) never send it twice; a failed delivery is tried
again after 1, 2, 4, ... times DIV_NOTIFY_RETRY_SECONDS, up to
DIV_NOTIFY_MAX_ATTEMPTS tries, and its error is kept on the channel."""
from __future__ import annotations

import logging
import threading
from datetime import timedelta

import sqlalchemy as sa
from flask import current_app
from sqlalchemy.orm.exc import StaleDataError

from divergent.app.extensions import db, rowcount
from divergent.app.models import Notification, NotifyChannel, utcnow
from divergent.app.services.background import run_every
from divergent.app.services.notify.delivery import NotDelivered, send_email, send_webhook

log = logging.getLogger("divergent.outbox")
# Longer than any one delivery takes (delivery.DEADLINE and then some).
CLAIM = timedelta(seconds=60)
# Messages of one org a pass takes, the oldest due first: an org whose
# receivers are slow, or that has thousands of messages due, delays every
# other org's by at most this many deliveries a pass and never starves them.
PER_ORG = 2


def _claim(row_id: int) -> bool:
    now = utcnow()
    taken = rowcount(db.session.execute(sa.update(Notification).where(
        Notification.id == row_id, Notification.status == "pending",
        sa.or_(Notification.claimed_until.is_(None), Notification.claimed_until < now)
    ).values(claimed_until=now + CLAIM)))
    db.session.commit()
    return bool(taken)


def _deliver(row: Notification) -> None:
    channel = row.channel
    delivery = f"div-{row.id}-{row.run_name}-{row.event}"
    if channel.kind == "webhook":
        send_webhook(channel.target, row.body, delivery)
    else:
        send_email(channel.target, row.text.split(";", 1)[0], row.text, delivery)


def send_due() -> int:
    """One pass over the due messages; how many were delivered."""
    config = current_app.config
    ranked = db.select(Notification.id, Notification.next_attempt_at, sa.func.row_number().over(
        partition_by=Notification.org_id, order_by=(Notification.next_attempt_at, Notification.id)
    ).label("place")).where(Notification.status == "pending",
                            Notification.next_attempt_at <= utcnow()).subquery()
    due: list[int] = list(db.session.execute(db.select(ranked.c.id).where(
        ranked.c.place <= PER_ORG).order_by(ranked.c.next_attempt_at)).scalars())
    sent = 0
    for row_id in due:
        if not _claim(row_id):
            continue
        row = db.session.get(Notification, row_id)
        channel = db.session.get(NotifyChannel, row.channel_id) if row is not None else None
        if row is None or channel is None:      # its channel was removed since, and it with it
            continue
        row.attempts += 1
        try:
            _deliver(row)
        except Exception as exc:   # any one message's failure is its own, never a loop's
            if not isinstance(exc, NotDelivered):
                log.exception("notification %d could not be sent", row.id)
            error = (str(exc) if isinstance(exc, NotDelivered)
                     else f"could not be sent ({type(exc).__name__}); see the reconciler's log")[:500]
            row.last_error, channel.last_error, channel.last_error_at = error, error, utcnow()
            if row.attempts >= config["DIV_NOTIFY_MAX_ATTEMPTS"]:
                row.status = "failed"
            else:
                row.next_attempt_at = utcnow() + timedelta(
                    seconds=config["DIV_NOTIFY_RETRY_SECONDS"] * 2 ** (row.attempts - 1))
            log.warning("notification %d to channel %d: attempt %d failed: %s",
                        row.id, channel.id, row.attempts, error)
        else:
            row.status, row.sent_at = "sent", utcnow()
            channel.last_delivery_at = row.sent_at
            sent += 1
        row.claimed_until = None
        try:
            db.session.commit()
        except StaleDataError:     # its channel was removed meanwhile, and it with it
            db.session.rollback()
    return sent


def run_sender(app, stop: threading.Event, every: float = 1.0) -> threading.Thread:
    """Starts the sender's thread: a pass every `every` seconds until `stop`."""
    return run_every(app, "notification-sender", every, send_due, stop)
