"""The tables: orgs and their people, keys, projects, volumes and runs.

Money is integer micro-dollars (1 USD = 1,000,000); times are aware UTC
datetimes; every row that belongs to an org carries org_id, and every query
of the app is scoped by it."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from divergent.app.extensions import db

# db.Model is made when db is (an attribute, not a class mypy can subclass):
# mypy is told what it is, Flask-SQLAlchemy's Model on a declarative base.
if TYPE_CHECKING:
    from flask_sqlalchemy.model import Model
    from sqlalchemy.orm import DeclarativeBase

    class Base(Model, DeclarativeBase):
        pass
else:
    Base = db.Model

ROLES = ("member", "org_admin", "site_admin")
RUN_STATUSES = ("queued", "running", "succeeded", "failed", "canceled",
                "budget_exceeded", "limit_reached")
# A run still to end: queued or running.
LIVE = ("queued", "running")


def iso_utc(moment: datetime | None) -> str | None:
    """2026-11-30T21:03:32Z: how the API writes a time."""
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator):
    """Stores UTC, returns aware datetimes on SQLite as on PostgreSQL."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime: use aware UTC datetimes")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Org(Base):
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(63), unique=True)
    slurm_account: Mapped[str] = mapped_column(sa.String(63), unique=True)
    # Per calendar month; None means no limit.
    monthly_limit_micros: Mapped[int | None] = mapped_column(sa.BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Offboarded (flask remove-org): its users removed, its records kept.
    removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Its volumes, code trees and blobs together, at most (None: the site's
    # DIV_STORAGE_QUOTA); what they took when last measured, plus what the
    # server has written since (app/services/files/quota.py).
    storage_quota_bytes: Mapped[int | None] = mapped_column(sa.BigInteger)
    storage_used_bytes: Mapped[int] = mapped_column(sa.BigInteger, default=0,
                                                    server_default="0")
    storage_measured_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    users = relationship("User", back_populates="org")


class User(Base):
    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(sa.ForeignKey("org.id"), index=True)
    username: Mapped[str] = mapped_column(sa.String(64), unique=True)
    email: Mapped[str | None] = mapped_column(sa.String(255))
    password_hash: Mapped[str | None] = mapped_column(sa.String(255))
    role: Mapped[str] = mapped_column(sa.String(16), default="member")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # A dashboard session carries the epoch it began in; signing out or a
    # new password moves it on, so every earlier session cookie stops working.
    session_epoch: Mapped[int] = mapped_column(default=0, server_default="0")
    # The member's own Unix user, where the site maps members to theirs
    # (flask user-unix-name; submit_as = "member"): their jobs run as it.
    unix_name: Mapped[str | None] = mapped_column(sa.String(32))
    # Who the site's OpenID Connect provider says this is ("issuer sub"),
    # once they signed in through it.
    oidc_subject: Mapped[str | None] = mapped_column(sa.String(512), unique=True)
    # Offboarded (flask remove-user): no key, password or session works; the
    # runs they started stay theirs.
    removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    org = relationship("Org", back_populates="users")
    api_keys = relationship("ApiKey", back_populates="user")

    __table_args__ = (sa.CheckConstraint(sa.column("role").in_(ROLES), name="role"),)


class ApiKey(Base):
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("user.id"), index=True)
    # The key's visible start (div_<id>), recognisable when leaked, used to
    # find the row; the secret part is only ever stored hashed.
    prefix: Mapped[str] = mapped_column(sa.String(32), unique=True)
    key_hash: Mapped[str] = mapped_column(sa.String(128))
    name: Mapped[str] = mapped_column(sa.String(64), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    user = relationship("User", back_populates="api_keys")


class Project(Base):
    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(sa.ForeignKey("org.id"))
    name: Mapped[str] = mapped_column(sa.String(63))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (sa.UniqueConstraint("org_id", "name"),)


class Volume(Base):
    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(sa.ForeignKey("org.id"))
    name: Mapped[str] = mapped_column(sa.String(63))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (sa.UniqueConstraint("org_id", "name"),)


class Run(Base):
    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(sa.ForeignKey("org.id"))
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("project.id"))
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("user.id"))
    name: Mapped[str] = mapped_column(sa.String(63))
    status: Mapped[str] = mapped_column(sa.String(16), default="queued")
    # "batch", or an interactive "shell" or "notebook" (app/services/runs/interactive.py).
    kind: Mapped[str] = mapped_column(sa.String(8), default="batch", server_default="batch")
    slurm_job_id: Mapped[str | None] = mapped_column(sa.String(32))
    # The Unix user its job runs as (who cancels and shortens it); None:
    # the server's own, as before a site moved to org users.
    unix_user: Mapped[str | None] = mapped_column(sa.String(32))
    pending_reason: Mapped[str | None] = mapped_column(sa.String(64))
    # The nodes Slurm gave it (its NodeList: gpu-[1-2]), shown on its page.
    nodes: Mapped[str | None] = mapped_column(sa.String(255))
    # Slurm's final state (COMPLETED, OUT_OF_MEMORY, ...): says why a run failed.
    slurm_state: Mapped[str | None] = mapped_column(sa.String(32))
    # Why we cancelled it ourselves (budget_exceeded, limit_reached), if we did.
    stopped_for: Mapped[str | None] = mapped_column(sa.String(16))
    # The Idempotency-Key `div run` sent: its retry after a lost answer gets
    # this run, never a second one.
    request_key: Mapped[str | None] = mapped_column(sa.String(64))

    gpu_type: Mapped[str] = mapped_column(sa.String(8))
    gpus: Mapped[int]
    cpus: Mapped[int]
    memory_gib: Mapped[int]
    image: Mapped[str] = mapped_column(sa.String(255))
    command: Mapped[str] = mapped_column(sa.Text)
    env: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    code_ref: Mapped[str | None] = mapped_column(sa.String(255))  # <volume>/code/<hash8>
    telemetry: Mapped[str | None] = mapped_column(sa.Text)       # the run's telemetry.toml

    rate_micros_per_hour: Mapped[int] = mapped_column(sa.BigInteger)
    max_spend_micros: Mapped[int | None] = mapped_column(sa.BigInteger)
    time_limit_minutes: Mapped[int | None]
    # What set --time: "spend" (--max-spend), "org" (what the org's monthly
    # limit had left) or "maxtime" (the partition's MaxTime); a TIMEOUT then
    # means budget_exceeded, limit_reached or failed.
    time_limit_by: Mapped[str | None] = mapped_column(sa.String(8))
    cost_micros: Mapped[int] = mapped_column(sa.BigInteger, default=0)

    exit_code: Mapped[int | None]
    elapsed_seconds: Mapped[int | None]        # every attempt's, when Slurm requeued it
    # Attempts before the current one: Slurm requeues a run whose node failed.
    restarts: Mapped[int] = mapped_column(default=0, server_default="0")
    metrics: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    # How far the reconciler has read the run's metrics.jsonl, and what it saw.
    metrics_offset: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    metrics_points: Mapped[int] = mapped_column(default=0)
    metrics_malformed: Mapped[int] = mapped_column(default=0)
    checks: Mapped[list] = mapped_column(sa.JSON, default=list)
    # What it used (app/services/runs/usage.py): its samplers' running
    # totals, then Slurm's accounting at its end; the idle policy's state
    # for it; and whether it said it may idle (div run --allow-idle).
    usage: Mapped[dict | None] = mapped_column(sa.JSON)
    # When the reconciler last read its samplers (epoch seconds): a column
    # of its own, so that a cycle decides without loading `usage`.
    usage_read_at: Mapped[float | None]
    idle: Mapped[dict | None] = mapped_column(sa.JSON)
    allow_idle: Mapped[bool] = mapped_column(default=False, server_default=sa.false())
    # The secrets it was given: names to show, and the values, encrypted, to
    # mask in its log (the values it ran with, even if a secret changes since).
    secret_names: Mapped[list] = mapped_column(sa.JSON, default=list)
    secrets_sealed: Mapped[str | None] = mapped_column(sa.Text)
    # Buckets copied into volumes before it started (--mount): url, path
    # (/mnt/NAME) and copy (the transfer run's name), each.
    mounts: Mapped[list] = mapped_column(sa.JSON, default=list)
    # A sweep's member (app/services/runs/sweeps.py): its sweep, its index in the
    # Slurm job array and the values it was given ({"LR": "1e-3"}).
    sweep_id: Mapped[int | None] = mapped_column(sa.ForeignKey("sweep.id"), index=True)
    sweep_index: Mapped[int | None]
    sweep_values: Mapped[dict | None] = mapped_column(sa.JSON)
    # The schedule that started it, if one did: its notifications apply.
    schedule_name: Mapped[str | None] = mapped_column(sa.String(63))

    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When a follower of its log saw its command end (its exit file): the
    # reconciler asks Slurm about it at once, not at its next cycle.
    end_heard_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)

    project = relationship("Project")
    user = relationship("User")
    sweep = relationship("Sweep")

    __table_args__ = (
        sa.UniqueConstraint("org_id", "name"),
        sa.CheckConstraint(sa.column("status").in_(RUN_STATUSES), name="status"),
        # The runs page: an org's runs newest first (keyset pagination).
        sa.Index("ix_run_org_created", "org_id", "created_at", "id"),
        # The reconciler: every live run of every org.
        sa.Index("ix_run_status", "status"),
        sa.Index("ux_run_org_request_key", "org_id", "request_key", unique=True),
    )


class Lease(Base):
    """A named lock with an expiry, so that of several reconcilers exactly one
    acts (app/services/leases.py); works the same on SQLite and PostgreSQL."""

    name: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(sa.String(64))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SiteGauge(Base):
    """A number every server process and the reconciler share, for /metrics
    (app/services/cluster/monitoring.py): a counter (Slurm calls that failed, by
    call) or the reconciler's last cycle (when it ended, how long it took)."""

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    value: Mapped[float] = mapped_column(sa.Float, default=0.0)


class Secret(Base):
    """An org's secret: its value encrypted at rest (app/services/accounts/secrets.py),
    never returned by the API or shown by the dashboard."""

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(sa.ForeignKey("org.id"))
    name: Mapped[str] = mapped_column(sa.String(128))
    sealed_value: Mapped[str] = mapped_column(sa.Text)
    set_by_id: Mapped[int] = mapped_column(sa.ForeignKey("user.id"))
    set_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    set_by = relationship("User")

    __table_args__ = (sa.UniqueConstraint("org_id", "name"),)


class AuthFailure(Base):
    """Failed sign-ins and bad API keys per client address or username, in
    the database so every server process counts the same
    (app/services/accounts/throttle.py)."""

    subject: Mapped[str] = mapped_column(sa.String(160), primary_key=True)
    failures: Mapped[int] = mapped_column(default=0)
    window_start: Mapped[datetime] = mapped_column(UTCDateTime)


class Schedule(Base):
    """A run the reconciler starts on a cron schedule (app/services/runs/schedules.py):
    the request `div run` would send, code already uploaded, run as the
    user who made it."""

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(sa.ForeignKey("org.id"))
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("user.id"))
    name: Mapped[str] = mapped_column(sa.String(63))
    cron: Mapped[str] = mapped_column(sa.String(200))
    request: Mapped[dict] = mapped_column(sa.JSON)
    next_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_run_name: Mapped[str | None] = mapped_column(sa.String(63))
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    # The IANA time zone its cron is read in.
    tz: Mapped[str] = mapped_column(sa.String(64), default="UTC", server_default="UTC")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    user = relationship("User")

    __table_args__ = (
        sa.UniqueConstraint("org_id", "name"),
        # The reconciler: every schedule that is due.
        sa.Index("ix_schedule_next_at", "next_at"),
    )


class Sweep(Base):
    """Runs over every combination of some env values, submitted as one
    Slurm job array (app/services/runs/sweeps.py); each member is a run."""

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(sa.ForeignKey("org.id"))
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("user.id"))
    name: Mapped[str] = mapped_column(sa.String(63))
    # {"LR": ["1e-3", "3e-4"], ...}, in the order given: member i's values
    # are the i-th combination (the last key varies fastest).
    axes: Mapped[dict] = mapped_column(sa.JSON)
    size: Mapped[int]
    schedule_name: Mapped[str | None] = mapped_column(sa.String(63))
    request_key: Mapped[str | None] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        sa.UniqueConstraint("org_id", "name"),
        sa.Index("ux_sweep_org_request_key", "org_id", "request_key", unique=True),
    )


class NotifyChannel(Base):
    """Where an org hears about its runs' ends (app/services/notify/notices.py): a
    webhook or an email address, for some events, of every run or of one
    schedule's; with its last delivery and error."""

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(sa.ForeignKey("org.id"), index=True)
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("user.id"))
    kind: Mapped[str] = mapped_column(sa.String(8))          # webhook | email
    target: Mapped[str] = mapped_column(sa.String(2048))     # the URL or the address
    events: Mapped[list] = mapped_column(sa.JSON)
    schedule_name: Mapped[str | None] = mapped_column(sa.String(63))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_delivery_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    last_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    # An id is never given again (SQLite reuses the highest otherwise): a
    # script's `div notify rm ID` never removes a channel made since.
    __table_args__ = {"sqlite_autoincrement": True}


class Notification(Base):
    """The outbox: one message for one channel, written in the transaction
    that ended its run, delivered by the sender (app/services/notify/outbox.py)."""

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(sa.ForeignKey("org.id"))
    channel_id: Mapped[int] = mapped_column(sa.ForeignKey("notify_channel.id", ondelete="CASCADE"))
    run_name: Mapped[str] = mapped_column(sa.String(63))
    event: Mapped[str] = mapped_column(sa.String(16))
    text: Mapped[str] = mapped_column(sa.Text)
    body: Mapped[dict] = mapped_column(sa.JSON)
    status: Mapped[str] = mapped_column(sa.String(8), default="pending")  # pending|sent|failed
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # A sender that took it may not be taken from until then (several
    # reconcilers, each with a sender, never deliver one message twice).
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    channel = relationship("NotifyChannel")

    __table_args__ = (sa.Index("ix_notification_due", "status", "next_attempt_at"),)
