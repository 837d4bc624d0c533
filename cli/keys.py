"""`div whoami` and `div keys create|ls|revoke`: who the key in use belongs
to, and that user's API keys."""
from __future__ import annotations

import time
from typing import Any

import click

from divergent.cli.api import ApiClient
from divergent.cli.context import pass_api
from divergent.cli.output import print_json, started, table


@click.command("whoami")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_api
def whoami(api: ApiClient, as_json: bool) -> None:
    """Show the user, org and role of the key in use."""
    me = api.get("/whoami")
    if as_json:
        return print_json(me)
    click.echo(f"{me['user']} in {me['org']} ({me['role']}), key {me['key']}_… at {api.url}")


@click.group("keys")
def keys() -> None:
    """Your API keys: create one for each machine, revoke a lost one."""


@keys.command("create")
@click.option("--name", default="", metavar="NAME", help="A label, such as the machine's name.")
@click.option("--expires-in", "days", type=click.IntRange(1, 3650), metavar="DAYS",
              help="The key stops working by itself after this many days.")
@pass_api
def keys_create(api: ApiClient, name: str, days: int | None) -> None:
    """Create a key. It is printed this once: keep it."""
    made = api.post("/keys", {"name": name, **({"expires_in_days": days} if days else {})})
    click.echo(made["key"])
    click.echo(f"key {made['prefix']}_… created; it is shown only now. "
               f"Use it with: div login --token <key>", err=True)


@keys.command("ls")
@click.option("--all", "whole_org", is_flag=True, help="Every key of the org (org admins).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_api
def keys_ls(api: ApiClient, whole_org: bool, as_json: bool) -> None:
    """List your keys: prefix, name, when made, last used, revoked."""
    rows = api.get("/keys", {"all": "1"} if whole_org else None)["keys"]
    if as_json:
        return print_json(rows)
    table(["KEY", "USER", "NAME", "CREATED", "LAST USED", "STATE"],
          [[f"{row['prefix']}_…", row["user"], row["name"] or "-", started(row["created_at"]),
            started(row["last_used_at"]) if row["last_used_at"] else "never",
            _state(row)] for row in rows])


def _state(row: dict[str, Any]) -> str:
    if row["revoked_at"]:
        return "revoked"
    expires = row.get("expires_at")
    if expires and expires <= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()):
        return "expired"
    state = "in use here" if row["current"] else "active"
    return f"{state}, expires {started(expires)}" if expires else state


@keys.command("revoke")
@click.argument("prefix", metavar="KEY_PREFIX")
@pass_api
def keys_revoke(api: ApiClient, prefix: str) -> None:
    """Revoke a key (its div_xxxxxxxxxxxx prefix, as `div keys ls` shows it):
    one of yours, or, for an org admin, any of the org's. It stops working
    at once."""
    prefix = prefix.rstrip("_…")
    api.delete(f"/keys/{prefix}")
    click.echo(f"key {prefix}_… revoked", err=True)
