"""`/metrics` for Prometheus, on SQLite and PostgreSQL through the
migrations: who may scrape it, and that each figure is what the database,
the reconciler, the Slurm client and the log followers say."""
from __future__ import annotations

import os
import subprocess
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from divergent.app.extensions import db
from divergent.app.models import Org, Project, Run, utcnow
from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.site import gauges as site_gauges
from divergent.app.services.site import request_slots, slurm_access
from divergent.app.services.site.request_slots import FOLLOW, take_slot
from divergent.slurm.client import SlurmError
from tests.test_models import make_run

TOKEN = "scrape-token-for-tests-0123456789"


@pytest.fixture
def site(migrated_app):
    """Two orgs' runs in every state, a site admin's key and a member's."""
    migrated_app.config["DIV_METRICS_TOKEN"] = TOKEN
    now = utcnow()
    keys = {}
    for org_name, role in (("acme", "site_admin"), ("other", "member")):
        org = get_or_create_org(org_name)
        user = get_or_create_user(org, f"{org_name}-user", role=role)
        keys[role] = create_key(user)
        project = Project(org_id=org.id, name="p")
        db.session.add(project)
        db.session.flush()
        for i, (status, gpu, waited) in enumerate((
                ("queued", "h100", 600), ("queued", "h100", 60), ("running", "a100", 30),
                ("succeeded", "h100", 10), ("failed", "cpu", None))):
            started = None if status == "queued" else now - timedelta(minutes=5)
            created = (now - timedelta(seconds=waited) if started is None
                       else started - timedelta(seconds=waited or 0))
            db.session.add(make_run(org, user, project, name=f"r{i}", status=status,
                                    gpu_type=gpu, created_at=created, started_at=started,
                                    cost_micros=1_250_000))
    get_or_create_org("acme").monthly_limit_micros = 100_000_000
    db.session.commit()
    return migrated_app, keys


def scrape(app, token: str | None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = app.test_client().get("/metrics", headers=headers)
    if answer.status_code != 200:
        return answer.status_code, {}
    samples = {}
    for family in text_string_to_metric_families(answer.get_data(as_text=True)):
        assert family.name.startswith("divergent_")
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return 200, samples


def test_only_the_scrape_token_or_a_site_admin_gets_metrics(site):
    app, keys = site
    assert scrape(app, None)[0] == 401
    assert scrape(app, keys["member"])[0] == 401
    assert scrape(app, "div_wrong_key")[0] == 401
    assert scrape(app, TOKEN + "x")[0] == 401
    assert scrape(app, TOKEN)[0] == 200
    assert scrape(app, keys["site_admin"])[0] == 200
    refused = app.test_client().get("/metrics")
    assert refused.mimetype == "text/plain" and b"scrape token" in refused.data


def test_a_short_scrape_token_is_refused_at_start(tmp_path, make_app):
    with pytest.raises(RuntimeError, match="at least 32 characters"):
        make_app({"SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/t.db",
                  "DIV_METRICS_TOKEN": "short"})


def test_runs_queue_spend_reconciler_slurm_errors_and_followers(site):
    app, _ = site
    _, m = scrape(app, TOKEN)
    assert m[("divergent_runs", (("gpu", "h100"), ("status", "queued")))] == 4
    assert m[("divergent_runs", (("gpu", "a100"), ("status", "running")))] == 2
    assert m[("divergent_runs", (("gpu", "cpu"), ("status", "failed")))] == 2
    assert 600 <= m[("divergent_queued_oldest_wait_seconds", (("gpu", "h100"),))] < 660
    # Started in the last hour: running (waited 30 s), succeeded (10), failed (0), twice.
    assert m[("divergent_queue_wait_seconds_count", ())] == 6
    assert m[("divergent_queue_wait_seconds_sum", ())] == pytest.approx(80)
    assert m[("divergent_queue_wait_median_seconds", ())] == pytest.approx(10)
    assert m[("divergent_spend_dollars", (("org", "acme"),))] == 6.25
    # Each org's running a100 run holds its GPU; nothing measured it: no "used".
    assert m[("divergent_gpus_allocated", (("gpu", "a100"), ("org", "other")))] == 1
    assert ("divergent_gpus_used", (("gpu", "a100"), ("org", "other"))) not in m
    assert m[("divergent_spend_limit_dollars", (("org", "acme"),))] == 100
    assert ("divergent_spend_limit_dollars", (("org", "other"),)) not in m
    assert m[("divergent_reconciler_lag_seconds", ())] == -1           # never cycled
    # This process's followers: other tests' streams may still hold slots.
    followers = request_slots.held(FOLLOW)

    site_gauges.record_cycle(0.25)
    site_gauges.record_cycle(0.5)

    class Broken:
        def query(self, job_ids, squeue_alone=False):
            raise SlurmError("squeue: error: Unable to contact slurm controller")

    with slurm_access.standing_in(Broken()):
        for _ in range(3):
            with pytest.raises(SlurmError):
                slurm_access.slurm_client().query(["1"])
    with app.test_request_context():
        give_back = take_slot(FOLLOW, 1)
        _, m = scrape(app, TOKEN)
        assert m[("divergent_log_followers", ())] == followers + 1
        give_back()
    _, m = scrape(app, TOKEN)
    assert m[("divergent_log_followers", ())] == followers
    assert m[("divergent_reconciler_cycles_total", ())] == 2
    assert m[("divergent_reconciler_cycle_seconds", ())] == 0.5
    assert 0 <= m[("divergent_reconciler_lag_seconds", ())] < 5
    assert m[("divergent_slurm_call_errors_total", (("call", "query"),))] == 3


def test_a_dead_processs_followers_are_not_counted(site):
    app, _ = site
    dead = subprocess.Popen(["true"])
    dead.wait()
    with app.app_context():
        folder = os.path.dirname(site_gauges.followers_file())
        site_gauges.note_followers(os.path.join(folder, str(dead.pid)), 7)
        site_gauges.note_followers(site_gauges.followers_file(), 2)
        assert site_gauges.followers_now() == 2
        assert not os.path.exists(os.path.join(folder, str(dead.pid)))


def test_a_followers_count_that_cannot_be_written_keeps_no_slot(site, monkeypatch):
    app, _ = site

    def full_disk(path, count):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(request_slots, "note_followers", full_disk)
    before = request_slots.held(FOLLOW)
    with app.test_request_context():
        give_back = take_slot(FOLLOW, 1)
        give_back()
    assert request_slots.held(FOLLOW) == before


def test_slurm_away_is_asked_once_per_cache_period_not_once_per_waiter(site):
    app, _ = site

    class Away:
        asked = 0

        def nodes(self):
            Away.asked += 1
            raise SlurmError("sinfo: error: Unable to contact slurm controller")

    app.config["DIV_CLUSTER_CACHE_SECONDS"] = 60
    from divergent.app.services.cluster.capacity import cluster_nodes
    from divergent.app.services.errors import Unavailable
    with slurm_access.standing_in(Away()):
        for _ in range(3):
            with pytest.raises(Unavailable):
                cluster_nodes()
    assert Away.asked == 1


def test_gpus_used_are_what_the_samplers_measured(site):
    app, _ = site
    run = db.session.execute(db.select(Run).where(Run.status == "running")).scalars().first()
    run.gpus, run.usage = 4, {"gpu_utilization": 0.25}
    db.session.commit()
    org = db.session.get(Org, run.org_id).name
    _, m = scrape(app, TOKEN)
    assert m[("divergent_gpus_allocated", (("gpu", "a100"), ("org", org)))] == 4
    assert m[("divergent_gpus_used", (("gpu", "a100"), ("org", org)))] == 1.0
