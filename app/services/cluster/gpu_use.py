"""GPUs allocated against GPUs used, by type and org, for site admins (the
Cluster and Orgs pages, /metrics) and the month's efficiency (flask usage).
"Used" is each running run's GPUs times its utilisation as its samplers
last measured it; where nothing measured it (no GPU telemetry) it is None,
never a guess."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa

from divergent.app.extensions import db
from divergent.app.models import Org, Run
from divergent.app.services.money.catalog import gpu_type


@dataclass
class GpuUse:
    org: str
    gpu: str
    allocated: int = 0
    measured: int = 0          # of those, GPUs whose utilisation is known
    used: float = 0.0          # GPUs' worth of work on the measured ones

    def add(self, gpus: int, usage: dict | None) -> None:
        self.allocated += gpus
        utilization = _utilization(usage)
        if utilization is not None:
            self.measured += gpus
            self.used += gpus * utilization

    @property
    def used_gpus(self) -> float | None:
        """GPUs' worth in use, scaled from the measured ones to all; None without telemetry."""
        return None if not self.measured else round(self.used * self.allocated / self.measured, 2)


def _utilization(usage: dict | None) -> float | None:
    value = (usage or {}).get("gpu_utilization")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def gpus_in_use() -> list[GpuUse]:
    """Running GPU runs, by org and GPU type."""
    # The model's columns are untyped: the rows' types are said here, once.
    rows = cast(list[tuple[str, str, int, dict[str, Any] | None]], db.session.execute(
        sa.select(Org.name, Run.gpu_type, Run.gpus, Run.usage).join(
            Org, Org.id == Run.org_id).where(Run.status == "running")).all())
    use: dict[tuple[str, str], GpuUse] = {}
    for org, gpu, gpus, usage in rows:
        if gpu_type(gpu).is_cpu:
            continue
        use.setdefault((org, gpu), GpuUse(org, gpu)).add(gpus, usage)
    return sorted(use.values(), key=lambda e: (e.gpu, e.org))


def by_type(entries: list[GpuUse]) -> list[GpuUse]:
    totals: dict[str, GpuUse] = {}
    for entry in entries:
        total = totals.setdefault(entry.gpu, GpuUse("", entry.gpu))
        total.allocated += entry.allocated
        total.measured += entry.measured
        total.used += entry.used
    return list(totals.values())


def gpu_hours_efficiency(org_id: int, start: datetime, end: datetime) -> tuple[float, float | None]:
    """The GPU hours an org's runs of the month ran, and the share of them
    spent working, over the runs whose GPUs were measured (None if none were)."""
    rows = cast(list[tuple[str, int, int, dict[str, Any] | None]], db.session.execute(
        sa.select(Run.gpu_type, Run.gpus, Run.elapsed_seconds, Run.usage)
        .where(Run.org_id == org_id, Run.created_at >= start,
               Run.created_at < end, Run.elapsed_seconds > 0)).all())
    # GPU-seconds, counted as a GpuUse counts GPUs.
    month = GpuUse("", "")
    for gpu, gpus, seconds, usage in rows:
        if not gpu_type(gpu).is_cpu:
            month.add(gpus * seconds, usage)
    worked = None if not month.measured else round(month.used / month.measured, 3)
    return month.allocated / 3600, worked
