"""What an ingestor hands to the ledger: accepted events and rejected records, each with
the place it was read from (file, line, byte offset), from the moment it is read."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import ValidationError

from schemas.canonical import Unstorable, canonical_event
from schemas.events import CloudEvent
from schemas.types import MAX_EVENT_BYTES
from schemas.types import RECORD_HEAD as RECORD_HEAD

# Records are named tuples, not dataclasses: a large file's records are made again in the
# appending process from what the parsing process sends (ingest/worker.py), and a frozen
# dataclass's __init__ (a setattr a field) cost it 1.2 µs a record, a tuple a third of it.


class Origin(NamedTuple):
    file: str
    line: int
    offset: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class Accepted(NamedTuple):
    """A validated event in canonical bytes, with what the ledger indexes it by."""

    source: str
    id: str
    type: str
    tenant: str | None
    body: bytes
    origin: Origin

    @classmethod
    def of(cls, event: CloudEvent, origin: Origin) -> Accepted:
        """Raises Unstorable for an event JSON cannot carry exactly or one over 1 MiB."""
        body = canonical_event(event)
        if len(body) > MAX_EVENT_BYTES:
            raise EventTooLarge(
                f"the event is {len(body):,} bytes in canonical form, over the limit of "
                f"{MAX_EVENT_BYTES:,} (1 MiB)"
            )
        for name, value in (
            ("source", event.source),
            ("id", event.id),
            ("data.tenant", event.tenant),
        ):
            _storable_column(name, value)
        return cls(event.source, event.id, event.type, event.tenant, body, origin)


def _storable_column(name: str, value: str | None) -> None:
    """Raises Unstorable for a value its own column cannot hold on every backend: a NUL,
    which PostgreSQL's text refuses (the canonical body escapes it, these columns cannot),
    so that a record holding one is quarantined on both backends, never a failed batch."""
    if value is not None and "\x00" in value:
        column = name.split(".")[-1]
        raise Unstorable(
            f"holds a NUL character (\\u0000), which the ledger's {column} column "
            "cannot store on every backend",
            tuple(name.split(".")),
        )


class EventTooLarge(Unstorable):
    """An event whose canonical bytes pass MAX_EVENT_BYTES."""


class Rejected(NamedTuple):
    """A record that did not parse or validate, for the quarantine: `record` is the whole
    record, or, when a reader would not hold it whole (a line of hundreds of MB), only its
    first RECORD_HEAD bytes, with `digest` (SHA-256) and `length` of the whole given."""

    origin: Origin
    field: str
    reason: str
    record: bytes
    digest: bytes | None = None
    length: int | None = None

    def __str__(self) -> str:
        return f"{self.origin}: {self.field}: {self.reason}"


Record = Accepted | Rejected


#: The member names pydantic adds to a location inside a `str | int` field (`device`,
#: `devices[i]`): they name the type tried, not a place, so a field path leaves them out.
_MEMBER_TAGS = frozenset({"str", "int", "constrained-str", "constrained-int"})


def field_path(loc: tuple[str | int, ...]) -> str:
    """`data.gpus`, `data.devices[2]`; the union tag pydantic puts first is dropped, and
    so are the member names of a union field."""
    steps = list(loc)
    if steps and "." in str(steps[0]):  # the discriminator value, e.g. 'billing.line'
        steps = steps[1:]
    while len(steps) > 1 and steps[-1] in _MEMBER_TAGS:
        steps.pop()
    text = ""
    for step in steps:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text or "(record)"


def rejections(error: ValidationError, origin: Origin, record: bytes) -> Rejected:
    """One Rejected for a ValidationError: the first error's field, all errors' reasons."""
    errors = error.errors(include_url=False)
    first = errors[0]
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        field, reason = "type", _tag_reason(first)
    else:
        field, reason = field_path(tuple(first["loc"])), _message(first["msg"])
    if len(errors) > 1:
        reason += (
            f" (and {len(errors) - 1} more: "
            + "; ".join(
                f"{field_path(tuple(e['loc']))}: {_message(e['msg'])}" for e in errors[1:4]
            )
            + ")"
        )
    return Rejected(origin, field, reason, record)


def unstorable(error: Unstorable, origin: Origin, record: bytes) -> Rejected:
    """The Rejected for an event that validated but must not be stored."""
    return Rejected(origin, error.field, error.reason, record)


def _tag_reason(error: object) -> str:
    ctx = getattr(error, "get", lambda *_: None)("ctx") or {}
    tag = ctx.get("tag")
    return f"unknown event type {tag!r}" if tag else "missing event type"


def _message(msg: str) -> str:
    return msg.removeprefix("Value error, ")
