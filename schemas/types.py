"""Field types shared by the event models: UTC times, exact money, bounded counts.

Rules (DESIGN.md §2): times are UTC, an input time with no zone is UTC and one with an
offset is converted; money is a decimal string, never a float; counts are integers that
survive I-JSON (|n| < 2**53).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer, Strict, WithJsonSchema

MAX_SAFE_INT = 2**53 - 1

_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_RFC3339_PREFIX = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def rfc3339_only(value: Any) -> Any:
    """Refuse what pydantic's lax parser would guess at: bare numbers, dates with no time."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and _RFC3339_PREFIX.match(value):
        return value
    raise ValueError(f"not an RFC 3339 date-time: {value!r}")


def as_utc(moment: datetime) -> datetime:
    """The same instant in UTC; a naive time is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    if moment.tzinfo is timezone.utc:
        return moment
    return moment.astimezone(timezone.utc)


def format_utc(moment: datetime) -> str:
    """The one text form of a time: `YYYY-MM-DDTHH:MM:SSZ`, or `...SS.ffffffZ` when the
    microseconds are not zero (byte for byte what orjson writes with OPT_UTC_Z)."""
    moment = as_utc(moment)
    text = moment.replace(tzinfo=None).isoformat(timespec="microseconds" if moment.microsecond else "seconds")
    return text + "Z"


def parse_money(value: Any) -> Decimal:
    """A decimal string (or an integer) as an exact Decimal; floats are refused."""
    if isinstance(value, (bool, float)):
        raise ValueError(f"money must be a decimal string, not a float: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, Decimal) and value.is_finite():
        return value
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        try:
            return Decimal(value.strip())
        except InvalidOperation:
            pass
    raise ValueError(f"not a decimal string: {value!r}")


def format_money(amount: Decimal) -> str:
    """Fixed-point text, never an exponent, scale kept ("12.3400" stays "12.3400")."""
    return format(amount, "f")


#: An RFC 3339 string or a datetime; never a bare number or a date alone.
UtcTime = Annotated[datetime, BeforeValidator(rfc3339_only), AfterValidator(as_utc)]
Money = Annotated[
    Decimal,
    BeforeValidator(parse_money),
    PlainSerializer(format_money, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": r"^[+-]?(\d+(\.\d*)?|\.\d+)$"}),
]
Count = Annotated[int, Strict(), Field(ge=0, le=MAX_SAFE_INT)]
PositiveCount = Annotated[int, Strict(), Field(ge=1, le=MAX_SAFE_INT)]
Name = Annotated[str, Strict(), Field(min_length=1)]
Currency = Annotated[str, Strict(), Field(pattern=r"^[A-Z]{3}$")]
