"""`flask dev-bootstrap`: the dev machine's org, user and key, for `make up`."""
from __future__ import annotations

import os
import secrets

import click

from divergent.app.admin import admin_command
from divergent.app.services.accounts.keys import create_key, user_for_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.accounts.passwords import set_password, user_for_password
from divergent.app.services.files.volumes import data_path


@admin_command("dev-bootstrap")
@click.option("--env-file", default=".div-dev.env", show_default=True,
              help="Where to write DIV_API_URL and DIV_TOKEN.")
@click.option("--api-url", default="http://127.0.0.1:8000", show_default=True)
def dev_bootstrap(env_file: str, api_url: str) -> None:
    """Create the dev org and user (a site admin: on a dev machine, whoever
    ran `make up` owns the cluster) and a first API key; print it and write
    it to ENV_FILE (mode 0600). A key already in ENV_FILE that still works
    is kept, so running it twice changes nothing."""
    values = _env_values(env_file)
    key = values.get("DIV_TOKEN", "")
    # The dev share, where a real site mounts its Lustre or NFS share.
    os.makedirs(data_path("share"), exist_ok=True)
    org = get_or_create_org("dev")
    user = get_or_create_user(org, "dev", role="site_admin")
    user.role = "site_admin"
    if not (key and user_for_key(key)):
        key = create_key(user, name="make up")
    password = values.get("DIV_DASHBOARD_PASSWORD", "")
    if not (password and user_for_password(user.username, password)):
        password = secrets.token_urlsafe(12)
        set_password(user, password)
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"DIV_API_URL={api_url}\nDIV_TOKEN={key}\n"
                f"DIV_DASHBOARD_USER={user.username}\nDIV_DASHBOARD_PASSWORD={password}\n")
    click.echo(f"API key for dev@dev: {key}")
    click.echo(f"written to {env_file}")
    click.echo(f"sign the CLI in:  .venv/bin/div login --api-url {api_url} --token {key}")
    click.echo(f"dashboard: {api_url}/ as {user.username} (password in {env_file})")


def _env_values(env_file: str) -> dict[str, str]:
    if not os.path.exists(env_file):
        return {}
    with open(env_file) as f:
        return dict(line.strip().split("=", 1) for line in f if "=" in line)


commands = [dev_bootstrap]
