"""The Telemetry tab's data: the chart layout from the run's telemetry.toml
(`[[chart]] title = "Loss", metrics = ["loss", "val_loss"], x = "step"`),
or one chart per numeric metric against step without one; and the series
from the run's metrics.jsonl. A bad layout is a message for the tab, never
an exception."""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass

# What the tab draws at most of a run's metrics.jsonl (the reconciler keeps
# reading it for the run's own metrics).
MAX_POINTS = 200_000
MAX_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class Chart:
    title: str
    metrics: tuple[str, ...]
    x: str = "step"


def parse_layout(text: str | None) -> tuple[list[Chart] | None, str | None]:
    """(charts, None), (None, None) without a layout, or (None, what is wrong)."""
    if not text:
        return None, None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return None, f"telemetry.toml is not valid TOML: {exc}"
    charts = []
    for i, chart in enumerate(data.get("chart", []), 1):
        if not isinstance(chart, dict):
            return None, f"chart {i}: use [[chart]] tables"
        metrics = chart.get("metrics")
        if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
            return None, f"chart {i}: metrics must be a list of metric names"
        x = chart.get("x", "step")
        if not isinstance(x, str):
            return None, f"chart {i}: x must be a metric name, such as step or time"
        charts.append(Chart(str(chart.get("title", ", ".join(metrics))), tuple(metrics), x))
    if not charts:
        return None, "telemetry.toml has no [[chart]] tables"
    return charts, None


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def default_charts(points: list[dict]) -> list[Chart]:
    keys = []
    for point in points:
        for key, value in point.items():
            if key not in ("step", "time") and key not in keys and _number(value) is not None:
                keys.append(key)
    return [Chart(key, (key,)) for key in keys]


def chart_data(chart: Chart, points: list[dict]) -> dict:
    """uPlot's shape: x values, then one list per metric (None for gaps);
    points without x use their line number."""
    xs: list[float] = []
    series: list[list[float | None]] = [[] for _ in chart.metrics]
    for n, point in enumerate(points):
        values = [_number(point.get(m)) for m in chart.metrics]
        if all(v is None for v in values):
            continue
        x = _number(point.get(chart.x))
        xs.append(n if x is None else x)
        for column, value in zip(series, values, strict=True):
            column.append(value)
    return {"title": chart.title, "x": chart.x, "metrics": list(chart.metrics),
            "data": [xs, *series]}
