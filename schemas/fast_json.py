"""JSON text written by orjson, byte for byte as `json.dumps` writes it in the styles the
documents use (`Document.JSON_STYLE`), and by `json.dumps` itself where they would differ.

orjson writes a month's reconciliation (tens of MB) about ten times faster than `json`.
Where their texts differ, and how each is handled:

- `ensure_ascii` (json's default): orjson writes UTF-8; every character past `~` in its
  text is inside a string (JSON's syntax is ASCII), and is escaped here as json escapes it
  (`\\u00e9`, a surrogate pair past U+FFFF, DEL as `\\u007f`).
- numbers below 1e-4 in magnitude: json writes `1e-05` and `5e-08`, orjson `0.00001` and
  `5e-8`; any text with `0.0000` or such an exponent in it (a rare number, or a string that
  looks like one) is written by json.
- what orjson refuses (an integer past 64 bits, a key that is not a string, a lone
  surrogate): written by json.
- styles other than `indent=2` and compact `separators=(",", ":")`: written by json.

NaN and infinities are never in a document (json would write `NaN`, which no JSON reader
takes; orjson `null`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_PAST_ASCII = re.compile(r"[^\x00-\x7e]")
#: where orjson writes a small number otherwise than json: `0.00001` (json `1e-05`) and a
#: one-digit negative exponent (`5e-8`, json `5e-08`); a string that looks so is harmless
_SMALL = re.compile(rb"0\.0000|[0-9]e-[0-9](?![0-9])")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code > 0xFFFF:
        code -= 0x10000
        return "\\u%04x\\u%04x" % (0xD800 | (code >> 10), 0xDC00 | (code & 0x3FF))
    return "\\u%04x" % code


def _option(style: dict[str, Any]) -> int | None:
    """orjson's option for a json.dumps style it can write, else None."""
    rest = {k: v for k, v in style.items() if k != "ensure_ascii"}
    if rest == {"indent": 2}:
        return orjson.OPT_INDENT_2
    if rest == {"separators": (",", ":")}:
        return 0
    return None


def dumps(value: Any, **style: Any) -> str:
    """`json.dumps(value, **style)`, the same text, by orjson where it can."""
    option = _option(style)
    if option is None:
        return json.dumps(value, **style)
    try:
        data = orjson.dumps(value, option=option)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, **style)
    if _SMALL.search(data):
        return json.dumps(value, **style)
    text = data.decode()
    if style.get("ensure_ascii", True) and (not text.isascii() or "\x7f" in text):
        text = _PAST_ASCII.sub(_escape, text)
    return text
