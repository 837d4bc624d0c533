"""A sweep as `div run --sweep` shows it: a header, one line a member as
each ends, a summary, and the exit code of the first member that failed
(0 when every one succeeded); and `div sweep NAME` for one already started."""
from __future__ import annotations

import functools
import sys
import time
from typing import Any

import click

from divergent.cli.api import ApiClient
from divergent.cli.context import pass_api
from divergent.cli.follow import through_restarts
from divergent.cli.output import count, exit_code_for, print_json
from divergent.terms import shown

POLL_SECONDS = 1.0


def member_line(run: dict[str, Any]) -> str:
    values = shown(" ".join(f"{k}={v}" for k, v in (run["sweep_values"] or {}).items()))
    status = run["status"] + (f" (exit code {run['exit_code']})"
                              if run["status"] == "failed" and run["exit_code"] else "")
    checks = run["checks"]
    passed = sum(check["verdict"] == "passed" for check in checks)
    verdict = f", checks {passed}/{len(checks)} passed" if checks else ""
    return f"{run['name']}  {values}  {status}{verdict}, ${run['cost']}"


def summary_line(sweep: dict[str, Any]) -> str:
    text = (f"sweep {sweep['name']}: {sweep['succeeded']} of {count(sweep['size'], 'run')} "
            f"succeeded")
    if sweep["with_checks"]:
        text += f", {sweep['passed_checks']} passed all checks"
    if sweep["ended"] < sweep["size"]:
        text += f", {sweep['size'] - sweep['ended']} not ended yet"
    return text + f"; cost ${sweep['cost']}"


def follow_sweep(api: ApiClient, sweep: dict[str, Any], detach: bool, as_json: bool) -> None:
    axes = " × ".join(f"{key} ({len(values)})" for key, values in sweep["axes"].items())
    click.echo(f"sweep {sweep['name']}: {count(sweep['size'], 'run')} over {axes}, "
               f"one Slurm job array ({sweep['slurm_job_id'] or 'submitting'})", err=True)
    if detach:
        print_json(sweep) if as_json else click.echo(sweep["name"])
        return
    shown: set[str] = set()
    try:
        while True:
            for run in sweep["runs"]:
                if run["status"] not in ("queued", "running") and run["name"] not in shown:
                    shown.add(run["name"])
                    # With --json, stdout is the sweep's JSON alone.
                    click.echo(member_line(run), err=as_json)
            if sweep["ended"] == sweep["size"]:
                break
            time.sleep(POLL_SECONDS)
            sweep = through_restarts(functools.partial(api.get, f"/sweeps/{sweep['name']}"))["sweep"]
    except KeyboardInterrupt:
        click.echo(f"\ndetached; {sweep['name']} goes on.\n"
                   f"  see it: div sweep {sweep['name']}", err=True)
        sys.exit(0)
    click.echo(summary_line(sweep), err=True)
    if as_json:
        print_json(sweep)
    sys.exit(sweep_exit_code(sweep))


def sweep_exit_code(sweep: dict[str, Any]) -> int:
    """0 when every member succeeded, else the first failing member's code."""
    failing = [run for run in sweep["runs"] if run["status"] != "succeeded"]
    return exit_code_for(failing[0]) if failing else 0


@click.command("sweep")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the sweep as JSON.")
@pass_api
def sweep(api: ApiClient, name: str, as_json: bool) -> None:
    """Show a sweep: one line a member run (its values, status, checks and
    cost) and the summary. Once every member has ended it exits as `div run
    --sweep` would; before, 0."""
    found = api.get(f"/sweeps/{name}")["sweep"]
    if as_json:
        print_json(found)
    else:
        for run in found["runs"]:
            click.echo(member_line(run))
        click.echo(summary_line(found), err=True)
    sys.exit(sweep_exit_code(found) if found["ended"] == found["size"] else 0)
