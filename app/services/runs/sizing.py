"""What a request comes to (Sizing): cores, memory, its price and Slurm's
--time, which the spend limit, the org's monthly limit and the
partition's MaxTime bound."""
from __future__ import annotations

from dataclasses import dataclass, replace

from divergent.app.models import Org
from divergent.app.services.errors import (
    Invalid,
)
from divergent.app.services.money.catalog import catalog
from divergent.app.services.money.pricing import current_prices, format_usd, minutes_for, usd_text
from divergent.app.services.money.usage import hold_spend, minutes_left
from divergent.app.services.runs.request import RunRequest
from divergent.app.services.site.slurm_access import partition_max_minutes


@dataclass
class Sizing:
    """What a request comes to: its hardware, its price and its --time."""
    cpus: int
    memory_gib: int
    rate: int
    minutes: int | None
    limited_by: str | None
    # The partition's MaxTime, as Slurm said it when the run was sized.
    max_time: int | None = None


def size_run(org: Org, req: RunRequest) -> Sizing:
    gpu = catalog()[req.gpu]
    cpus = req.cpus or req.gpus * gpu.cores
    memory = req.memory_gib or req.gpus * gpu.memory_gib
    rate = current_prices().rate(gpu, req.gpus, cpus, memory)
    max_time = partition_max_minutes(gpu.partition)
    return Sizing(cpus, memory, rate, *_time_limit(org, req.max_spend_micros, rate, max_time),
                  max_time=max_time)


def sized_under_lock(org: Org, req: RunRequest, sizing: Sizing) -> Sizing:
    """The run's --time again, with the org's row locked until the run is
    on record (usage.hold_spend): what live runs may still spend is
    reserved against the org's limit, and nothing asks Slurm meanwhile."""
    hold_spend(org)
    minutes, by = _time_limit(org, req.max_spend_micros, sizing.rate, sizing.max_time)
    return replace(sizing, minutes=minutes, limited_by=by)


def _time_limit(org: Org, max_spend: int | None, rate: int,
                max_time: int | None) -> tuple[int | None, str | None]:
    """Slurm's --time: what the spend limit buys, capped by what the org's
    monthly limit has left (docs/developers/design.md, "Money") and by the partition's
    MaxTime, and which of them set it ("spend", "org", "maxtime")."""
    minutes, by = _money_limit(org, max_spend, rate)
    if max_time is not None and (minutes is None or max_time < minutes):
        return max_time, "maxtime"
    return minutes, by


def _money_limit(org: Org, max_spend: int | None, rate: int) -> tuple[int | None, str | None]:
    spend_minutes = None
    if max_spend is not None:
        spend_minutes = minutes_for(max_spend, rate)
        if spend_minutes < 1:
            least_cents = -(-rate // (60 * 10_000))    # a minute, rounded up to the cent
            raise Invalid(f"a max spend of ${usd_text(max_spend)} buys less than a minute at "
                          f"${usd_text(rate)}/h: the least is {format_usd(least_cents * 10_000)}")
    org_minutes = minutes_left(org, rate)
    if org_minutes is not None and (spend_minutes is None or org_minutes < spend_minutes):
        return org_minutes, "org"
    return spend_minutes, "spend" if spend_minutes is not None else None
