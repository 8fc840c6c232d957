"""Numbers as finance's views show them: GPU-hours and amounts, thousands separated,
rounded half-even. One module, read by the terminal tables (output.py) and the finance
page (finance_page.py) alike, so neither imports the other for its number format."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction

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


# -- the one format of each other kind of figure, for people (terminal tables and pages) ---
#
# Machine outputs (JSON, CSV, Parquet) keep ratios as ratios, in fields named *_ratio or
# *_rate, and durations in seconds (*_s); what people read shows a ratio as a percentage
# with PERCENT_PLACES decimals, a rate with RATE_PLACES, and a duration in days, hours,
# minutes and seconds (docs/reports.md, "Number formats").

PERCENT_PLACES = 2
RATE_PLACES = 4


def percent(ratio: Decimal | Fraction | float | int | None, places: int = PERCENT_PLACES) -> str:
    """A ratio as people read it: 0.023444 -> "2.34 %" (half-even); None -> "–"."""
    if ratio is None:
        return "–"
    value = _exact(ratio) * 100
    return f"{number(value, places)} %"


def rate(value: Decimal | Fraction | float | int | None, places: int = RATE_PLACES) -> str:
    """A rate (restarts per run, …) with fixed decimals: 0 -> "0.0000", 0.11666 -> "0.1167"."""
    if value is None:
        return "–"
    return number(_exact(value), places)


def money(amount: str | Decimal | None) -> str:
    """An amount already rounded to its minor unit (a JSON amount such as "1234.50") as
    people read it: thousands separated, its own places kept ("1,234.50"); None -> "–"."""
    if amount is None:
        return "–"
    value = Decimal(amount)
    exponent = value.as_tuple().exponent
    return number(value, -exponent if isinstance(exponent, int) and exponent < 0 else 0)


def duration(seconds: Decimal | Fraction | float | int | None) -> str:
    """Seconds as people read them, the two largest units: 128303 -> "1 d 11 h",
    4320 -> "1 h 12 min", 95 -> "1 min 35 s", 7.5 -> "7.5 s"; a negative duration
    (early) keeps its sign: -300 -> "−5 min"."""
    if seconds is None:
        return "–"
    value = _exact(seconds)
    sign = "−" if value < 0 else ""
    value = abs(value)
    if value < 60:
        shown = number(value, 0 if value == value.to_integral_value() else 1)
        return f"{sign}{shown} s"
    whole = int(value.to_integral_value(ROUND_HALF_EVEN))
    parts: list[str] = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count or parts:
            parts.append(f"{count} {unit}")
        if len(parts) == 2:
            break
    parts = [p for p in parts if not p.startswith("0 ")] or parts[:1]
    return sign + " ".join(parts)


def _exact(value: Decimal | Fraction | float | int) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, Fraction):
        with localcontext() as ctx:
            ctx.prec = 60
            return Decimal(value.numerator) / Decimal(value.denominator)
    if isinstance(value, float):
        return Decimal(repr(value))
    return Decimal(value)
