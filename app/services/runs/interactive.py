"""Interactive runs (div shell, div notebook): runs like any other (sandbox,
volumes, secrets, spend, billing) whose one program serves the server on
the job's own address: a terminal (slurm/batch/terminal.py) or JupyterLab.

The server reaches one only at the address it works out itself, from the
site's [interactive] settings and Slurm's record of the job's node (never
from anything a request or the run says), with a token of the run's own
that travels in its secrets (never in its script or its log)."""
from __future__ import annotations

import secrets
from dataclasses import dataclass

from divergent.app.models import Run
from divergent.app.services.accounts.secrets import run_secret_values
from divergent.app.services.errors import Invalid, NotFound
from divergent.app.services.money.catalog import catalog
from divergent.app.services.site.settings import load_site
from divergent.slurm.jobspec import INTERACTIVE_KINDS, Interactive
from divergent.slurm.script import INTERACTIVE_TOKEN

BATCH = "batch"
KINDS = (BATCH, *INTERACTIVE_KINDS)
SHELL, NOTEBOOK = INTERACTIVE_KINDS
# What a shell runs without `-- command`, and what a notebook run shows as its command.
DEFAULT_SHELL = "bash"
NOTEBOOK_COMMAND = "jupyter lab"
# A shell's terminal names itself so that programs draw in colour.
TERM = "xterm-256color"


def notebook_path(run_name: str) -> str:
    """Where the server serves a notebook run (its Jupyter's base URL)."""
    return f"/runs/{run_name}/notebook/"


def check_interactive(kind: str, gpu: str, gpus: int) -> None:
    """Whether this site lets a run of this kind and size be interactive."""
    if kind not in KINDS:
        raise Invalid(f"kind must be one of {', '.join(KINDS)}")
    if kind == BATCH:
        return
    site = load_site()
    if not site.interactive.job_subnets:
        raise Invalid("this site has no interactive runs (div shell, div notebook): its admin "
                      "lists the nodes' job subnets with flask site interactive")
    if site.slurm.run_network != "isolated":
        raise Invalid("interactive runs need each run's own network on the nodes "
                      "(run_network = isolated), which this site does not use")
    if not site.interactive.allows(gpu):
        raise Invalid(f"this site has no interactive runs on {gpu}: "
                      f"{', '.join(site.interactive.gpu_types or ())} only")
    gpu_type = catalog().get(gpu)
    if gpu_type is not None and gpu_type.nodes_for(gpus) > 1:
        raise Invalid(f"an interactive run takes one node: at most {gpu_type.per_node} GPUs")


def reachable() -> bool:
    """Whether this site's server reaches runs (it lists the nodes' job subnets)."""
    return bool(load_site().interactive.job_subnets)


def batch_only(kind: str, what: str) -> None:
    """Sweeps and schedules start runs nobody is there to attach to."""
    if kind != BATCH:
        raise Invalid(f"{what} starts batch runs only: div shell and div notebook are for a "
                      "person at a terminal")


def interactive_spec(kind: str, run_name: str) -> Interactive | None:
    """What serves the run to the server: its terminal, its notebook, or
    for a batch run shells beside its command (div shell RUN); None on a
    site whose server does not reach runs."""
    settings = load_site().interactive
    if not settings.job_subnets:
        return None
    return Interactive(kind, settings.port, settings.idle_minutes * 60, notebook_path(run_name))


def new_token() -> dict[str, str]:
    """The run's token, among its secrets: sealed with them, masked in its
    log, and written again for an attempt after a node failure; none on a
    site whose server does not reach runs."""
    return {INTERACTIVE_TOKEN: secrets.token_hex(32)} if reachable() else {}


def first_node(nodes: str) -> str:
    """The first host of Slurm's node list ("gpu-[3-4,7]" -> "gpu-3")."""
    head, bracket, rest = nodes.partition("[")
    if not bracket:
        return head.split(",")[0]
    return head + rest.split(",")[0].split("-")[0].rstrip("]")


@dataclass(frozen=True)
class Upstream:
    """Where the server reaches an interactive run, and with what."""

    address: str
    port: int
    token: str


def upstream(run: Run) -> Upstream:
    """The running interactive run's address on its node; NotFound while
    it has none (queued, ended, or not interactive)."""
    if run.status != "running" or not run.nodes or not run.slurm_job_id:
        raise NotFound(f"{run.name} is {run.status}: not running")
    if run.sweep_id is not None:
        raise NotFound(f"{run.name} is a sweep's run: its sweep's job has no shell of its own")
    settings = load_site().interactive
    job_id = run.slurm_job_id
    node = first_node(run.nodes)
    address = settings.job_address(node, int(job_id)) if job_id.isdigit() else None
    if address is None:
        raise NotFound(f"{run.name} runs on {node}, which this site's [interactive] "
                       "job_subnets do not list")
    token = run_secret_values(run).get(INTERACTIVE_TOKEN)
    if not token:
        raise NotFound(f"{run.name} cannot be reached: it started before this site's server "
                       "reached runs")
    return Upstream(address, settings.port, token)
