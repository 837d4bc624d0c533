"""Offboarding in-process: a removed user's keys, password and sessions
stop at once and their runs stay; an org is removed only without live runs,
its volumes kept until a purge; a key with an expiry stops by itself."""
from __future__ import annotations

import os
import re
from datetime import timedelta

import pytest
import sqlalchemy as sa

from divergent.app.extensions import db
from divergent.app.models import (
    ApiKey,
    Notification,
    NotifyChannel,
    Org,
    Project,
    Run,
    Schedule,
    User,
    utcnow,
)
from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.accounts.passwords import set_password, user_for_password
from divergent.app.services.errors import Forbidden
from divergent.app.services.files.volumes import ensure_volume
from divergent.app.services.notify.notices import add_channel
from divergent.app.services.runs.request import parse_request
from divergent.app.services.runs.submit import create_run
from tests.test_admin_commands import flask


def seed(app, status="succeeded") -> str:
    with app.app_context():
        org = get_or_create_org("acme")
        user = get_or_create_user(org, "alice")
        set_password(user, "a-long-password")
        project = Project(org_id=org.id, name="p")
        db.session.add(project)
        db.session.flush()
        db.session.add(Run(org_id=org.id, project_id=project.id, user_id=user.id, name="run-1",
                           status=status, gpu_type="cpu", gpus=1, cpus=1, memory_gib=2,
                           image="img", command="true", rate_micros_per_hour=300_000,
                           cost_micros=5_000))
        db.session.commit()
        ensure_volume(org, "data")
        return create_key(user)


def whoami(client, key: str) -> int:
    return client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {key}"}).status_code


def test_a_removed_user_can_do_nothing_and_their_runs_stay(app, client, runner):
    key = seed(app)
    assert whoami(client, key) == 200
    assert "alice removed; 1 key revoked" in flask(runner, "remove-user", "alice")
    assert whoami(client, key) == 401
    with app.app_context():
        assert user_for_password("alice", "a-long-password") is None
        run = db.session.execute(db.select(Run)).scalar_one()
        assert db.session.get(User, run.user_id).username == "alice"
    assert "alice was removed: no new keys" in flask(runner, "create-key", "alice", code=1)
    assert "'alice' was removed" in flask(runner, "create-user", "acme", "alice", code=1)
    assert "removed" in flask(runner, "users").splitlines()[1]


def test_an_org_with_live_runs_stays_and_one_without_keeps_its_volumes_until_a_purge(
        app, client, runner):
    key = seed(app, status="running")
    assert "acme has 1 live run: stop them" in flask(runner, "remove-org", "acme", code=1)
    assert whoami(client, key) == 200
    with app.app_context():
        db.session.execute(db.update(Run).values(status="succeeded"))
        db.session.commit()
    with app.app_context():
        org = db.session.execute(db.select(Org).filter_by(name="acme")).scalar_one()
        add_channel(db.session.execute(db.select(User)).scalar_one(),
                    webhook="https://hooks.example.org/acme")
        db.session.add(Notification(org_id=org.id, channel_id=db.session.execute(
            db.select(NotifyChannel.id)).scalar_one(), run_name="run-1", event="failed",
            text="t", body={}))
        db.session.commit()
    removed = flask(runner, "remove-org", "acme")
    assert ("acme removed with its 1 user and its notification channels; its runs and bills "
            "are kept") in removed
    assert whoami(client, key) == 401
    # Its channels hear of nothing more, and the org list says it is gone.
    with app.app_context():
        assert db.session.execute(db.select(NotifyChannel)).first() is None
        assert db.session.execute(db.select(Notification)).first() is None
    listed = [line for line in flask(runner, "orgs").splitlines() if line.startswith("acme")]
    assert re.fullmatch(r"acme +acme +0 +\$0\.01 +no limit +removed \d{4}-\d\d-\d\d", listed[0]), listed
    assert re.search(r"acme was removed on \d{4}-\d\d-\d\d; nothing more to remove",
                     flask(runner, "remove-org", "acme"))
    share = os.path.join(app.config["DIV_DATA_DIR"], "share", "acme")
    assert os.path.isdir(os.path.join(share, "data"))
    assert "acme was removed" in flask(runner, "create-org", "acme", code=2)
    flask(runner, "remove-org", "acme", "--purge", "--yes")
    assert not os.path.exists(share)


def test_a_key_that_expires_stops_by_itself(app, client, runner):
    seed(app)
    key = flask(runner, "create-key", "alice", "--expires-in", "30").strip()
    assert whoami(client, key) == 200
    with app.app_context():
        row = db.session.execute(db.select(ApiKey).filter(ApiKey.expires_at.is_not(None))).scalar_one()
        assert timedelta(days=29) < row.expires_at - utcnow() <= timedelta(days=30)
        row.expires_at = utcnow() - timedelta(seconds=1)
        db.session.commit()
    assert whoami(client, key) == 401
    assert "Invalid value for '--expires-in'" in flask(runner, "create-key", "alice",
                                                      "--expires-in", "0", code=2)


def test_a_removed_users_dashboard_session_ends_at_once(app, client, runner):
    seed(app)
    page = client.get("/login").get_data(as_text=True)
    token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)
    signed = client.post("/login", data={"username": "alice", "password": "a-long-password",
                                         "csrf_token": token})
    assert signed.status_code == 302 and client.get("/").status_code == 200
    flask(runner, "remove-user", "alice")
    assert client.get("/").status_code == 302          # back to the sign-in page


def test_a_removed_users_schedules_go_and_nothing_starts_runs_in_their_name(app, runner):
    seed(app)
    with app.app_context():
        org = get_or_create_org("acme")
        user = get_or_create_user(org, "alice")
        db.session.add(Schedule(org_id=org.id, user_id=user.id, name="nightly", cron="0 3 * * *",
                                request={"project": "p", "command": "true", "gpu": "cpu"},
                                next_at=utcnow()))
        db.session.commit()
    flask(runner, "remove-user", "alice")
    with app.app_context():
        assert db.session.execute(db.select(Schedule)).first() is None
        user = get_or_create_user(get_or_create_org("acme"), "alice")
        with pytest.raises(Forbidden, match="alice was removed: no new runs"):
            create_run(user, parse_request({"project": "p", "command": "true", "gpu": "cpu"}))


def test_an_org_is_mapped_to_another_account_the_site_made(app, runner):
    seed(app)
    assert "org acme (Slurm account lab-acme)" in flask(runner, "org-account", "acme", "lab-acme")
    flask(runner, "create-org", "other")
    assert "'lab-acme' is another org's" in flask(runner, "org-account", "other", "lab-acme",
                                                   code=2)


def test_a_key_request_that_is_not_a_json_object_makes_no_key(app, client):
    key = seed(app)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    for body in ('{"expires_in_days": 1' + "0" * 50, "[30]", '"x"'):
        answer = client.post("/api/v1/keys", data=body, headers=headers)
        assert answer.status_code == 400, (body, answer.get_data(as_text=True))
    assert client.post("/api/v1/keys", headers={"Authorization": f"Bearer {key}"}).status_code == 201
    with app.app_context():
        assert db.session.execute(db.select(sa.func.count()).select_from(ApiKey)).scalar() == 2
