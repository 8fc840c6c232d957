"""What the ingestors of a pilot's probe outputs share (docs/probes.md).

`nvidia-smi topo -m`, nvbandwidth and nccl-tests print no tenant, allocation or job, and
no time: the caller names them (`--tenant`, `--allocation`, `--job`, `--scrape-time`),
and without `--scrape-time` the time is the file's modification time (when the tool's
output was written, for a file the pilot redirected it into).

Identity: source `<tool>://<allocation>`, id the SHA-256 of the event's data (tenant,
allocation, what the tool printed, as parsed): the same run read again is the same id
whatever its layout (tabs or spaces, prompts around it, the file's name). A run already
in the ledger is given again exactly as stored (the option `recorded`, as dcgm-metrics
uses it), so a later copy of the same output, with another modification time, appends
nothing instead of conflicting.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from ingest.base import IngestError, event_from_json, event_from_object, open_source
from ingest.options import RUNTIME, IngestOptions
from schemas import Origin, Record, format_utc
from schemas.errors import BadInput

#: (source, id, tenant) → the stored event of that tenant, or None (cli.py's look-up).
Recorded = Callable[[str, str, str], "bytes | None"]
_FIGURE = re.compile(r"\d+(?:\.\d+)?")
#: What a launcher puts before each line of a rank's output: Open MPI's --tag-output, srun --label.
LAUNCHER_TAG = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+: )")


class BadLine(BadInput, ValueError):
    """A problem in one line of a probe's output: the line, the field and the reason (the
    run or capture it belongs to goes to the quarantine whole, saying so)."""

    def __init__(self, line: int, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.line, self.field, self.reason = line, field, reason


def read_output(path: Path, tool: str, limit: int) -> bytes:
    """The file's bytes; more than `limit` is not one tool's output but a usage error."""
    with open_source(path) as stream:
        body = stream.read(limit + 1)
    if len(body) > limit:
        raise IngestError(f"{path}: larger than {limit >> 20} MiB: not one {tool} output")
    return body


def figure_text(text: str, line: int, field: str) -> str:
    """A figure as the tool printed it: digits, perhaps a point and more digits."""
    if not _FIGURE.fullmatch(text):
        raise BadLine(line, field, f"not a figure: {text!r}")
    return text


@dataclass(frozen=True)
class ProbeOptions:
    """Who ran the probe, on which allocation, and when: what the tool cannot know."""

    tool: str
    tenant: str
    allocation: str
    job: str | None
    time: datetime
    recorded: Recorded | None

    @property
    def source(self) -> str:
        return f"{self.tool}://{self.allocation}"

    def owner(self) -> dict[str, Any]:
        """The fields every event of the file carries."""
        owner: dict[str, Any] = {"tenant": self.tenant, "allocation_id": self.allocation}
        if self.job is not None:
            owner["job_id"] = self.job
        return owner


def probe_options(
    path: Path, options: dict[str, Any], declared: type[IngestOptions]
) -> ProbeOptions:
    """The options, checked by the format's options object (`declared`): `tenant` and
    `allocation` are required (usage errors, every missing one named at once)."""
    given = declared.of({k: v for k, v in options.items() if k not in RUNTIME}, path).given()
    job = _named(given.get("job"))
    recorded = options.get("recorded")
    return ProbeOptions(
        declared.format,
        given["tenant"],
        given["allocation"],
        job,
        _capture_time(path, given.get("scrape_time")),
        recorded if callable(recorded) else None,
    )


def _named(value: Any) -> str | None:
    if value is None:
        return None
    if not str(value).strip():
        raise IngestError("empty name", option="job")
    return str(value)


def _capture_time(path: Path, text: str | None) -> datetime:
    """`--scrape-time` (RFC 3339; no zone means UTC), else the file's modification time."""
    if not text:
        return datetime.fromtimestamp(int(path.stat().st_mtime), timezone.utc)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise IngestError(f"not an RFC 3339 time: {text!r}", option="scrape_time") from None
    return (
        moment.replace(tzinfo=timezone.utc)
        if moment.tzinfo is None
        else moment.astimezone(timezone.utc)
    )


def run_id(data: dict[str, Any]) -> str:
    """The id of a run: the digest of its data (sorted keys, figures as their text)."""
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def probe_record(
    kind: str, data: dict[str, Any], how: ProbeOptions, origin: Origin, raw: bytes
) -> Record:
    """One event of the file, or the same run as the ledger already holds it."""
    event_id = run_id(data)
    known = how.recorded(how.source, event_id, how.tenant) if how.recorded is not None else None
    if known is not None:
        return event_from_json(known, origin)
    event = {
        "specversion": "1.0",
        "id": event_id,
        "source": how.source,
        "type": kind,
        "time": format_utc(how.time),
        "data": data,
    }
    return event_from_object(event, origin, raw)


__all__ = [
    "LAUNCHER_TAG",
    "BadLine",
    "ProbeOptions",
    "figure_text",
    "probe_options",
    "probe_record",
    "read_output",
    "run_id",
]
