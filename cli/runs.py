"""`div ls`, `div logs`, `div stop`, `div open` and `div rerun`: the runs that exist."""
from __future__ import annotations

import sys
import webbrowser
from typing import Any

import click

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable
from divergent.cli.complete import run_names
from divergent.cli.context import pass_api
from divergent.cli.follow import follow
from divergent.cli.output import dollars, duration, exit_code_for, print_json, started, table
from divergent.cli.run import follow_started, start

STATUSES = ("queued", "running", "succeeded", "failed", "canceled", "budget_exceeded",
            "limit_reached")


@click.command("ls")
@click.option("--project", help="Only this project's runs.")
@click.option("--status", type=click.Choice(STATUSES), help="Only runs in this status.")
@click.option("--user", "username", metavar="USERNAME", help="Only this user's runs.")
@click.option("--mine", is_flag=True, help="Only your own runs (the key's user).")
@click.option("-n", "--limit", type=click.IntRange(1, 500), default=20, show_default=True,
              help="How many runs, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@pass_api
def ls(api: ApiClient, project: str | None, status: str | None, username: str | None, mine: bool,
       limit: int, as_json: bool) -> None:
    """List recent runs: name, project, user, status, GPUs, started, duration,
    cost, and the sweep (with its values) a run is a member of."""
    if mine and username:
        raise click.UsageError("--mine and --user name a user each; give one")
    params = {"limit": limit, "project": project, "status": status, "user": username,
              "mine": "1" if mine else None}
    runs = api.get("/runs", {k: v for k, v in params.items() if v is not None})["runs"]
    if as_json:
        print_json(runs)
        return
    if not runs:
        filtered = project or status or username or mine
        click.echo("no runs match these filters" if filtered else
                   "no runs yet: start one with div run", err=True)
        return
    rows = [[r["name"], r["project"], r["user"], r["status"], r.get("kind", "batch"),
             "cpu" if r["gpu"] == "cpu" else f"{r['gpus']} x {r['gpu']}",
             started(r["started_at"]), duration(r["duration"]), dollars(r["cost"]),
             _sweep_cell(r)] for r in runs]
    table(["NAME", "PROJECT", "USER", "STATUS", "KIND", "GPUS", "STARTED", "DURATION", "COST",
           "SWEEP"],
          rows)


def _sweep_cell(run: dict[str, Any]) -> str:
    """A sweep's member: its sweep and values (`div sweep NAME` shows them all)."""
    if not run.get("sweep"):
        return "-"
    values = " ".join(f"{k}={v}" for k, v in (run["sweep_values"] or {}).items())
    return f"{run['sweep']} {values}"


@click.command("logs")
@click.argument("run", shell_complete=run_names)
@click.option("-f", "--follow", "follow_log", is_flag=True,
              help="Keep following until the run ends; exit as `div run` would.")
@click.option("-n", "--tail", type=click.IntRange(min=1), metavar="N",
              help="Only the last N lines of each stream (then follow, with -f).")
@pass_api
def logs(api: ApiClient, run: str, follow_log: bool, tail: int | None) -> None:
    """Print a run's stdout and stderr, each to its own."""
    try:
        end = follow(api, run, follow_to_end=follow_log, tail=tail)
    except KeyboardInterrupt:
        click.echo(f"\nstopped following; {run} goes on.\n"
                   f"  follow it again: div logs {run} -f\n"
                   f"  stop it:         div stop {run}", err=True)
        sys.exit(0)
    if end is not None:
        click.echo(end["summary"], err=True)
        sys.exit(exit_code_for(end["run"]))


@click.command("stop")
@click.argument("runs", nargs=-1, required=True, metavar="RUN...", shell_complete=run_names)
@pass_api
def stop(api: ApiClient, runs: tuple[str, ...]) -> None:
    """Stop runs; each ends canceled. Every run is asked even when one of
    them cannot be: exit 1 if any could not."""
    failed = False
    for name in dict.fromkeys(runs):
        try:
            answer = api.post(f"/runs/{name}/stop")
        except (ApiError, ApiUnreachable) as exc:
            click.echo(f"{name}: {exc}", err=True)
            failed = True
            continue
        if answer["stopping"]:
            click.echo(f"stopping {name}", err=True)
        else:
            click.echo(f"{name} has already ended: {answer['run']['status']}", err=True)
    sys.exit(1 if failed else 0)


@click.command("open")
@click.argument("run", shell_complete=run_names)
@pass_api
def open_(api: ApiClient, run: str) -> None:
    """Open the run's page in the dashboard (and print its address)."""
    url = api.page_url(f"/runs/{api.get(f'/runs/{run}')['run']['name']}")
    click.echo(url)
    if sys.stdout.isatty():
        webbrowser.open(url)


@click.command("rerun")
@click.argument("run", shell_complete=run_names)
@click.option("-d", "--detach", is_flag=True, help="Print the new run's name and exit once it has started.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the new run as JSON when it ends (with --detach, when it starts).")
@pass_api
def rerun(api: ApiClient, run: str, detach: bool, as_json: bool) -> None:
    """Start a new run of what RUN ran: the same code (as uploaded then),
    command, image, hardware, env, secrets, checks, telemetry, mounts and
    spend limit; then follow it as `div run` does."""
    follow_started(api, start(api, f"/runs/{run}/rerun", {}), detach, as_json)
