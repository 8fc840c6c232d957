"""CloudEvents over HTTP (the HTTP protocol binding, structured and batch modes): the
events one POST carries, read as the same records a file of them gives.

- Structured mode: `Content-Type: application/cloudevents+json`, the body one event.
- Batch mode: `Content-Type: application/cloudevents-batch+json`, the body a JSON array.

Each event is read by the CloudEvents file reader (ingest/cloudevents.py), so identity,
bounds and quarantine are a file's; the owner's rights (schemas/owners.py) apply as for a
file; and a collector writes only under its own source: an event whose `source` is
neither the collector's nor under it (`SOURCE/…`) is refused into the quarantine, naming
`source`. Origins read `<name>:<n>`, n the event's place in the body from 1.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Literal

from ingest.base import MAX_LINE_BYTES, LongLine
from ingest.cloudevents import _event
from ingest.jsonarray import MalformedArray, iter_array
from schemas import Accepted, Origin, Record, Rejected
from schemas.errors import BadInput
from schemas.owners import Owner, owned

STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
Mode = Literal["structured", "batch"]


class UnsupportedMediaType(BadInput):
    """A body in neither of the CloudEvents JSON modes this endpoint reads."""


class MalformedBatch(BadInput):
    """A batch-mode body that is not one JSON array."""


def mode_of(content_type: str | None) -> Mode:
    """The binding mode a Content-Type names (its parameters, e.g. charset, ignored)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == STRUCTURED:
        return "structured"
    if media == BATCH:
        return "batch"
    raise UnsupportedMediaType(
        f"expected {STRUCTURED} or {BATCH}, found {media or 'none'!r}", option="Content-Type"
    )


def records_of_body(
    body: bytes, mode: Mode, name: str, owner: Owner, source: str | None
) -> list[Record]:
    """Every event of the body as a record, refused ones as rejections (for the quarantine)."""
    records = _batch(body, name) if mode == "batch" else [_structured(body, name)]
    return list(_within_source(owned(records, owner), source))


def _structured(body: bytes, name: str) -> Record:
    origin = Origin(name, 1)
    if len(body) > MAX_LINE_BYTES:
        return LongLine.of(body).rejected(origin)
    return _event(body.strip(), origin)


def _batch(body: bytes, name: str) -> list[Record]:
    """The array's events, numbered by place. A body that is no JSON array is refused
    whole (the collector still holds it): nothing of it is appended."""
    records: list[Record] = []
    try:
        for n, element in enumerate(iter_array(io.BytesIO(body)), start=1):
            origin = Origin(name, n, element.offset)
            if len(element.raw) > MAX_LINE_BYTES:
                records.append(LongLine.of(element.raw).rejected(origin))
            else:
                records.append(_event(element.raw, origin))
    except MalformedArray as exc:
        raise MalformedBatch(
            f"the batch body is not one JSON array: {exc}", option="body"
        ) from exc
    return records


def _within_source(records: Iterator[Record], source: str | None) -> Iterator[Record]:
    for record in records:
        if source is None or not isinstance(record, Accepted) or _under(record.source, source):
            yield record
        else:
            yield Rejected(
                record.origin,
                "source",
                f"this collector writes under {source!r}, not {record.source!r}",
                record.body,
            )


def _under(event_source: str, collector_source: str) -> bool:
    return event_source == collector_source or event_source.startswith(
        collector_source.rstrip("/") + "/"
    )
