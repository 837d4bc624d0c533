"""The `div` command: one group, one module per noun."""
from __future__ import annotations

import click

from divergent.cli.keys import keys, whoami
from divergent.cli.login import login
from divergent.cli.notify import notify
from divergent.cli.run import run
from divergent.cli.runs import logs, ls, open_, rerun, stop
from divergent.cli.schedule import schedule
from divergent.cli.secrets import secrets
from divergent.cli.shell import notebook, shell
from divergent.cli.storage import storage
from divergent.cli.sweep import sweep
from divergent.cli.transfers import export, import_
from divergent.cli.usage import usage


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="divergent", prog_name="div")
def cli() -> None:
    """divergent: run code on your organisation's GPUs."""


storage.add_command(import_)
storage.add_command(export)
for command in (run, shell, notebook, rerun, logs, stop, ls, open_, login, whoami, keys, secrets,
                schedule, notify, sweep, storage, usage):
    cli.add_command(command)
