"""`div login`: check a key against the server, then keep it and the URL in
~/.config/div/config.toml (mode 0600); or, with --sso, get a key through
the site's single sign-on (the OAuth device flow, so it works over SSH)."""
from __future__ import annotations

import socket
import sys
import time

import click

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable
from divergent.cli.config import write_file
from divergent.cli.context import fail


@click.command("login")
@click.option("--api-url", metavar="URL", help="The API's URL, such as http://127.0.0.1:8000.")
@click.option("--token", metavar="KEY", help="Your API key (div_…).")
@click.option("--sso", is_flag=True,
              help="Get a key by signing in at the site's sign-in provider, in a browser "
                   "anywhere (it prints a page and a code).")
def login(api_url: str | None, token: str | None, sso: bool) -> None:
    """Store an API URL and key for the other commands."""
    interactive = sys.stdin.isatty()
    if not api_url:
        if not interactive:
            raise click.UsageError("pass --api-url (no terminal to ask on)")
        api_url = click.prompt("API URL")
    if sso:
        if token:
            raise click.UsageError("--sso gets a key: leave out --token")
        token = _key_from_sign_in(api_url)
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


# How long `div login --sso` waits for the user at the provider, at most.
SIGN_IN_SECONDS = 600


def _key_from_sign_in(api_url: str) -> str:
    """The device flow, through the server: a code to enter at the
    provider's page, then the key once the user has signed in there."""
    api = ApiClient(api_url, "")
    try:
        started = api.post("/auth/device")
        link = started.get("verification_uri_complete") or started["verification_uri"]
        click.echo(f"Open {link} in a browser and sign in; the code is {started['user_code']}",
                   err=True)
        deadline = time.monotonic() + min(int(started.get("expires_in", SIGN_IN_SECONDS)),
                                          SIGN_IN_SECONDS)
        interval = int(started.get("interval", 5))
        while time.monotonic() < deadline:
            time.sleep(interval)
            answer = api.post("/auth/device/token", {"device_code": started["device_code"],
                                                     "host": socket.gethostname()})
            if not answer.get("pending"):
                return str(answer["key"])
            interval = int(answer.get("interval", interval))
    except (ApiError, ApiUnreachable) as exc:
        fail(f"not signed in: {exc}")
    fail("not signed in: the code expired before the sign-in; run `div login --sso` again")
