"""Reading the fields of a Kubernetes object parsed from JSON or YAML: each accessor names
the field path it was asked for, so a bad value is reported as
`status.conditions[1].lastTransitionTime: not an RFC 3339 time: '…'`."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from schemas import format_utc
from schemas.errors import BadInput

FieldPath = tuple[str | int, ...]

_RFC3339 = re.compile(
    r"(?P<base>\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2})(?P<fraction>\.\d+)?(?P<zone>[Zz]|"
    r"[+-]\d{2}:\d{2})?"
)


class ObjectError(BadInput, ValueError):
    """A field of one object is missing or wrong."""

    def __init__(self, path: FieldPath, reason: str) -> None:
        super().__init__(f"{dotted(path)}: {reason}")
        self.path, self.reason = path, reason


def dotted(path: FieldPath) -> str:
    """`status.conditions[1].lastTransitionTime`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(object)"


def field(obj: dict[str, Any], path: FieldPath) -> Any:
    """The value at `path`, or None where any step is missing or null."""
    value: Any = obj
    for part in path:
        if isinstance(part, int):
            value = value[part] if isinstance(value, list) and 0 <= part < len(value) else None
        else:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return None
    return value


def text(obj: dict[str, Any], path: FieldPath, required: bool = False) -> str | None:
    value = field(obj, path)
    if value is None or value == "":
        if required:
            raise ObjectError(path, "missing")
        return None
    if not isinstance(value, str):
        raise ObjectError(path, f"expected a string, found {json_type(value)} {value!r}")
    return value


def mapping(obj: dict[str, Any], path: FieldPath) -> dict[str, Any]:
    value = field(obj, path)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ObjectError(path, f"expected an object, found {json_type(value)}")
    return value


def sequence(obj: dict[str, Any], path: FieldPath) -> list[Any]:
    value = field(obj, path)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ObjectError(path, f"expected a list, found {json_type(value)}")
    return value


def integer(obj: dict[str, Any], path: FieldPath) -> int | None:
    value = field(obj, path)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ObjectError(path, f"expected an integer, found {json_type(value)} {value!r}")
    return value


def utc_time(obj: dict[str, Any], path: FieldPath, required: bool = True) -> str | None:
    """An RFC 3339 time (`metav1.Time` or `MicroTime`) as UTC text."""
    value = text(obj, path, required)
    if value is None:
        return None
    match = _RFC3339.fullmatch(value)
    try:
        if match is None:
            raise ValueError(value)
        moment = datetime.fromisoformat(
            match["base"] + (match["fraction"] or "")[:7] + _zone(match["zone"])
        )
    except ValueError:
        raise ObjectError(path, f"not an RFC 3339 time: {value!r}") from None
    return format_utc(moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc))


def _zone(zone: str | None) -> str:
    return "+00:00" if zone is None or zone in ("Z", "z") else zone


def tenant(
    obj: dict[str, Any],
    namespace_path: FieldPath,
    tenant_field: str | None,
    default: str | None = None,
) -> str:
    """The label `tenant_field` when the object carries it, else the namespace, else the
    `default` given (the ingest's tenant option, for a source that names none)."""
    if tenant_field:
        label = text(obj, ("metadata", "labels", tenant_field))
        if label:
            return label
    name = text(obj, namespace_path, required=default is None) or default
    assert name is not None
    return name


def json_type(value: Any) -> str:
    names = {
        bool: "boolean",
        int: "number",
        float: "number",
        str: "string",
        list: "list",
        dict: "object",
    }
    return names.get(type(value), type(value).__name__)


__all__ = [
    "FieldPath",
    "ObjectError",
    "dotted",
    "field",
    "integer",
    "json_type",
    "mapping",
    "sequence",
    "tenant",
    "text",
    "utc_time",
]
