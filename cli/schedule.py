"""`div schedule create|ls|rm`: runs the server starts on a cron schedule,
so a nightly evaluation needs no crontab on a laptop."""
from __future__ import annotations

import click

from divergent.cli.api import ApiClient
from divergent.cli.context import pass_api
from divergent.cli.flags import parse_name
from divergent.cli.output import print_json, table
from divergent.cli.run import check_first, run, run_request


@click.group("schedule")
def schedule() -> None:
    """Runs the server starts on a cron schedule, in a time zone (UTC unless
    --tz says)."""


@schedule.command("create", context_settings={"ignore_unknown_options": True,
                                              "allow_interspersed_args": False})
@click.option("--cron", required=True, metavar="'M H DOM MON DOW'",
              help="When, as crontab writes it: '0 3 * * *' is 03:00 every day.")
@click.option("--tz", default="UTC", show_default=True, metavar="ZONE",
              help="The IANA time zone the cron is read in (Europe/Berlin). Across "
                   "daylight-saving changes a time the clocks skip runs once, just after, "
                   "and one they pass twice runs the first time only.")
@click.option("--name", callback=lambda ctx, param, value: value and parse_name(value, "--name"),
              help="The schedule's name.  [default: generated]")
@click.argument("run_args", nargs=-1, type=click.UNPROCESSED, metavar="-- <div run flags and entrypoint>")
@pass_api
def schedule_create(api: ApiClient, cron: str, tz: str, name: str | None,
                    run_args: tuple[str, ...]) -> None:
    """Start a run like `div run` would, at every time the cron expression
    names. The code is uploaded now: each run gets this folder as it is
    today (make the schedule again to change it).

    \b
      div schedule create --cron '0 3 * * *' -- --gpu h100 eval.py \\
          --check 'metrics.accuracy>=0.8' --max-spend 5
    """
    try:
        run_ctx = run.make_context("div run", list(run_args))
    except click.UsageError as exc:   # about the div run flags after --, said as such
        raise click.UsageError(f"after --, as div run takes them: {exc.format_message()}",
                               click.get_current_context()) from None
    flags = {k: v for k, v in run_ctx.params.items()
             if k not in ("detach", "as_json", "token", "api_url")}
    body = run_request(api, flags, run_ctx.meta["after_dashes"], lambda request: check_first(
        api, "/schedules/check", {"cron": cron, "tz": tz, "name": name, "run": request}))
    made = api.post("/schedules", {"cron": cron, "tz": tz, "name": name, "run": body})["schedule"]
    click.echo(f"schedule {made['name']}: {made['when']}; next {made['next_local']}", err=True)
    click.echo(made["name"])


@schedule.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_api
def schedule_ls(api: ApiClient, as_json: bool) -> None:
    """List the org's schedules: when they run, what, and how the last went."""
    rows = api.get("/schedules")["schedules"]
    if as_json:
        return print_json(rows)
    if not rows:
        click.echo("no schedules yet: make one with div schedule create --cron 'M H DOM MON DOW' "
                   "-- <div run flags>", err=True)
        return
    table(["NAME", "WHEN", "LAST RUN", "COMMAND"],
          [[row["name"], f"{row['when']}; next {row['next_local']}",
            row["last_run"] or (f"failed: {row['last_error']}" if row["last_error"] else "-"),
            row["command"] + _sweep_text(row["sweep"])] for row in rows])


def _sweep_text(sweep: dict[str, list[str]] | None) -> str:
    """A schedule's sweep, after its command: " (a sweep of LR (2) x BS (2))"."""
    if not sweep:
        return ""
    return " (a sweep of " + " x ".join(f"{key} ({len(values)})"
                                         for key, values in sweep.items()) + ")"


@schedule.command("rm")
@click.argument("name")
@pass_api
def schedule_rm(api: ApiClient, name: str) -> None:
    """Delete a schedule. Runs it already started go on."""
    api.delete(f"/schedules/{name}")
    click.echo(f"schedule {name} deleted", err=True)
