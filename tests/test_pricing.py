"""The docs' Pricing and Container size sections, to the cent."""
from __future__ import annotations

import pytest

from app.services.pricing import PriceTable, cost, format_minutes, format_usd, minutes_for

PRICES = PriceTable()


def test_h100_with_8_cores_and_64g_costs_7_53_an_hour():
    assert format_usd(PRICES.rate("h100", 1, 8, 64)) == "$7.53"


@pytest.mark.parametrize("gpu, usd", [("b300", "$8.30"), ("h200", "$5.45"), ("h100", "$4.80"),
                                      ("l40s", "$2.55"), ("cpu", "$0.30")])
def test_the_default_size_costs_the_table_price(gpu, usd):
    assert format_usd(PRICES.rate(gpu, 1, 1, PriceTable.included_gib(gpu))) == usd


def test_less_than_included_costs_the_same_as_the_default():
    assert PRICES.rate("h100", 8, 1, 1) == PRICES.rate("h100", 8, 8, 64) == 38_400_000


def test_five_dollars_of_h100_is_about_1h_2m():
    assert format_minutes(minutes_for(5_000_000, 4_800_000)) == "1h 2m"


@pytest.mark.parametrize("seconds, minutes", [(0, 1), (1, 1), (60, 1), (61, 2), (760, 13)])
def test_billed_per_started_minute_with_a_one_minute_minimum(seconds, minutes):
    assert cost(4_800_000, seconds) == 80_000 * minutes


def test_durations_read_like_the_docs():
    assert [format_minutes(m) for m in (45, 62, 60 * 24 * 3 + 61)] == ["45m", "1h 2m", "3d 1h"]
