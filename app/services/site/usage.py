"""The site's settings for what runs use, [usage] in its site file:

    [usage]
    interval_seconds = 10      # the sampler beside each run, on each node; 0: none
    idle_below = 0.05          # utilisation under this is idle (0 to 1)
    idle_warn_minutes = 30     # idle this long: its owner is told (off when unset)
    idle_stop_minutes = 30     # and this long more: it is stopped, canceled
    idle_measure = "gpu"       # "gpu": GPU runs, by their GPUs' utilisation;
                               # "cpu": every run, by its CPU use (where GPUs
                               # have no telemetry, as on the dev cluster)

The idle policy is off unless idle_warn_minutes is set. Minutes may be
fractions (0.5). A run that says it may idle (`div run --allow-idle`) and an
interactive one (which ends on its own idle time) are never stopped by it."""
from __future__ import annotations

from dataclasses import dataclass

KEYS = ("interval_seconds", "idle_below", "idle_warn_minutes", "idle_stop_minutes",
        "idle_measure")
MEASURES = ("gpu", "cpu")
MAX_MINUTES = 7 * 24 * 60


class UsageSettingsError(ValueError):
    """Says which [usage] value is wrong."""


@dataclass(frozen=True)
class UsageSettings:
    interval_seconds: int = 10
    idle_below: float = 0.05
    idle_warn_minutes: float | None = None
    idle_stop_minutes: float = 30
    idle_measure: str = "gpu"

    @property
    def idle_policy(self) -> bool:
        return self.idle_warn_minutes is not None and self.interval_seconds > 0

    @property
    def refresh_seconds(self) -> float:
        """How often the reconciler reads a running run's samples: a few
        samples apart, so that 5,000 runs cost a cycle a little each."""
        return 3.0 * self.interval_seconds


def _minutes(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0.05 <= value <= MAX_MINUTES:
        raise UsageSettingsError(f"[usage] {what}: minutes from 0.05 to {MAX_MINUTES} (a week)")
    return float(value)


def usage_settings(table: object) -> UsageSettings:
    if not isinstance(table, dict):
        raise UsageSettingsError("[usage] must be a table")
    unknown = set(table) - set(KEYS)
    if unknown:
        raise UsageSettingsError(f"[usage]: unknown settings {', '.join(sorted(unknown))}")
    default = UsageSettings()
    interval = table.get("interval_seconds", default.interval_seconds)
    if isinstance(interval, bool) or not isinstance(interval, int) or not 0 <= interval <= 3600:
        raise UsageSettingsError("[usage] interval_seconds: 0 (no sampler) to 3600")
    below = table.get("idle_below", default.idle_below)
    if isinstance(below, bool) or not isinstance(below, (int, float)) or not 0 < below <= 1:
        raise UsageSettingsError("[usage] idle_below: a utilisation above 0, at most 1")
    measure = table.get("idle_measure", default.idle_measure)
    if measure not in MEASURES:
        raise UsageSettingsError("[usage] idle_measure: \"gpu\" or \"cpu\"")
    warn = table.get("idle_warn_minutes")
    return UsageSettings(
        interval_seconds=interval, idle_below=float(below),
        idle_warn_minutes=None if warn is None else _minutes(warn, "idle_warn_minutes"),
        idle_stop_minutes=_minutes(table.get("idle_stop_minutes", default.idle_stop_minutes),
                                   "idle_stop_minutes"),
        idle_measure=measure)
