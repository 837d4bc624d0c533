"""`div usage`: the org's spend this month, by project, GPU type and user."""
from __future__ import annotations

import re

import click

from divergent.cli.api import ApiClient
from divergent.cli.context import pass_api
from divergent.cli.output import dollars, print_json, table


def _month(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A bad month is a bad flag (exit 2), said before the API is asked."""
    match = re.fullmatch(r"(\d{4})-(\d{2})", value) if value is not None else None
    if value is not None and not (match and 1 <= int(match.group(1)) <= 9998
                                  and 1 <= int(match.group(2)) <= 12):
        raise click.BadParameter(f"{value!r}: use YYYY-MM, such as 2026-11")
    return value


@click.command("usage")
@click.option("--month", metavar="YYYY-MM", callback=_month, help="Another month than this one.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_api
def usage(api: ApiClient, month: str | None, as_json: bool) -> None:
    """Show the org's spend this month by project, GPU type and user, and its limit."""
    report = api.get("/usage", {"month": month} if month else None)
    if as_json:
        return print_json(report)
    limit = ("no limit" if report["limit"] is None
             else f"limit {dollars(report['limit'])}, {dollars(report['left'])} left")
    click.echo(f"{report['month']}: {dollars(report['spent'])} spent; {limit}")
    if report["projects"]:
        click.echo()
        table(["PROJECT", "RUNS", "COST"],
              [[p["project"], str(p["runs"]), dollars(p["cost"])] for p in report["projects"]])
        click.echo()
        table(["GPU", "RUNS", "COST"],
              [[g["gpu"], str(g["runs"]), dollars(g["cost"])] for g in report["gpus"]])
        click.echo()
        table(["USER", "RUNS", "COST"],
              [[u["user"], str(u["runs"]), dollars(u["cost"])] for u in report.get("users", [])])
