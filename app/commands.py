"""Admin commands (`flask …`): bootstrap orgs, users and keys; the reconciler."""
from __future__ import annotations

import logging
import os
import secrets
import signal
import sys

import click
from flask import current_app

from app.extensions import db
from app.models import ROLES, User
from app.services.errors import ServiceError
from app.services.keys import create_key, user_for_key
from app.services.orgs import InvalidName, add_user, find_org, get_or_create_org, get_or_create_user
from app.services.passwords import set_password, user_for_password
from app.services.volumes import data_path


@click.command("dev-bootstrap")
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


@click.command("set-password")
@click.argument("username")
@click.password_option()
def set_password_command(username: str, password: str) -> None:
    """Set a user's dashboard password (asked twice, not echoed)."""
    user = db.session.execute(db.select(User).filter_by(username=username)).scalar_one_or_none()
    if user is None:
        raise click.BadParameter(f"no user named {username!r}", param_hint="USERNAME")
    try:
        set_password(user, password)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="PASSWORD") from None
    click.echo(f"password set for {username}")


@click.command("create-org")
@click.argument("name")
def create_org(name: str) -> None:
    """Create an org (its Slurm account is made on its first run)."""
    try:
        org = get_or_create_org(name)
    except InvalidName as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    click.echo(f"org {org.name}")


@click.command("create-user")
@click.argument("org_name")
@click.argument("username")
@click.option("--role", type=click.Choice(ROLES), default="member", show_default=True)
def create_user(org_name: str, username: str, role: str) -> None:
    """Create a user in an existing org."""
    try:
        org = find_org(org_name)
        user = add_user(org, username, role)
    except ServiceError as exc:
        raise click.ClickException(exc.message) from None
    click.echo(f"user {user.username} in {org.name} ({user.role})")


@click.command("create-key")
@click.argument("username")
@click.option("--name", default="", help="A label for the key.")
def create_key_command(username: str, name: str) -> None:
    """Create an API key for a user and print it (the only time it is shown)."""
    user = db.session.execute(db.select(User).filter_by(username=username)).scalar_one_or_none()
    if user is None:
        raise click.BadParameter(f"no user named {username!r}", param_hint="USERNAME")
    click.echo(create_key(user, name=name))


@click.command("reconcile")
@click.option("--interval", type=float, default=None,
              help="Seconds between cycles (default: DIV_RECONCILE_INTERVAL, 1).")
@click.option("--once", is_flag=True, help="Run one cycle and exit.")
def reconcile(interval: float | None, once: bool) -> None:
    """Follow Slurm and settle runs, until stopped."""
    from app.reconciler import LEASE, holder_name, reconcile_once, run_forever
    from app.services import leases
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if once:
        if not leases.acquire(LEASE, holder_name(), 30):
            raise click.ClickException("another reconciler is acting; nothing done")
        try:
            click.echo(f"{reconcile_once()} runs changed")
        finally:
            leases.release(LEASE, holder_name())
        return
    # A plain `kill` ends the loop through its finally, which hands the lease
    # back, so a restarted reconciler acts at once instead of after the TTL.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_forever(interval or current_app.config["DIV_RECONCILE_INTERVAL"])


commands = [dev_bootstrap, create_org, create_user, create_key_command, set_password_command,
            reconcile]
