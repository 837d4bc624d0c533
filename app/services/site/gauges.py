"""The numbers every server process and the reconciler share for
`/metrics` (app/services/cluster/monitoring.py reads them): rows of site_gauge
(Slurm calls that failed, by call; the reconciler's last cycle), each
written in a transaction of its own so that a request that rolls back
keeps its count; and log followers, one small file per server process,
summed over the processes still alive."""
from __future__ import annotations

import contextlib
import os
import time

import sqlalchemy as sa
from flask import current_app

from divergent.app.extensions import db
from divergent.app.models import SiteGauge
from divergent.app.services.instance_files import replace_file

SLURM_ERRORS = "slurm_errors:"
CYCLE_ENDED, CYCLE_SECONDS, CYCLES = "reconciler_cycle_ended", "reconciler_cycle_seconds", \
    "reconciler_cycles"
SQLITE_WAIT_MS, SQLITE_BUSY_MS = 500, 10_000


def _write(*changes: tuple[str, float, bool]) -> None:
    """Rows of site_gauge set, or added to when `add`, in a transaction of
    their own. On SQLite a writer holding the database makes it give up
    after a moment, not the usual 10 s: a count is not worth a stalled
    request."""
    with db.engine.begin() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            conn.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_WAIT_MS}")
        try:
            for name, value, add in changes:
                _upsert(conn, name, value, add)
        finally:
            if sqlite:
                conn.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")


def _upsert(conn, name: str, value: float, add: bool) -> None:
    new = SiteGauge.value + value if add else sa.literal(value)
    row = sa.update(SiteGauge).where(SiteGauge.name == name).values(value=new)
    if conn.execute(row).rowcount:
        return
    try:
        with conn.begin_nested():
            conn.execute(sa.insert(SiteGauge).values(name=name, value=value))
    except sa.exc.IntegrityError:    # another process made it first
        conn.execute(row)


def count_slurm_error(call: str) -> None:
    _write((SLURM_ERRORS + call, 1, True))


def record_cycle(seconds: float) -> None:
    """The reconciler's cycle that just ended: when, and how long it took."""
    _write((CYCLE_ENDED, time.time(), False), (CYCLE_SECONDS, seconds, False), (CYCLES, 1, True))


def _followers_dir() -> str:
    return os.path.join(current_app.instance_path, "followers")


def followers_file() -> str:
    """This process's count of the logs it follows."""
    return os.path.join(_followers_dir(), str(os.getpid()))


def note_followers(path: str, count: int) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    replace_file(path, str(count), 0o600)


def followers_now() -> int:
    """Followers of the server processes still alive; a dead one's file goes."""
    total, folder = 0, _followers_dir()
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if not name.isdigit():
            continue
        try:
            os.kill(int(name), 0)
        except ProcessLookupError:
            with contextlib.suppress(FileNotFoundError):    # another scrape was first
                os.unlink(os.path.join(folder, name))
            continue
        except PermissionError:
            pass   # alive, another user's
        try:
            with open(os.path.join(folder, name)) as f:
                total += int(f.read() or 0)
        except (FileNotFoundError, ValueError):
            continue
    return total


def gauges(prefix: str) -> list[tuple[str, float]]:
    return list(db.session.execute(sa.select(SiteGauge.name, SiteGauge.value).where(
        SiteGauge.name.startswith(prefix, autoescape=True)).order_by(SiteGauge.name)).all())
