"""Field types shared by the event models: UTC times, exact money, bounded counts.

Rules (docs/events.md, docs/canonical-and-bounds.md): times carry a zone (RFC 3339) and are
stored in UTC; money is a decimal string, never a float; counts are integers that survive
I-JSON (|n| < 2**53). Every bound below exists so that anything ingest accepts, every later
command can process (the store is append-only: a value no command can use would break them
for good); a value past one is a validation error, so the record goes to the quarantine
with its field and the bound it broke.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainSerializer,
    Strict,
    ValidationInfo,
    WithJsonSchema,
)

from schemas.times import as_utc as as_utc
from schemas.times import format_utc as format_utc

#: I-JSON (RFC 7493 §2.2): integers beyond ±(2**53 - 1) do not survive a double.
MAX_SAFE_INT = 2**53 - 1
#: GPUs in one allocation, job, promise or billing line (docs/events.md).
MAX_GPUS = 1_000_000
#: Nodes one allocation spans (`nodes`): a Slurm hostlist expanding past this is refused.
MAX_NODES = 100_000
#: Seconds in a duration (terms, notices): 100 years, longer than any span between two
#: accepted times, so in µs (× 10**6) it stays far inside DuckDB's BIGINT.
MAX_DURATION_S = 100 * 31_557_600
#: An event's canonical bytes (what the ledger stores and hashes).
MAX_EVENT_BYTES = 1 << 20
#: What the quarantine keeps of a rejected record: its first 64 KiB, with the SHA-256 and
#: the length of the whole (quarantine is evidence too: docs/evidence.md).
RECORD_HEAD = 64 << 10
#: The earliest accepted time, and how far past the ingest's own clock a time may be.
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
CLOCK_SKEW = timedelta(days=1)
#: Money the engine computes with (reconcile/engine/money.py: amount × GPU-µs × 10**4 must fit
#: 126 bits). An amount is below 10**7 in magnitude with at most 11 decimal places (real
#: FOCUS exports carry 11), so as an integer at the data's largest scale it is below 10**18;
#: a billing line bills at most 2,000,000 GPU-hours (7.2 × 10**15 GPU-µs); and
#: 10**18 × 7.2 × 10**15 × 10**4 = 7.2 × 10**37 < 2**126 ≈ 8.5 × 10**37.
AMOUNT_WHOLE_DIGITS = 7
AMOUNT_DECIMAL_PLACES = 11
MAX_LINE_GPU_SECONDS = 2_000_000 * 3600

_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_RFC3339_PREFIX = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")
_RFC3339_ZONE = re.compile(r"(?:[Zz]|[+-]\d{2}:\d{2})$")

#: Validation context keys: the ingest's clock, and whether a parser may hand over a time
#: with no zone (it then means UTC; see `validate_event`).
NOW = "now"
NAIVE_IS_UTC = "naive_is_utc"


def _context(info: ValidationInfo) -> dict[str, Any]:
    return info.context if isinstance(info.context, dict) else {}


def rfc3339_only(value: Any, info: ValidationInfo) -> Any:
    """Refuse what pydantic's lax parser would guess at (bare numbers, dates with no time)
    and, unless the caller allows it, a time with no zone: RFC 3339 requires one."""
    zone_optional = bool(_context(info).get(NAIVE_IS_UTC))
    if isinstance(value, datetime):
        if value.tzinfo is None and not zone_optional:
            raise ValueError(
                f"a time with no zone: {value.isoformat()} (RFC 3339 requires Z or an offset)"
            )
        return value
    if isinstance(value, str) and _RFC3339_PREFIX.match(value):
        if not zone_optional and not _RFC3339_ZONE.search(value):
            raise ValueError(f"a time with no zone: {value!r} (RFC 3339 requires Z or an offset)")
        return value
    raise ValueError(f"not an RFC 3339 date-time: {value!r}")


def ingest_clock(info: ValidationInfo) -> datetime:
    """The ingest's own clock: the context's `now`, else the machine's."""
    now = _context(info).get(NOW)
    return as_utc(now) if isinstance(now, datetime) else datetime.now(timezone.utc)


def not_before_1970(moment: datetime) -> datetime:
    if moment < EARLIEST:
        raise ValueError(f"{format_utc(moment)} is before 1970-01-01T00:00:00Z")
    return moment


def within_clock(moment: datetime, info: ValidationInfo) -> datetime:
    """A time that happened: not before 1970, not after the ingest's clock plus one day
    (a later one would make every pending promise look missed, for good)."""
    latest = ingest_clock(info) + CLOCK_SKEW
    if moment > latest:
        raise ValueError(
            f"{format_utc(moment)} is after the ingest clock plus one day ({format_utc(latest)})"
        )
    return not_before_1970(moment)


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
    raise ValueError(f"not a decimal string: {_preview(value)}")


def computable_amount(amount: Decimal) -> Decimal:
    """An amount the engine computes exactly (see AMOUNT_WHOLE_DIGITS)."""
    places = max(0, -int(amount.as_tuple().exponent))
    if places > AMOUNT_DECIMAL_PLACES:
        raise ValueError(
            f"{places} decimal places; the engine computes exactly with at most "
            f"{AMOUNT_DECIMAL_PLACES}"
        )
    if abs(amount) >= Decimal(10) ** AMOUNT_WHOLE_DIGITS:
        raise ValueError(
            f"{_preview(amount)} is not below 10^{AMOUNT_WHOLE_DIGITS} in magnitude, "
            "the largest amount the engine computes exactly (split the charge into lines)"
        )
    return amount


def format_money(amount: Decimal) -> str:
    """Fixed-point text, never an exponent, scale kept ("12.3400" stays "12.3400")."""
    return format(amount, "f")


def _preview(value: Any) -> str:
    text = repr(value) if not isinstance(value, Decimal) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


_MONEY_SCHEMA = {"type": "string", "pattern": r"^[+-]?(\d+(\.\d*)?|\.\d+)$"}
_AMOUNT_SCHEMA = {"type": "string", "pattern": r"^[+-]?0*(\d{1,7}(\.\d{0,11})?|\.\d{1,11})$"}

#: An RFC 3339 string with a zone, or an aware datetime; never a bare number or a date alone.
UtcTime = Annotated[
    datetime, BeforeValidator(rfc3339_only), AfterValidator(as_utc), AfterValidator(within_clock)
]
#: A promised time: it may lie ahead of the clock, but not before 1970.
Deadline = Annotated[
    datetime,
    BeforeValidator(rfc3339_only),
    AfterValidator(as_utc),
    AfterValidator(not_before_1970),
]
Money = Annotated[
    Decimal,
    BeforeValidator(parse_money),
    PlainSerializer(format_money, return_type=str, when_used="json"),
    WithJsonSchema(_MONEY_SCHEMA),
]
#: Money the engine computes with: a billing line's amount.
Amount = Annotated[Money, AfterValidator(computable_amount), WithJsonSchema(_AMOUNT_SCHEMA)]


def unit_share(value: Decimal) -> Decimal:
    """A share in [0, 1] (placement_credit_share), with at most AMOUNT_DECIMAL_PLACES places."""
    if not 0 <= value <= 1:
        raise ValueError(f"{_preview(value)} is not a share in [0, 1]")
    places = max(0, -int(value.as_tuple().exponent))
    if places > AMOUNT_DECIMAL_PLACES:
        raise ValueError(
            f"{places} decimal places; the engine computes exactly with at most "
            f"{AMOUNT_DECIMAL_PLACES}"
        )
    return value


_SHARE_SCHEMA = {
    "type": "string",
    "pattern": r"^\+?0*(1(\.0*)?|0?\.\d{1,11}|0(\.\d{0,11})?)$",
}
#: A share in [0, 1] as a decimal string (placement_credit_share): "0", "0.5", "1".
Share = Annotated[
    Decimal,
    BeforeValidator(parse_money),
    AfterValidator(unit_share),
    PlainSerializer(format_money, return_type=str, when_used="json"),
    WithJsonSchema(_SHARE_SCHEMA),
]
SafeInt = Annotated[int, Strict(), Field(ge=-MAX_SAFE_INT, le=MAX_SAFE_INT)]
Count = Annotated[int, Strict(), Field(ge=0, le=MAX_SAFE_INT)]
PositiveCount = Annotated[int, Strict(), Field(ge=1, le=MAX_SAFE_INT)]
GpuCount = Annotated[int, Strict(), Field(ge=0, le=MAX_GPUS)]
PositiveGpuCount = Annotated[int, Strict(), Field(ge=1, le=MAX_GPUS)]
Seconds = Annotated[int, Strict(), Field(ge=0, le=MAX_DURATION_S)]
Name = Annotated[str, Strict(), Field(min_length=1)]
#: The nodes of one allocation: at most MAX_NODES names.
NodeNames = Annotated[list[Name], Field(max_length=MAX_NODES)]
Currency = Annotated[str, Strict(), Field(pattern=r"^[A-Z]{3}$")]
