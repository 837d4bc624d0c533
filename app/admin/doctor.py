"""`flask doctor`: the whole setup checked, in plain words."""
from __future__ import annotations

import sys

import click

from divergent.app.admin import admin_command
from divergent.app.services.cluster.doctor import examine


@admin_command("doctor")
def doctor() -> None:
    """Check the setup end to end and say what is wrong, in plain words.
    Exits 1 when something is."""
    failed = 0
    for finding in examine():
        mark = "ok " if finding.ok else "BAD"
        click.echo(f"{mark} {finding.what}: {finding.says}")
        failed += not finding.ok
    if failed:
        click.echo(f"{failed} problem{'s' if failed > 1 else ''} found", err=True)
        sys.exit(1)
    click.echo("everything answers", err=True)


commands = [doctor]
