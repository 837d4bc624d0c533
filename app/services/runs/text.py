"""The words a run is shown with, the same in the CLI and the dashboard: its
hardware, the header line before its log and the last line after it."""
from __future__ import annotations

import shlex

from divergent.app.extensions import db
from divergent.app.models import Run
from divergent.app.services.money.catalog import gpu_type
from divergent.app.services.money.pricing import format_minutes, format_usd, usd_text
from divergent.app.services.runs.checks import summary as checks_summary
from divergent.app.services.runs.idle import stopped_line
from divergent.app.services.runs.submissions import NOT_SUBMITTED
from divergent.app.services.runs.usage import over_asked
from divergent.slurm.reasons import explain_pending
from divergent.terms import DEFAULT_IMAGE


def format_duration(seconds: int | None) -> str:
    """12m 40s, 1h 2m 3s, 5s."""
    hours, rest = divmod(max(0, seconds or 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def hardware(run: Run) -> str:
    """H100, 8 x H100; cores and memory when above what is included (always,
    for a cpu run, where they are the hardware): H100, 8 cores, 64 GiB."""
    included = gpu_type(run.gpu_type)
    if included.is_cpu:
        cores = "core" if run.cpus == 1 else "cores"
        return f"CPU, {run.cpus} {cores}, {run.memory_gib} GiB"
    text = run.gpu_type.upper() if run.gpus == 1 else f"{run.gpus} x {run.gpu_type.upper()}"
    if run.cpus > run.gpus * included.cores:
        text += f", {run.cpus} cores"
    if run.memory_gib > run.gpus * included.memory_gib:
        text += f", {run.memory_gib} GiB"
    return text


def cli_command(run: Run) -> str:
    """`div run` with the flags that ask for this run again from the folder
    it came from (its code as the folder is then; `div rerun NAME` runs the
    same stored code)."""
    included = gpu_type(run.gpu_type)
    words = ["div", "run", "--gpu", run.gpu_type]
    if run.gpus != 1:
        words += ["--gpus", str(run.gpus)]
    if run.cpus != run.gpus * included.cores:
        words += ["--cpu", str(run.cpus)]
    if run.memory_gib != run.gpus * included.memory_gib:
        words += ["--memory", f"{run.memory_gib}G"]
    words += ["--project", run.project.name]
    if run.image != DEFAULT_IMAGE:
        words += ["--image", run.image]
    for key, value in (run.env or {}).items():      # a sweep member's values included
        words += ["--env", f"{key}={value}"]
    for mount in run.mounts or []:
        words += ["--mount", f"{mount['url']}:{mount['path']}"]
    for name in run.secret_names or []:
        words += ["--secret", name]
    for check in run.checks or []:
        words += ["--check", check["check"]]
    if run.max_spend_micros:
        words += ["--max-spend", usd_text(run.max_spend_micros)]
    if run.allow_idle:
        words.append("--allow-idle")
    if run.code_ref is None:
        words.append("--no-upload")
    return shlex.join(words) + " -- " + shlex.quote(run.command)


def header_line(run: Run) -> str:
    """run-k4t9 H100 $4.80/h max spend $5.00 (about 1h 2m)"""
    rate = f"{run.name} {hardware(run)} {format_usd(run.rate_micros_per_hour)}/h"
    about = format_minutes(run.time_limit_minutes or 0)
    spend = ("no spend limit" if run.max_spend_micros is None
             else f"max spend {format_usd(run.max_spend_micros)}")
    if run.time_limit_by == "org":
        return f"{rate} {spend}; the org's usage limit leaves about {about}"
    if run.time_limit_by == "maxtime":
        return f"{rate} {spend}; the partition's time limit ends it after about {about}"
    if run.max_spend_micros is None:
        return f"{rate} no spend limit"
    return f"{rate} {spend} (about {about})"


def waiting_text(run: Run) -> str | None:
    if run.status != "queued":
        return None
    return explain_pending(run.pending_reason or "", hardware(run).split(",")[0])


def summary_line(run: Run) -> str | None:
    """The last line for a run that has ended, by the docs' Output table,
    with the checks' tally when it has checks, and one hint when it clearly
    asked for more than it used."""
    line = _ended_line(run)
    if line is None:
        return None
    hint = over_asked(run)
    return line + (checks_summary(run.checks or []) or "") + (f" · {hint}" if hint else "")


def _failed_copy(run: Run) -> dict | None:
    """The first of a run's mounts whose copy failed (or hit a spend
    limit), when the run never started: Slurm ended it for that
    (--kill-on-invalid-dep). A copy canceled, or a run stopped while its
    copies still ran (which stops them), is a run canceled, as any other."""
    if run.started_at is not None or not run.mounts:
        return None
    statuses = dict(db.session.execute(db.select(Run.name, Run.status).where(
        Run.org_id == run.org_id, Run.name.in_([m["copy"] for m in run.mounts]))).all())
    return next((m for m in run.mounts if statuses.get(m["copy"]) in
                 ("failed", "budget_exceeded", "limit_reached")), None)


def _ended_line(run: Run) -> str | None:
    took, spent = format_duration(run.elapsed_seconds), format_usd(run.cost_micros)
    if run.status == "succeeded":
        return f"{run.name} finished in {took} and spent {spent}"
    if run.status == "budget_exceeded":
        limit = format_usd(run.max_spend_micros) if run.max_spend_micros else "its time limit"
        return f"{run.name} reached its spend limit of {limit} after {took}"
    if run.status == "limit_reached":
        return f"{run.name} reached the org's usage limit after {took} and spent {spent}"
    if run.status == "canceled":
        copy = _failed_copy(run)
        if copy is not None:
            return (f"{run.name} did not start: the copy of {copy['url']} into {copy['path']} "
                    f"({copy['copy']}) did not succeed, and spent {spent}")
        idle = stopped_line(run)
        if idle is not None:
            return f"{run.name} was stopped after {took}: {idle}, and spent {spent}"
        return f"{run.name} was canceled after {took} and spent {spent}"
    if run.status == "failed":
        if run.slurm_state == NOT_SUBMITTED:
            return f"{run.name} failed before it started: Slurm never got it, and spent {spent}"
        if run.slurm_state == "NODE_FAIL":
            return f"{run.name} failed after {took}: a node it ran on failed, and spent {spent}"
        if run.slurm_state == "TIMEOUT" and run.time_limit_by == "maxtime":
            return (f"{run.name} failed after {took}: the partition's time limit ended it, "
                    f"and spent {spent}")
        if run.slurm_state == "OUT_OF_MEMORY":
            return (f"{run.name} ran out of memory ({run.memory_gib} GiB) after {took} "
                    f"and spent {spent}")
        code = run.exit_code if run.exit_code is not None else "unknown"
        return f"{run.name} failed after {took} with exit code {code} and spent {spent}"
    return None
