"""The site's Slurm settings (`flask site`) and its catalog of hardware
(`flask site gpu add|ls|rm`)."""
from __future__ import annotations

from dataclasses import replace
from typing import cast

import click

from divergent.app.admin import admin_group
from divergent.app.services.accounts.orgs import live_orgs
from divergent.app.services.accounts.unix_users import move_to_own_users
from divergent.app.services.cluster.capacity import cluster_nodes
from divergent.app.services.cluster.catalog_from_slurm import propose
from divergent.app.services.errors import Invalid
from divergent.app.services.images.site import ImageSettingsError, image_settings
from divergent.app.services.money.pricing import PriceTable, change_prices, current_prices, micros, usd_text
from divergent.app.services.site.interactive import (
    InteractiveSettingsError,
    interactive_settings,
    parse_subnets,
)
from divergent.app.services.site.settings import (
    SUBMIT_AS,
    TRANSPORTS,
    Identity,
    load_site,
    save_site,
    with_catalog,
    with_changes,
    with_gpu_type,
)
from divergent.app.services.site.usage import MEASURES, UsageSettingsError, usage_settings
from divergent.slurm.jobspec import ORG_NODES, RUN_NETWORKS, RUNTIMES, GpuType


def _pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        gpu, sep, name = value.partition("=")
        if not sep:
            raise click.BadParameter(f"{value!r} is not TYPE=NAME", param_hint=flag)
        pairs[gpu] = name
    return pairs


def _transport(kind: str | None, **ssh) -> dict | None:
    if kind in ("local", "pyslurm"):
        return {"kind": kind}
    if kind == "ssh":
        return {"kind": "ssh", **{k: v for k, v in ssh.items() if v is not None}}
    return None


@admin_group("site", invoke_without_command=True)
@click.option("--partition", "partitions", multiple=True, metavar="TYPE=PARTITION",
              help="The Slurm partition for a GPU type (or cpu). Repeatable.")
@click.option("--gres", multiple=True, metavar="TYPE=GRES",
              help="The GRES type name for a GPU type, as in gres.conf. Repeatable.")
@click.option("--runtime", type=click.Choice(RUNTIMES), help="How runs get their image.")
@click.option("--gpus-per-node", type=click.IntRange(1, 64), help="GPUs on each GPU node.")
@click.option("--scratch-root", metavar="PATH", help="Node-local folder for runs' scratch.")
@click.option("--qos", metavar="QOS", help="The QoS every job asks for (a type's own wins).")
@click.option("--accounts", type=click.Choice(["make", "existing"]),
              help="make: each org's Slurm account is made on its first run; existing: "
                   "orgs use accounts the site's admins made (flask create-org --account).")
@click.option("--run-network", type=click.Choice(RUN_NETWORKS),
              help="isolated: each run in a network of its own job (slurm/node/ on every "
                   "node); shared: the node's network, for sites without those parts.")
@click.option("--org-nodes", type=click.Choice(ORG_NODES),
              help="exclusive: no two orgs' runs share a node (slurm.conf: "
                   "MCSPlugin=mcs/account, MCSParameters=ondemand,select); shared: they may.")
@click.option("--submit-as", type=click.Choice(SUBMIT_AS),
              help="Whose Unix user jobs run as: each org's own (made for it), a mapped "
                   "member's own (flask user-unix-name), or the server's (a site not yet "
                   "moved: `--submit-as org` moves it, making every org's user).")
@click.option("--org-user", metavar="TEMPLATE",
              help="Each org's Unix user's name, with {org} in it (default div-{org}).")
@click.option("--unix-users", type=click.Choice(["make", "existing"]),
              help="make: divergent makes org users (deploy/identity); existing: the "
                   "site's directory has them.")
@click.option("--transport", type=click.Choice(TRANSPORTS),
              help="Run Slurm's commands on this host, on a login node over SSH, or call "
                   "Slurm's C API here through pyslurm (see flask doctor).")
@click.option("--ssh-host", metavar="HOST")
@click.option("--ssh-user", metavar="USER")
@click.option("--ssh-key", metavar="PATH", help="The private key the server logs in with.")
@click.option("--ssh-port", type=click.IntRange(1, 65535), default=22, show_default=True)
@click.option("--ssh-known-hosts", metavar="PATH",
              help="known_hosts with the login node's key (else the system's): never trust on first use.")
@click.pass_context
def site(ctx, partitions, gres, runtime, gpus_per_node, scratch_root, qos, accounts, run_network,
         org_nodes, submit_as, org_user, unix_users, transport, ssh_host, ssh_user, ssh_key,
         ssh_port, ssh_known_hosts) -> None:
    """Show the site's Slurm settings, or change them. The server and the
    reconciler reread them on their next request or cycle; check the result
    with `flask doctor`."""
    if ctx.invoked_subcommand is not None:
        return
    current = load_site()
    changes = {key: value for key, value in (
        ("runtime", runtime), ("gpus_per_node", gpus_per_node),
        ("scratch_root", scratch_root), ("partitions", _pairs(partitions, "--partition")),
        ("gres", _pairs(gres, "--gres")), ("qos", qos), ("run_network", run_network),
        ("org_nodes", org_nodes)) if value}
    if accounts is not None:
        changes["make_accounts"] = accounts == "make"
    wire = _transport(transport, host=ssh_host, user=ssh_user, key_path=ssh_key, port=ssh_port,
                      known_hosts=ssh_known_hosts)
    who = {key: value for key, value in (("submit_as", submit_as), ("org_user", org_user))
           if value}
    if unix_users is not None:
        who["make_users"] = unix_users == "make"
    if changes or wire or who:
        moving = current.identity.submit_as == "service" and who.get("submit_as") not in (
            None, "service")
        current = with_changes(current, changes, wire, who)
        click.echo(f"saved {save_site(current)}", err=True)
        if moving:
            for line in move_to_own_users(live_orgs()):
                click.echo(line, err=True)
            click.echo("runs that were live go on as the server's user until they end",
                       err=True)
    slurm = current.slurm
    click.echo(f"runtime        {slurm.runtime}")
    per_node = {gpu.per_node for gpu in slurm.catalog.values() if not gpu.is_cpu}
    click.echo(f"gpus per node  {per_node.pop() if len(per_node) == 1 else 'per type'}")
    click.echo(f"scratch        {slurm.scratch_root}")
    click.echo(f"qos            {slurm.qos or '-'}")
    click.echo(f"accounts       {'made for each org' if slurm.make_accounts else 'existing'}")
    click.echo(f"run network    {slurm.run_network}")
    click.echo(f"org nodes      {slurm.org_nodes}")
    click.echo(f"Slurm on       {current.transport.describe()}")
    click.echo(f"jobs run as    {_runs_as(current.identity)}")
    _catalog_table(slurm.catalog)


def _runs_as(identity: Identity) -> str:
    made = "made by divergent" if identity.make_users else "the site's directory's"
    if identity.submit_as == "service":
        return "the server's own Unix user (move: flask site --submit-as org)"
    org = f"each org's own Unix user ({identity.org_user}, {made})"
    return org if identity.submit_as == "org" else f"a mapped member's own, else {org}"


def _catalog_table(catalog: dict[str, GpuType], prices: dict[str, int] | None = None) -> None:
    click.echo("type   partition   gres           per node  each includes   node has"
               + ("         price" if prices is not None else ""))
    for name, gpu in catalog.items():
        # Not is_cpu: it has a GRES.
        gres = "-" if gpu.is_cpu else (cast(str, gpu.gres).partition(":")[2] or "gpu (untyped)")
        if gpu.constraint:
            gres += f" [{gpu.constraint}]"
        line = (f"{name:6s} {gpu.partition:11s} {gres:14s} "
                f"{'-' if gpu.is_cpu else gpu.per_node:>8}  "
                f"{gpu.cores:>3} c {gpu.memory_gib:>4} GiB  {gpu.node_cores:>4} c {gpu.node_gib:>5} GiB")
        if gpu.qos:
            line += f"  qos {gpu.qos}"
        if prices is not None:
            line += f"  {'$' + usd_text(prices[name]) + '/h' if name in prices else 'no price'}"
        click.echo(line.rstrip())


@site.group("gpu", cls=type(site))
def gpu() -> None:
    """The catalog: each type of hardware the site sells."""


@gpu.command("ls")
def gpu_ls() -> None:
    """List the catalog with each type's price."""
    _catalog_table(load_site().slurm.catalog, current_prices().per_unit_hour)


def _price(ctx, param, text: str) -> str:
    """Checked before anything is saved: a bad price changes nothing."""
    try:
        micros(text.removeprefix("$"))
    except Invalid as exc:
        raise click.BadParameter(exc.message, ctx, param) from None
    return text


@gpu.command("add")
@click.argument("name")
@click.option("--partition", required=True, help="The Slurm partition its jobs go to.")
@click.option("--gres", metavar="GRES",
              help="gpu:TYPE (typed, as in gres.conf) or gpu (untyped); leave out for a cpu type.")
@click.option("--per-node", type=click.IntRange(1, 64), default=8, show_default=True,
              help="GPUs on each node: more than this come in whole nodes.")
@click.option("--price", required=True, metavar="USD", callback=_price,
              help="Per GPU (or cpu unit) an hour.")
@click.option("--cores", type=click.IntRange(1), default=1, show_default=True,
              help="Cores one GPU includes.")
@click.option("--memory", type=click.IntRange(1), default=8, show_default=True, metavar="GIB",
              help="GiB one GPU includes.")
@click.option("--node-cores", type=click.IntRange(1), default=64, show_default=True,
              help="Cores a node has to give runs.")
@click.option("--node-memory", type=click.IntRange(1), default=336, show_default=True,
              metavar="GIB", help="GiB a node has to give runs.")
@click.option("--constraint", metavar="FEATURE", help="A node feature jobs ask for (--constraint).")
@click.option("--qos", metavar="QOS", help="The QoS its jobs ask for.")
def gpu_add(name, partition, gres, per_node, price, cores, memory, node_cores, node_memory,
            constraint, qos) -> None:
    """Add a type to the catalog, or change one (every setting at once).
    The site's first `add` turns the docs' table into a catalog of its own,
    so the docs' types stay until removed."""
    values = {"partition": partition, "gres": gres, "per_node": per_node, "cores": cores,
              "memory": memory, "node_cores": node_cores, "node_memory": node_memory,
              "constraint": constraint, "qos": qos}
    current = with_gpu_type(load_site(), name, {k: v for k, v in values.items() if v is not None})
    # The price first: a stop between the two writes leaves a price nothing
    # sells yet, never a type on sale without one.
    change_prices({name: price}, current.slurm.catalog)
    click.echo(f"saved {save_site(current)}", err=True)
    _catalog_table(current.slurm.catalog, current_prices().per_unit_hour)


@site.command("init")
@click.option("--from-slurm", is_flag=True, required=True,
              help="Propose the catalog from the cluster's nodes, partitions and GRES.")
@click.option("--save", is_flag=True, help="Make the proposal the site's catalog.")
def init(from_slurm: bool, save: bool) -> None:
    """Propose a catalog from what Slurm has (sinfo): one type per typed GPU
    GRES, one per partition of untyped GPUs, and cpu. Read it, --save it,
    then price what has no price and change what differs with `flask site
    gpu add`."""
    proposed = propose(cluster_nodes())
    if not proposed:
        raise click.ClickException("Slurm shows no nodes to propose a catalog from")
    current = load_site()
    if save:
        current = with_catalog(current, proposed)
        click.echo(f"saved {save_site(current)}", err=True)
    prices = current_prices().per_unit_hour if save else {
        name: price for name, price in PriceTable().per_unit_hour.items() if name in proposed}
    _catalog_table(proposed, prices)
    unpriced = [name for name in proposed if name not in prices]
    if unpriced:
        click.echo(f"no price yet for {', '.join(unpriced)}: "
                   f"`flask prices --set {unpriced[0]}=USD`", err=True)
    if not save:
        click.echo("a proposal only: --save makes it the site's catalog", err=True)


@gpu.command("rm")
@click.argument("name")
def gpu_rm(name: str) -> None:
    """Remove a type from the catalog: new runs cannot ask for it; runs that
    did keep their rate and their records."""
    current = with_gpu_type(load_site(), name, None)
    click.echo(f"saved {save_site(current)}", err=True)
    _catalog_table(current.slurm.catalog)


@site.command("images")
@click.option("--mirror", metavar="HOST[:PORT]",
              help="The registry image names without one come from (default: Docker Hub).")
@click.option("--registry", "registries", multiple=True, metavar="HOST[:PORT]",
              help="Another registry runs may name. Repeatable; replaces the list.")
@click.option("--insecure", multiple=True, metavar="HOST[:PORT]",
              help="A registry asked over plain HTTP (a dev one). Repeatable; replaces the list.")
@click.option("--login", "logins", multiple=True, metavar="HOST[:PORT]=PREFIX",
              help="A private registry: each org's secrets PREFIX_USERNAME and PREFIX_PASSWORD "
                   "log in. Repeatable; replaces the list.")
def images(mirror, registries, insecure, logins) -> None:
    """Show the registries runs take images from (runtime pyxis), or change
    them. The nodes list the same ones (IMAGE_REGISTRIES, divergent-node.conf)."""
    current = load_site()
    values = {key: value for key, value in (
        ("mirror", mirror), ("registries", list(registries)), ("insecure", list(insecure)),
        ("logins", _pairs(logins, "--login"))) if value}
    if values:
        old = current.images
        table = {"mirror": old.mirror, "registries": list(old.registries),
                 "insecure": list(old.insecure), "logins": dict(old.logins), **values}
        try:
            current = replace(current, images=image_settings(table))
        except ImageSettingsError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"saved {save_site(current)}", err=True)
    settings = current.images
    click.echo(f"mirror      {settings.mirror}")
    click.echo(f"registries  {' '.join(settings.registries) or '-'}")
    click.echo(f"insecure    {' '.join(settings.insecure) or '-'}")
    for registry, prefix in settings.logins.items():
        click.echo(f"login       {registry}: secrets {prefix}_USERNAME, {prefix}_PASSWORD")


@site.command("interactive")
@click.option("--job-subnets", metavar="'NODE=PREFIX ...'",
              help="Each node's /16 for its jobs, as JOB_SUBNETS in divergent-node.conf "
                   "(\"node1=10.81 node2=10.82\"); none: no interactive runs.")
@click.option("--port", type=int, help="The port they serve on in their job's network "
                                        "(INTERACTIVE_PORT on the nodes; default 62888).")
@click.option("--idle-minutes", type=int,
              help="A shell nobody is attached to, or a notebook nobody uses, ends after "
                   "this long (default 15).")
@click.option("--gpu-type", "gpu_types", multiple=True, metavar="TYPE",
              help="A type interactive runs may ask for. Repeatable; replaces the list "
                   "(default: every type).")
@click.option("--notebook-host", metavar="HOST",
              help="Another name of this server's, where browsers open notebooks (their "
                   "pages are the org's own code: never on the dashboard's origin).")
def interactive(job_subnets, port, idle_minutes, gpu_types, notebook_host) -> None:
    """Show the settings of interactive runs (div shell, div notebook), or change them."""
    current = load_site()
    old = current.interactive
    if any(value is not None for value in (job_subnets, port, idle_minutes, notebook_host)) \
            or gpu_types:
        table = {"port": old.port if port is None else port,
                 "idle_minutes": old.idle_minutes if idle_minutes is None else idle_minutes,
                 "job_subnets": dict(old.job_subnets)}
        if notebook_host or old.notebook_host:
            table["notebook_host"] = notebook_host or old.notebook_host
        if gpu_types or old.gpu_types is not None:
            table["gpu_types"] = list(gpu_types or old.gpu_types or ())
        try:
            if job_subnets is not None:
                table["job_subnets"] = parse_subnets(job_subnets)
            current = replace(current, interactive=interactive_settings(table))
        except InteractiveSettingsError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"saved {save_site(current)}", err=True)
    settings = current.interactive
    subnets = " ".join(f"{node}={prefix}" for node, prefix in settings.job_subnets.items())
    click.echo(f"job subnets   {subnets or '- (no interactive runs)'}")
    click.echo(f"port          {settings.port}")
    click.echo(f"idle minutes  {settings.idle_minutes}")
    click.echo(f"gpu types     {' '.join(settings.gpu_types or ()) or 'all'}")
    click.echo(f"notebook host {settings.notebook_host or '- (notebooks by API key alone)'}")


@site.command("usage")
@click.option("--interval", type=int, metavar="SECONDS",
              help="Seconds between samples of what a run uses, on each of its nodes "
                   "(default 10); 0: no sampler, no live usage, no idle policy.")
@click.option("--idle-warn", type=float, metavar="MINUTES",
              help="Tell a run's owner once its GPUs have been idle this long "
                   "(turns the idle policy on; fractions allowed).")
@click.option("--idle-stop", type=float, metavar="MINUTES",
              help="Stop it (canceled) when idle this long more (default 30).")
@click.option("--idle-below", type=float, metavar="FRACTION",
              help="Utilisation under this is idle, 0 to 1 (default 0.05).")
@click.option("--idle-measure", type=click.Choice(MEASURES),
              help="gpu: GPU runs by their GPUs (default); cpu: every run by its CPU use, "
                   "where GPUs have no telemetry.")
@click.option("--idle-off", is_flag=True, help="Turn the idle policy off.")
def usage(interval, idle_warn, idle_stop, idle_below, idle_measure, idle_off) -> None:
    """Show the settings of runs' usage sampling and idle policy, or change them."""
    current = load_site()
    old = current.usage
    changes = {"interval_seconds": interval, "idle_warn_minutes": idle_warn,
               "idle_stop_minutes": idle_stop, "idle_below": idle_below,
               "idle_measure": idle_measure}
    if idle_off or any(value is not None for value in changes.values()):
        table = {key: value for key, value in vars(old).items() if value is not None}
        table.update({key: value for key, value in changes.items() if value is not None})
        if idle_off:
            table.pop("idle_warn_minutes", None)
        try:
            current = replace(current, usage=usage_settings(table))
        except UsageSettingsError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"saved {save_site(current)}", err=True)
    settings = current.usage
    click.echo(f"interval      {settings.interval_seconds} s"
               + ("" if settings.interval_seconds else " (no sampler)"))
    if settings.idle_warn_minutes is None:
        click.echo("idle policy   off")
        return
    click.echo(f"idle policy   under {settings.idle_below:g} of its {settings.idle_measure.upper()}s: "
               f"warned after {settings.idle_warn_minutes:g} min, stopped "
               f"{settings.idle_stop_minutes:g} min later")


commands = [site]
