"""Shell completion of run and volume names, asked of the API (docs/users/div.md,
"Shell completion"). Completion never prints an error: a shell calls it on
every Tab, so without a key or a server it offers nothing."""
from __future__ import annotations

from collections.abc import Mapping

import click
from click.shell_completion import CompletionItem

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable
from divergent.cli.config import resolve

# Short: a Tab that waits on a server that is away must not hang the shell.
TIMEOUT = 3


def _names(path: str, key: str, field: str, typed: str,
           params: Mapping[str, object] | None = None) -> list[CompletionItem]:
    try:
        # The configured server only: a --api-url typed (or pasted) on the
        # line being completed never gets the stored key on a Tab.
        settings = resolve(None, None)
        items = ApiClient(settings.api_url, settings.token, timeout=TIMEOUT).get(path, params)[key]
    except (click.ClickException, ApiError, ApiUnreachable, KeyError, TypeError, ValueError):
        return []
    return [CompletionItem(item[field]) for item in items if item[field].startswith(typed)]


def run_names(ctx: click.Context, param: click.Parameter, typed: str) -> list[CompletionItem]:
    """The org's 100 newest runs."""
    return _names("/runs", "runs", "name", typed, {"limit": 100})


def volume_names(ctx: click.Context, param: click.Parameter, typed: str) -> list[CompletionItem]:
    return _names("/volumes", "volumes", "name", typed)
