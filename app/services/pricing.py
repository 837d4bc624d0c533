"""Prices and the money arithmetic of DESIGN.md "Money", in integer
micro-dollars: the hourly rate of a container size, what a spend limit buys
as Slurm's --time, and the cost of elapsed seconds (per started minute, one
minute minimum)."""
from __future__ import annotations

from dataclasses import dataclass, field

MICROS = 1_000_000


def _default_prices() -> dict[str, int]:
    # The docs' price table, per GPU (or cpu unit) per hour.
    return {"b300": 8_300_000, "h200": 5_450_000, "h100": 4_800_000,
            "l40s": 2_550_000, "cpu": 300_000}


@dataclass(frozen=True)
class PriceTable:
    per_unit_hour: dict[str, int] = field(default_factory=_default_prices)
    extra_core_hour: int = 150_000
    extra_gib_hour: int = 30_000

    @staticmethod
    def included_gib(gpu: str) -> int:
        return 2 if gpu == "cpu" else 8

    def rate(self, gpu: str, units: int, cores: int, memory_gib: int) -> int:
        """Micro-dollars an hour. Each unit includes 1 core and 8 GiB (cpu:
        2 GiB); asking for less than included costs the same as the default."""
        extra_cores = max(0, cores - units)
        extra_gib = max(0, memory_gib - units * self.included_gib(gpu))
        return (units * self.per_unit_hour[gpu] + extra_cores * self.extra_core_hour
                + extra_gib * self.extra_gib_hour)


def minutes_for(budget_micros: int, rate_micros_per_hour: int) -> int:
    """Whole minutes a budget buys: floor(budget / (rate / 60))."""
    return budget_micros * 60 // rate_micros_per_hour


def cost(rate_micros_per_hour: int, elapsed_seconds: int) -> int:
    """Billed per started minute, one minute minimum."""
    minutes = max(1, -(-elapsed_seconds // 60))
    return rate_micros_per_hour * minutes // 60


def format_usd(micros: int) -> str:
    """$4.80; rounded half up to the cent."""
    cents = (micros + 5_000) // 10_000
    return f"${cents // 100}.{cents % 100:02d}"


def format_minutes(minutes: int) -> str:
    """1h 2m, 45m, 3d 4h: the docs' "about 1h 2m"."""
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {mins}m" if hours else f"{mins}m"


def usd_text(micros: int) -> str:
    """Exact dollars for JSON, as a string so no client reads it as a float:
    "4.80", "0.1255"."""
    whole, frac = divmod(micros, MICROS)
    digits = f"{frac:06d}".rstrip("0")
    return f"{whole}.{digits.ljust(2, '0')}"
