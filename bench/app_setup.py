"""What the server-side benchmarks share: the app on a fresh database
(SQLite in the run's temporary folder, or DATABASE_URL) with one org, its
user and a project."""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from divergent.app import create_app  # noqa: E402
from divergent.app.extensions import db  # noqa: E402
from divergent.app.models import Org, Project, User  # noqa: E402
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user  # noqa: E402


def bench_app(tmp: str, **config):
    return create_app({"SQLALCHEMY_DATABASE_URI": os.environ.get(
        "DATABASE_URL", f"sqlite:///{tmp}/bench.db"), "DIV_DATA_DIR": f"{tmp}/data", **config})


def fresh_org() -> tuple[Org, User, Project]:
    """Empty tables, then org, user and project "bench" (in an app context)."""
    db.drop_all()
    db.create_all()
    org = get_or_create_org("bench")
    user = get_or_create_user(org, "bench")
    project = Project(org_id=org.id, name="bench")
    db.session.add(project)
    db.session.flush()
    return org, user, project
