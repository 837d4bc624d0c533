"""Prices and the money arithmetic of docs/developers/design.md, "Money", in integer
micro-dollars: the hourly rate of a container size, what a spend limit buys
as Slurm's --time, and the cost of elapsed seconds (per started minute, one
minute minimum)."""
from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import cast

from flask import current_app

from divergent.app.services.errors import Invalid, Unavailable
from divergent.app.services.instance_files import replace_file
from divergent.app.services.site.slurm_access import slurm_site
from divergent.slurm.jobspec import GPU_NAME, GpuType

MICROS = 1_000_000


def _default_prices() -> dict[str, int]:
    # The docs' price table, per GPU (or cpu unit) per hour.
    return {"b300": 8_300_000, "h200": 5_450_000, "h100": 4_800_000,
            "l40s": 2_550_000, "cpu": 300_000}


@dataclass(frozen=True)
class PriceTable:
    """A price per GPU (or cpu unit) hour for each type of the site's
    catalog that has one, and the price of cores and GiB beyond what a
    type includes."""
    per_unit_hour: dict[str, int] = field(default_factory=_default_prices)
    extra_core_hour: int = 150_000
    extra_gib_hour: int = 30_000

    def rate(self, gpu: GpuType, units: int, cores: int, memory_gib: int) -> int:
        """Micro-dollars an hour. Each unit includes the type's cores and GiB
        (the docs': 1 core and 8 GiB, cpu 2 GiB); asking for less than
        included costs the same as the default."""
        if gpu.name not in self.per_unit_hour:
            raise Unavailable(f"{gpu.name} has no price yet: an admin sets one with "
                              f"`flask prices --set {gpu.name}=USD`")
        extra_cores = max(0, cores - units * gpu.cores)
        extra_gib = max(0, memory_gib - units * gpu.memory_gib)
        return (units * self.per_unit_hour[gpu.name] + extra_cores * self.extra_core_hour
                + extra_gib * self.extra_gib_hour)


# More than any price, limit or spend; "1e999999" is no amount.
MAX_DOLLARS = 10**12


def micros(text: str) -> int:
    """Dollars as written in the price file ("4.80") to micro-dollars."""
    try:
        amount = Decimal(str(text))
    except InvalidOperation:
        raise Invalid(f"{text!r} is not an amount in dollars") from None
    # A finite amount's exponent is an int (the letters are for NaN and infinity).
    if not amount.is_finite() or amount < 0 or cast(int, amount.as_tuple().exponent) < -6 \
            or amount > MAX_DOLLARS:
        raise Invalid(f"{str(text)[:40]!r}: an amount is dollars, at least 0, at most "
                         f"{MAX_DOLLARS:,} with at most 6 decimals")
    return int(amount * MICROS)


def load_prices(path: str, types: Iterable[str] | None = None) -> PriceTable:
    """The site's price file (TOML), or the docs' table when there is none:

        [per_gpu_hour]
        h100 = "4.80"
        [extra]
        core_hour = "0.15"
        gib_hour = "0.03"

    Prices are strings, so no price is ever a float. With `types` (the
    catalog's), the table holds those types' prices alone: a type the
    catalog no longer has sells nothing, and its line goes at the next
    change of prices."""
    if not os.path.exists(path):
        return _for_types(PriceTable(), types)
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise Invalid(f"{path}: {exc}") from None
    default = PriceTable()
    per_unit = dict(default.per_unit_hour)
    for gpu, price in data.get("per_gpu_hour", {}).items():
        if not GPU_NAME.fullmatch(gpu):
            raise Invalid(f"{path}: {gpu!r} is not a GPU type's name")
        per_unit[gpu] = micros(price)
    extra = data.get("extra", {})
    return _for_types(PriceTable(
        per_unit, micros(extra.get("core_hour", usd_text(default.extra_core_hour))),
        micros(extra.get("gib_hour", usd_text(default.extra_gib_hour)))), types)


def _for_types(table: PriceTable, types: Iterable[str] | None) -> PriceTable:
    if types is None:
        return table
    return replace(table, per_unit_hour={t: table.per_unit_hour[t] for t in types
                                         if t in table.per_unit_hour})


def with_prices(table: PriceTable, changes: dict[str, str],
                types: Iterable[str] | None = None) -> PriceTable:
    """`table` with some prices changed: a GPU type of `types` (the
    catalog's; else one `table` prices), extra_core or extra_gib, each to
    dollars as written ("4.80"). Invalid says which."""
    types = list(table.per_unit_hour) if types is None else list(types)
    per_unit, core, gib = dict(table.per_unit_hour), table.extra_core_hour, table.extra_gib_hour
    for name, amount in changes.items():
        value = micros(amount.strip().removeprefix("$"))
        if name == "extra_core":
            core = value
        elif name == "extra_gib":
            gib = value
        elif name in types:
            per_unit[name] = value
        else:
            raise Invalid(f"{name!r}: a GPU type ({', '.join(types)}), extra_core or "
                          "extra_gib")
    return PriceTable(per_unit, core, gib)


def monthly_limit(text: str) -> int | None:
    """An org's monthly limit as an admin writes it: dollars, or none."""
    text = text.strip()
    return None if text in ("none", "") else micros(text.removeprefix("$"))


def current_prices() -> PriceTable:
    """The site's price table (DIV_PRICES_FILE); a broken one is the site's
    trouble, not the request's."""
    try:
        return load_prices(current_app.config["DIV_PRICES_FILE"], slurm_site().catalog)
    except (Invalid, OSError) as exc:
        raise Unavailable(f"the site's price table is broken: {exc}") from None


def change_prices(changes: dict[str, str], types: Iterable[str] | None = None) -> PriceTable:
    """The price table with `changes` (see with_prices), saved: new runs use
    it; a run keeps the rate it started with. `types`: the catalog the
    prices are for (the site's, unless one about to be saved)."""
    table = with_prices(current_prices(), changes,
                        slurm_site().catalog if types is None else types)
    save_prices(current_app.config["DIV_PRICES_FILE"], table)
    return table


def limit_text(limit_micros: int | None) -> str:
    """An org's monthly limit as people read it."""
    return "no limit" if limit_micros is None else format_usd(limit_micros)


def save_prices(path: str, table: PriceTable) -> None:
    lines = ["# divergent's prices, per hour (flask prices). New runs use them;",
             "# a run keeps the rate it started with.", "[per_gpu_hour]"]
    lines += [f'{gpu} = "{usd_text(price)}"' for gpu, price in table.per_unit_hour.items()]
    lines += ["[extra]", f'core_hour = "{usd_text(table.extra_core_hour)}"',
              f'gib_hour = "{usd_text(table.extra_gib_hour)}"']
    replace_file(path, "\n".join(lines) + "\n")


def minutes_for(budget_micros: int, rate_micros_per_hour: int) -> int:
    """Whole minutes a budget buys: floor(budget / (rate / 60))."""
    return budget_micros * 60 // rate_micros_per_hour


def cost(rate_micros_per_hour: int, elapsed_seconds: int,
         limit_minutes: int | None = None) -> int:
    """Billed per started minute, one minute minimum, and never past the
    run's time limit: Slurm ends a job up to a minute after its --time (its
    timer's grain and KillWait), which is Slurm's slack, not the user's, so
    a run stopped at its spend limit never costs more than that limit."""
    minutes = max(1, -(-elapsed_seconds // 60))
    if limit_minutes is not None:
        minutes = min(minutes, limit_minutes)
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
