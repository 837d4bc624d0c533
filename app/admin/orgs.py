"""Orgs and users: `flask create-org`, `create-user`, `user-unix-name`,
`set-password`, `orgs` and `users`."""
from __future__ import annotations

import click

from divergent.app.admin import admin_command
from divergent.app.models import ROLES
from divergent.app.services.accounts.offboarding import purge_volumes, remove_org, remove_user
from divergent.app.services.accounts.orgs import (
    ORG_NAME,
    add_user,
    find_org,
    find_user,
    get_or_create_org,
    org_summaries,
    set_org_account,
    users_by_org,
)
from divergent.app.services.accounts.passwords import set_password
from divergent.app.services.accounts.unix_users import (
    IdentityUnavailable,
    identity,
    map_member,
    ready_org,
)
from divergent.app.services.money.pricing import format_usd, limit_text


@admin_command("create-org", bad_value="NAME")
@click.argument("name")
@click.option("--account", metavar="ACCOUNT",
              help="The Slurm account its runs use, if not one of its name (a site "
                   "with make_accounts = false maps every org to an account it made).")
def create_org(name: str, account: str | None) -> None:
    """Create an org, and its Unix user, whose its jobs run as (unless the
    site's directory makes it); its Slurm account is made on its first run,
    unless the site makes accounts itself."""
    own_user = identity().submit_as != "service"
    if own_user and ORG_NAME.fullmatch(name):
        identity().user_of_org(name)       # a name Unix takes, before the org is made
    org = get_or_create_org(name, account)
    runs_as = ""
    if own_user:
        try:
            runs_as = f", jobs run as Unix user {ready_org(org)}"
        except IdentityUnavailable as exc:
            runs_as = f"; its Unix user is made on its first run, if it can be then: {exc}"
    click.echo(f"org {org.name} (Slurm account {org.slurm_account}{runs_as})")


@admin_command("org-account", bad_value="ACCOUNT")
@click.argument("name")
@click.argument("account")
def org_account(name: str, account: str) -> None:
    """Map an org to a Slurm account the site made: its next runs are
    submitted and billed under it."""
    org = set_org_account(find_org(name), account)
    click.echo(f"org {org.name} (Slurm account {org.slurm_account})")


@admin_command("create-user")
@click.argument("org_name")
@click.argument("username")
@click.option("--role", type=click.Choice(ROLES), default="member", show_default=True)
def create_user(org_name: str, username: str, role: str) -> None:
    """Create a user in an existing org."""
    org = find_org(org_name)
    user = add_user(org, username, role)
    click.echo(f"user {user.username} in {org.name} ({user.role})")


@admin_command("user-unix-name", bad_value="UNIX_NAME")
@click.argument("username")
@click.argument("unix_name", required=False)
@click.option("--none", "unmap", is_flag=True, help="Their jobs run as the org's user again.")
def user_unix_name(username: str, unix_name: str | None, unmap: bool) -> None:
    """Map a user to their own Unix user: where the site submits as members
    (flask site --submit-as member), their jobs run as it, so Slurm's fair
    share, limits and sacct -u see them; the org is still billed."""
    if (unix_name is None) == (not unmap):
        raise click.UsageError("give UNIX_NAME, or --none")
    user = find_user(username)
    map_member(user, unix_name)
    click.echo(f"{user.username}'s jobs run as "
               f"{unix_name or 'the org' + chr(39) + 's Unix user'}"
               + ("" if identity().submit_as == "member" else
                  " once the site submits as members (flask site --submit-as member)"))


@admin_command("set-password", bad_value="PASSWORD")
@click.argument("username")
@click.password_option()
def set_password_command(username: str, password: str) -> None:
    """Set a user's dashboard password (asked twice, not echoed)."""
    set_password(find_user(username), password)
    click.echo(f"password set for {username}")


@admin_command("orgs")
def orgs() -> None:
    """List the orgs: Slurm account, users, this month's spend and limit."""
    click.echo(f"{'ORG':20s} {'ACCOUNT':20s} {'USERS':>5s} {'THIS MONTH':>11s} {'LIMIT':>10s}")
    for row in org_summaries():
        removed = f"  removed {row.org.removed_at:%Y-%m-%d}" if row.org.removed_at else ""
        click.echo(f"{row.org.name:20s} {row.org.slurm_account:20s} {row.users:>5d} "
                   f"{format_usd(row.month_spend_micros):>11s} "
                   f"{limit_text(row.org.monthly_limit_micros):>10s}{removed}")


@admin_command("users")
@click.option("--org", "org_name", metavar="ORG", help="Only this org's users.")
def users(org_name: str | None) -> None:
    """List users: org, role, and whether they have a dashboard password."""
    click.echo(f"{'USER':24s} {'ORG':20s} {'ROLE':10s} PASSWORD")
    for user, org in users_by_org(org_name):
        state = "removed" if user.removed_at else "set" if user.password_hash else "-"
        click.echo(f"{user.username:24s} {org:20s} {user.role:10s} {state}")


@admin_command("remove-user")
@click.argument("username")
def remove_user_command(username: str) -> None:
    """Remove a user: their keys are revoked and their password and sessions
    end at once; the runs they started stay in the org's records and bills."""
    revoked = remove_user(find_user(username))
    click.echo(f"{username} removed; {revoked} key{'' if revoked == 1 else 's'} revoked")


@admin_command("remove-org")
@click.argument("name")
@click.option("--purge", is_flag=True,
              help="Also delete its volumes and code from the share (asks first).")
@click.option("--yes", is_flag=True, help="Do not ask before purging.")
def remove_org_command(name: str, purge: bool, yes: bool) -> None:
    """Remove an org (refused while it has live runs): every user removed,
    its runs and bills kept, its volumes kept on the share until --purge."""
    org = find_org(name)
    if org.removed_at is not None:
        click.echo(f"{name} was removed on {org.removed_at:%Y-%m-%d}; nothing more to remove",
                   err=not purge)
    else:
        users = remove_org(org)
        click.echo(f"{name} removed with its {users} user{'' if users == 1 else 's'} and its "
                   "notification channels; its runs and bills are kept")
    if not purge:
        click.echo("its volumes stay on the share: `flask remove-org NAME --purge` deletes them",
                   err=True)
        return
    if not yes:
        click.confirm(f"delete every volume of {name} from the share? This cannot be undone",
                      abort=True)
    purge_volumes(org)
    click.echo(f"{name}'s volumes and code deleted from the share")


commands = [create_org, org_account, create_user, user_unix_name, set_password_command, orgs,
            users, remove_user_command, remove_org_command]
