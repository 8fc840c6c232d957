"""Numbers as finance's views show them: GPU-hours and amounts, thousands separated,
rounded half-even. One module, read by the terminal tables (output.py) and the finance
page (finance_page.py) alike, so neither imports the other for its number format."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, localcontext

from reconcile.engine.money import exact_text, places_of

#: GPU-µs in a GPU-hour.
HOUR_US = 3_600 * 1_000_000


def number(value: Decimal, places: int) -> str:
    """The one number format of finance's views: thousands separated, `places` decimals,
    rounded half-even (GPU-hours; amounts are already whole minor units)."""
    with localcontext() as ctx:
        ctx.prec = 100  # an exact amount may have 38 digits and more places (the default keeps 28)
        return format(value.quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN), f",.{places}f")


def exact_number(value: Decimal, minor: int) -> str:
    """An exact amount in the same format: the minor unit's places, more only where it has
    digits other than trailing zeros ("2,468.456400" is shown 2,468.4564)."""
    return number(value, max(minor, places_of(exact_text(value, 0))))


def hours(gpu_us: int) -> str:
    return number(Decimal(gpu_us) / HOUR_US, 2)
