"""Notifications: channels as an org sets them, the outbox a run's end
writes, and the sender's deliveries to real receivers on 127.0.0.1 (an HTTP
server that fails twice before it accepts, aiosmtpd), retried with backoff
and recorded on the channel. End to end: a failed run on the dev cluster
is announced by webhook and by email within seconds."""
from __future__ import annotations

import json
import re
import time

import pytest
import sqlalchemy as sa

from divergent.app.extensions import db
from divergent.app.models import Notification, NotifyChannel, Project, Run
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.errors import Invalid
from divergent.app.services.notify.notices import add_channel, enqueue_for
from divergent.app.services.notify.outbox import send_due
from tests.receivers import receivers, wait_for
from tests.sshd import free_port

SMTP_PORT = free_port()


@pytest.fixture
def app_config(tmp_path) -> dict:
    return {"TESTING": True, "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/t.db",
            "DIV_DATA_DIR": str(tmp_path / "data"), "DIV_SMTP_HOST": "127.0.0.1",
            "DIV_SMTP_PORT": SMTP_PORT, "DIV_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "DIV_NOTIFY_RETRY_SECONDS": 0.5, "DIV_PUBLIC_URL": "https://div.example.org"}


def ended_run(user, status: str = "failed", checks=None, name: str = "run-ab12") -> Run:
    project = db.session.execute(db.select(Project).filter_by(
        org_id=user.org_id, name="eval")).scalar_one_or_none()
    if project is None:
        project = Project(org_id=user.org_id, name="eval")
        db.session.add(project)
        db.session.flush()
    run = Run(org_id=user.org_id, project_id=project.id, user_id=user.id, name=name,
              status=status, gpu_type="cpu", gpus=1, cpus=2, memory_gib=4, image="i",
              command="python eval.py", rate_micros_per_hour=300_000, cost_micros=20_000,
              exit_code=3 if status == "failed" else 0, checks=checks or [], env={},
              schedule_name=None, mounts=[])
    db.session.add(run)
    db.session.flush()
    return run


def test_a_receiver_that_fails_twice_gets_the_message_on_the_third_try(app_context):
    user = get_or_create_user(get_or_create_org("acme"), "ana")
    with receivers(SMTP_PORT, failures=2) as (webhook, mailbox):
        add_channel(user, webhook=webhook.url)
        add_channel(user, email="oncall@example.org", events="failed,ended")
        run = ended_run(user, checks=[{"check": "metrics.accuracy>=0.8", "verdict": "failed",
                                       "value": 0.71}])
        assert enqueue_for(run) == 2
        db.session.commit()
        started = time.monotonic()
        timeline = []
        while len(webhook.received) < 1 or len(mailbox.received) < 1:
            send_due()
            time.sleep(0.05)
            assert time.monotonic() - started < 20
        timeline = [round(t - started, 2) for t in webhook.tries]
        print("webhook tries at", timeline, "s")
    # Tried three times, the waits doubling (0.5 s, then 1 s), and recorded.
    assert len(webhook.tries) == 3
    assert timeline[1] - timeline[0] >= 0.5 and timeline[2] - timeline[1] >= 1.0
    body = webhook.received[0]
    assert body["text"] == ("divergent: run run-ab12 failed (exit code 3); checks: "
                            "metrics.accuracy>=0.8 failed (0.71); cost $0.02; "
                            "https://div.example.org/runs/run-ab12")
    assert (body["event"], body["run"], body["cost"]) == ("failed", "run-ab12", "0.02")
    # Every try of one message carries one id, for a receiver to drop a repeat.
    assert len(set(webhook.deliveries)) == 1 and webhook.deliveries[0] == body["delivery"]
    assert body["delivery"].endswith("-run-ab12-failed")
    recipients, mail = mailbox.received[0]
    assert recipients == ["oncall@example.org"]
    assert "Subject: divergent: run run-ab12 failed (exit code 3)" in mail
    assert re.search(r"Message-ID: <div-\d+-run-ab12-failed@divergent>", mail), mail
    channels = {c.kind: c for c in db.session.execute(db.select(NotifyChannel)).scalars()}
    assert channels["webhook"].last_delivery_at is not None
    assert "answered 500" in channels["webhook"].last_error
    rows = db.session.execute(db.select(Notification)).scalars().all()
    assert sorted((n.status, n.attempts) for n in rows) == [("sent", 1), ("sent", 3)]


def test_a_receiver_that_never_answers_ends_failed_after_the_last_try(app_context, app):
    app.config["DIV_NOTIFY_MAX_ATTEMPTS"] = 2
    app.config["DIV_NOTIFY_RETRY_SECONDS"] = 0.1
    user = get_or_create_user(get_or_create_org("acme"), "ana")
    add_channel(user, webhook=f"http://127.0.0.1:{free_port()}/nobody")
    enqueue_for(ended_run(user, status="budget_exceeded"))
    db.session.commit()
    wait_for(lambda: send_due() is not None and db.session.execute(
        sa.select(Notification.status)).scalar_one() == "failed", timeout=10)
    row = db.session.execute(db.select(Notification)).scalar_one()
    assert row.attempts == 2 and "Connection refused" in row.last_error


def test_events_decide_which_channels_hear_of_a_run(app_context):
    user = get_or_create_user(get_or_create_org("acme"), "ana")
    add_channel(user, webhook="https://hooks.example.org/a")                  # default events
    add_channel(user, webhook="https://hooks.example.org/b", events="ended")
    add_channel(user, webhook="https://hooks.example.org/c", events=["limit_reached"])
    assert enqueue_for(ended_run(user, status="succeeded")) == 1             # b alone
    db.session.rollback()
    run = ended_run(user, status="succeeded", checks=[
        {"check": "metrics.loss<1", "verdict": "failed", "value": 2}])
    assert enqueue_for(run) == 2                                             # a and b
    assert {n.event for n in db.session.new if isinstance(n, Notification)} == {
        "checks_failed", "ended"}


@pytest.mark.parametrize("target, says", [
    ({"webhook": "ftp://example.org/x"}, "http:// or https://"),
    ({"webhook": "http://user:pw@example.org/x"}, "no user or password"),
    ({"webhook": "http://169.254.169.254/latest/meta-data"}, "not a public address"),
    ({"webhook": "http://[::1]:8000/"}, "not a public address"),
    ({"webhook": "http://example.org/a\r\nX-Evil: 1"}, "http:// or https://"),
    ({"email": "a@example.org\r\nBcc: all@example.org"}, "email address"),
    ({"email": "Ana <a@example.org>"}, "email address"),
    ({}, "give one"),
])
def test_bad_channels_are_refused(app_context, target, says):
    user = get_or_create_user(get_or_create_org("acme"), "ana")
    with pytest.raises(Invalid, match=says):
        add_channel(user, **target)
    with pytest.raises(Invalid, match="unknown event"):
        add_channel(user, webhook="https://hooks.example.org/x", events="failed,exploded")


def test_a_failed_run_is_announced_by_webhook_and_email(stack, project):
    """On the dev cluster: the reconciler writes the messages as it settles
    the run, its sender delivers them; a channel of one schedule's runs
    stays quiet, and another org sees none of this org's channels."""
    with receivers(int(stack.settings["DIV_SMTP_PORT"]), failures=2) as (webhook, mailbox):
        made = stack.div("notify", "add", "--webhook", webhook.url, cwd=project)
        assert made.returncode == 0, made.stderr
        channel = made.stdout.decode().strip()
        mail = stack.div("notify", "add", "--email", "oncall@example.org", cwd=project)
        assert mail.returncode == 0, mail.stderr
        started = time.monotonic()
        done = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "exit 3", cwd=project)
        ended = time.monotonic() - started
        assert done.returncode == 3, done.stderr
        wait_for(lambda: webhook.received and mailbox.received, timeout=30)
        print(f"run ended at {ended:.1f} s; webhook tries at "
              f"{[round(t - started, 1) for t in webhook.tries]} s")
        assert webhook.received[0]["status"] == "failed"
        assert "failed (exit code 3)" in mailbox.received[0][1]
        listed = json.loads(stack.div("notify", "ls", "--json", cwd=project).stdout)
        hook = next(row for row in listed if str(row["id"]) == channel)
        assert hook["last_delivery_at"] and "answered 500" in hook["last_error"]
        assert stack.api("GET", "/notifications", org="other").json()["channels"] == []
        assert stack.api("DELETE", f"/notifications/{channel}", org="other").status_code == 404
        for row in listed:
            assert stack.div("notify", "rm", str(row["id"]), cwd=project).returncode == 0


def test_a_message_that_cannot_be_sent_at_all_fails_alone(app_context, monkeypatch):
    """An error no receiver caused (a bug, a header the mail library
    refuses) counts as a failed try of that message, recorded; the sender
    goes on with the others and never retries it forever."""
    import divergent.app.services.notify.outbox as outbox
    user = get_or_create_user(get_or_create_org("acme"), "ana")
    add_channel(user, webhook="https://hooks.example.org/x")
    enqueue_for(ended_run(user))
    db.session.commit()
    monkeypatch.setattr(outbox, "send_webhook", lambda url, body, delivery: 1 / 0)
    assert send_due() == 0
    row = db.session.execute(db.select(Notification)).scalar_one()
    assert (row.status, row.attempts, row.claimed_until) == ("pending", 1, None)
    assert row.last_error == "could not be sent (ZeroDivisionError); see the reconciler's log"


def test_a_receiver_that_drips_is_cut_off_and_holds_up_no_other_org(app_context, monkeypatch):
    """One org's webhook answers a byte at a time; its deliveries end at the
    deadline, at most PER_ORG of them a pass, and another org's message
    goes out in the same pass."""
    import divergent.app.services.notify.delivery as delivery
    from divergent.app.services.notify.outbox import PER_ORG
    from tests.receivers import Drip, Webhook
    monkeypatch.setattr(delivery, "DEADLINE", 1)
    slow_user = get_or_create_user(get_or_create_org("slow"), "sam")
    user = get_or_create_user(get_or_create_org("acme"), "ana")
    drip, webhook = Drip(), Webhook()
    try:
        add_channel(slow_user, webhook=drip.url)
        add_channel(user, webhook=webhook.url)
        for index in range(4):
            enqueue_for(ended_run(slow_user, name=f"run-slow{index}"))
        enqueue_for(ended_run(user))
        db.session.commit()
        started = time.monotonic()
        send_due()
        took = time.monotonic() - started
        print(f"one pass: {took:.1f} s, {drip.connections} cut off")
    finally:
        drip.close()
        webhook.close()
    assert len(webhook.received) == 1 and drip.connections == PER_ORG
    assert took < PER_ORG * 1 + 2
    errors = {n.last_error for n in db.session.execute(db.select(Notification)).scalars()
              if n.attempts}
    assert "127.0.0.1 took longer than 1 s" in errors


def test_a_message_says_how_the_run_ended_whichever_event_was_heard(app_context):
    user = get_or_create_user(get_or_create_org("acme"), "ana")
    add_channel(user, webhook="https://hooks.example.org/every-end", events="ended")
    enqueue_for(ended_run(user))
    message = next(n for n in db.session.new if isinstance(n, Notification))
    assert message.text == ("divergent: run run-ab12 failed (exit code 3); cost $0.02; "
                            "https://div.example.org/runs/run-ab12")


def test_a_message_writes_money_as_the_cli_does(app_context):
    """A minute of cpu is $0.005: the text says $0.01, as `div run` does; the
    JSON keeps the exact amount."""
    user = get_or_create_user(get_or_create_org("acme"), "ana")
    add_channel(user, webhook="https://hooks.example.org/every-end", events="ended")
    run = ended_run(user)
    run.cost_micros = 5_000
    enqueue_for(run)
    message = next(n for n in db.session.new if isinstance(n, Notification))
    assert "; cost $0.01; " in message.text and '"cost": "0.005"' in json.dumps(message.body)
