"""`div storage import` and `div storage export`: an S3 prefix into a volume
and back. Each is a transfer run on the cluster (the bytes never pass
through this machine or the API), followed as `div run` follows a run:
its progress in the log, the last line, exit 0 when everything moved."""
from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

import click

from divergent.cli.api import ApiClient
from divergent.cli.context import pass_api
from divergent.cli.flags import parse_s3_url, parse_usd, parse_volume
from divergent.cli.run import check_first, follow_started, start

F = TypeVar("F", bound=Callable[..., Any])

FOLLOW_OPTIONS = (
    click.option("--max-spend", metavar="USD",
                 callback=lambda ctx, param, value: None if value is None else parse_usd(value),
                 help="Stop the transfer when it has cost this many dollars: 5, 5.00 or $5."),
    click.option("-d", "--detach", is_flag=True,
                 help="Print the transfer run's name and exit once it has started."),
    click.option("--json", "as_json", is_flag=True,
                 help="Print the transfer run as JSON when it ends (with --detach, when it "
                      "starts)."),
)


def _follow_options(command: F) -> F:
    for option in reversed(FOLLOW_OPTIONS):
        command = option(command)
    return command


def _volume_path(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, str]:
    """VOLUME[/PATH] as (volume, path)."""
    volume, _, path = value.partition("/")
    try:
        return parse_volume(volume), path.strip("/")
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message) from None


def _s3(ctx: click.Context, param: click.Parameter, value: str) -> str:
    return parse_s3_url(value)


def _transfer(api: ApiClient, direction: str, volume: str, path: str, url: str, max_spend: int | None,
              detach: bool, as_json: bool) -> None:
    body = {"direction": direction, "volume": volume, "path": path, "url": url,
            "max_spend": None if max_spend is None else format(Decimal(max_spend) / 10**6, "f")}
    check_first(api, "/transfers/check", body)
    follow_started(api, start(api, "/transfers", body), detach, as_json)


@click.command("import")
@click.argument("destination", metavar="VOLUME[/PATH]", callback=_volume_path)
@click.argument("source", metavar="s3://BUCKET/PREFIX", callback=_s3)
@_follow_options
@pass_api
def import_(api: ApiClient, destination: tuple[str, str], source: str, max_spend: int | None,
            detach: bool, as_json: bool) -> None:
    """Copy the objects below PREFIX (or the one object PREFIX names) into
    VOLUME, under PATH, keeping their names below PREFIX; only what is
    missing or changed moves, nothing is deleted. Makes the volume.

    The bytes move on the cluster, in a transfer run: a cpu run of 2 cores
    (project s3), billed per minute, listed by `div ls`, stopped by `div
    stop`. The bucket's keys are the org's secrets AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY, with AWS_ENDPOINT_URL for a store other than AWS
    (and AWS_DEFAULT_REGION, AWS_SESSION_TOKEN if set): div secrets set.
    Exits 0 when everything moved, 1 when a key was refused or an object
    failed (each said in a line), 2 for bad input.

    \b
      div storage import training-data/imagenet s3://datasets/imagenet
    """
    _transfer(api, "import", *destination, source, max_spend, detach, as_json)


@click.command("export")
@click.argument("source", metavar="VOLUME[/PATH]", callback=_volume_path)
@click.argument("destination", metavar="s3://BUCKET/PREFIX", callback=_s3)
@_follow_options
@pass_api
def export(api: ApiClient, source: tuple[str, str], destination: str, max_spend: int | None,
           detach: bool, as_json: bool) -> None:
    """Copy the files below PATH in VOLUME (a folder, one file, or without
    PATH the whole volume) to the bucket under PREFIX; only what is missing
    or changed (by size and ETag) moves, nothing is deleted. Links in the
    volume are skipped, never followed.

    A transfer run, with the org's keys, billed and exiting as for
    `div storage import`.

    \b
      div storage export checkpoints/lora-v1 s3://models/lora-v1
    """
    _transfer(api, "export", *source, destination, max_spend, detach, as_json)
