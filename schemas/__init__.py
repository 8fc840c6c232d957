"""Event types, canonical encoding and JSON Schema export (imports nothing of the project)."""

from schemas.canonical import canonical, canonical_event, event_document
from schemas.events import (
    DATA_MODELS,
    ENVELOPES,
    FLEET_TYPES,
    CloudEvent,
    validate_event,
    validate_event_json,
)
from schemas.records import Accepted, Origin, Record, Rejected, rejections
from schemas.types import format_utc

__all__ = [
    "DATA_MODELS", "ENVELOPES", "FLEET_TYPES", "Accepted", "CloudEvent", "Origin", "Record",
    "Rejected", "canonical", "canonical_event", "event_document", "format_utc",
    "rejections", "validate_event", "validate_event_json",
]
