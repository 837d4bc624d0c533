"""The options every command that talks to the API shares (--token,
--api-url), and the client they build, passed to the command."""
from __future__ import annotations

import functools
import sys

import click

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable
from divergent.cli.config import resolve


def api_options(command):
    command = click.option("--api-url", metavar="URL", help="API URL to use (else DIV_API_URL, "
                           "then ~/.config/div/config.toml).")(command)
    return click.option("--token", metavar="KEY", help="API key to use (else DIV_TOKEN, then "
                        "~/.config/div/config.toml).")(command)


def fail(message: str, code: int = 1):
    click.echo(message, err=True)
    sys.exit(code)


def pass_api(command):
    """Adds --token and --api-url and calls the command with an ApiClient;
    an API rejection or an unreachable API exits 1 with the one-line reason."""
    @api_options
    @functools.wraps(command)
    def wrapper(*args, token=None, api_url=None, **kwargs):
        settings = resolve(token, api_url)
        try:
            return command(ApiClient(settings.api_url, settings.token), *args, **kwargs)
        except (ApiError, ApiUnreachable) as exc:
            fail(str(exc))
    return wrapper
