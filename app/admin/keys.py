"""Keys: a user's API key (`flask create-key`) and the site key that seals
secrets (`flask rotate-secrets`)."""
from __future__ import annotations

import click

from divergent.app.admin import admin_command
from divergent.app.services.accounts.keys import MAX_KEY_DAYS, create_key
from divergent.app.services.accounts.orgs import find_user
from divergent.app.services.accounts.secrets import rotate


@admin_command("create-key")
@click.argument("username")
@click.option("--name", default="", help="A label for the key.")
@click.option("--expires-in", "days", type=click.IntRange(1, MAX_KEY_DAYS), metavar="DAYS",
              help="The key stops working by itself after this many days.")
def create_key_command(username: str, name: str, days: int | None) -> None:
    """Create an API key for a user and print it (the only time it is shown)."""
    click.echo(create_key(find_user(username), name=name, expires_in_days=days))


@admin_command("rotate-secrets")
@click.option("--new-key", is_flag=True,
              help="Make a new key first (keys kept in instance/secrets_key).")
def rotate_secrets(new_key: bool) -> None:
    """Re-encrypt every secret under the first key. With keys in
    DIV_SECRETS_KEYS: put the new key first, restart, then run this; the
    old key can go once it is done."""
    click.echo(f"{rotate(new_key)} sealed values re-encrypted under the first key")


commands = [create_key_command, rotate_secrets]
