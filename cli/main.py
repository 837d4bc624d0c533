"""The `div` command: one group, one module per noun."""
from __future__ import annotations

import click

from cli.keys import keys, whoami
from cli.login import login
from cli.notify import notify
from cli.run import run
from cli.runs import logs, ls, open_, rerun, stop
from cli.schedule import schedule
from cli.secrets import secrets
from cli.storage import storage
from cli.sweep import sweep
from cli.transfers import export, import_
from cli.usage import usage


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="divergent", prog_name="div")
def cli() -> None:
    """divergent: run code on your organisation's GPUs."""


storage.add_command(import_)
storage.add_command(export)
for command in (run, rerun, logs, stop, ls, open_, login, whoami, keys, secrets, schedule, notify, sweep,
                storage, usage):
    cli.add_command(command)
