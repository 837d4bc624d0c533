"""Admin commands (`flask …`)."""
from __future__ import annotations

import os

import click

from app.services.keys import create_key, user_for_key
from app.services.orgs import get_or_create_org, get_or_create_user


@click.command("dev-bootstrap")
@click.option("--env-file", default=".div-dev.env", show_default=True,
              help="Where to write DIV_API_URL and DIV_TOKEN.")
@click.option("--api-url", default="http://127.0.0.1:8000", show_default=True)
def dev_bootstrap(env_file: str, api_url: str) -> None:
    """Create the dev org and user and a first API key; print it and write it
    to ENV_FILE (mode 0600). A key already in ENV_FILE that still works is
    kept, so running it twice changes nothing."""
    key = _working_key(env_file)
    if key is None:
        org = get_or_create_org("dev")
        user = get_or_create_user(org, "dev", role="org_admin")
        key = create_key(user, name="make up")
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"DIV_API_URL={api_url}\nDIV_TOKEN={key}\n")
    click.echo(f"API key for dev@dev: {key}")
    click.echo(f"written to {env_file}")


def _working_key(env_file: str) -> str | None:
    if not os.path.exists(env_file):
        return None
    with open(env_file) as f:
        values = dict(line.strip().split("=", 1) for line in f if "=" in line)
    key = values.get("DIV_TOKEN", "")
    return key if key and user_for_key(key) else None
