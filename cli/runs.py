"""`div ls`, `div logs` and `div stop`: the runs that exist."""
from __future__ import annotations

import sys

import click

from cli.context import pass_api
from cli.follow import follow
from cli.output import dollars, duration, exit_code_for, print_json, started, table


@click.command("ls")
@click.option("--project", help="Only this project's runs.")
@click.option("-n", "--limit", type=click.IntRange(1, 500), default=20, show_default=True,
              help="How many runs, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@pass_api
def ls(api, project: str | None, limit: int, as_json: bool) -> None:
    """List recent runs: name, project, status, GPUs, started, duration, cost,
    and the sweep (with its values) a run is a member of."""
    params = {"limit": limit, **({"project": project} if project else {})}
    runs = api.get("/runs", params)["runs"]
    if as_json:
        print_json(runs)
        return
    rows = [[r["name"], r["project"], r["status"],
             "cpu" if r["gpu"] == "cpu" else f"{r['gpus']} x {r['gpu']}",
             started(r["started_at"]), duration(r["duration"]), dollars(r["cost"]),
             _sweep_cell(r)] for r in runs]
    table(["NAME", "PROJECT", "STATUS", "GPUS", "STARTED", "DURATION", "COST", "SWEEP"], rows)


def _sweep_cell(run: dict) -> str:
    """A sweep's member: its sweep and values (`div sweep NAME` shows them all)."""
    if not run.get("sweep"):
        return "-"
    values = " ".join(f"{k}={v}" for k, v in (run["sweep_values"] or {}).items())
    return f"{run['sweep']} {values}"


@click.command("logs")
@click.argument("run")
@click.option("-f", "--follow", "follow_log", is_flag=True,
              help="Keep following until the run ends; exit as `div run` would.")
@pass_api
def logs(api, run: str, follow_log: bool) -> None:
    """Print a run's stdout and stderr, each to its own."""
    try:
        end = follow(api, run, follow_to_end=follow_log)
    except KeyboardInterrupt:
        sys.exit(0)
    if end is not None:
        click.echo(end["summary"], err=True)
        sys.exit(exit_code_for(end["run"]))


@click.command("stop")
@click.argument("run")
@pass_api
def stop(api, run: str) -> None:
    """Stop a run; it ends canceled."""
    answer = api.post(f"/runs/{run}/stop")
    if answer["stopping"]:
        click.echo(f"stopping {run}", err=True)
    else:
        click.echo(f"{run} has already ended: {answer['run']['status']}", err=True)
