"""Money is exact on its whole path: integers and fractions until shown, then rounded
half-even to the currency's minor unit (RULES.md §Money). Each expected figure is worked
out by hand beside it; the amounts are past the 28 digits a default Decimal keeps, or
exactly half a minor unit, where a float or a rounded quotient would give another figure."""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from reconcile.engine.money import major_units
from schemas.money import Money

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("cents", "currency", "shown"),
    [
        (Fraction(5, 2), "USD", "0.02"),  # 2.5 cents: half, to the even 2
        (Fraction(7, 2), "USD", "0.04"),  # 3.5 cents: half, to the even 4
        (Fraction(-5, 2), "USD", "-0.02"),
        (Fraction(1001, 3), "JPY", "334"),  # 333.67 yen: up (no minor unit in JPY)
        (Fraction(3, 2), "KWD", "0.002"),  # 1.5 fils: half, to the even 2 (three places in KWD)
        # 10^30 + 1.5 cents: half, to the even 10^30 + 2; a 28-digit quotient reads 10^30
        (Fraction(2 * (10**30 + 1) + 1, 2), "USD", "1" + "0" * 28 + ".02"),
    ],
)
def test_an_exact_amount_is_shown_rounded_half_even(
    cents: Fraction, currency: str, shown: str
) -> None:
    assert str(Money.of(cents, currency=currency)) == shown


def test_minor_units_past_28_digits_stay_exact() -> None:
    # 10^30 + 7 cents = 10^28 dollars and 7 cents
    assert str(Money.of(10**30 + 7, 2)) == "1" + "0" * 28 + ".07"
    assert Money.of(10**30 + 7, 2).grouped() == "10" + ",000" * 9 + ".07"
    assert major_units(10**30 + 7, 2) == Decimal("1" + "0" * 28 + ".07")


#: Floating point where money is computed: a DuckDB DOUBLE or FLOAT (pow() gives one), a
#: Python float() (the `int | float` of GPU-seconds is time, not money).
FLOAT_ON_MONEY = re.compile(r"\b(DOUBLE|FLOAT|REAL)\b|\bpow\(|\bfloat\(|\d\.\d+e\d")
MONEY_PATH = (
    "reconcile/engine/money.py",
    "reconcile/engine/classify.py",
    "reconcile/engine/result.py",
    "reconcile/engine/figures.py",
    "reconcile/reports/outcomes.py",
    "reconcile/packets/claims.py",
    "schemas/money.py",
)


@pytest.mark.parametrize("module", MONEY_PATH)
def test_no_float_on_the_path_of_an_amount(module: str) -> None:
    text = (ROOT / module).read_text(encoding="utf-8")
    assert [m.group(0) for m in FLOAT_ON_MONEY.finditer(text)] == []


@pytest.mark.parametrize(
    ("cents", "minor", "plain", "grouped"),
    [
        (123456, 2, "1234.56", "1,234.56"),
        (-5, 2, "-0.05", "-0.05"),
        (0, 2, "0.00", "0.00"),
        (1234567, 0, "1234567", "1,234,567"),  # yen: no minor unit
        (1234567, 3, "1234.567", "1,234.567"),  # dinar: three places
    ],
)
def test_money_is_printed_one_way_plain_or_grouped(
    cents: int, minor: int, plain: str, grouped: str
) -> None:
    money = Money.of(cents, minor, "XXX")
    assert (str(money), money.grouped(), money.currency, money.minor) == (
        plain,
        grouped,
        "XXX",
        minor,
    )
