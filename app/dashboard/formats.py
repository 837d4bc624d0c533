"""How the dashboard writes times, money and sizes: as the CLI does, with
the exact value on hover. Times are written in UTC with their exact
moment in <time datetime>; dashboard.js rewrites them in the reader's own
time zone (without JavaScript they stay UTC, and say so)."""
from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup, escape

from divergent.app.dashboard import bp
from divergent.app.models import iso_utc
from divergent.app.services.money.pricing import format_usd, usd_text
from divergent.app.services.money.pricing import micros as to_micros
from divergent.app.services.runs.text import format_duration
from divergent.app.services.runs.usage import format_gib
from divergent.app.web.byte_paths import path_query
from divergent.terms import format_bytes, shown


@bp.app_template_filter("duration")
def duration_filter(seconds):
    return "-" if seconds is None else format_duration(seconds)


@bp.app_template_filter("when")
def when_filter(moment: datetime | float | None) -> Markup:
    """2026-12-01 05:41 UTC, the whole moment on hover."""
    if moment is None:
        return Markup("-")
    if isinstance(moment, str):          # the API's ISO 8601 (a sweep's created_at)
        moment = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    if not isinstance(moment, datetime):
        try:
            moment = datetime.fromtimestamp(moment, UTC)
        except (ValueError, OverflowError, OSError):   # a file time a run set past any calendar
            return escape(str(moment))
    exact = iso_utc(moment.astimezone(UTC).replace(microsecond=0))
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(
        exact, moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"))


@bp.app_template_filter("money")
def money_filter(micros: int | str | None) -> Markup:
    """$0.14 (to the cent), the exact amount on hover: $0.138333. From
    micro-dollars, or the API's dollars as text ("0.138333")."""
    if micros is None:
        return Markup("-")
    if isinstance(micros, str):
        micros = to_micros(micros)
    return Markup('<span class="money" title="${}">{}</span>').format(
        usd_text(micros), format_usd(micros))


@bp.app_template_filter("number")
def number_filter(value) -> Markup:
    """A metric as a reader wants it: 0.8, not 0.7999999999999999 (six
    significant digits), the exact value on hover; text as it is."""
    if isinstance(value, bool) or not isinstance(value, float):
        return escape(str(value))             # whole numbers (a step) as they are
    return Markup('<span title="{}">{}</span>').format(repr(value), f"{value:.6g}")


@bp.app_template_filter("share")
def share_filter(fraction: float | None) -> str:
    """0.43 as 43%; nothing measured as -."""
    return "-" if fraction is None else f"{fraction:.0%}"


@bp.app_template_filter("gib")
def gib_filter(size: int | None) -> str:
    return "-" if size is None else format_gib(size)


@bp.app_template_filter("size")
def size_filter(size: int) -> Markup:
    """101 B, 1.9 KB (as `div storage ls`), the bytes on hover."""
    return Markup('<span title="{} bytes">{}</span>').format(f"{size:,}", escape(format_bytes(size)))


# A volume path a run named with any bytes (app/web/byte_paths.py): shown as
# `div storage ls` shows it, linked byte for byte.
bp.app_template_filter("shown_path")(shown)
bp.app_template_filter("path_query")(path_query)
