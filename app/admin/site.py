"""The site's Slurm settings: `flask site`."""
from __future__ import annotations

import click

from app.admin import admin_command
from app.services.site import TRANSPORTS, load_site, save_site, with_changes
from slurm.jobspec import RUNTIMES


def _pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        gpu, sep, name = value.partition("=")
        if not sep:
            raise click.BadParameter(f"{value!r} is not TYPE=NAME", param_hint=flag)
        pairs[gpu] = name
    return pairs


def _transport(kind: str | None, **ssh) -> dict | None:
    if kind == "local":
        return {"kind": "local"}
    if kind == "ssh":
        return {"kind": "ssh", **{k: v for k, v in ssh.items() if v is not None}}
    return None


@admin_command("site")
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
    current = load_site()
    changes = {key: value for key, value in (
        ("runtime", runtime), ("gpus_per_node", gpus_per_node),
        ("scratch_root", scratch_root), ("partitions", _pairs(partitions, "--partition")),
        ("gres", _pairs(gres, "--gres"))) if value}
    wire = _transport(transport, host=ssh_host, user=ssh_user, key_path=ssh_key, port=ssh_port,
                      known_hosts=ssh_known_hosts)
    if changes or wire:
        current = with_changes(current, changes, wire)
        click.echo(f"saved {save_site(current)}", err=True)
    slurm = current.slurm
    click.echo(f"runtime        {slurm.runtime}")
    click.echo(f"gpus per node  {slurm.gpus_per_node}")
    click.echo(f"scratch        {slurm.scratch_root}")
    click.echo(f"Slurm on       {current.transport.describe()}")
    click.echo("type   partition   gres")
    for gpu, partition in slurm.partitions.items():
        click.echo(f"{gpu:6s} {partition:11s} {slurm.gres_types.get(gpu, '-')}")


commands = [site]
