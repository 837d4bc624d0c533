"""`div login`: check a key against the server, then keep it and the URL in
~/.config/div/config.toml (mode 0600)."""
from __future__ import annotations

import sys

import click

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable
from divergent.cli.config import write_file
from divergent.cli.context import fail


@click.command("login")
@click.option("--api-url", metavar="URL", help="The API's URL, such as http://127.0.0.1:8000.")
@click.option("--token", metavar="KEY", help="Your API key (div_…).")
def login(api_url: str | None, token: str | None) -> None:
    """Store an API URL and key for the other commands."""
    interactive = sys.stdin.isatty()
    if not api_url:
        if not interactive:
            raise click.UsageError("pass --api-url (no terminal to ask on)")
        api_url = click.prompt("API URL")
    if not token:
        if not interactive:
            raise click.UsageError("pass --token (no terminal to ask on)")
        token = click.prompt("API key", hide_input=True)
    try:
        me = ApiClient(api_url, token).get("/whoami")
    except (ApiError, ApiUnreachable) as exc:
        fail(f"not saved: {exc}")
    path = write_file(api_url, token)
    click.echo(f"logged in to {api_url} as {me['user']} ({me['org']}); saved to {path}", err=True)
