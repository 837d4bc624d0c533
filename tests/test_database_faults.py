"""A database that cannot be written (a full disk, a volume gone read-only):
made real by making the SQLite file and its write-ahead log immutable
(chattr +i, as root). The API answers 503, never 500, and reads go on; the
reconciler logs, backs off and goes on, and acts again once it can."""
from __future__ import annotations

import contextlib
import logging
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from divergent.app.extensions import db
from divergent.app.models import ApiKey, utcnow
from divergent.app.reconciler import run_forever
from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user


@pytest.fixture
def app(app_context):
    app_context.config["KEY"] = create_key(get_or_create_user(get_or_create_org("acme"), "alice"))
    return app_context


@contextlib.contextmanager
def unwritable(folder: Path):
    files = [str(p) for p in (folder / "t.db", folder / "t.db-wal") if p.exists()]
    subprocess.run(["chattr", "+i", *files], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *files], check=True)


def test_a_database_that_cannot_be_written_is_a_503_and_reads_go_on(app, tmp_path):
    client = app.test_client()
    headers = {"Authorization": f"Bearer {app.config['KEY']}"}
    assert client.get("/api/v1/whoami", headers=headers).status_code == 200   # last use: now
    with unwritable(tmp_path):
        assert client.get("/api/v1/whoami", headers=headers).status_code == 200  # no write
        answer = client.put("/api/v1/secrets/TOKEN", json={"value": "x"}, headers=headers)
        assert answer.status_code == 503 and "database" in answer.get_json()["error"]
        assert answer.headers["Retry-After"] == "5"
    assert client.put("/api/v1/secrets/TOKEN", json={"value": "x"},
                      headers=headers).status_code < 300                     # and back


def test_a_key_whose_last_use_is_due_still_reads_while_nothing_can_be_written(app, tmp_path):
    client = app.test_client()
    headers = {"Authorization": f"Bearer {app.config['KEY']}"}
    key = db.session.execute(db.select(ApiKey)).scalar_one()
    key.last_used_at = utcnow() - timedelta(minutes=5)       # its use is due to be written
    db.session.commit()
    with unwritable(tmp_path):
        answer = client.get("/api/v1/whoami", headers=headers)
        assert answer.status_code == 200, answer.get_data(as_text=True)
    db.session.rollback()
    assert db.session.get(ApiKey, key.id).last_used_at < utcnow() - timedelta(minutes=4)


def test_the_reconciler_outlives_a_database_it_cannot_write(app, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="divergent.reconciler"), unwritable(tmp_path):
        run_forever(0.05, stop_after=0.5)                   # returns: it never died
    assert "a reconciler cycle failed; trying again in" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="divergent.reconciler"):
        run_forever(0.05, stop_after=0.3)
    assert "is acting" in caplog.text                       # back once it can write
