"""telemetry.toml layouts and the series drawn from metrics.jsonl."""
from __future__ import annotations

import pytest

from divergent.app.services.runs.telemetry import Chart, chart_data, default_charts, parse_layout


def test_a_layout_is_read_from_chart_tables():
    charts, problem = parse_layout('[[chart]]\ntitle = "Loss"\nmetrics = ["loss", "val"]\n'
                                   '[[chart]]\nmetrics = ["lr"]\nx = "time"\n')
    assert problem is None
    assert charts == [Chart("Loss", ("loss", "val"), "step"), Chart("lr", ("lr",), "time")]


@pytest.mark.parametrize("text,message", [
    ("[[chart]", "not valid TOML"),
    ("title = 1", "no [[chart]] tables"),
    ("[[chart]]\nmetrics = []", "metrics must be a list"),
    ("[[chart]]\nmetrics = [1]", "metrics must be a list"),
    ("[[chart]]\nmetrics = ['a']\nx = 3", "x must be a metric name"),
])
def test_a_bad_layout_is_a_message_not_an_error(text, message):
    charts, problem = parse_layout(text)
    assert charts is None and message in problem


def test_without_a_layout_one_chart_per_numeric_metric():
    points = [{"step": 0, "loss": 1, "name": "x", "ok": True}, {"step": 1, "acc": 0.5}]
    assert default_charts(points) == [Chart("loss", ("loss",)), Chart("acc", ("acc",))]
    assert parse_layout(None) == (None, None)


def test_series_keep_gaps_and_fall_back_to_line_numbers():
    points = [{"step": 5, "a": 1.0}, {"b": 2}, {"step": 7, "a": float("nan"), "b": 3}]
    data = chart_data(Chart("ab", ("a", "b")), points)
    assert data["data"] == [[5, 1, 7], [1.0, None, None], [None, 2.0, 3.0]]
