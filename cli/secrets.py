"""`div secrets set|ls|rm`: the org's secrets. A value is read from a prompt
that does not echo, or from stdin when it is not a terminal; no command
ever prints one."""
from __future__ import annotations

import sys

import click

from divergent.cli.api import ApiClient
from divergent.cli.context import pass_api
from divergent.cli.flags import parse_secret_name
from divergent.cli.output import print_json, started, table


@click.group("secrets")
def secrets() -> None:
    """Credentials for runs: `div run --secret NAME` gives one to a run."""


@secrets.command("set")
@click.argument("name", callback=lambda ctx, param, value: parse_secret_name(value, "NAME"))
@pass_api
def secrets_set(api: ApiClient, name: str) -> None:
    """Set NAME's value (asked for without echo, or read from stdin).

    \b
      div secrets set WANDB_API_KEY
      printf %s "$TOKEN" | div secrets set HF_TOKEN
    """
    if sys.stdin.isatty():
        value = click.prompt(f"{name}", hide_input=True, err=True)
    else:
        value = sys.stdin.read()
        # `echo value |` adds a newline that is not part of the secret.
        value = value[:-1] if value.endswith("\n") else value
    if not value:
        raise click.UsageError("the value is empty")
    api.put_json(f"/secrets/{name}", {"value": value})
    click.echo(f"secret {name} set", err=True)


@secrets.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_api
def secrets_ls(api: ApiClient, as_json: bool) -> None:
    """List the org's secrets: names, who set them, when (never values)."""
    rows = api.get("/secrets")["secrets"]
    if as_json:
        return print_json(rows)
    table(["NAME", "SET BY", "SET AT"],
          [[row["name"], row["set_by"], started(row["set_at"])] for row in rows])


@secrets.command("rm")
@click.argument("name", callback=lambda ctx, param, value: parse_secret_name(value, "NAME"))
@pass_api
def secrets_rm(api: ApiClient, name: str) -> None:
    """Delete a secret. Runs already started keep the value they were given."""
    api.delete(f"/secrets/{name}")
    click.echo(f"secret {name} deleted", err=True)
