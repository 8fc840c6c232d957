"""Reading JSON that a verifier cannot trust: each field checked for its type where it is
read, with its place in the error (`packet.bundle.entries[3].seq: expected an integer,
got a string`), and the first place two JSON values differ, with both values."""

from __future__ import annotations

import json
from typing import Any

from schemas.errors import CheckFailed

_MAX_INT = 2**53  # the ledger's integers stay below this (canonical JSON, ledger.hashing)


class PacketError(CheckFailed, ValueError):
    """A packet that does not verify; the message (one line) says which check failed."""

    def __init__(self, message: str) -> None:
        # one line, and printable whatever the packet's strings hold (lone surrogates too)
        one_line = " ".join(message.splitlines())
        super().__init__(one_line.encode("utf-8", "backslashreplace").decode("utf-8"))


def typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise PacketError(f"{where}: expected {_kind_name(kind)}, got {_json_type(value)}")
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < _MAX_INT:
        raise PacketError(f"{where}: {value} is out of range [0, 2^53)")
    return value


def member(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise PacketError(f"{where}.{key}: missing")
    return typed(obj[key], kind, f"{where}.{key}")


def no_other_members(obj: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    """Nothing in a packet goes unchecked: a member the format does not define is refused."""
    for name in obj:
        if name not in known:
            raise PacketError(f"{where}.{show(name)[1:-1]}: not a member of this format")


def hex_string(value: Any, where: str) -> None:
    text = typed(value, str, where)
    try:
        bytes.fromhex(text)
    except ValueError:
        raise PacketError(f"{where}: not hex: {show(text)}") from None


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {dict: "an object", list: "an array", str: "a string", int: "an integer", type(None): "null"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _json_type(value: Any) -> str:
    for kind, name in ((bool, "a boolean"), (dict, "an object"), (list, "an array"), (str, "a string"),
                       (int, "an integer"), (float, "a number"), (type(None), "null")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"


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
            label = f" (line {theirs['line_id']})" if isinstance(theirs, dict) and "line_id" in theirs else ""
            found = first_difference(mine, theirs, f"{path}[{i}]{label}")
            if found is not None:
                return found
        return None
    return None if _same_scalar(claimed, actual) else f"{path}: the packet says {show(claimed)}, recomputed {show(actual)}"


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)
