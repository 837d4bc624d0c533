"""The admin commands (`flask …`), one module per noun: orgs and users,
keys, money, the site's Slurm settings, the doctor, the reconciler, and the
dev machine's bootstrap. Each command is an AdminCommand, so a service's
error reaches the admin as one line, never a traceback."""
from __future__ import annotations

import functools

import click
from flask import Flask
from flask.cli import with_appcontext

from divergent.app.services.cluster.doctor import missing_database
from divergent.app.services.errors import Invalid, ServiceError


class ServiceErrors(click.Command):
    """A command whose ServiceErrors are click's: an Invalid value of the
    parameter named by `bad_value` is a usage error (exit 2, naming it), any
    other error is its message (exit 1). Mixed into a Command or a Group
    (its base, so that super() is typed, leaves their order unchanged)."""

    def __init__(self, *args, bad_value: str | None = None, **kwargs):
        # In the app's context however it is invoked: `flask` pushes one,
        # Flask's CLI test runner does not.
        if kwargs.get("callback") is not None:
            kwargs["callback"] = with_appcontext(_on_the_sites_database(kwargs["callback"]))
        super().__init__(*args, **kwargs)
        self.bad_value = bad_value

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except Invalid as exc:
            if self.bad_value:
                raise click.BadParameter(exc.message, ctx=ctx, param_hint=self.bad_value) from None
            raise click.ClickException(exc.message) from None
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None


def _on_the_sites_database(callback):
    """An admin command runs against a database with divergent's tables, or
    says where it looked: never a new empty SQLite file made by the asking
    (the site's settings not loaded) and a `no such table` traceback."""
    @functools.wraps(callback)
    def checked(*args, **kwargs):
        missing = missing_database()
        if missing:
            raise click.ClickException(
                f"{missing}: are the site's settings loaded? scripts/services reads them from "
                "services.env in the checkout (docs/admins/login-node.md); a new "
                "site makes its tables with `flask db upgrade`")
        return callback(*args, **kwargs)
    return checked


class AdminCommand(ServiceErrors, click.Command):
    pass


class AdminGroup(ServiceErrors, click.Group):
    command_class = AdminCommand


def admin_command(name: str, bad_value: str | None = None, **kwargs):
    return click.command(name, cls=AdminCommand, bad_value=bad_value, **kwargs)


def admin_group(name: str, **kwargs):
    return click.group(name, cls=AdminGroup, **kwargs)


def register(app: Flask) -> None:
    from divergent.app.admin import dev, doctor, keys, money, orgs, reconciler, site
    for module in (orgs, keys, money, site, doctor, reconciler, dev):
        for command in module.commands:
            app.cli.add_command(command)
