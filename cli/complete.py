"""Shell completion of run and volume names, asked of the API (README:
"Shell completion"). Completion never prints an error: a shell calls it on
every Tab, so without a key or a server it offers nothing."""
from __future__ import annotations

import click
from click.shell_completion import CompletionItem

from cli.api import ApiClient, ApiError, ApiUnreachable
from cli.config import resolve

# Short: a Tab that waits on a server that is away must not hang the shell.
TIMEOUT = 3


def _names(ctx, path: str, key: str, field: str, typed: str, params: dict | None = None):
    try:
        token, api_url = ctx.params.get("token"), ctx.params.get("api_url")
        settings = resolve(token, api_url)
        items = ApiClient(settings.api_url, settings.token, timeout=TIMEOUT).get(path, params)[key]
    except (click.ClickException, ApiError, ApiUnreachable, KeyError, TypeError, ValueError):
        return []
    return [CompletionItem(item[field]) for item in items if item[field].startswith(typed)]


def run_names(ctx, param, typed: str):
    """The org's 100 newest runs."""
    return _names(ctx, "/runs", "runs", "name", typed, {"limit": 100})


def volume_names(ctx, param, typed: str):
    return _names(ctx, "/volumes", "volumes", "name", typed)
