"""Event types, canonical encoding and JSON Schema export (imports nothing of the project).

The names below load on first use (PEP 562), so that a light module of this package
(`schemas.errors`, `schemas.display`) can be imported without pydantic: the command
line's `--help` must not pay for the event models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schemas.canonical import NotCanonicalizable, Unstorable, canonical, canonical_event, event_document
    from schemas.events import (
        DATA_MODELS,
        ENVELOPES,
        FLEET_TYPES,
        CloudEvent,
        validate_event,
        validate_event_json,
    )
    from schemas.records import Accepted, EventTooLarge, Origin, Record, Rejected, rejections, unstorable
    from schemas.types import format_utc

_HOMES = {
    "canonical": ["NotCanonicalizable", "Unstorable", "canonical", "canonical_event", "event_document"],
    "events": ["DATA_MODELS", "ENVELOPES", "FLEET_TYPES", "CloudEvent", "validate_event", "validate_event_json"],
    "records": ["Accepted", "EventTooLarge", "Origin", "Record", "Rejected", "rejections", "unstorable"],
    "types": ["format_utc"],
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "DATA_MODELS", "ENVELOPES", "FLEET_TYPES", "Accepted", "CloudEvent", "EventTooLarge", "NotCanonicalizable",
    "Origin", "Record", "Rejected", "Unstorable", "canonical", "canonical_event", "event_document", "format_utc",
    "rejections", "unstorable", "validate_event", "validate_event_json",
]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'schemas' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"schemas.{module}"), name)
    globals()[name] = value
    return value
