"""Admin commands for the cluster's owners (`flask …`): the site's Slurm
settings, a check of the whole setup, orgs and users at a glance, usage per
org, and rotating the key that seals secrets."""
from __future__ import annotations

import sys

import click
import sqlalchemy as sa

from app.extensions import db
from app.models import Org, User
from app.services.doctor import examine
from app.services.errors import ServiceError
from app.services.pricing import format_usd
from app.services.secrets import rotate
from app.services.site import TRANSPORTS, SiteConfigError, load_site, save_site, with_changes
from app.services.usage import month_spend, usage_report
from slurm.jobspec import RUNTIMES


def _pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        gpu, sep, name = value.partition("=")
        if not sep:
            raise click.BadParameter(f"{value!r} is not TYPE=NAME", param_hint=flag)
        pairs[gpu] = name
    return pairs


@click.command("site")
@click.option("--partition", "partitions", multiple=True, metavar="TYPE=PARTITION",
              help="The Slurm partition for a GPU type (or cpu). Repeatable.")
@click.option("--gres", multiple=True, metavar="TYPE=GRES",
              help="The GRES type name for a GPU type, as in gres.conf. Repeatable.")
@click.option("--runtime", type=click.Choice(RUNTIMES), help="How runs get their image.")
@click.option("--gpus-per-node", type=click.IntRange(1, 64), help="GPUs on each GPU node.")
@click.option("--scratch-root", metavar="PATH", help="Node-local folder for runs' scratch.")
@click.option("--transport", type=click.Choice(TRANSPORTS),
              help="Run Slurm's commands on this host, or on a login node over SSH.")
@click.option("--ssh-host", metavar="HOST")
@click.option("--ssh-user", metavar="USER")
@click.option("--ssh-key", metavar="PATH", help="The private key the server logs in with.")
@click.option("--ssh-port", type=click.IntRange(1, 65535), default=22, show_default=True)
@click.option("--ssh-known-hosts", metavar="PATH",
              help="known_hosts with the login node's key (else the system's): never trust on first use.")
def site(partitions, gres, runtime, gpus_per_node, scratch_root, transport, ssh_host,
         ssh_user, ssh_key, ssh_port, ssh_known_hosts) -> None:
    """Show the site's Slurm settings, or change them. The server and the
    reconciler reread them on their next request or cycle; check the result
    with `flask doctor`."""
    try:
        current = load_site()
        changes = {key: value for key, value in (
            ("runtime", runtime), ("gpus_per_node", gpus_per_node),
            ("scratch_root", scratch_root), ("partitions", _pairs(partitions, "--partition")),
            ("gres", _pairs(gres, "--gres"))) if value}
        wire = None
        if transport == "local":
            wire = {"kind": "local"}
        elif transport == "ssh":
            wire = {"kind": "ssh", "host": ssh_host, "user": ssh_user, "key_path": ssh_key,
                    "port": ssh_port, "known_hosts": ssh_known_hosts}
            wire = {k: v for k, v in wire.items() if v is not None}
        if changes or wire:
            current = with_changes(current, changes, wire)
            click.echo(f"saved {save_site(current)}", err=True)
    except SiteConfigError as exc:
        raise click.ClickException(str(exc)) from None
    slurm = current.slurm
    click.echo(f"runtime        {slurm.runtime}")
    click.echo(f"gpus per node  {slurm.gpus_per_node}")
    click.echo(f"scratch        {slurm.scratch_root}")
    click.echo(f"Slurm on       {current.transport.describe()}")
    click.echo("type   partition   gres")
    for gpu, partition in slurm.partitions.items():
        click.echo(f"{gpu:6s} {partition:11s} {slurm.gres_types.get(gpu, '-')}")


@click.command("doctor")
def doctor() -> None:
    """Check the setup end to end and say what is wrong, in plain words.
    Exits 1 when something is."""
    failed = 0
    for finding in examine():
        mark = "ok " if finding.ok else "BAD"
        click.echo(f"{mark} {finding.what}: {finding.says}")
        failed += not finding.ok
    if failed:
        click.echo(f"{failed} problem{'s' if failed > 1 else ''} found", err=True)
        sys.exit(1)
    click.echo("everything answers", err=True)


@click.command("orgs")
def orgs() -> None:
    """List the orgs: Slurm account, users, this month's spend and limit."""
    users = dict(db.session.execute(sa.select(User.org_id, sa.func.count())
                                    .group_by(User.org_id)).all())
    click.echo(f"{'ORG':20s} {'ACCOUNT':20s} {'USERS':>5s} {'THIS MONTH':>11s} {'LIMIT':>10s}")
    for org in db.session.execute(sa.select(Org).order_by(Org.name)).scalars():
        limit = "none" if org.monthly_limit_micros is None else format_usd(org.monthly_limit_micros)
        click.echo(f"{org.name:20s} {org.slurm_account:20s} {users.get(org.id, 0):>5d} "
                   f"{format_usd(month_spend(org)):>11s} {limit:>10s}")


@click.command("users")
@click.option("--org", "org_name", metavar="ORG", help="Only this org's users.")
def users(org_name: str | None) -> None:
    """List users: org, role, and whether they have a dashboard password."""
    query = sa.select(User, Org.name).join(Org, User.org_id == Org.id).order_by(Org.name,
                                                                               User.username)
    if org_name:
        query = query.where(Org.name == org_name)
    click.echo(f"{'USER':24s} {'ORG':20s} {'ROLE':10s} PASSWORD")
    for user, org in db.session.execute(query).all():
        click.echo(f"{user.username:24s} {org:20s} {user.role:10s} "
                   f"{'set' if user.password_hash else '-'}")


@click.command("usage")
@click.option("--month", metavar="YYYY-MM", help="Another month than this one.")
def usage(month: str | None) -> None:
    """Spend per org for a month, by project, with each org's limit."""
    try:
        reports = [(org, usage_report(org, month))
                   for org in db.session.execute(sa.select(Org).order_by(Org.name)).scalars()]
    except ServiceError as exc:
        raise click.ClickException(exc.message) from None
    for org, report in reports:
        limit = ("no limit" if report["limit_micros"] is None
                 else f"limit {format_usd(report['limit_micros'])}")
        click.echo(f"{org.name}: {format_usd(report['spent_micros'])} in {report['month']} ({limit})")
        for project in report["projects"]:
            click.echo(f"  {project['project']:30s} {project['runs']:>5d} runs "
                       f"{format_usd(project['cost_micros']):>10s}")


@click.command("rotate-secrets")
@click.option("--new-key", is_flag=True,
              help="Make a new key first (keys kept in instance/secrets_key).")
def rotate_secrets(new_key: bool) -> None:
    """Re-encrypt every secret under the first key. With keys in
    DIV_SECRETS_KEYS: put the new key first, restart, then run this; the
    old key can go once it is done."""
    try:
        count = rotate(new_key)
    except ServiceError as exc:
        raise click.ClickException(exc.message) from None
    click.echo(f"{count} sealed values re-encrypted under the first key")


commands = [site, doctor, orgs, users, usage, rotate_secrets]
