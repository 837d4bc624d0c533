"""The options every command that talks to the API shares (--token,
--api-url), and the client they build, passed to the command."""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, Concatenate, NoReturn, TypeVar

import click

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable
from divergent.cli.config import resolve

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


def api_options(command: F) -> F:
    command = click.option("--api-url", metavar="URL", help="API URL to use (else DIV_API_URL, "
                           "then ~/.config/div/config.toml).")(command)
    return click.option("--token", metavar="KEY", help="API key to use (else DIV_TOKEN, then "
                        "~/.config/div/config.toml).")(command)


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(code)


def pass_api(command: Callable[Concatenate[ApiClient, ...], R]) -> Callable[..., R]:
    """Adds --token and --api-url and calls the command with an ApiClient;
    an API rejection or an unreachable API exits 1 with the one-line reason."""
    # Callable[..., R]: a ParamSpec cannot say "the command's flags, and
    # these two"; only click calls the result, with every flag by name.
    @api_options
    @functools.wraps(command)
    def wrapper(*args: Any, token: str | None = None, api_url: str | None = None,
                **kwargs: Any) -> R:
        settings = resolve(token, api_url)
        try:
            return command(ApiClient(settings.api_url, settings.token), *args, **kwargs)
        except (ApiError, ApiUnreachable) as exc:
            fail(str(exc))
    return wrapper
