"""divergent's Flask app: create_app() binds the extensions, the error
handlers (app/web/errors.py), the JSON API, the dashboard and the admin commands
(app/admin/)."""
from __future__ import annotations

import os
import secrets

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from divergent.app import admin
from divergent.app.config import Config
from divergent.app.extensions import csrf, db, htmx, migrate, oauth
from divergent.app.services.instance_files import instance_secret
from divergent.app.web import errors, security_headers
from divergent.app.web.request_args import StrictJSONProvider


def create_app(test_config: dict | None = None, instance_path: str | None = None) -> Flask:
    # templates/ sits at the repository's top, beside app/: pages are what
    # a designer edits without reading Python. static/ stays in app/ because Flask serves it from there.
    # DIV_INSTANCE_PATH: the site's keys, settings and prices elsewhere than
    # the checkout's instance/ (each of the tests' stacks has its own).
    instance_path = instance_path or os.environ.get("DIV_INSTANCE_PATH") or None
    app = Flask(__name__, instance_relative_config=True, instance_path=instance_path,
                template_folder=os.path.join(os.path.dirname(__file__), "..", "templates"))
    app.config.from_object(Config)
    if test_config:
        app.config.update(test_config)
    os.makedirs(app.instance_path, exist_ok=True)
    if app.config["SQLALCHEMY_DATABASE_URI"] is None:
        app.config["SQLALCHEMY_DATABASE_URI"] = (
            "sqlite:///" + os.path.join(app.instance_path, "divergent.db"))
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = instance_secret(
            os.path.join(app.instance_path, "secret_key"), lambda: secrets.token_urlsafe(48))
    if app.config["DIV_PRICES_FILE"] is None:
        app.config["DIV_PRICES_FILE"] = os.path.join(app.instance_path, "prices.toml")
    if app.config["DIV_DATA_DIR"] is None:
        app.config["DIV_DATA_DIR"] = os.path.join(app.instance_path, "data")

    if app.config["DIV_PROXY_HOPS"]:
        hops = app.config["DIV_PROXY_HOPS"]
        # The client's address, and whether it came over TLS, from the proxy.
        # Flask's way to add WSGI middleware; mypy sees a method replaced.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)  # type: ignore[method-assign]
    app.json = StrictJSONProvider(app)
    db.init_app(app)
    errors.init_app(app)
    security_headers.init_app(app)
    csrf.init_app(app)
    htmx.init_app(app)
    oauth.init_app(app)
    migrate.init_app(app, db, directory=os.path.join(os.path.dirname(__file__), "..", "migrations"))

    from divergent.app import models  # noqa: F401  (tables known to Flask-Migrate)
    from divergent.app.api import bp as api_bp
    app.register_blueprint(api_bp, url_prefix="/api/v1")
    # The API authenticates every request by its key, never by a cookie:
    # there is nothing for a cross-site form to ride on.
    csrf.exempt(api_bp)
    from divergent.app.dashboard import bp as dashboard_bp
    app.register_blueprint(dashboard_bp)
    from divergent.app.web.metrics import bp as metrics_bp
    from divergent.app.web.metrics import check_token
    check_token(app.config)
    app.register_blueprint(metrics_bp)

    # Browsers ask for it at the root, whatever the page says.
    app.add_url_rule("/favicon.ico", "favicon", lambda: app.send_static_file("favicon.ico"))
    admin.register(app)
    return app
