"""Event types, canonical encoding and JSON Schema export (imports nothing of the project).

The names below are imported when first read (PEP 562), so that a module of the package
(`schemas.errors`, `schemas.money`) is imported without building every event model: the
reconciliation reads the store without pydantic's models.
"""

from __future__ import annotations

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schemas.canonical import (
        NotCanonicalizable,
        Unstorable,
        canonical,
        canonical_event,
        event_document,
    )
    from schemas.events import (
        DATA_MODELS,
        ENVELOPES,
        FLEET_TYPES,
        CloudEvent,
        validate_event,
        validate_event_json,
    )
    from schemas.records import (
        Accepted,
        EventTooLarge,
        Origin,
        Record,
        Rejected,
        rejections,
        unstorable,
    )
    from schemas.times import format_utc

#: each lazily imported name -> the module that defines it
_HOME = {
    **dict.fromkeys(
        ("NotCanonicalizable", "Unstorable", "canonical", "canonical_event", "event_document"),
        "schemas.canonical",
    ),
    **dict.fromkeys(
        (
            "DATA_MODELS",
            "ENVELOPES",
            "FLEET_TYPES",
            "CloudEvent",
            "validate_event",
            "validate_event_json",
        ),
        "schemas.events",
    ),
    **dict.fromkeys(
        ("Accepted", "EventTooLarge", "Origin", "Record", "Rejected", "rejections", "unstorable"),
        "schemas.records",
    ),
    "format_utc": "schemas.times",
}


class _Package(ModuleType):
    """The package, whose name `canonical` stays the function when the module of the same
    name is imported (as it was when this file imported the function eagerly)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "canonical" and isinstance(value, ModuleType):
            value = value.canonical
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'schemas' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "DATA_MODELS",
    "ENVELOPES",
    "FLEET_TYPES",
    "Accepted",
    "CloudEvent",
    "EventTooLarge",
    "NotCanonicalizable",
    "Origin",
    "Record",
    "Rejected",
    "Unstorable",
    "canonical",
    "canonical_event",
    "event_document",
    "format_utc",
    "rejections",
    "unstorable",
    "validate_event",
    "validate_event_json",
]
