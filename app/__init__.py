"""divergent's Flask app: create_app() binds the extensions, the JSON API and
the admin commands."""
from __future__ import annotations

import os

from flask import Flask

from app.config import Config
from app.extensions import db, migrate


def create_app(test_config: dict | None = None) -> Flask:
    app = Flask(__name__, instance_relative_config=True)
    app.config.from_object(Config)
    if test_config:
        app.config.update(test_config)
    os.makedirs(app.instance_path, exist_ok=True)
    if app.config["SQLALCHEMY_DATABASE_URI"] is None:
        app.config["SQLALCHEMY_DATABASE_URI"] = (
            "sqlite:///" + os.path.join(app.instance_path, "divergent.db"))
    if app.config["DIV_PRICES_FILE"] is None:
        app.config["DIV_PRICES_FILE"] = os.path.join(app.instance_path, "prices.toml")
    if app.config["DIV_DATA_DIR"] is None:
        app.config["DIV_DATA_DIR"] = os.path.join(app.instance_path, "data")

    db.init_app(app)
    migrate.init_app(app, db, directory=os.path.join(os.path.dirname(__file__), "..", "migrations"))

    from app import models  # noqa: F401  (tables known to Flask-Migrate)
    from app.api import bp as api_bp
    app.register_blueprint(api_bp, url_prefix="/api/v1")

    from app.commands import commands
    from app.money_commands import commands as money_commands
    for command in commands + money_commands:
        app.cli.add_command(command)
    return app
