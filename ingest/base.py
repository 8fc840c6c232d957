"""The interface every ingestor shares (after beangulp): `identify` and `extract`.

An ingestor turns one source file into a stream of records, each an event accepted in
canonical form or a rejection that keeps the raw record, both carrying file and line.
It never writes: appends go through the ledger's API, called by the CLI or a runner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from pydantic import ValidationError

from schemas import Accepted, CloudEvent, Origin, Record, Unstorable, rejections, unstorable, validate_event, validate_event_json

UTF8_BOM = b"\xef\xbb\xbf"


class IngestError(Exception):
    """The file as a whole cannot be read (missing, unreadable, wrong format)."""


class Ingestor(Protocol):
    name: str
    description: str

    def identify(self, path: Path, head: bytes) -> bool:
        """True when the file, whose first bytes are `head`, is in this format."""
        ...

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        """The file's records in file order."""
        ...


def open_source(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except FileNotFoundError as exc:
        raise IngestError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise IngestError(f"{path}: is a directory, not a file") from exc
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror}") from exc


def event_from_json(raw: bytes, origin: Origin) -> Record:
    """One CloudEvent in JSON text as an accepted record, or a rejection saying why."""
    return _accept(lambda: validate_event_json(raw), origin, raw)


def event_from_object(obj: dict[str, Any], origin: Origin, raw: bytes, naive_is_utc: bool = True) -> Record:
    """One CloudEvent built by a parser of another format, accepted or rejected. A naive
    time from the parser means UTC unless `naive_is_utc` is False (a CloudEvent's own
    JSON text must carry a zone)."""
    return _accept(lambda: validate_event(obj, naive_is_utc=naive_is_utc), origin, raw)


def _accept(validate: Callable[[], CloudEvent], origin: Origin, raw: bytes) -> Record:
    try:
        return Accepted.of(validate(), origin)
    except ValidationError as exc:
        return rejections(exc, origin, raw)
    except Unstorable as exc:
        return unstorable(exc, origin, raw)
