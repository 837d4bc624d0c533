"""Money: the price table (`flask prices`), an org's monthly limit
(`org-limit`), spend per org (`usage`), and the reconciliation of a month's
charges against sacct (`charges`)."""
from __future__ import annotations

import sys

import click

from divergent.app.admin import admin_command
from divergent.app.services.accounts.orgs import all_orgs, find_org, set_monthly_limit
from divergent.app.services.cluster.gpu_use import gpu_hours_efficiency
from divergent.app.services.files.quota import set_quota, usage_text
from divergent.app.services.money.billing import recompute
from divergent.app.services.money.pricing import (
    change_prices,
    current_prices,
    format_usd,
    limit_text,
    usd_text,
)
from divergent.app.services.money.usage import month_bounds, usage_report


@admin_command("prices", bad_value="--set")
@click.option("--set", "changes", multiple=True, metavar="NAME=USD",
              help="A GPU type (h100=4.80) or extra_core=, extra_gib=. Repeatable.")
def prices(changes: tuple[str, ...]) -> None:
    """Show the price table, or change it. New runs use the new prices; a run
    keeps the rate it started with."""
    if changes:
        table = change_prices(dict(change.partition("=")[::2] for change in changes))
    else:
        table = current_prices()
    for gpu, price in table.per_unit_hour.items():
        click.echo(f"{gpu:10s} ${usd_text(price)}/h")
    click.echo(f"{'extra core':10s} ${usd_text(table.extra_core_hour)}/h")
    click.echo(f"{'extra GiB':10s} ${usd_text(table.extra_gib_hour)}/h")


@admin_command("org-quota", bad_value="SIZE")
@click.argument("org_name")
@click.argument("size", metavar="SIZE|none")
def org_quota(org_name: str, size: str) -> None:
    """Set an org's storage quota (its volumes, code and blobs together):
    500GB, 2TB, or none for the site's DIV_STORAGE_QUOTA."""
    org = set_quota(find_org(org_name), size)
    click.echo(f"{org.name}: {usage_text(org)}")


@admin_command("org-limit", bad_value="USD")
@click.argument("org_name")
@click.argument("amount", metavar="USD|none")
def org_limit(org_name: str, amount: str) -> None:
    """Set an org's monthly usage limit in dollars (or `none`)."""
    org = set_monthly_limit(find_org(org_name), amount)
    click.echo(f"{org.name}: {limit_text(org.monthly_limit_micros)} a month")


@admin_command("usage")
@click.option("--month", metavar="YYYY-MM", help="Another month than this one.")
def usage(month: str | None) -> None:
    """Spend per org for a month, by project, with each org's limit and how
    much of its GPU hours its GPUs spent working."""
    start, end, _ = month_bounds(month)
    reports = [(org, usage_report(org, month)) for org in all_orgs()]
    for org, report in reports:
        limit = limit_text(report["limit_micros"])
        limit = limit if report["limit_micros"] is None else f"limit {limit}"
        click.echo(f"{org.name}: {format_usd(report['spent_micros'])} in {report['month']} ({limit})")
        hours, efficiency = gpu_hours_efficiency(org.id, start, end)
        if hours:
            worked = "no GPU telemetry on this cluster" if efficiency is None \
                else f"{efficiency:.0%} of them working"
            click.echo(f"  GPU hours {hours:.1f}, {worked}")
        for project in report["projects"]:
            click.echo(f"  {project['project']:30s} {project['runs']:>5d} runs "
                       f"{format_usd(project['cost_micros']):>10s}")


@admin_command("charges")
@click.option("--month", metavar="YYYY-MM", help="Default: this month.")
def charges(month: str | None) -> None:
    """Recompute a month's charges from sacct and print any difference from
    what was billed; exit 1 if there is one."""
    _, _, label = month_bounds(month)
    found = recompute(month)
    wrong = [c for c in found if c.recomputed_micros is None or c.difference]
    for c in wrong:
        again = "not in sacct" if c.recomputed_micros is None else format_usd(c.recomputed_micros)
        click.echo(f"{c.org} {c.run} (job {c.job_id}): billed {format_usd(c.billed_micros)}, "
                   f"sacct says {again}")
    billed = sum(c.billed_micros for c in found)
    difference = sum(c.difference for c in found)
    click.echo(f"{label}: {len(found)} runs, billed ${usd_text(billed)}, "
               f"difference ${usd_text(abs(difference))}"
               + ("" if not difference else (" too much" if difference < 0 else " too little")))
    if wrong:
        sys.exit(1)


commands = [prices, org_limit, org_quota, usage, charges]
