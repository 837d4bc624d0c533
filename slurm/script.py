"""Render a JobSpec into a Slurm batch script: a pure function, pinned by a
golden file in the tests so that every change to the script is a diff someone
reads.

Only the "values" block holds user values, each one shlex-quoted or already
checked by a strict pattern (slurm.jobspec). Everything else is fixed text.

The trust boundary (docs/developers/design.md, "The batch script"): this
script's own shell, srun, scontrol, cp and the cleanup run outside the
sandbox with an environment the script sets itself. The run's env and
secrets are never exported here: they travel as quoted array declarations
under fixed names (div_env_decl, div_secrets_decl), and only LAUNCH, the
first thing run inside the sandbox, turns them into environment variables.
"""
from __future__ import annotations

import shlex
from importlib import resources

from divergent.slurm.jobspec import (
    BESIDE,
    InvalidJobSpec,
    JobSpec,
    SlurmSite,
    check_env_name,
    job_name,
)
from divergent.terms import format_bytes


def _fragment(name: str) -> str:
    """A fixed part of the script, kept in slurm/batch/ as a file of its own
    so that shellcheck reads it (make lint)."""
    return resources.files("divergent.slurm").joinpath("batch", name).read_text()


METRICS_PATH = "/div/metrics.jsonl"
# The run's secrets, in its state folder (0600) until the batch script has
# read them (the reconciler writes them again for an attempt after a node
# failure): never in the script itself, which Slurm and admins keep.
SECRETS_FILE = "secrets.env"
# A private registry's login (netrc) for the nodes' pull helper, in the
# state folder (0640) for the run's life: never in the script or the job's
# environment.
REGISTRY_LOGIN_FILE = "registry.login"
# What a node writes when the run's image could not be pulled there, and
# what one writes as it starts the run's command in its image: a run with
# the first and never the second was only the attempt to pull, and costs
# nothing; one whose command ran on any node is billed.
IMAGE_FAILED_FILE = "image.failed"
COMMAND_STARTED_FILE = "command.started"
# A run whose node fails is requeued by Slurm (--requeue) at most this many
# times; the attempt after that ends at once, failed, saying so in its log.
MAX_RESTARTS = 3
# SIGUSR1 at least this long before Slurm ends a run at its time limit (its
# spend limit, the org's, the partition's MaxTime): time to write a
# checkpoint. Slurm sends it up to a minute earlier than asked (its timer's
# grain), so 45 to 105 s before: even a two-minute run is warned after it
# has started, not before its program could catch it.
WARNING_SIGNAL, WARNING_SECONDS = "USR1", 45

# The first command inside the sandbox: the run's env and secrets become
# environment variables here and nowhere else, divergent's own div_* values
# go, and the run's command is evaluated once, by the run's own shell.
# SIGUSR1 (the warning) starts ignored, so that a program that never asks for
# it is not ended by it a minute early; one that installs a handler gets it.
LAUNCH = ('trap "" USR1; eval "$div_env_decl"; eval "$div_secrets_decl"; '
          'for div_kv in "${div_env[@]}" "${div_secrets[@]}"; do export -- "$div_kv"; done; '
          '_div_command=$div_command; unset -v "${!div_@}"; '
          'exec /bin/bash -c "$_div_command"')

# A node's stdout (or stderr) to its file a line at a time: each write one
# or more whole lines, so appends from several nodes interleave by line. A
# partial line goes out after 0.2 s without more (a progress bar's \r), or
# at 1 MiB (a line that long may be cut, and a secret in it with it: the
# masker sees only bytes that stay together). Bytes pass unchanged.
# Slurm's signals to the step are for the run: the relay ends when the last
# writer is gone, with what it holds.
LINES = _fragment("lines.py")

# Runs once on each node (srun, one task a node): a scratch folder with
# workspace/ (a copy of the code) and mnt/, the command through the runtime,
# then the lost-bytes note and the scratch gone, on any exit.
NODE_FUNCTIONS = "\n" + _fragment("node.sh")

# `none`: bubblewrap on the node's own software, read-only, and nothing else
# of the node: no home, no share but the org's volumes, no other runs, no
# capabilities, and of /etc only what programs need to start (users, name
# resolution, certificates, the loader's cache): never the node's keys
# (munge, ssh) or Slurm's configuration. A user namespace of its own, so
# that even uid 0 inside is the job's unprivileged user outside, and no user
# namespace of its own inside it; other runs' kernel key names (/proc/keys)
# are not shown. The code trees the server stored are bound read-only over
# /mnt/<volume>/code.
EXEC_NONE = "\n" + _fragment("exec-none.sh")

# `pyxis`: a step of its own on this node, in the image, through enroot.
EXEC_PYXIS = "\n" + _fragment("exec-pyxis.sh")

# `apptainer`: the image from its registry, contained, with GPUs when asked.
EXEC_APPTAINER = "\n" + _fragment("exec-apptainer.sh")

# An interactive run's token (the server's, to reach it): in the secrets
# file, so that neither the script nor a log ever holds it; only what serves
# the run reads it from the environment (terminal.py, Jupyter).
INTERACTIVE_TOKEN = "DIV_INTERACTIVE_TOKEN"

# A shell run's program in its sandbox: the command on a terminal, served
# to the server (slurm/batch/terminal.py). The node's Python, or the image's.
TERMINAL = _fragment("terminal.py")

# What a run uses, sampled on each of its nodes beside it (node.sh's
# div_sample) into usage.<node>.jsonl in its state folder.
USAGE = _fragment("usage.py")

# Runtime `none`, inside the sandbox before LAUNCH: a Python environment of
# the run's own over the node's (whose packages, torch included, stay
# visible), so that `pip install` works with /usr read-only. On the node's
# scratch disk (bound at /div/python), not in memory; about 30 ms.
# From / and isolated (-I): a module in the run's code never shadows venv's.
PYTHON_ENV = _fragment("python-env.sh").rstrip("\n")

EXEC = {"none": EXEC_NONE, "pyxis": EXEC_PYXIS, "apptainer": EXEC_APPTAINER}
# What a node needs for each runtime, asked on one (flask doctor): the image
# helper exec-pyxis.sh calls, or apptainer itself.
RUNTIME_PROBES = {"pyxis": ["/usr/local/lib/divergent/image-pull", "--check"],
                  "apptainer": ["apptainer", "--version"]}

# Each attempt, before it waits for anything: its deadline (when Slurm ends
# it at its time limit, if it has one), and after a node failure a line in
# the log and at most MAX_RESTARTS restarts.
ATTEMPT = _fragment("attempt.sh").rstrip("\n")

# The batch step: the node function once per node; the first rank to fail
# gives the run its exit code (srun then ends the others), else rank 0's.
MAIN = "\n" + _fragment("main.sh")


def sbatch_directives(spec: JobSpec, site: SlurmSite) -> list[str]:
    gpu = spec.hardware(site)
    lines = [
        f"--job-name={job_name(spec.run_name)}",
        f"--account={spec.account}",
        f"--partition={gpu.partition}",
        f"--nodes={spec.nodes(site)}",
        "--ntasks-per-node=1",
    ]
    if gpu.gres is not None:
        lines.append(f"--gres={gpu.gres}:{spec.per_node(spec.gpus, site)}")
    if gpu.constraint is not None:
        lines.append(f"--constraint={gpu.constraint}")
    if (gpu.qos or site.qos) is not None:
        lines.append(f"--qos={gpu.qos or site.qos}")
    lines += [
        f"--cpus-per-task={spec.per_node(spec.cpus, site)}",
        f"--mem={spec.per_node(spec.memory_gib, site)}G",
    ]
    if spec.time_limit_minutes is not None:
        lines.append(f"--time={spec.time_limit_minutes}")
    if site.org_nodes == "exclusive":
        lines.append("--exclusive=mcs")
    if spec.after_jobs:
        # A copy that fails ends this job at once, never leaves it pending.
        lines += ["--dependency=afterok:" + ":".join(spec.after_jobs), "--kill-on-invalid-dep=yes"]
    # A sweep: one job array, a member a run (see _member_block).
    slurm_log = f"{spec.state_dir}/slurm-%a.log" if spec.array else f"{spec.state_dir}/slurm.log"
    if spec.array:
        lines.append(f"--array=0-{len(spec.array) - 1}")
    lines += [
        # Never the server's own folder: apptainer would mount the cwd.
        f"--chdir={spec.state_dir}",
        # Slurm's own lines (slurmstepd's "*** JOB 87 CANCELLED ... DUE TO
        # TIME LIMIT ***", srun's) go to a file for admins, never into the
        # run's log: each node writes the run's stdout and stderr itself.
        f"--output={slurm_log}",
        f"--error={slurm_log}",
        "--open-mode=append",
        # The server's own environment (its database URL, its keys) must not
        # reach a run: the script sets everything a run sees.
        "--export=NONE",
        # A node failure requeues the job: the same run, attempt after attempt
        # (DIV_RESTART_COUNT), each billed. A cancel, a time limit or a
        # failing exit code never does.
        "--requeue",
        f"--signal={WARNING_SIGNAL}@{WARNING_SECONDS}",
    ]
    return ["#SBATCH " + line for line in lines]


def run_command(spec: JobSpec) -> str:
    """What the run's own shell runs: its command, or for an interactive
    run what serves it on the job's address (the server's one way in)."""
    interactive = spec.interactive
    if interactive is None:
        return spec.command
    port = f"export DIV_INTERACTIVE_PORT={interactive.port}; "
    # The program travels in the environment: ps on the node shows one short line.
    program = f"export DIV_TERMINAL_PROGRAM={shlex.quote(TERMINAL)}; "
    terminal = "python3 -I -c 'import os; exec(os.environ.pop(\"DIV_TERMINAL_PROGRAM\"))'"
    if interactive.kind == "shell":
        return (f"{port}{program}exec {terminal} shell {interactive.idle_seconds} "
                + shlex.quote(spec.command))
    if interactive.kind == BESIDE:
        # On the first node, shells for div shell RUN beside the command,
        # which then runs as it always does; without a Python, none.
        return ('if [ "${NODE_RANK:-0}" = 0 ] && command -v python3 >/dev/null; then '
                f"({port}{program}{terminal} beside {interactive.idle_seconds} bash "
                "</dev/null >/dev/null 2>&1 &); fi; "
                f"unset {INTERACTIVE_TOKEN}; exec /bin/bash -c {shlex.quote(spec.command)}")
    # JupyterLab from the image or the node's Python; its files in /tmp, not the workspace.
    return (f'export JUPYTER_TOKEN="${INTERACTIVE_TOKEN}"; unset {INTERACTIVE_TOKEN}; '
            "export JUPYTER_RUNTIME_DIR=/tmp/jupyter IPYTHONDIR=/tmp/ipython; "
            f"exec python3 -m jupyterlab --no-browser --ip=0.0.0.0 --port={interactive.port} "
            f"--ServerApp.base_url={shlex.quote(interactive.base_url)} "
            "--ServerApp.root_dir=/workspace --ServerApp.allow_remote_access=True "
            f"--ServerApp.shutdown_no_activity_timeout={interactive.idle_seconds} "
            f"--MappingKernelManager.cull_idle_timeout={interactive.idle_seconds} "
            "--LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")


def _assign(name: str, value: str) -> str:
    return f"{name}={shlex.quote(value)}"


def _array_declaration(name: str, items: list[str]) -> str:
    return f"{name}=(" + " ".join(shlex.quote(item) for item in items) + ")"


def _env_declaration(name: str, values: dict[str, str], what: str,
                     ours: tuple[str, ...] = ()) -> str:
    for key in values:
        if key not in ours:
            check_env_name(key, what)
    return _array_declaration(name, [f"{k}={v}" for k, v in values.items()])


def _run_values(name: str, state_dir: str, env: dict[str, str]) -> str:
    """What differs between runs: its name, state folder and env. The run's
    own values are declarations under fixed names, never exported as
    themselves here (see LAUNCH)."""
    return "export " + " ".join([
        _assign("div_env_decl", _env_declaration("div_env", env, "env variable")),
        _assign("DIV_RUN", name), _assign("div_state", state_dir)])


def _member_block(spec: JobSpec) -> list[str]:
    """A sweep's member takes its run's values by its array index; an index
    with none (never submitted by us) ends at once."""
    if not spec.array:
        return [_run_values(spec.run_name, spec.state_dir, spec.env)]
    cases = [f"{index}) {_run_values(m.run_name, m.state_dir, m.env)} ;;"
             for index, m in enumerate(spec.array)]
    return ['case "${SLURM_ARRAY_TASK_ID:-}" in', *cases, "*) exit 1 ;;", "esac"]


def values_block(spec: JobSpec, site: SlurmSite) -> list[str]:
    return [
        "export " + _assign("PATH", site.path),
        *_member_block(spec),
        "export " + _assign("DIV_PROJECT", spec.project),
        "export " + _assign("DIV_METRICS", METRICS_PATH),
        # The run's world, under the names torchrun (PET_*) and
        # torch.distributed's env:// read; the node's rank is set per node.
        'export NNODES="$SLURM_JOB_NUM_NODES" PET_NNODES="$SLURM_JOB_NUM_NODES" '
        'WORLD_SIZE="$SLURM_JOB_NUM_NODES"',
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export MASTER_ADDR",
        'export PET_MASTER_ADDR="$MASTER_ADDR"',
        # Per job, so that two jobs sharing a node never collide.
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 40000))",
        'export PET_MASTER_PORT="$MASTER_PORT"',
        'export DIV_RESTART_COUNT="${SLURM_RESTART_COUNT:-0}"',
        f"export div_max_restarts={MAX_RESTARTS}",
        "export " + _assign("div_volumes_dir", spec.volumes_dir),
        "export " + _assign("div_trees_dir", spec.trees_dir or ""),
        "export " + _assign("div_code", spec.code_dir or ""),
        "export " + _assign("div_command", run_command(spec)),
        "export " + _assign("div_image", spec.image),
        "export " + _assign("div_scratch_root", site.scratch_root),
        "export " + _assign("div_gpus", "no" if spec.hardware(site).is_cpu else "yes"),
        "export " + _assign("div_launch", LAUNCH),
        "export " + _assign("div_lines", LINES),
        f"export div_usage_interval={spec.usage_interval}",
        *(["export " + _assign("div_usage", USAGE)] if spec.usage_interval else []),
        *_isolation_values(site),
        # Only `none` runs it (EXEC_NONE); images bring their own Python.
        *(["export " + _assign("div_python_env", PYTHON_ENV)] if site.runtime == "none" else []),
        *_image_values(spec, site),
        # Arrays do not cross srun's environment: a declaration does.
        "export div_bind_paths_decl=" + shlex.quote(
            _array_declaration("div_bind_paths", list(site.bind_paths))),
    ]


def _isolation_values(site: SlurmSite) -> list[str]:
    """Which srun joins the job's own network (srun --div-isolate): the
    node function's, or under pyxis the container's step alone, since the
    node function starts that step and must reach slurmctld to."""
    isolate = "--div-isolate" if site.run_network == "isolated" else ""
    pyxis = site.runtime == "pyxis"
    return [
        "export " + _assign("div_node_isolate", "" if pyxis else isolate),
        "export " + _assign("div_isolate", isolate if pyxis else ""),
        'export div_job_hosts="/run/divergent/jobs/$SLURM_JOB_ID/hosts"',
    ]


def _image_values(spec: JobSpec, site: SlurmSite) -> list[str]:
    """Runtime pyxis: the image the nodes pull (once each) and start."""
    if site.runtime != "pyxis":
        return []
    if spec.image_source is None:
        raise InvalidJobSpec("runtime pyxis needs the image resolved (its digest)")
    return [
        "export " + _assign("div_image_source", spec.image_source),
        "export " + _assign("div_image_size", format_bytes(spec.image_size)),
        "export " + _assign("div_image_login",
                            REGISTRY_LOGIN_FILE if spec.image_private else ""),
        "export " + _assign("div_image_failed", IMAGE_FAILED_FILE),
        "export " + _assign("div_command_started", COMMAND_STARTED_FILE),
    ]


def secrets_file_text(values: dict[str, str]) -> str:
    """What the batch script reads (never sources) into div_secrets_decl:
    a declaration whose names are checked and values shell-quoted; the one
    reserved name allowed is the server's own (an interactive run's token)."""
    return _env_declaration("div_secrets", values, "secret", (INTERACTIVE_TOKEN,)) + "\n"


def _secrets_block(spec: JobSpec) -> list[str]:
    """Reads the secrets and deletes them. After a node failure the
    reconciler writes them again for the next attempt: it waits a minute for
    them rather than run without them."""
    if not spec.has_secrets:
        return ["export div_secrets_decl="]
    path = f'"$div_state/{SECRETS_FILE}"'
    return [
        f"for _ in $(seq 60); do [ -e {path} ] && break; sleep 1; done",
        f"if ! div_secrets_decl=$(<{path}); then",
        '    echo "divergent: $DIV_RUN has no secrets for this attempt: not started" '
        '>>"$div_state/stderr"',
        "    exit 1",
        "fi",
        f"rm -f {path}",
        "export div_secrets_decl",
    ]


def render_batch_script(spec: JobSpec, site: SlurmSite) -> str:
    header = [
        "#!/bin/bash",
        f"# divergent run {spec.run_name}: rendered by slurm/script.py, safe to regenerate.",
        *sbatch_directives(spec, site),
    ]
    body = [
        "set -u",
        *values_block(spec, site),
        ATTEMPT,
        *_secrets_block(spec),
        ': >>"$div_state/metrics.jsonl"',
    ]
    return "\n".join(header + [""] + body) + "\n" + NODE_FUNCTIONS + EXEC[site.runtime] + MAIN
