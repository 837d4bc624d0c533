"""What the CLI prints about runs: the exit code a run's end means (the
docs' Exit codes table), JSON for scripts and the `div ls` table."""
from __future__ import annotations

import json
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import click

from divergent.terms import shown


def exit_code_for(run: dict[str, Any]) -> int:
    """0 for success; the run's own code when it ended with one; 1 when it
    stopped without one (spend limit, usage limit, canceled)."""
    if run["status"] == "succeeded":
        return 0
    if run["status"] == "failed" and run.get("exit_code"):
        return int(run["exit_code"])
    return 1


def count(n: int, noun: str) -> str:
    """1 file, 14 files."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def print_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2))


def duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {secs}s" if minutes else f"{secs}s"


def dollars(text: str) -> str:
    return "$" + str(Decimal(text).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def started(iso: str | None) -> str:
    if not iso:
        return "-"
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M")


def table(headers: list[str], rows: list[list[str]]) -> None:
    rows = [[shown(cell) for cell in row] for row in rows]
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    for row in [headers, *rows]:
        click.echo("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
