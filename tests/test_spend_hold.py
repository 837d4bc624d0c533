"""The spend hold on both databases: parallel admissions under one org's
limit take turns at the org's row, so no two are given the same rest of
it. Without the hold, 5 to 12 of 10-12 threads were each given all of it.
(tests/test_attacks.py asks the same of the real server's processes.)"""
from __future__ import annotations

import threading

from app.extensions import db
from app.models import Project, Run, User
from app.services.orgs import get_or_create_org, get_or_create_user
from app.services.rows import add_unique
from app.services.runs import Sizing, new_run, parse_request, sized_under_lock
from app.services.usage import LimitReached

# Fewer than a database engine's pool (5 + 10 overflow): every thread holds
# a connection while it waits at the barrier.
ADMISSIONS = 10
ONE_CORE = 300_000      # $0.30 an hour: the limit below buys two minutes


def _admit(app, user_id: int, project_id: int, index: int, barrier: threading.Barrier,
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
        run.name = f"run-{index}"
        assert add_unique(run)
        answers.append(sizing.minutes)


def test_parallel_admissions_under_a_limit_take_turns(migrated_app):
    org = get_or_create_org("tight")
    org.monthly_limit_micros = 10_000
    user = get_or_create_user(org, "ada")
    project = Project(org_id=org.id, name="p")
    db.session.add(project)
    db.session.commit()
    barrier, answers = threading.Barrier(ADMISSIONS), []
    threads = [threading.Thread(target=_admit, args=(
        migrated_app, user.id, project.id, n, barrier, answers)) for n in range(ADMISSIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    made = [a for a in answers if isinstance(a, int)]
    refused = [a for a in answers if isinstance(a, str)]
    assert made == [2] and len(refused) == ADMISSIONS - 1, answers
    assert all("$0.01 held by live runs" in message for message in refused), refused
    on_record = db.session.execute(db.select(Run.name).filter_by(org_id=org.id)).scalars()
    assert len(list(on_record)) == 1
