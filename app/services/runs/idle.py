"""The site's idle policy ([usage] idle_* in its site file): a running run
whose GPUs (or, with idle_measure = "cpu", whose CPUs) stay under
idle_below for idle_warn_minutes gets its owner a notification; idle for
idle_stop_minutes more, it is stopped and ends canceled, its last line
saying why. Judged from reading to reading of its samplers' totals, so a
busy moment between two readings counts; a run with nothing measured
(no GPU telemetry) is never judged idle. Interactive runs end on their own
idle time, and a run started with --allow-idle is left alone."""
from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import cast

from divergent.app.models import Run
from divergent.app.services.money.catalog import gpu_type
from divergent.app.services.notify.notices import enqueue_idle_warning
from divergent.app.services.runs.usage import totals, utilization_since
from divergent.app.services.site.slurm_access import slurm_client
from divergent.app.services.site.usage import UsageSettings
from divergent.slurm.client import SlurmError

log = logging.getLogger("divergent.idle")

WARN, STOP = "warn", "stop"


def judged(run: Run, settings: UsageSettings) -> bool:
    if not settings.idle_policy or run.status != "running" or run.kind != "batch" \
            or run.allow_idle:
        return False
    return settings.idle_measure == "cpu" or not gpu_type(run.gpu_type).is_cpu


def idle_step(run: Run, samples: list[dict], settings: UsageSettings,
              now: float) -> tuple[str | None, dict]:
    """The run's idle state moved on by one reading of its samples, and
    WARN when its owner is to be told now, STOP when it is to be stopped now.
    How long it has been idle is the samplers' time (one clock a node, each
    from the attempt's start); the stop comes only after the warning, by
    the server's clock (`now`), so nobody is stopped unwarned: not after a
    restart on another node, a node's clock stepped, or the server away."""
    state = dict(run.idle or {})
    if not samples:
        return None, state       # nothing read this time: nothing changes
    attempt = max(s["attempt"] or 0 for s in samples)
    if state.get("attempt", 0) != attempt:
        state = {"attempt": attempt}      # a new attempt starts from nothing
    if state.get("stopped"):
        return None, state
    reading, earlier = totals(samples, run, settings.idle_measure), state.get("mark")
    used, state["mark"] = utilization_since(earlier, reading), reading
    if used is None or earlier is None:
        return None, state
    if used >= settings.idle_below:
        state.update(since=None, warned_at=None)
        return None, state
    # Idle since the reading before this one, at least.
    since = state.get("since") or earlier["time"]
    state.update(since=since, below=settings.idle_below, measure=settings.idle_measure,
                 attempt=attempt)
    idle_minutes = (reading["time"] - since) / 60
    warned_at = state.get("warned_at")
    if warned_at is None:
        if idle_minutes >= (settings.idle_warn_minutes or 0.0):   # judged(): it is set
            state["warned_at"] = now
            return WARN, state
        return None, state
    if (now - warned_at) / 60 >= settings.idle_stop_minutes:
        state.update(stopped=True, minutes=round(idle_minutes, 1))
        return STOP, state
    return None, state


def apply_idle_policy(run: Run, samples: list[dict], settings: UsageSettings,
                      now: float) -> dict | None:
    """One reading's step of the policy for a running run, and what it asks:
    its owner told, or its job canceled (the reconciler settles it). The
    run's new idle state, for the caller to write; None when not judged."""
    if not judged(run, settings):
        return None
    action, state = idle_step(run, samples, settings, now)
    if action == WARN:
        enqueue_idle_warning(run, settings.idle_measure, settings.idle_below,
                             settings.idle_warn_minutes or 0, settings.idle_stop_minutes)
    elif action == STOP:
        log.info("stopping %s: idle for %s minutes", run.name, state.get("minutes"))
        try:
            slurm_client(run.unix_user).cancel(cast(str, run.slurm_job_id))
        except SlurmError as exc:
            log.warning("could not stop idle %s: %s", run.name, exc)
            state["stopped"] = False       # asked again next reading
    return state


def stopped_line(run: Run) -> str | None:
    """Why the idle policy stopped the run, for its last line; None if it did not."""
    state = run.idle or {}
    if not state.get("stopped"):
        return None
    what = "GPUs" if state.get("measure", "gpu") == "gpu" else "CPUs"
    return (f"its {what} stayed under {state.get('below', 0):.0%} utilization for "
            f"{state.get('minutes', 0):g} minutes")


def idle_notice(run: Run, settings: UsageSettings) -> str | None:
    """What the run's page says of a warning the policy gave: when it stops
    the run unless its GPUs (or CPUs) are used."""
    state = run.idle or {}
    warned_at = state.get("warned_at")
    if run.status != "running" or warned_at is None or state.get("stopped"):
        return None
    what = "GPUs" if state.get("measure", "gpu") == "gpu" else "CPUs"
    stop_at = datetime.fromtimestamp(warned_at + settings.idle_stop_minutes * 60, UTC)
    return (f"Its {what} have stayed under {state.get('below', 0):.0%} utilization: the site's "
            f"idle policy stops it at {stop_at:%H:%M} UTC unless they are used.")
