"""Checks, as the docs' Check syntax: `<path><operator><value>` against the
run's JSON (metrics.accuracy, exit_code, cost, duration, status, ...). Each
gets a verdict once the run has ended: passed, failed, or unknown when the
run has no value at the path. Checks never change a run's status or exit
code. Pure functions."""
from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation

from divergent.app.services.errors import Invalid
from divergent.terms import CHECK, NUMBER

ORDERING = {">": lambda a, b: a > b, "<": lambda a, b: a < b,
            ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}


def parse_value(raw: str):
    if NUMBER.fullmatch(raw):
        return Decimal(raw)
    if raw in ("true", "false"):
        return raw == "true"
    return raw


def parse_check(text: str) -> tuple[str, str, object]:
    match = CHECK.fullmatch(text.strip())
    if not match:
        raise Invalid(f"invalid check {text!r}: <path><operator><value>, "
                      "such as metrics.accuracy>=0.8")
    path, op, raw = match.groups()
    value = parse_value(raw)
    if op in ORDERING and not isinstance(value, Decimal):
        raise Invalid(f"invalid check {text!r}: {op} needs a number")
    return path, op, value


def _lookup(document: dict, path: str):
    value = document
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _number(value) -> Decimal | None:
    """Numbers, and the decimal strings the run JSON gives money in."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if isinstance(value, str) and NUMBER.fullmatch(value):
        try:
            return Decimal(value)
        except InvalidOperation:
            return None
    return None


def verdict(document: dict, text: str) -> dict:
    """{"check", "verdict", "value"}: the value is what the path held."""
    path, op, expected = parse_check(text)
    seen = _lookup(document, path)
    result = {"check": text, "verdict": "unknown", "value": seen}
    if seen is None or isinstance(seen, (dict, list)):
        result["value"] = None
        return result
    if op in ORDERING:
        number = _number(seen)
        if number is None:
            return result
        passed = ORDERING[op](number, expected)
    else:
        if isinstance(expected, Decimal):
            number = _number(seen)
            same = number is not None and number == expected
        elif isinstance(expected, bool):
            same = seen is expected
        else:
            same = str(seen) == expected
        passed = same if op == "==" else not same
    result["verdict"] = "passed" if passed else "failed"
    return result


def summary(checks: list[dict]) -> str | None:
    """` · passed 2 of 2 checks`, for the last line; with those that did
    not pass and what they saw: ` · passed 1 of 3 checks (failed:
    metrics.loss<0.6 was 0.7; no value: metrics.f1>0.5)`."""
    if not checks:
        return None
    passed = sum(c.get("verdict") == "passed" for c in checks)
    noun = "check" if len(checks) == 1 else "checks"
    failed = [f"{c['check']} was {_shown(c.get('value'))}"
              for c in checks if c.get("verdict") == "failed"]
    unknown = [c["check"] for c in checks if c.get("verdict") not in ("passed", "failed")]
    why = "; ".join(([f"failed: {', '.join(failed)}"] if failed else [])
                    + ([f"no value: {', '.join(unknown)}"] if unknown else []))
    return f" · passed {passed} of {len(checks)} {noun}" + (f" ({why})" if why else "")


def _shown(value) -> str:
    """A value as JSON, cut short: a run chooses its metrics' size."""
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:79] + "…"
