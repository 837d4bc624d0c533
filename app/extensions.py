"""Extensions created once, bound to an app in create_app()."""
import sqlite3
from typing import cast

from authlib.integrations.flask_client import OAuth
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from flask_wtf.csrf import CSRFProtect
from htmx_flask import Htmx
from sqlalchemy import MetaData, event
from sqlalchemy.engine import CursorResult, Engine, Result

# Named constraints, so migrations are the same on SQLite and PostgreSQL.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

db = SQLAlchemy(metadata=MetaData(naming_convention=NAMING))
migrate = Migrate(render_as_batch=True)
csrf = CSRFProtect()
htmx = Htmx()
# The site's OpenID Connect provider's client, registered on first use
# (app/dashboard/sso.py).
oauth = OAuth()


def rowcount(result: Result) -> int:
    """The rows an UPDATE or DELETE matched: the session types what it returns
    as a Result, and for those statements it is a CursorResult, which counts."""
    return cast(CursorResult, result).rowcount


@event.listens_for(Engine, "connect")
def _sqlite_for_many_processes(dbapi_connection, _record):
    """The server's threads, the reconciler and log followers share one SQLite
    file: WAL lets readers go on while one writes, and a writer waits for
    another instead of failing at once."""
    if isinstance(dbapi_connection, sqlite3.Connection):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.close()
