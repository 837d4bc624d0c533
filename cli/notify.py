"""`div notify add|ls|rm`: where the org hears that a run failed, failed its
checks or reached a spend limit (a webhook, or email through the site's
SMTP server)."""
from __future__ import annotations

import click

from divergent.cli.api import ApiClient
from divergent.cli.context import pass_api
from divergent.cli.output import print_json, started, table

EVENTS = "failed,budget_exceeded,limit_reached,checks_failed,ended,idle"


@click.group("notify")
def notify() -> None:
    """Notifications when runs end: webhooks (Slack-compatible) and email."""


@notify.command("add")
@click.option("--webhook", metavar="URL", help="POST a JSON message ({\"text\": ...}) here.")
@click.option("--email", metavar="ADDRESS", help="Send an email here.")
@click.option("--on", "events", metavar="EVENTS",
              default="failed,checks_failed,budget_exceeded,limit_reached,idle", show_default=True,
              help=f"Which ends, comma-separated, of: {EVENTS} (ended: every end; idle: "
                   "your run's GPUs idle, before the site's idle policy stops it).")
@click.option("--schedule", metavar="NAME", help="Only the runs this schedule starts.")
@pass_api
def notify_add(api: ApiClient, webhook: str | None, email: str | None, events: str,
               schedule: str | None) -> None:
    """Add a channel: a message for each run of the org (or of one schedule)
    that ends one of these ways.

    \b
      div notify add --webhook https://hooks.slack.com/services/T0/B0/XX
      div notify add --email ml-oncall@example.org --on failed,checks_failed
    """
    if (webhook is None) == (email is None):
        raise click.UsageError("give --webhook URL or --email ADDRESS (one)")
    made = api.post("/notifications", {"webhook": webhook, "email": email,
                                       "on": events.split(","), "schedule": schedule})["channel"]
    click.echo(f"channel {made['id']}: {made['kind']} {made['target']} on "
               f"{','.join(made['on'])}", err=True)
    click.echo(made["id"])


@notify.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_api
def notify_ls(api: ApiClient, as_json: bool) -> None:
    """List the org's channels, with each one's last delivery and error."""
    rows = api.get("/notifications")["channels"]
    if as_json:
        return print_json(rows)
    table(["ID", "KIND", "TARGET", "ON", "SCHEDULE", "LAST DELIVERY", "LAST ERROR"],
          [[str(row["id"]), row["kind"], row["target"], ",".join(row["on"]),
            row["schedule"] or "-", started(row["last_delivery_at"]),
            f"{row['last_error']} ({started(row['last_error_at'])})" if row["last_error"]
            else "-"] for row in rows])


@notify.command("rm")
@click.argument("channel_id", metavar="ID", type=int)
@pass_api
def notify_rm(api: ApiClient, channel_id: int) -> None:
    """Remove a channel; its undelivered messages go with it."""
    api.delete(f"/notifications/{channel_id}")
    click.echo(f"channel {channel_id} removed", err=True)
