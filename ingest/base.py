"""The interface every ingestor shares (after beangulp): `identify` and `extract`.

An ingestor turns one source file into a stream of records, each an event accepted in
canonical form or a rejection that keeps the raw record, both carrying file and line.
It never writes: appends go through the ledger's API, called by the CLI or a runner.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from datetime import datetime, timezone, tzinfo
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from schemas import (
    Accepted,
    CloudEvent,
    Origin,
    Record,
    Rejected,
    Unstorable,
    rejections,
    unstorable,
    validate_event,
    validate_event_json,
)
from schemas.errors import BadInput
from schemas.records import RECORD_HEAD
from schemas.types import MAX_EVENT_BYTES

if TYPE_CHECKING:
    from ingest.options import IngestOptions

UTF8_BOM = b"\xef\xbb\xbf"


class IngestError(BadInput):
    """The file as a whole cannot be read (missing, unreadable, wrong format)."""


class Ingestor(Protocol):
    name: str
    description: str

    @property
    def options(self) -> type[IngestOptions]:
        """The format's options, one configuration object (ingest/options.py)."""
        ...

    def identify(self, path: Path, head: bytes) -> bool:
        """True when the file, whose first bytes are `head`, is in this format."""
        ...

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        """The file's records in file order."""
        ...


class LocalZone:
    """The zone in which a tool that prints local time with no offset (sacct, dcgmi) is
    read: `--timezone NAME` (IANA), else the local zone of the machine running the ingest
    (docs/events.md). `name` goes into the ingest summary, so a reader sees which was used."""

    def __init__(self, name: str | None = None) -> None:
        self.zone, self.name = _zone(name) if name else _machine_zone()

    def utc(self, moment: datetime) -> datetime:
        """A time as the tool printed it, in UTC. An offset written in the text wins; in a
        repeated hour (clocks going back) the first of the two instants is taken (fold 0)."""
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=self.zone)
        return moment.astimezone(timezone.utc)


def _zone(name: str, where: str | None = None) -> tuple[tzinfo, str]:
    """The zone `name`, given by the `timezone` option, or else read from `where`."""
    try:
        return ZoneInfo(name), name
    except (ZoneInfoNotFoundError, ValueError):
        source, hint = (f"{where}: ", "; name the zone with this option") if where else ("", "")
        raise IngestError(
            f"{source}unknown time zone {name!r} (an IANA name such as Europe/Berlin or "
            f"UTC){hint}",
            option="timezone",
        ) from None


def _machine_zone() -> tuple[tzinfo, str]:
    """$TZ, else the zone /etc/localtime points to, else /etc/localtime's rules unnamed."""
    name = os.environ.get("TZ", "").removeprefix(":")
    if name:
        return _zone(name, "$TZ")
    localtime = Path("/etc/localtime")
    target = os.path.realpath(localtime)
    if "zoneinfo/" in target:
        return _zone(target.split("zoneinfo/", 1)[1], str(localtime))
    if localtime.exists():
        with localtime.open("rb") as rules:
            return ZoneInfo.from_file(rules, key="localtime"), "localtime (/etc/localtime)"
    return timezone.utc, "UTC (this machine names no zone)"


def fixed_tenant(options: dict[str, Any]) -> str | None:
    """`--tenant NAME`: the tenant of every record of a file whose source names none."""
    tenant = options.get("tenant")
    if tenant is None:
        return None
    if not str(tenant).strip():
        raise IngestError("empty tenant name", option="tenant")
    if options.get("tenant_field"):
        raise IngestError(
            "give a fixed tenant or the tenant field to read it from, not both",
            option="tenant_field",
        )
    return str(tenant)


#: The longest line a line reader hands on whole. An event over MAX_EVENT_BYTES (1 MiB) in
#: canonical form is quarantined anyway; a line four times that is read no further than
#: its first RECORD_HEAD bytes and its digest (docs/canonical-and-bounds.md).
MAX_LINE_BYTES = 4 * MAX_EVENT_BYTES


class LongLine(NamedTuple):
    """A line over MAX_LINE_BYTES, as far as it is kept: head, digest, length (newline not
    counted) and the bytes it took in the file (newline counted)."""

    head: bytes
    digest: bytes
    length: int
    size: int

    @classmethod
    def of(cls, raw: bytes) -> LongLine:
        """A record already read whole (an element of a JSON array), kept as a long line."""
        return cls(raw[:RECORD_HEAD], sha256(raw).digest(), len(raw), len(raw))

    def rejected(self, origin: Origin) -> Rejected:
        reason = (
            f"the record is {self.length:,} bytes, over the {MAX_LINE_BYTES:,} a line or "
            f"JSON value may hold: not read as an event (its first {RECORD_HEAD:,} bytes "
            "and SHA-256 are kept)"
        )
        return Rejected(origin, "(record)", reason, self.head, self.digest, self.length)


def bounded_lines(stream: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[bytes | LongLine]:
    """The stream's lines (newline included), each held whole only up to `limit` bytes:
    a longer one is read on in pieces of `limit`, hashed and counted, and only its head
    kept, so memory stays at a few times `limit` whatever the line's length."""
    while line := stream.readline(limit):
        if len(line) < limit or line.endswith(b"\n"):
            yield line
            continue
        digest, size, head = sha256(line), len(line), line[:RECORD_HEAD]
        while not line.endswith(b"\n") and (line := stream.readline(limit)):
            size += len(line)
            piece = line.removesuffix(b"\n")
            digest.update(piece)
            head += piece[: RECORD_HEAD - len(head)]
        yield LongLine(head, digest.digest(), size - line.endswith(b"\n"), size)


def open_source(path: Path) -> BinaryIO:
    """The file, opened for reading only if it is a regular file. The check is made on
    what was opened (without blocking: a FIFO with no writer would hang the ingest), so
    a path swapped for a FIFO or a device after the manifest's checks is refused too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise IngestError(f"{path}: no such file") from exc
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        directory = stat.S_ISDIR(mode)
        what = "is a directory, not a file" if directory else "not a regular file: refused"
        raise IngestError(f"{path}: {what}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def event_from_json(raw: bytes, origin: Origin) -> Record:
    """One CloudEvent in JSON text as an accepted record, or a rejection saying why."""
    return _accept(lambda: validate_event_json(raw), origin, raw)


def event_from_object(
    obj: dict[str, Any], origin: Origin, raw: bytes, naive_is_utc: bool = True
) -> Record:
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


#: What people paste around a tool's output: the shell prompt and command that made it
#: (`$ curl localhost:9400/metrics`, `user@host:~$ …`, `[root@host ~]# …`) and the lines
#: that stand for output cut out (`...`, `…`).
_PASTED = re.compile(
    r"(?:[$%>]|[\w.-]+@[\w.-]+(?::\S*)?\s?[$#]|\[[^\]]*\][$#])(?:\s.*)?|(?:\.\.\.|…)+"
)


def pasted_around(text: str) -> bool:
    """True for a line (stripped) that a paste adds around a tool's output, not the output."""
    return _PASTED.fullmatch(text) is not None
