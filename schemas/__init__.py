"""Event types, canonical encoding and JSON Schema export (imports nothing of the project)."""

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
from schemas.types import format_utc

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
