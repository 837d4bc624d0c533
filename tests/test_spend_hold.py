"""The spend hold on both databases: parallel admissions under one org's
limit take turns at the org's row, so no two are given the same rest of
it. Without the hold, 5 to 12 of 10-12 threads were each given all of it.
(tests/test_attacks.py asks the same of the real server's processes.)"""
from __future__ import annotations

import threading

from divergent.app.extensions import db
from divergent.app.models import Project, Run, User
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.money.usage import LimitReached
from divergent.app.services.runs.names import insert_run
from divergent.app.services.runs.request import parse_request
from divergent.app.services.runs.sizing import Sizing, sized_under_lock
from divergent.app.services.runs.submit import new_run

# Fewer than a database engine's pool (5 + 10 overflow): every thread holds
# a connection while it waits at the barrier.
ADMISSIONS = 10
ONE_CORE = 300_000      # $0.30 an hour: the limit below buys two minutes


def _admit(app, user_id: int, project_id: int, barrier: threading.Barrier,
           answers: list) -> None:
    """One POST /runs' admission, as create_run makes it, after every
    thread has read the org: lock, size against what is left, record."""
    with app.app_context():
        user = db.session.get(User, user_id)
        req = parse_request({"project": "p", "command": "sleep 600", "gpu": "cpu"})
        sizing = Sizing(cpus=1, memory_gib=1, rate=ONE_CORE, minutes=None, limited_by=None)
        org = user.org     # read, as a request reads it, before any of them locks
        barrier.wait()
        try:
            sizing = sized_under_lock(org, req, sizing)
        except LimitReached as exc:
            answers.append(str(exc))
            return
        run = new_run(user, req, sizing, project_id, {})
        insert_run(run, None)
        answers.append((run.name, sizing.minutes))


def _admitted_in_parallel(app, ended_run: str | None = None) -> list:
    """What ADMISSIONS parallel admissions under a $0.01 limit answered: a
    (name, minutes) each one made, an error each one refused."""
    org = get_or_create_org("tight")
    org.monthly_limit_micros = 10_000
    user = get_or_create_user(org, "ada")
    project = Project(org_id=org.id, name="p")
    db.session.add(project)
    db.session.flush()
    if ended_run:
        db.session.add(Run(org_id=org.id, project_id=project.id, user_id=user.id,
                           name=ended_run, status="succeeded", gpu_type="cpu", gpus=1, cpus=1,
                           memory_gib=1, image="img", command="true", rate_micros_per_hour=1))
    db.session.commit()
    barrier, answers = threading.Barrier(ADMISSIONS), []
    threads = [threading.Thread(target=_admit, args=(app, user.id, project.id, barrier, answers))
               for _ in range(ADMISSIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def _made_and_refused(answers: list) -> tuple[list, list]:
    refused = [a for a in answers if isinstance(a, str)]
    assert len(refused) == ADMISSIONS - 1, answers
    assert all("$0.01 held by live runs" in message for message in refused), refused
    return [a for a in answers if isinstance(a, tuple)], refused


def test_parallel_admissions_under_a_limit_take_turns(migrated_app):
    made, _ = _made_and_refused(_admitted_in_parallel(migrated_app))
    assert [minutes for _, minutes in made] == [2]


def test_a_generated_name_that_is_taken_does_not_end_the_hold(migrated_app, monkeypatch):
    # Every admission draws run-aaaa first, then run-aaaaa: with run-aaaa
    # taken, an insert that failed on it rolled back, let go of the org's
    # row and went on unheld: 2 to 4 of 10 were admitted.
    monkeypatch.setattr("divergent.app.services.runs.names.secrets.choice", lambda alphabet: "a")
    made, _ = _made_and_refused(_admitted_in_parallel(migrated_app, ended_run="run-aaaa"))
    assert made == [("run-aaaaa", 2)]
