"""The docs' Pricing and Container size sections, to the cent."""
from __future__ import annotations

import pytest

from divergent.app.services.errors import Unavailable
from divergent.app.services.money.pricing import PriceTable, cost, format_minutes, format_usd, minutes_for
from divergent.slurm.jobspec import GpuType, default_catalog

PRICES = PriceTable()
DOCS = default_catalog()


def test_h100_with_8_cores_and_64g_costs_7_53_an_hour():
    assert format_usd(PRICES.rate(DOCS["h100"], 1, 8, 64)) == "$7.53"


@pytest.mark.parametrize("gpu, usd", [("b300", "$8.30"), ("h200", "$5.45"), ("h100", "$4.80"),
                                      ("l40s", "$2.55"), ("cpu", "$0.30")])
def test_the_default_size_costs_the_table_price(gpu, usd):
    assert format_usd(PRICES.rate(DOCS[gpu], 1, 1, DOCS[gpu].memory_gib)) == usd


def test_less_than_included_costs_the_same_as_the_default():
    assert PRICES.rate(DOCS["h100"], 8, 1, 1) == PRICES.rate(DOCS["h100"], 8, 8, 64) == 38_400_000


def test_a_site_type_includes_what_the_catalog_says_and_needs_a_price():
    a100 = GpuType("a100", "gpu", "gpu:a100", per_node=4, cores=8, memory_gib=64)
    table = PriceTable({"a100": 3_000_000})
    assert table.rate(a100, 2, 16, 128) == 6_000_000          # all included
    assert table.rate(a100, 1, 9, 65) == 3_000_000 + 150_000 + 30_000
    with pytest.raises(Unavailable, match="a100 has no price yet"):
        PRICES.rate(a100, 1, 8, 64)


def test_five_dollars_of_h100_is_about_1h_2m():
    assert format_minutes(minutes_for(5_000_000, 4_800_000)) == "1h 2m"


@pytest.mark.parametrize("seconds, minutes", [(0, 1), (1, 1), (60, 1), (61, 2), (760, 13)])
def test_billed_per_started_minute_with_a_one_minute_minimum(seconds, minutes):
    assert cost(4_800_000, seconds) == 80_000 * minutes


def test_durations_read_like_the_docs():
    assert [format_minutes(m) for m in (45, 62, 60 * 24 * 3 + 61)] == ["45m", "1h 2m", "3d 1h"]
