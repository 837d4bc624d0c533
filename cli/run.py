"""`div run`: validate every flag, upload what changed, start the run, print
the two header lines, follow the log, print the last line and exit with the
code the docs' table gives."""
from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import click

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable
from divergent.cli.catalog import FALLBACK, Shape, cluster_shape
from divergent.cli.config import resolve
from divergent.cli.context import fail, pass_api
from divergent.cli.entrypoint import check_entrypoint
from divergent.cli.flags import (
    check_hardware,
    command_for,
    parse_check,
    parse_env,
    parse_image,
    parse_memory,
    parse_mount,
    parse_name,
    parse_secret_name,
    parse_sweep,
    parse_usd,
    parse_volume,
    safe_project_name,
)
from divergent.cli.follow import follow, through_restarts
from divergent.cli.output import count, exit_code_for, print_json
from divergent.cli.sweep import follow_sweep
from divergent.cli.upload import hash_files, list_files, upload
from divergent.terms import DEFAULT_IMAGE, format_bytes

# What the server answers for a request it will not take as it is.
REFUSALS = (400, 404, 409, 422)


class RunCommand(click.Command):
    """Remembers whether the words came after `--`, which click swallows:
    `div run -- train.py` runs `train.py` as it is, not as an entrypoint."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["after_dashes"] = "--" in args
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """--gpu lists the site's catalog when the API answers (the docs'
        table when it does not, or no API is set)."""
        gpu = next(param for param in self.params if param.name == "gpu")
        gpu.help = f"GPU type: {', '.join(catalog_for_help().gpu_types)}."
        super().format_help(ctx, formatter)


def catalog_for_help() -> Shape:
    try:
        settings = resolve(None, None)
        return cluster_shape(ApiClient(settings.api_url, settings.token))
    except (click.UsageError, ApiUnreachable):
        return FALLBACK


def _callback(parse: Callable[..., object],
              *extra: str) -> Callable[[click.Context, click.Parameter, object], object]:
    def callback(ctx: click.Context, param: click.Parameter, value: object) -> object:
        if value is None or value == ():
            return value
        return parse(value, *extra)
    return callback


F = TypeVar("F", bound=Callable[..., Any])


def _options(*options: Callable[[F], F]) -> Callable[[F], F]:
    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command
    return apply


# What a run is and what it gets: div run's, and div shell's and div notebook's.
RUN_OPTIONS = _options(
    click.option("--gpu", default="h100", show_default=True, metavar="TYPE",
                 shell_complete=lambda ctx, param, typed: [
                     t for t in FALLBACK.gpu_types if t.startswith(typed)],
                 help=f"GPU type, one the site sells ({', '.join(FALLBACK.gpu_types)} on the "
                      "docs' cluster)."),
    click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Number of GPUs; above a node's (8 on the docs' cluster), whole nodes."),
    click.option("--cpu", "cpus", type=click.IntRange(min=1),
                 help="Physical CPU cores.  [default: 1 per GPU]"),
    click.option("--memory", callback=_callback(parse_memory), metavar="SIZE",
                 help="Memory in whole GiB: 64, 64G or 64GiB.  [default: 8 GiB per GPU, 2 for cpu]"),
    click.option("--max-spend", callback=_callback(parse_usd), metavar="USD",
                 help="Stop the run when it has cost this many dollars: 5, 5.00 or $5."),
    click.option("--project", callback=_callback(parse_name, "--project"),
                 help="Project the run belongs to.  [default: the folder's name]"),
    click.option("--name", callback=_callback(parse_name, "--name"),
                 help="Run name.  [default: generated]"),
    click.option("--image", default=DEFAULT_IMAGE, show_default=True,
                 callback=_callback(parse_image), help="Public container image to run in."),
    click.option("--env", "env_items", multiple=True, callback=_callback(parse_env),
                 metavar="KEY=value", help="Environment variable for the run. Repeatable."),
    click.option("--secret", "secrets", multiple=True, metavar="NAME",
                 callback=lambda ctx, param, values: [parse_secret_name(v) for v in values],
                 help="An org secret (div secrets set) to give the run as an environment "
                      "variable; masked as *** in its log. Repeatable."))

# Where its code comes from.
CODE_OPTIONS = _options(
    click.option("--volume", callback=_callback(parse_volume),
                 help="Volume to upload the code to.  [default: <project>-code]"),
    click.option("--no-upload", is_flag=True, help="Upload nothing; run the command in the image as it is."))


@click.command("run", cls=RunCommand)
@click.argument("words", nargs=-1, metavar="<entrypoint> | -- <command...>")
@RUN_OPTIONS
@click.option("--mount", "mounts", multiple=True, metavar="s3://BUCKET/PREFIX:/mnt/NAME",
              callback=lambda ctx, param, values: [parse_mount(v) for v in values],
              help="Copy an S3 prefix into the volume NAME (a volume's name, no subfolder) "
                   "before the run starts, as a transfer run of its own: only what changed since "
                   "the last copy moves, and nothing goes back to the bucket. The org's AWS_* "
                   "secrets. Repeatable.")
@click.option("--sweep", "sweep", multiple=True, metavar="KEY=v1,v2,...",
              callback=_callback(parse_sweep),
              help="Start one run for each combination of these values, as one Slurm job "
                   "array; each run gets its values as environment variables ($KEY). "
                   "Repeatable. Spend limits apply to each run.")
@click.option("--check", "checks", multiple=True, metavar="CHECK",
              callback=lambda ctx, param, values: [parse_check(v) for v in values],
              help="Condition the result must meet, such as metrics.accuracy>=0.8. Repeatable.")
@click.option("--telemetry", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Chart layout for the Telemetry tab.  [default: telemetry.toml, if present]")
@click.option("--allow-idle", is_flag=True,
              help="The run may leave its GPUs idle: the site's idle policy never stops it.")
@CODE_OPTIONS
@click.option("-d", "--detach", is_flag=True, help="Print the run's name and exit once it has started.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run as JSON when it ends (with --detach, when it starts); "
                   "stdout then holds the JSON alone, and the run's stdout goes to stderr.")
@pass_api
def run(api: ApiClient, detach: bool, as_json: bool, **flags: object) -> None:
    """Start a run with this folder's code and stream its log until it ends.

    \b
      div run --gpu h100 train.py::run --max-spend 5
      div run --detach -- torchrun --nproc-per-node 8 train.py
    """
    body = run_request(api, flags, click.get_current_context().meta["after_dashes"],
                       lambda request: check_first(
                           api, "/sweeps/check" if request["sweep"] else "/runs/check", request))
    if body["sweep"]:
        follow_sweep(api, start(api, "/sweeps", body)["sweep"], detach, as_json)
    else:
        follow_started(api, start(api, "/runs", body), detach, as_json)


def follow_started(api: ApiClient, created: dict[str, Any], detach: bool, as_json: bool) -> None:
    """The header, then (unless detached) the log to its end, the last line,
    and the exit code the docs' table gives; Ctrl-C detaches."""
    started = created["run"]
    click.echo(created["header"], err=True)
    if sys.stderr.isatty():     # a person watching: the page with logs and charts
        click.echo(f"view it: {api.page_url('/runs/' + started['name'])}", err=True)
    if detach:
        print_json(started) if as_json else click.echo(started["name"])
        return
    try:
        # A run that mounts buckets starts once their copies end well.
        for mount in started.get("mounts") or []:
            click.echo(f"copying {mount['url']} into {mount['path']}: {mount['copy']}", err=True)
            click.echo(follow(api, mount["copy"])["summary"], err=True)
        if as_json:
            click.echo("with --json, stdout holds the run's JSON alone: the run's stdout "
                       "follows on stderr", err=True)
        end = follow(api, started["name"], stdout_free=as_json)
    except KeyboardInterrupt:
        click.echo(f"\ndetached; {started['name']} goes on.\n"
                   f"  follow it: div logs {started['name']} -f\n"
                   f"  stop it:   div stop {started['name']}", err=True)
        sys.exit(0)
    click.echo(end["summary"], err=True)
    if as_json:
        print_json(end["run"])
    sys.exit(exit_code_for(end["run"]))


def start(api: ApiClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST /runs (or /transfers), tried again with the same Idempotency-Key
    while the API is away (a server restart) for up to RECONNECT_SECONDS: an
    answer lost on the way back gets the run it made, never a second run."""
    key = secrets.token_hex(16)
    return through_restarts(lambda: api.post(path, body, headers={"Idempotency-Key": key}))


def check_first(api: ApiClient, path: str, body: dict[str, Any]) -> None:
    """The server's check of the whole request, before anything is uploaded:
    what it refuses (a secret that does not exist, GPUs no partition has, a
    name in use) is bad input, exit 2, as a bad flag is; what it notes (an
    image the site does not use) goes to stderr."""
    try:
        checked = api.post(path, body)
    except ApiError as exc:
        if exc.status not in REFUSALS:
            raise
        fail(str(exc), 2)
    for note in checked.get("notes", []):
        click.echo(f"note: {note}", err=True)


def run_request(api: ApiClient, params: dict[str, Any], after_dashes: bool,
                check: Callable[[dict[str, Any]], None], kind: str = "batch") -> dict[str, Any]:
    """The request for POST /runs from `div run`'s parsed flags, checked by
    `check` and then the code uploaded (unless --no-upload). `div schedule
    create` uses it too, and div shell and div notebook (`kind`), whose
    command may be left out (a shell; Jupyter)."""
    interactive = kind != "batch"
    params = {"telemetry": None, "checks": [], "mounts": [], "sweep": (), **params}
    words = params["words"]
    command = command_for(words, after_dashes) if words or not interactive else ""
    gpu, gpus, cpus, memory = params["gpu"], params["gpus"], params["cpus"], params["memory"]
    check_hardware(gpu, gpus, cpus, memory, cluster_shape(api, gpu))
    root = Path.cwd()
    project = params["project"] or safe_project_name(root.resolve().name)
    no_upload, max_spend = params["no_upload"], params["max_spend"]
    telemetry = params["telemetry"] or (None if no_upload else _present(root / "telemetry.toml"))
    body = {"project": project, "command": command, "gpu": gpu, "gpus": gpus, "cpu": cpus,
            "memory": memory, "name": params["name"], "image": params["image"],
            "env": params["env_items"] or {}, "secrets": params["secrets"],
            "checks": [c["check"] for c in params["checks"]], "mounts": params["mounts"],
            "telemetry": telemetry.read_text() if telemetry else None,
            "max_spend": None if max_spend is None else format(Decimal(max_spend) / 10**6, "f"),
            "sweep": params["sweep"] or None, "kind": kind,
            "allow_idle": bool(params.get("allow_idle"))}
    paths: dict[str, os.stat_result] = {} if no_upload else list_files(root)
    # A shell or notebook in an empty folder has nothing to upload, and that is fine.
    no_upload = no_upload or (interactive and not paths)
    if not no_upload:
        if not paths:
            raise click.UsageError(f"nothing to upload in {root}; to run the image as it "
                                   "is, use --no-upload")
        if words:
            check_entrypoint(words, after_dashes, root, paths)
    check(body)
    if not no_upload:
        tree = upload(api, params["volume"] or f"{project}-code", hash_files(root, paths))
        click.echo(f"{count(tree['files'], 'file')}, {format_bytes(tree['bytes'])} → "
                   f"{tree['ref']}", err=True)
        body["code"] = tree["ref"]
    return body


def _present(path: Path) -> Path | None:
    return path if path.is_file() else None
