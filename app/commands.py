"""Admin commands (`flask …`)."""
from __future__ import annotations

import os

import click

from app.services.keys import create_key
from app.services.orgs import get_or_create_org, get_or_create_user


@click.command("dev-bootstrap")
@click.option("--env-file", default=".div-dev.env", show_default=True,
              help="Where to write DIV_API_URL and DIV_TOKEN.")
@click.option("--api-url", default="http://127.0.0.1:8000", show_default=True)
def dev_bootstrap(env_file: str, api_url: str) -> None:
    """Create the dev org and user and a first API key; print it and write it
    to ENV_FILE (mode 0600)."""
    org = get_or_create_org("dev")
    user = get_or_create_user(org, "dev", role="org_admin")
    key = create_key(user, name="make up")
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"DIV_API_URL={api_url}\nDIV_TOKEN={key}\n")
    click.echo(f"API key for dev@dev: {key}")
    click.echo(f"written to {env_file}")
