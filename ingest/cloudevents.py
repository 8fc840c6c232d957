"""CloudEvents 1.0, structured mode, in JSON, in the shapes tools write it; all stream:
- JSON Lines, one event a line (a broken line is one rejection, the next is read on);
- a batch file holding one JSON array (`application/cloudevents-batch+json`);
- one JSON object over several lines (a pretty-printed event, as the SDKs' test files
  and `jq .` write it), or several such objects one after another.
The shape is read from the first non-blank line: `[` opens an array; a line that ends
its object (`{` … `}`), or one with no line after it in the first 4 KiB, starts JSON
Lines; a line that opens an object and goes on to the next starts multi-line objects.

The option `tenant` fills `data.tenant` of an event whose type belongs to a tenant and
whose data names none (a source that has no notion of tenants); an event that names its
tenant keeps it, and fleet events (devices, faults) stay tenant-less.

An event may carry its data as `data_base64` (CloudEvents JSON format §3.1.1); it is
decoded, and must then be the JSON object the event type expects."""

from __future__ import annotations

import base64
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import orjson

from ingest.base import (
    MAX_LINE_BYTES,
    UTF8_BOM,
    LongLine,
    bounded_lines,
    event_from_json,
    event_from_object,
    open_source,
)
from ingest.jsonarray import Element, MalformedArray, iter_array, iter_values
from ingest.options import IngestOptions, option
from schemas import FLEET_TYPES, Origin, Record, Rejected


class CloudEventsOptions(IngestOptions):
    """What cloudevents is told beside its file."""

    format = "cloudevents"

    tenant: str | None = option("The tenant of events of a tenant's type whose data names none.")


class CloudEventsIngestor:
    name = "cloudevents"
    options = CloudEventsOptions
    description = (
        "CloudEvents 1.0 JSON: JSON Lines, one JSON array (batch mode), or pretty-printed objects"
    )

    def identify(self, path: Path, head: bytes) -> bool:
        text = head.removeprefix(UTF8_BOM).lstrip()
        return text[:1] in (b"{", b"[") and b'"specversion"' in head

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        tenant: str | None = options.get("tenant")
        make: _Maker = _event if tenant is None else functools.partial(_event, tenant=tenant)
        with open_source(path) as stream:
            head = stream.read(4096)
            start = len(UTF8_BOM) if head.startswith(UTF8_BOM) else 0
            stream.seek(start)
            text = head[start:].lstrip()
            first_line, more_lines = text.split(b"\n", 1)[0].strip(), b"\n" in text
            if first_line[:1] == b"[":
                yield from _elements(str(path), iter_array(stream, b"", start), make)
            elif (
                first_line[-1:] == b"}" or not more_lines
            ):  # a whole object, or one line (cut short or past the head)
                yield from _line_records(str(path), stream, start, make)
            else:
                yield from _elements(str(path), iter_values(stream, b"", start), make)


class _Maker(Protocol):
    def __call__(self, raw: bytes, origin: Origin) -> Record: ...


def _line_records(name: str, stream: BinaryIO, offset: int, make: _Maker) -> Iterator[Record]:
    for number, line in enumerate(bounded_lines(stream), start=1):
        if isinstance(line, LongLine):  # never held whole: a line of 300 MB costs 4 MiB here
            yield line.rejected(Origin(name, number, offset))
            offset += line.size
            continue
        stripped = line.strip()
        if stripped:
            yield make(stripped, Origin(name, number, offset))
        offset += len(line)


def _event(raw: bytes, origin: Origin, tenant: str | None = None) -> Record:
    if (
        tenant is None and b'"data_base64"' not in raw
    ):  # the common case costs one substring search
        return event_from_json(raw, origin)
    try:
        envelope = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return event_from_json(raw, origin)  # let the validator say what is wrong
    if not isinstance(envelope, dict):
        return event_from_json(raw, origin)
    if "data_base64" in envelope:
        if "data" in envelope:
            return Rejected(
                origin, "data_base64", "an event carries data or data_base64, not both", raw
            )
        try:
            envelope["data"] = orjson.loads(
                base64.b64decode(envelope.pop("data_base64"), validate=True)
            )
        except (ValueError, TypeError) as exc:
            return Rejected(origin, "data_base64", f"not base64 of JSON: {exc}", raw)
    if tenant is not None:
        _fill_tenant(envelope, tenant)
    return event_from_object(
        envelope, origin, raw, naive_is_utc=False
    )  # a CloudEvent's time must carry its zone


def _fill_tenant(envelope: dict[str, Any], tenant: str) -> None:
    data = envelope.get("data")
    if (
        isinstance(data, dict)
        and data.get("tenant") is None
        and envelope.get("type") not in FLEET_TYPES
    ):
        data["tenant"] = tenant


def _elements(name: str, elements: Iterator[Element], make: _Maker) -> Iterator[Record]:
    try:
        for element in elements:
            origin = Origin(name, element.line, element.offset)
            if len(element.raw) > MAX_LINE_BYTES:  # never parsed: its head and digest are kept
                yield LongLine.of(element.raw).rejected(origin)
                continue
            yield make(element.raw, origin)
    except MalformedArray as exc:
        yield Rejected(Origin(name, exc.line), "(file)", str(exc), b"")
