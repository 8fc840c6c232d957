"""Money as gpuledger prints it: one exact amount in one currency, at the currency's
minor unit (RULES.md §Money).

`Money` is an exact Decimal with its currency and minor unit (ISO 4217: 2 places unless
`MINOR_UNITS` says otherwise). It is made from integer minor units (cents), or from an
exact fraction of them, rounded half-even; `str(money)` is the text every JSON document
carries ("1234.50": exactly `minor` places, no grouping), and `grouped()` the same figure
with thousands separated, as finance's tables and pages show it ("1,234.50")."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction

#: ISO 4217 minor units that are not 2.
MINOR_UNITS = {
    "BHD": 3,
    "BIF": 0,
    "CLP": 0,
    "DJF": 0,
    "GNF": 0,
    "IQD": 3,
    "ISK": 0,
    "JOD": 3,
    "JPY": 0,
    "KMF": 0,
    "KRW": 0,
    "KWD": 3,
    "LYD": 3,
    "OMR": 3,
    "PYG": 0,
    "RWF": 0,
    "TND": 3,
    "UGX": 0,
    "UYI": 0,
    "VND": 0,
    "VUV": 0,
    "XAF": 0,
    "XOF": 0,
    "XPF": 0,
    "CLF": 4,
    "UYW": 4,
}


def minor_unit(currency: str | None) -> int:
    """The decimal places of `currency`'s minor unit (2 for a currency not listed, or none)."""
    return MINOR_UNITS.get(currency or "", 2)


@dataclass(frozen=True)
class Money:
    """An exact amount, its currency (None when the source named none) and minor unit."""

    amount: Decimal
    currency: str | None = None
    minor: int = 2

    @classmethod
    def of(
        cls, units: int | Fraction, minor: int | None = None, currency: str | None = None
    ) -> Money:
        """`units` of the minor unit (cents), exactly; a Fraction of them is rounded
        half-even to a whole one. `minor` defaults to the currency's."""
        places = minor_unit(currency) if minor is None else minor
        whole = round(units) if isinstance(units, Fraction) else int(units)  # Fraction: half-even
        # written as text: a scaleb would round to the default context's 28 digits
        return cls(Decimal(f"{whole}E-{places}"), currency, places)

    def __str__(self) -> str:
        """Decimal text with exactly `minor` places: what JSON documents carry."""
        return format(self.amount, f".{self.minor}f")

    def grouped(self) -> str:
        """Thousands separated, `minor` places, rounded half-even: what pages show."""
        with localcontext() as ctx:
            ctx.prec = 100  # an exact amount may have 38 digits and more places
            exact = self.amount.quantize(Decimal(1).scaleb(-self.minor), ROUND_HALF_EVEN)
            return format(exact, f",.{self.minor}f")
