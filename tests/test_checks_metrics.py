"""The docs' Check syntax and verdicts, and reading $DIV_METRICS lines."""
from __future__ import annotations

import pytest

from divergent.app.services.errors import Invalid
from divergent.app.services.money.pricing import cost
from divergent.app.services.money.usage import month_bounds
from divergent.app.services.runs.checks import parse_check, summary, verdict
from divergent.app.services.runs.metrics import MetricsRead, read_metrics

RUN = {"status": "succeeded", "exit_code": 0, "cost": "1.05", "duration": 760,
       "metrics": {"accuracy": 0.83, "loss": 0.4, "name": "lora", "ok": True,
                   "nested": {"x": 1}}}


@pytest.mark.parametrize("check,expected,value", [
    ("metrics.accuracy>=0.8", "passed", 0.83),
    ("metrics.accuracy>0.9", "failed", 0.83),
    ("metrics.loss<=0.4", "passed", 0.4),
    ("metrics.loss<0.4", "failed", 0.4),
    ("metrics.f1>0.5", "unknown", None),
    ("metrics.name==lora", "passed", "lora"),
    ("metrics.name!=lora", "failed", "lora"),
    ("metrics.name>1", "unknown", "lora"),           # not a number: no verdict
    ("metrics.ok==true", "passed", True),
    ("metrics.ok==false", "failed", True),
    ("metrics.nested>0", "unknown", None),            # a folder of values, not a value
    ("metrics.nested.x==1", "passed", 1),
    ("cost<2", "passed", "1.05"),                     # money is a decimal string
    ("duration<=760", "passed", 760),
    ("exit_code==0", "passed", 0),
    ("status==succeeded", "passed", "succeeded"),
    ("status!=failed", "passed", "succeeded"),
])
def test_verdicts(check, expected, value):
    assert verdict(RUN, check) == {"check": check, "verdict": expected, "value": value}


@pytest.mark.parametrize("bad", ["accuracy", "metrics.loss<low", ">=1", "a..b>1", "a b>1"])
def test_bad_checks_are_refused(bad):
    with pytest.raises(Invalid):
        parse_check(bad)


def test_the_tally_for_the_last_line():
    assert summary([{"check": "a>1", "verdict": "passed", "value": 2},
                    {"check": "metrics.f1>0.5", "verdict": "unknown", "value": None}]) == \
        " · passed 1 of 2 checks (no value: metrics.f1>0.5)"
    assert summary([{"check": "a>1", "verdict": "passed", "value": 2}]) == " · passed 1 of 1 check"
    assert summary([{"check": "metrics.loss<0.6", "verdict": "failed", "value": 0.7},
                    {"check": "metrics.tag==best", "verdict": "failed", "value": "last"}]) == \
        (' · passed 0 of 2 checks (failed: metrics.loss<0.6 was 0.7, metrics.tag==best '
         'was "last")')
    long = summary([{"check": "metrics.tag==x", "verdict": "failed", "value": "y" * 500}])
    assert len(long) < 160 and long.endswith('…)')
    assert summary([]) is None


def test_metrics_are_read_incrementally_last_value_wins(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "loss": 1.0}\nnot json\n{"step": 1, "lo')
    seen = read_metrics(str(path), MetricsRead())
    assert (seen.last, seen.points, seen.malformed) == ({"step": 0, "loss": 1.0}, 1, 1)
    with open(path, "a") as f:
        f.write('ss": 0.5, "acc": NaN}\n[1]\n{"step": 2, "note": "x", "bad": {"a": 1}}\n')
    seen = read_metrics(str(path), seen)
    assert seen.last == {"step": 2, "loss": 0.5, "note": "x"}
    assert (seen.points, seen.malformed) == (3, 2)
    assert seen.offset == path.stat().st_size


def test_a_last_line_without_newline_counts_once_the_run_has_ended(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"accuracy": 0.9}')
    assert read_metrics(str(path), MetricsRead()).last == {}
    assert read_metrics(str(path), MetricsRead(), final=True).last == {"accuracy": 0.9}


def test_cost_is_per_started_minute_and_never_past_the_time_limit():
    assert cost(4_800_000, 0) == 80_000
    assert cost(4_800_000, 61) == 160_000
    assert cost(2_550_000, 95, limit_minutes=1) == 42_500
    assert cost(7_530_000, 760) == 7_530_000 * 13 // 60


def test_months():
    start, end, label = month_bounds("2026-12")
    assert (start.isoformat(), end.isoformat(), label) == (
        "2026-12-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00", "2026-12")
    with pytest.raises(Invalid):
        month_bounds("2026-13")
