"""RFC 8785 (JCS) canonical JSON: sorted keys, no whitespace, UTF-8, ES6 numbers.

`canonical()` is the reference: it follows RFC 8785 §3.2 to the letter. `canonical_event()`
is the hot path: orjson with sorted keys gives the same bytes whenever no float appears and
no key holds a character outside the BMP (orjson sorts keys by UTF-8, JCS by UTF-16 code
units, and they agree on the BMP). Both properties are checked before orjson is trusted.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson
from pydantic import BaseModel

from schemas.events import CloudEvent
from schemas.types import MAX_SAFE_INT, format_money, format_utc

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class NotCanonicalizable(ValueError):
    """A value JSON cannot carry exactly (NaN, infinity, a non-JSON type)."""


def _string(text: str) -> str:
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


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        # I-JSON numbers are doubles; larger integers are written as the double they are.
        return str(value) if abs(value) <= MAX_SAFE_INT else es6_number(float(value))
    if isinstance(value, float):
        return es6_number(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, datetime):
        return _string(format_utc(value))
    if isinstance(value, Decimal):
        return _string(format_money(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise NotCanonicalizable(f"object key {key!r} is not a string")
        items = sorted(value.items(), key=lambda kv: _utf16_key(kv[0]))
        return "{" + ",".join(_string(k) + ":" + _encode(v) for k, v in items) + "}"
    raise NotCanonicalizable(f"{type(value).__name__} has no JSON form")


def canonical(value: Any) -> bytes:
    """The RFC 8785 bytes of a JSON value given as Python objects (the reference encoder)."""
    return _encode(value).encode("utf-8")


def _bmp_only(key: Any) -> bool:
    return isinstance(key, str) and (key.isascii() or all(ord(c) < 0x10000 for c in key))


def _orjson_safe(value: Any) -> bool:
    """True when orjson's sorted output is already JCS: no floats, big ints or astral keys."""
    if isinstance(value, dict):
        return all(_bmp_only(k) for k in value) and all(_orjson_safe(v) for v in value.values())
    if isinstance(value, list):
        return all(_orjson_safe(v) for v in value)
    if isinstance(value, float):
        return False
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) <= MAX_SAFE_INT
    return True


def fast_canonical(value: Any) -> bytes:
    """canonical(), through orjson when that is provably the same bytes."""
    if _orjson_safe(value):
        return orjson.dumps(value, default=_json_default, option=_ORJSON_OPTIONS)
    return canonical(value)


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

    Only unknown fields can hold floats or odd keys (declared fields are typed), so the
    safety walk runs only when some exist.
    """
    document = event_document(event)
    if event.__pydantic_extra__ or event.data.__pydantic_extra__:
        if not _orjson_safe(document):
            return canonical(document)
    return orjson.dumps(document, default=_json_default, option=_ORJSON_OPTIONS)
