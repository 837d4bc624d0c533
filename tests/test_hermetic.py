"""The tests keep to their own folders: an app a test builds (make_app)
keeps its instance files, its database and its data under the test's
temporary folder, never in the checkout's instance/, where a developer's
dev stack lives (conftest's session check fails a run that leaves any)."""
from __future__ import annotations

from pathlib import Path

from tests.conftest import CHECKOUT_INSTANCE


def test_an_app_a_test_builds_keeps_every_file_under_the_tests_own_folder(make_app, tmp_path):
    before = set(CHECKOUT_INSTANCE.rglob("*")) if CHECKOUT_INSTANCE.is_dir() else set()
    app = make_app({})
    app.test_client().get("/login")          # a session: the secret key is made and kept
    for path in (app.instance_path, app.config["DIV_DATA_DIR"],
                 app.config["SQLALCHEMY_DATABASE_URI"].removeprefix("sqlite:///")):
        assert Path(path).is_relative_to(tmp_path), path
    assert (Path(app.instance_path) / "secret_key").exists()
    after = set(CHECKOUT_INSTANCE.rglob("*")) if CHECKOUT_INSTANCE.is_dir() else set()
    assert after == before
