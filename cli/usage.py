"""`div usage`: the org's spend this month, by project and GPU type."""
from __future__ import annotations

import click

from cli.context import pass_api
from cli.output import dollars, print_json, table


@click.command("usage")
@click.option("--month", metavar="YYYY-MM", help="Another month than this one.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_api
def usage(api, month: str | None, as_json: bool) -> None:
    """Show the org's spend this month by project and GPU type, and its limit."""
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
