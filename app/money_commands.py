"""Admin commands for money (`flask …`): the price table, an org's monthly
limit, and the reconciliation of a month's charges against sacct."""
from __future__ import annotations

import sys

import click
from flask import current_app

from app.extensions import db
from app.services.billing import recompute
from app.services.errors import NotFound
from app.services.orgs import find_org
from app.services.pricing import format_usd, load_prices, monthly_limit, save_prices, usd_text, with_prices
from app.services.usage import month_bounds


@click.command("prices")
@click.option("--set", "changes", multiple=True, metavar="NAME=USD",
              help="A GPU type (h100=4.80) or extra_core=, extra_gib=. Repeatable.")
def prices(changes: tuple[str, ...]) -> None:
    """Show the price table, or change it. New runs use the new prices; a run
    keeps the rate it started with."""
    path = current_app.config["DIV_PRICES_FILE"]
    table = load_prices(path)
    if changes:
        try:
            table = with_prices(table, dict(change.partition("=")[::2] for change in changes))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--set") from None
        save_prices(path, table)
    for gpu, price in table.per_unit_hour.items():
        click.echo(f"{gpu:10s} ${usd_text(price)}/h")
    click.echo(f"{'extra core':10s} ${usd_text(table.extra_core_hour)}/h")
    click.echo(f"{'extra GiB':10s} ${usd_text(table.extra_gib_hour)}/h")


@click.command("org-limit")
@click.argument("org_name")
@click.argument("amount", metavar="USD|none")
def org_limit(org_name: str, amount: str) -> None:
    """Set an org's monthly usage limit in dollars (or `none`)."""
    try:
        org = find_org(org_name)
    except NotFound as exc:
        raise click.ClickException(exc.message) from None
    try:
        org.monthly_limit_micros = monthly_limit(amount)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="USD") from None
    db.session.commit()
    shown = "no limit" if org.monthly_limit_micros is None else format_usd(org.monthly_limit_micros)
    click.echo(f"{org.name}: {shown} a month")


@click.command("charges")
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


commands = [prices, org_limit, charges]
