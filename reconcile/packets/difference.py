"""Where a packet's claimed figures first depart from the ones the verifier recomputed,
with both values: `findings.lines[0] (line L-1).categories.productive.amount: the packet
says "6.00", recomputed "4.00"`. The packet's shape is the dispute-packet model's to check
(schemas/documents/dispute.py); this compares two JSON values of that shape."""

from __future__ import annotations

from typing import Any

from schemas.documents.base import show


def first_difference(claimed: Any, actual: Any, path: str) -> str | None:
    """Where the packet's `claimed` value first departs from the `actual` one, and both values."""
    if isinstance(actual, dict):
        if not isinstance(claimed, dict):
            return f"{path}: the packet says {show(claimed)}, recomputed {show(actual)}"
        if claimed.keys() != actual.keys():
            missing = ", ".join(k for k in actual if k not in claimed) or "none"
            extra = ", ".join(k for k in claimed if k not in actual) or "none"
            return f"{path}: missing from the packet: {missing}; not recomputed: {extra}"
        for key, value in actual.items():
            found = first_difference(claimed[key], value, f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(actual, list):
        if not isinstance(claimed, list) or len(claimed) != len(actual):
            count = f"{len(claimed)} items" if isinstance(claimed, list) else show(claimed)
            return f"{path}: the packet has {count}, recomputed {len(actual)} items"
        for i, (mine, theirs) in enumerate(zip(claimed, actual)):
            label = (
                f" (line {theirs['line_id']})"
                if isinstance(theirs, dict) and "line_id" in theirs
                else ""
            )
            found = first_difference(mine, theirs, f"{path}[{i}]{label}")
            if found is not None:
                return found
        return None
    if _same_scalar(claimed, actual):
        return None
    return f"{path}: the packet says {show(claimed)}, recomputed {show(actual)}"


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)
