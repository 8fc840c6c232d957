"""RFC 8785 (JCS) canonical JSON: sorted keys, no whitespace, UTF-8, ES6 numbers.

One encoder, two speeds, the same bytes. `canonical()` is the reference: RFC 8785 §3.2 to
the letter. What JSON cannot carry exactly it refuses, on every path, with
`NotCanonicalizable` and the path to the value, so ingest quarantines the record:
- an integer that RFC 8785 would change. I-JSON (RFC 7493 §2.2) numbers are doubles, and
  RFC 8785 writes an integer beyond ±(2**53 - 1) as the nearest double (2**64 as
  18446744073709552000): stored bytes naming another number than the source gave.
  Evidence must not change a value, so such an integer is refused (a source with them
  sends them as strings, RFC 8785 Appendix D); one that a double holds exactly below
  10**21 (2**53, 10**20) is written as its digits, as RFC 8785 would. The event models
  bound their own integers to ±(2**53 - 1);
- a NaN or infinite float, a string with a lone surrogate (not Unicode: RFC 7493 §2.1);
- a time with no zone (it names no instant), a Decimal that is not finite, any other type.
Times are written in UTC (`format_utc`), Decimals as fixed-point strings (`format_money`).

`fast_canonical()` gives the same bytes or the same refusal: one walk decides whether
orjson's sorted output is already JCS (no float, every integer safe, every time in UTC,
every key in the BMP: orjson sorts keys by UTF-8 and JCS by UTF-16 code units, which agree
on the BMP); anything else, and anything orjson refuses, goes to the reference.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import orjson
from pydantic import BaseModel

from schemas.errors import BadInput
from schemas.events import CloudEvent
from schemas.types import MAX_SAFE_INT, format_money, format_utc

_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
Path = tuple[str | int, ...]
_ES6_PLAIN_BITS = 70  # 10**21 < 2**70: past it ES6 writes an exponent, never an integer's digits


class Unstorable(BadInput, ValueError):
    """An event the ledger must not store; `path` leads to the value (keys, list indices)."""

    def __init__(self, reason: str, path: Path = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path

    @property
    def field(self) -> str:
        """`data.devices[2]`, as a quarantine row names a field; `(record)` for the whole."""
        text = ""
        for step in self.path:
            text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
        return text or "(record)"

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}" if self.path else self.reason


class NotCanonicalizable(Unstorable):
    """A value JSON cannot carry exactly (see the module docstring)."""

    def inside(self, step: str | int) -> NotCanonicalizable:
        return NotCanonicalizable(self.reason, (step, *self.path))


def _string(text: str) -> str:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise NotCanonicalizable(
                "a lone surrogate: not Unicode text (RFC 7493 §2.1)"
            ) from None
    out = []
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def es6_number(value: float) -> str:
    """ECMAScript Number.prototype.toString for a finite double (RFC 8785 §3.2.2.3)."""
    if value != value or value in (float("inf"), float("-inf")):
        raise NotCanonicalizable(f"{value!r} has no JSON form")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr() gives the shortest digits that round-trip, as ES6 requires.
    _, digit_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    k = len(digits)
    n = int(exponent) + k
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        body = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + body


def _integer(value: int) -> str:
    """Its digits, when RFC 8785 writes exactly those (the double nearest it is it, and
    below 10**21 the ES6 form has no exponent); else refused: RFC 8785 would store another
    number. So canonical output always reads back to itself."""
    if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
        return str(int(value))
    if value.bit_length() <= _ES6_PLAIN_BITS:
        digits = str(int(value))
        if es6_number(float(value)) == digits:
            return digits
    raise NotCanonicalizable(
        f"an integer of {value.bit_length()} bits that a double does not hold exactly "
        "(I-JSON, RFC 7493 §2.2): RFC 8785 would write another number; send it as a string"
    )


def _time(moment: datetime) -> str:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise NotCanonicalizable(f"a time with no zone names no instant: {moment.isoformat()}")
    return _string(format_utc(moment))


def _money(amount: Decimal) -> str:
    if not amount.is_finite():
        raise NotCanonicalizable(f"the decimal {amount} has no JSON form")
    return _string(format_money(amount))


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _array(items: list[Any] | tuple[Any, ...]) -> str:
    parts = []
    for index, item in enumerate(items):
        try:
            parts.append(_encode(item))
        except NotCanonicalizable as exc:
            raise exc.inside(index) from None
    return "[" + ",".join(parts) + "]"


def _object(members: dict[Any, Any]) -> str:
    for key in members:
        if not isinstance(key, str):
            raise NotCanonicalizable(f"an object key of type {type(key).__name__}, not a string")
    parts = []
    for key, item in sorted(members.items(), key=lambda kv: _utf16_key(kv[0])):
        try:
            parts.append(_string(key) + ":" + _encode(item))
        except NotCanonicalizable as exc:
            raise exc.inside(key) from None
    return "{" + ",".join(parts) + "}"


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        return es6_number(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, datetime):
        return _time(value)
    if isinstance(value, Decimal):
        return _money(value)
    if isinstance(value, (list, tuple)):
        return _array(value)
    if isinstance(value, dict):
        return _object(value)
    raise NotCanonicalizable(f"{type(value).__name__} has no JSON form")


def canonical(value: Any) -> bytes:
    """The RFC 8785 bytes of a JSON value given as Python objects (the reference encoder)."""
    try:
        return _encode(value).encode("utf-8")
    except RecursionError:
        raise NotCanonicalizable("nested too deeply to encode") from None


def _bmp_only(key: str) -> bool:
    return key.isascii() or all(ord(c) < 0x10000 for c in key)


def _orjson_safe(value: Any) -> bool:
    """True when orjson's sorted output is this value's JCS bytes (exact types only: a
    subclass may serialise otherwise, so the reference takes it)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-MAX_SAFE_INT <= value <= MAX_SAFE_INT)
    if kind is dict:
        return all(type(k) is str and _bmp_only(k) for k in value) and all(
            _orjson_safe(v) for v in value.values()
        )
    if kind is list or kind is tuple:
        return all(_orjson_safe(v) for v in value)
    if kind is datetime:
        return value.tzinfo is timezone.utc
    if kind is Decimal:
        return bool(value.is_finite())
    return False  # floats (ES6 form), and what only the reference can judge


def _dump(value: Any) -> bytes:
    """orjson's bytes for a value known to be safe; what it still refuses (a lone
    surrogate) goes to the reference, which says where."""
    try:
        return orjson.dumps(value, default=_json_default, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return canonical(value)


def fast_canonical(value: Any) -> bytes:
    """canonical(), through orjson when that is provably the same bytes."""
    try:
        safe = _orjson_safe(value)
    except RecursionError:
        safe = False
    return _dump(value) if safe else canonical(value)


def _json_default(value: Any) -> str:
    if isinstance(value, Decimal):
        return format_money(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z


def _present(model: BaseModel) -> dict[str, Any]:
    """Declared fields that are set (nulls dropped), then unknown fields as they came."""
    fields = {k: v for k, v in model.__dict__.items() if v is not None}
    if model.__pydantic_extra__:
        fields.update(model.__pydantic_extra__)
    return fields


def event_document(event: CloudEvent) -> dict[str, Any]:
    """The JSON document of a validated event (times and money still typed)."""
    document = _present(event)
    document["data"] = _present(event.data)
    return document


def canonical_event(event: CloudEvent) -> bytes:
    """The canonical bytes of a validated event: what the ledger stores and hashes.

    Declared fields are typed so that orjson writes them as JCS does (integers within
    ±(2**53 - 1), times in UTC, money as Decimal), so the walk runs only when unknown
    fields exist; tests/test_canonical.py checks both claims against the reference."""
    document = event_document(event)
    if event.__pydantic_extra__ or event.data.__pydantic_extra__:
        return fast_canonical(document)
    return _dump(document)
