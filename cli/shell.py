"""`div shell` and `div notebook`: interactive runs, started like `div run`
(the same flags, the folder uploaded) and reached through the server: a
terminal in the run's sandbox on its node, or JupyterLab at the run's URL.
Billed per minute like any run; a shell ends when its command does."""
from __future__ import annotations

import socket
import sys
import time
import webbrowser
from typing import TYPE_CHECKING, Any

import click

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable
from divergent.cli.context import fail, pass_api
from divergent.cli.follow import follow
from divergent.cli.output import exit_code_for, print_json
from divergent.cli.run import CODE_OPTIONS, RUN_OPTIONS, RunCommand, check_first, run_request, start

if TYPE_CHECKING:
    from wsproto import WSConnection

POLL_SECONDS = 0.2
# How long a started run's program may take to listen (Jupyter: seconds).
ANSWER_SECONDS = 120
# What the server says while the run's program is not there yet, or while the
# org holds as many terminals as it may (429).
NOT_YET = (404, 429, 502, 503)
LIVE = ("queued", "running")


def _started(api: ApiClient, kind: str, flags: dict[str, Any]) -> dict[str, Any]:
    ctx = click.get_current_context()
    body = run_request(api, flags, ctx.meta["after_dashes"],
                       lambda request: check_first(api, "/runs/check", request), kind=kind)
    created = start(api, "/runs", body)
    click.echo(created["header"], err=True)
    run: dict[str, Any] = created["run"]
    return run


def _until_running(api: ApiClient, name: str) -> dict[str, Any]:
    """The run once it runs; its waiting reasons said as they change."""
    said = None
    while True:
        run: dict[str, Any] = api.get(f"/runs/{name}")["run"]
        if run["status"] != "queued":
            return run
        if run.get("waiting") and run["waiting"] != said:
            said = run["waiting"]
            click.echo(f"waiting: {said}", err=True)
        time.sleep(POLL_SECONDS)


def _ended(api: ApiClient, name: str) -> None:
    """The run's last line and exit code, as `div run` ends."""
    end = follow(api, name)
    click.echo(end["summary"], err=True)
    sys.exit(exit_code_for(end["run"]))


@click.command("shell", cls=RunCommand)
@click.argument("words", nargs=-1, metavar="[RUN] [-- command...]")
@RUN_OPTIONS
@CODE_OPTIONS
@click.option("--attach", metavar="RUN", help="Come back to a shell run whose connection dropped.")
@pass_api
def shell(api: ApiClient, attach: str | None, **flags: Any) -> None:
    """Start a run with this folder's code and a terminal in it, on its node,
    in /workspace. Exit (or Ctrl-D) ends the run; a dropped connection does
    not: come back with --attach within the site's idle time. With a running
    batch run's name, a shell beside its command instead (its GPUs, files,
    processes and environment), which leaves the run running when it exits.

    \b
      div shell --gpu h100
      div shell --cpu 4 -- python
      div shell --attach RUN
      div shell RUN          (beside a running batch run; a shell run: --attach)
    """
    words = flags["words"]
    if attach is None and words and not click.get_current_context().meta["after_dashes"]:
        if len(words) > 1:
            raise click.UsageError("one run to attach to, or a command after --")
        attach = words[0]
    name = attach or _started(api, "shell", flags)["name"]
    run = _until_running(api, name)
    if run["kind"] == "notebook":
        fail(f"{name} is a notebook: open {api.page_url(run['url'])}", 2)
    if run["status"] != "running":
        if run["kind"] == "batch":
            fail(f"{name} has ended ({run['status']}): a shell goes beside a running run", 1)
        if attach:
            click.echo(f"{name} has ended:", err=True)
        _ended(api, name)
    # wsproto is imported by div shell alone: every other command starts without it.
    from divergent.cli.terminal import Dropped, TakenOver, session
    sock, ws = _connected(api, name)
    try:
        code = session(sock, ws)
    except TakenOver:
        fail(f"\r\ndivergent: another connection took {name}'s shell over", 255)
    except Dropped:
        if api.get(f"/runs/{name}")["run"]["status"] not in LIVE:
            _ended(api, name)       # stopped, or at its time limit: nothing goes on
        if run["kind"] == "batch":
            fail(f"\r\ndivergent: the connection to {name} was lost, and its shell with it", 255)
        fail(f"\r\ndivergent: the connection to {name} was lost; its shell goes on: "
             f"div shell --attach {name}", 255)
    if run["kind"] == "batch":
        # A shell beside a run: the run goes on.
        click.echo(f"left {name}'s shell; {name} goes on", err=True)
        sys.exit(code)
    _ended(api, name)


def _connected(api: ApiClient, name: str) -> tuple[socket.socket, WSConnection]:
    from divergent.cli.terminal import open_terminal
    deadline = time.monotonic() + ANSWER_SECONDS
    while True:
        try:
            return open_terminal(api, name)
        except ApiError as exc:
            if exc.status not in NOT_YET or time.monotonic() > deadline:
                fail(str(exc))
            if api.get(f"/runs/{name}")["run"]["status"] not in LIVE:
                _ended(api, name)
        time.sleep(POLL_SECONDS)


@click.command("notebook", cls=RunCommand)
@RUN_OPTIONS
@CODE_OPTIONS
@click.option("-d", "--detach", is_flag=True,
              help="Print the run's name (the run as JSON, with its url, with --json) and exit "
                   "at once; the url answers once the run runs and JupyterLab has started.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON, with its url.")
@pass_api
def notebook(api: ApiClient, detach: bool, as_json: bool, **flags: Any) -> None:
    """Start a run with this folder's code and JupyterLab in it, at the run's
    own URL on the dashboard (opened here in a browser), until it goes
    unused for the site's idle time or div stop ends it.

    \b
      div notebook --gpu h100 --max-spend 10
      div notebook -d --json
    """
    run = _started(api, "notebook", {**flags, "words": ()})
    path = run["url"]
    run["url"] = api.page_url(path)
    if detach:
        print_json(run) if as_json else click.echo(run["name"])
        return
    run = _until_running(api, run["name"]) | {"url": run["url"]}
    if run["status"] == "running" and _answers(api, run["name"], path):
        click.echo(f"notebook: {run['url']}", err=True)
        if sys.stdout.isatty():
            webbrowser.open(run["url"])
    if as_json:
        print_json(run)
    try:
        _ended(api, run["name"])
    except KeyboardInterrupt:
        click.echo(f"\ndetached; {run['name']} goes on until it is idle.\n"
                   f"  stop it: div stop {run['name']}", err=True)


def _answers(api: ApiClient, name: str, path: str) -> bool:
    """Whether Jupyter answers at the run's URL (it takes seconds to start)."""
    deadline = time.monotonic() + ANSWER_SECONDS
    while time.monotonic() < deadline:
        try:
            api.get_page(path + "api/status")
            return True
        except ApiUnreachable:
            pass            # a bare 502/503 on the way: Jupyter is still starting
        except ApiError as exc:
            if exc.status not in NOT_YET:
                fail(str(exc))
        if api.get(f"/runs/{name}")["run"]["status"] not in LIVE:
            return False
        time.sleep(1)
    return False
