"""The schema through its migration, on SQLite and on PostgreSQL: orgs,
users, keys, projects, volumes and runs, and the API's key check."""
from __future__ import annotations

import json
from datetime import UTC

import pytest
import sqlalchemy as sa

from divergent.app.extensions import db
from divergent.app.models import Project, Run, Volume, utcnow
from divergent.app.services.accounts.keys import create_key, key_prefix, user_for_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user


def make_run(org, user, project, name="run-k4t9", **overrides) -> Run:
    fields = dict(org_id=org.id, project_id=project.id, user_id=user.id, name=name,
                  gpu_type="h100", gpus=1, cpus=8, memory_gib=64, image="img",
                  command="python train.py", rate_micros_per_hour=7_530_000)
    fields.update(overrides)
    return Run(**fields)


def test_a_run_belongs_to_an_org_project_and_user(migrated_app):
    org = get_or_create_org("acme")
    user = get_or_create_user(org, "ada")
    project = Project(org_id=org.id, name="classifier")
    db.session.add(project)
    db.session.flush()
    db.session.add(make_run(org, user, project, env={"LR": "3e-4"}, max_spend_micros=5_000_000))
    db.session.commit()

    run = db.session.execute(db.select(Run).filter_by(org_id=org.id, name="run-k4t9")).scalar_one()
    assert (run.status, run.cost_micros, run.env) == ("queued", 0, {"LR": "3e-4"})
    assert run.created_at.tzinfo == UTC
    assert org.slurm_account == "acme"


def test_run_names_are_unique_in_an_org_only(migrated_app):
    acme, other = get_or_create_org("acme"), get_or_create_org("other")
    for org in (acme, other):
        user = get_or_create_user(org, f"user-{org.name}")
        project = Project(org_id=org.id, name="p")
        db.session.add(project)
        db.session.flush()
        db.session.add(make_run(org, user, project))
    db.session.commit()
    user = get_or_create_user(acme, "user-acme")
    db.session.add(make_run(acme, user, db.session.execute(
        db.select(Project).filter_by(org_id=acme.id)).scalar_one()))
    with pytest.raises(sa.exc.IntegrityError):
        db.session.commit()


def test_volume_names_are_unique_in_an_org(migrated_app):
    org = get_or_create_org("acme")
    db.session.add_all([Volume(org_id=org.id, name="data"), Volume(org_id=org.id, name="data")])
    with pytest.raises(sa.exc.IntegrityError):
        db.session.commit()


def test_api_keys_are_stored_hashed_and_can_be_revoked(migrated_app):
    user = get_or_create_user(get_or_create_org("acme"), "ada")
    key = create_key(user, name="laptop")
    row = user.api_keys[0]
    assert key.startswith(row.prefix + "_") and row.prefix.startswith("div_")
    assert key not in (row.key_hash, row.prefix)
    assert user_for_key(key) == user and row.last_used_at is not None
    assert user_for_key(key[:-1] + ("x" if key[-1] != "x" else "y")) is None
    row.revoked_at = row.created_at
    db.session.commit()
    assert user_for_key(key) is None


def test_whoami_answers_for_a_key_and_refuses_without(migrated_app):
    user = get_or_create_user(get_or_create_org("acme"), "ada", role="org_admin")
    key = create_key(user)
    client = migrated_app.test_client()
    assert client.get("/api/v1/health").json == {"ok": True}
    answer = client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {key}"})
    assert answer.json == {"user": "ada", "org": "acme", "role": "org_admin",
                           "key": key_prefix(key)}
    refused = client.get("/api/v1/whoami", headers={"Authorization": "Bearer div_nope_nope"})
    assert (refused.status_code, refused.json) == (401, {"error": "invalid or missing API key"})


def test_org_admins_revoke_any_key_of_their_org_and_members_only_their_own(migrated_app):
    acme = get_or_create_org("acme")
    admin, member = get_or_create_user(acme, "ada", "org_admin"), get_or_create_user(acme, "bob")
    outsider = get_or_create_user(get_or_create_org("other"), "carol", "org_admin")
    keys = {user.username: create_key(user) for user in (admin, member, outsider)}
    client = migrated_app.test_client()

    def call(method, path, who):
        return client.open(path, method=method,
                           headers={"Authorization": f"Bearer {keys[who]}"})

    listed = call("GET", "/api/v1/keys?all=1", "bob").json["keys"]
    assert [k["user"] for k in listed] == ["bob"]                    # members: their own
    assert {k["user"] for k in call("GET", "/api/v1/keys?all=1", "ada").json["keys"]} == {
        "ada", "bob"}
    assert call("DELETE", f"/api/v1/keys/{key_prefix(keys['ada'])}", "bob").status_code == 404
    assert call("DELETE", f"/api/v1/keys/{key_prefix(keys['carol'])}", "ada").status_code == 404
    assert call("DELETE", f"/api/v1/keys/{key_prefix(keys['bob'])}", "ada").status_code == 200
    assert call("GET", "/api/v1/whoami", "bob").status_code == 401    # at once
    assert call("GET", "/api/v1/whoami", "carol").status_code == 200


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_channels_with_the_old_default_events_hear_idle_after_the_migration(
        database, tmp_path, make_app):
    """Migration 0019 adds `idle` (the new default) to channels that hear all
    of the old default events: an idle policy never stops their owners' runs
    unwarned. Other choices stay as they were."""
    from flask_migrate import downgrade, upgrade

    from tests.conftest import POSTGRES_URL
    from tests.stack import fresh_postgres_database
    url = (f"sqlite:///{tmp_path / 'm.db'}" if database == "sqlite"
           else fresh_postgres_database(POSTGRES_URL, "divergent_migration"))
    app = make_app({"SQLALCHEMY_DATABASE_URI": url})
    with app.app_context():
        upgrade(revision="c5d8e9f0a1b2")          # 0018: before usage
        org = get_or_create_org("acme")
        user = get_or_create_user(org, "ada")
        old = ["failed", "checks_failed", "budget_exceeded", "limit_reached"]
        for events in (old, ["ended"], [*old, "ended"]):
            db.session.execute(sa.text(
                "INSERT INTO notify_channel (org_id, user_id, kind, target, events, created_at) "
                "VALUES (:org, :user, 'webhook', 'https://hooks.example.org/x', :events, :now)"),
                {"org": org.id, "user": user.id, "events": json.dumps(events), "now": utcnow()})
        db.session.commit()
        upgrade()
        rows = [json.loads(e) if isinstance(e, str) else e for e in db.session.execute(
            sa.text("SELECT events FROM notify_channel ORDER BY id")).scalars()]
        assert rows == [[*old, "idle"], ["ended"], [*old, "ended", "idle"]]
        downgrade(revision="c5d8e9f0a1b2")
        db.session.remove()
        db.engine.dispose()
