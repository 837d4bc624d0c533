"""Notifications: an org's channels (a webhook or an email address) and the
messages a run's end puts in the outbox for them. A message is written in
the transaction that ends its run, and delivered later by the sender
(app/services/notify/outbox.py): nothing outside is called from here."""
from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from flask import current_app

from divergent.app.extensions import db
from divergent.app.models import Notification, NotifyChannel, Org, Run, Schedule, User, iso_utc
from divergent.app.services.errors import Invalid, NotFound
from divergent.app.services.money.pricing import format_usd, usd_text
from divergent.app.services.notify.delivery import NotDelivered, Unresolved, checked_address

# In the order a message names them: a run that failed and failed its checks
# is one message, "failed".
EVENTS = ("failed", "budget_exceeded", "limit_reached", "checks_failed", "ended", "idle")
DEFAULT_EVENTS = ("failed", "checks_failed", "budget_exceeded", "limit_reached", "idle")
# Channels an org may have: each run's end writes a row for each.
MAX_CHANNELS = 20
# An address as mail servers take it, without a name or a second line.
EMAIL = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")


def parse_events(value: object) -> list[str]:
    if value is None:
        return list(DEFAULT_EVENTS)
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise Invalid(f"events: a list of {', '.join(EVENTS)}")
    unknown = [event for event in value if event not in EVENTS]
    if unknown:
        raise Invalid(f"unknown event {unknown[0]!r}: one of {', '.join(EVENTS)}")
    return [event for event in EVENTS if event in value]


def parse_webhook(url: object) -> str:
    """An http(s) URL without credentials, whose host (or every address its
    name resolves to now) webhooks may reach; delivery checks the addresses
    again, as a name's answer may change (app/services/notify/delivery.py)."""
    if not isinstance(url, str) or len(url) > 2048 or any(c in url for c in "\r\n\0 "):
        raise Invalid("a webhook is an http:// or https:// URL")
    try:
        parts = urlsplit(url)
    except ValueError:      # "http://[::1": an address left open
        raise Invalid("a webhook is an http:// or https:// URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid("a webhook is an http:// or https:// URL")
    if parts.username or parts.password:
        raise Invalid("a webhook URL carries no user or password (put a token in its path)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Invalid("the webhook's port is not a number") from None
    try:
        checked_address(parts.hostname, port)
    except Unresolved:
        pass                # checked as it is delivered, when it must resolve
    except NotDelivered as exc:
        raise Invalid(str(exc)) from None
    return url


def parse_email(address: object) -> str:
    if not isinstance(address, str) or len(address) > 254 or not EMAIL.fullmatch(address):
        raise Invalid("an email address such as ops@example.org")
    if not current_app.config["DIV_SMTP_HOST"]:
        raise Invalid("this site has no SMTP server (DIV_SMTP_HOST): email is not sent")
    return address


def add_channel(user: User, webhook: object = None, email: object = None,
                events: object = None, schedule: object = None) -> NotifyChannel:
    if (webhook is None) == (email is None):
        raise Invalid("a channel is a webhook or an email address: give one")
    kind, target = ("webhook", parse_webhook(webhook)) if webhook is not None else (
        "email", parse_email(email))
    if schedule is not None and not isinstance(schedule, str):
        raise Invalid("schedule is a schedule's name")
    if schedule is not None and db.session.execute(db.select(Schedule.id).filter_by(
            org_id=user.org_id, name=schedule)).first() is None:
        raise NotFound(f"no schedule named {schedule!r}")
    row = NotifyChannel(org_id=user.org_id, user_id=user.id, kind=kind, target=target,
                        events=parse_events(events), schedule_name=schedule)
    # Counted with the new one written and the org locked (PostgreSQL) or
    # the database (SQLite, from the write on): two adds at once never both
    # find room for one.
    db.session.execute(db.select(Org.id).filter_by(id=user.org_id).with_for_update())
    db.session.add(row)
    db.session.flush()
    count: int = db.session.execute(db.select(db.func.count(NotifyChannel.id)).filter_by(
        org_id=user.org_id)).scalar_one()
    if count > MAX_CHANNELS:
        db.session.rollback()
        raise Invalid(f"an org has at most {MAX_CHANNELS} notification channels")
    db.session.commit()
    return row


def channels_of(org: Org) -> list[NotifyChannel]:
    return list(db.session.execute(db.select(NotifyChannel).filter_by(
        org_id=org.id).order_by(NotifyChannel.id)).scalars())


def remove_channel(org: Org, channel_id: object) -> None:
    row = None
    # Ids are database integers: 18 digits or more name none (and overflow).
    if (isinstance(channel_id, str) and channel_id.isascii() and channel_id.isdigit()
            and len(channel_id) < 18):
        row = db.session.execute(db.select(NotifyChannel).filter_by(
            org_id=org.id, id=int(channel_id))).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no notification channel {channel_id}")
    db.session.execute(db.delete(Notification).filter_by(channel_id=row.id))
    db.session.delete(row)
    db.session.commit()


def channel_json(row: NotifyChannel) -> dict:
    return {"id": row.id, "kind": row.kind, "target": row.target, "on": row.events,
            "schedule": row.schedule_name, "created_at": iso_utc(row.created_at),
            "last_delivery_at": iso_utc(row.last_delivery_at),
            "last_error": row.last_error, "last_error_at": iso_utc(row.last_error_at)}


def events_of(run: Run) -> list[str]:
    """What a run's end was, most telling first."""
    events = [run.status] if run.status in ("failed", "budget_exceeded", "limit_reached") else []
    if any(check.get("verdict") == "failed" for check in run.checks or []):
        events.append("checks_failed")
    return events + ["ended"]


OUTCOMES = {"budget_exceeded": "reached its spend limit",
            "limit_reached": "was stopped: the org reached its monthly limit"}


def _outcome(run: Run) -> str:
    """How the run ended, whichever event a channel heard it by."""
    what = OUTCOMES.get(run.status, run.status)
    if run.status == "failed" and run.exit_code:
        what += f" (exit code {run.exit_code})"
    if run.status == "succeeded" and "checks_failed" in events_of(run):
        what += " but failed its checks"
    return what


def run_url(run: Run) -> str:
    return f"{current_app.config['DIV_PUBLIC_URL'].rstrip('/')}/runs/{run.name}"


def message(run: Run, event: str) -> tuple[str, dict]:
    """One line that says what happened, with the run's URL, checks (when
    it has any) and cost; and the JSON a webhook gets (`text` is what Slack
    shows)."""
    url = run_url(run)
    checks = [f"{c['check']} {c['verdict']}" + (f" ({c['value']})" if c.get("value") is not None
                                                  else "") for c in run.checks or []]
    origin = f" (schedule {run.schedule_name})" if run.schedule_name else ""
    text = "; ".join([f"divergent: run {run.name}{origin} {_outcome(run)}",
                      *([f"checks: {', '.join(checks)}"] if checks else []),
                      f"cost {format_usd(run.cost_micros)}", url])
    body = {"text": text, "event": event, "run": run.name, "status": run.status,
            "exit_code": run.exit_code, "schedule": run.schedule_name,
            "sweep": run.sweep.name if run.sweep_id else None,
            "checks": run.checks or [], "cost": usd_text(run.cost_micros), "url": url}
    return text, body


def enqueue_for(run: Run) -> int:
    """Adds the messages a run's end asks for to the session (committed with
    the run's end); how many."""
    channels: Iterable[NotifyChannel] = db.session.execute(
        db.select(NotifyChannel).filter_by(org_id=run.org_id)).scalars()
    events = events_of(run)
    added = 0
    for channel in channels:
        if channel.schedule_name is not None and channel.schedule_name != run.schedule_name:
            continue
        wanted = [event for event in events if event in channel.events]
        if not wanted:
            continue
        text, body = message(run, wanted[0])
        db.session.add(Notification(org_id=run.org_id, channel_id=channel.id, run_name=run.name,
                                    event=wanted[0], text=text, body=body))
        added += 1
    return added


def enqueue_idle_warning(run: Run, measure: str, below: float, warn_minutes: float,
                         stop_minutes: float) -> int:
    """Tells the run's owner, on their channels that hear `idle`, that the
    site's idle policy will stop it (committed with the reading that saw it)."""
    url = run_url(run)
    what = "CPUs" if measure == "cpu" else "GPUs"
    text = (f"divergent: run {run.name}'s {what} have been under {below:.0%} utilization "
            f"for {warn_minutes:g} minutes; it will be stopped if they stay idle "
            f"{stop_minutes:g} minutes more; {url}")
    body = {"text": text, "event": "idle", "run": run.name, "status": run.status,
            "stop_in_minutes": stop_minutes, "url": url}
    channels: Iterable[NotifyChannel] = db.session.execute(db.select(NotifyChannel).filter_by(
        org_id=run.org_id, user_id=run.user_id)).scalars()
    added = 0
    for channel in channels:
        if "idle" in channel.events:
            db.session.add(Notification(org_id=run.org_id, channel_id=channel.id,
                                        run_name=run.name, event="idle", text=text, body=body))
            added += 1
    return added
