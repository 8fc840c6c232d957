"""Slurm accounting, as printed by `sacct --parsable2` (or `--parsable`, whose rows end
with one more delimiter).

Mapping (DESIGN.md §2): a job row yields `job.submitted` (Submit), `job.started` (Start)
and its end event by State at End: COMPLETED → job.completed; FAILED, TIMEOUT,
OUT_OF_MEMORY → job.failed (application); NODE_FAIL → job.failed (hardware); PREEMPTED →
job.failed (preempted); CANCELLED… → job.cancelled. A row with `gres/gpu` in AllocTRES
also yields `allocation.granted` at Start and `allocation.released` at End, with
allocation_id = JobID and gpus = the `gres/gpu=` count (typed `gres/gpu:<model>=` counts
are never added to it). Step rows (`.batch`, `.extern`, `.N`) are evidence, not
allocations: they ride along, whole, on their job's `job.submitted` under `steps`.
`Unknown`, `None` and `None assigned` mean absent; a job still running has an open
allocation. The event id is JobID and the event kind, under source `slurm://<cluster>`,
so re-reading a file appends nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ingest.base import IngestError, UTF8_BOM, event_from_object, open_source
from schemas import Origin, Record, Rejected

#: The field list assumed when none is given; the file then starts with a header line.
STANDARD_FIELDS = (
    "JobID", "JobName", "Account", "User", "Partition", "NodeList", "State", "Submit", "Start",
    "End", "Elapsed", "Timelimit", "AllocTRES",
)
ABSENT = frozenset({"", "Unknown", "None", "None assigned", "(null)"})
_END_EVENTS = {
    "COMPLETED": ("job.completed", None),
    "FAILED": ("job.failed", "application"),
    "TIMEOUT": ("job.failed", "application"),
    "OUT_OF_MEMORY": ("job.failed", "application"),
    "NODE_FAIL": ("job.failed", "hardware"),
    "BOOT_FAIL": ("job.failed", "hardware"),
    "PREEMPTED": ("job.failed", "preempted"),
}
_ELAPSED = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")


def parse_elapsed(text: str) -> float | None:
    """`1-23:59:00`, `15:28:22`, `23:08.358` (MM:SS.mmm) as seconds; None when absent."""
    if text in ABSENT or text in ("UNLIMITED", "Partition_Limit", "INVALID"):
        return None
    match = _ELAPSED.fullmatch(text)
    if match is None:
        raise ValueError(f"not a Slurm duration: {text!r}")
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


def gpu_count(tres: str) -> int | None:
    """The `gres/gpu=` count of a TRES list; the typed entries only when it is missing."""
    plain, typed = None, 0
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            plain = int(value)
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    count = plain if plain is not None else (typed or None)
    if count is not None and count < 0:
        raise ValueError(f"negative GPU count {count} in {tres!r}")
    return count


def slurm_time(text: str) -> str | None:
    if text in ABSENT:
        return None
    datetime.fromisoformat(text)  # raises ValueError on a malformed time
    return text


class SacctIngestor:
    name = "sacct"
    description = "Slurm sacct --parsable2 / --parsable output"

    def identify(self, path: Path, head: bytes) -> bool:
        first = head.removeprefix(UTF8_BOM).split(b"\n", 1)[0]
        return first.startswith(b"JobID|") or first.startswith(b"JobIDRaw|")

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        fields = options.get("fields")
        delimiter = options.get("delimiter") or "|"
        cluster = options.get("cluster") or "default"
        tenant_field = options.get("tenant_field")
        field_list = [f.strip() for f in fields.split(",")] if fields else None
        with open_source(path) as stream:
            reader = _Rows(str(path), stream, delimiter, field_list)
            yield from _job_events(reader, cluster, tenant_field)


class _Rows:
    """The file's rows as dicts, with line numbers; bad rows become rejections."""

    def __init__(self, name: str, stream: Any, delimiter: str, fields: list[str] | None) -> None:
        self.name, self.stream, self.delimiter, self.fields = name, stream, delimiter, fields

    def __iter__(self) -> Iterator[tuple[Origin, dict[str, str] | Rejected, bytes]]:
        offset = 0
        for number, raw in enumerate(self.stream, start=1):
            origin = Origin(self.name, number, offset)
            offset += len(raw)
            try:
                text = raw.decode("utf-8").removeprefix("\ufeff").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                yield origin, Rejected(origin, "(row)", f"not valid UTF-8 at byte {exc.start}", raw), raw
                continue
            if not text.strip():
                continue
            values = text.split(self.delimiter)
            if self.fields is None:  # the header names the fields
                self.fields = values[:-1] if values[-1] == "" else values
                continue
            if values == self.fields or values[:-1] == self.fields:
                continue  # a header line although --fields was given
            if len(values) == len(self.fields) + 1 and values[-1] == "":
                values.pop()  # --parsable's trailing delimiter
            if len(values) != len(self.fields):
                yield origin, Rejected(origin, "(row)", f"expected {len(self.fields)} fields, found {len(values)}", raw), raw
                continue
            yield origin, dict(zip(self.fields, values)), raw


def _job_events(rows: _Rows, cluster: str, tenant_field: str | None) -> Iterator[Record]:
    pending: list[tuple[Origin, dict[str, str], bytes]] = []
    for origin, row, raw in rows:
        if isinstance(row, Rejected):
            if pending:  # keep file order
                yield from _events_of(pending, cluster, tenant_field)
                pending = []
            yield row
            continue
        if "JobID" not in row:
            raise IngestError(f"{origin.file}: the field list has no JobID")
        if "." in row["JobID"] and pending and row["JobID"].split(".")[0] == pending[0][1]["JobID"]:
            pending.append((origin, row, raw))
            continue
        if pending:
            yield from _events_of(pending, cluster, tenant_field)
        pending = [(origin, row, raw)]
    if pending:
        yield from _events_of(pending, cluster, tenant_field)


def _events_of(group: list[tuple[Origin, dict[str, str], bytes]], cluster: str, tenant_field: str | None) -> Iterator[Record]:
    origin, row, raw = group[0]
    if "." in row["JobID"]:  # steps whose job row is not in this file: kept, in quarantine
        job = row["JobID"].split(".")[0]
        yield from (Rejected(o, "JobID", f"step {r['JobID']} without its job row {job}", b) for o, r, b in group)
        return
    try:
        events = _job_row_events(row, [r for _, r, _ in group[1:]], cluster, tenant_field)
    except ValueError as exc:
        field, _, reason = str(exc).partition(": ")
        yield Rejected(origin, field if reason else "(row)", reason or str(exc), raw)
        return
    records = [event_from_object(event, origin, raw) for event in events]
    rejected = [r for r in records if isinstance(r, Rejected)]
    # A row is one record: all its events, or the row in quarantine.
    yield from (rejected[:1] if rejected else records)


def _tenant(row: dict[str, str], tenant_field: str | None) -> str:
    for field in ([tenant_field] if tenant_field else ["Account", "User"]):
        value = row.get(field, "")
        if value not in ABSENT:
            return value
    raise ValueError(f"{tenant_field or 'Account'}: no tenant: Account and User are both empty")


def _job_row_events(row: dict[str, str], steps: list[dict[str, str]], cluster: str, tenant_field: str | None) -> list[dict[str, Any]]:
    job_id, tenant, state = row["JobID"], _tenant(row, tenant_field), row.get("State", "")
    times = {}
    for field in ("Submit", "Start", "End"):
        try:
            times[field] = slurm_time(row.get(field, ""))
        except ValueError:
            raise ValueError(f"{field}: not a time: {row.get(field)!r}") from None
    elapsed = {}
    for field in ("Elapsed", "Timelimit"):
        if field in row:
            try:
                elapsed[f"{field.lower()}_s"] = parse_elapsed(row[field])
            except ValueError as exc:
                raise ValueError(f"{field}: {exc}") from None
    try:
        gpus = gpu_count(row.get("AllocTRES", "")) or None
    except ValueError as exc:
        reason = str(exc) if "negative" in str(exc) else f"not a TRES list: {row.get('AllocTRES')!r}"
        raise ValueError(f"AllocTRES: {reason}") from None
    source = f"slurm://{cluster}"
    node_list = row.get("NodeList", "")
    node = None if node_list in ABSENT else node_list
    base = {"tenant": tenant, "job_id": job_id}
    out: list[dict[str, Any]] = []

    def add(kind: str, at: str | None, data: dict[str, Any]) -> None:
        if at is not None:
            out.append({"specversion": "1.0", "id": f"{job_id}:{kind}", "source": source, "type": kind,
                        "time": at, "data": {k: v for k, v in data.items() if v is not None}})

    evidence = {"sacct": row, "steps": steps or None}
    add("job.submitted", times["Submit"], {**base, "gpus": gpus, "queue": row.get("Partition") or None, **evidence})
    if times["Start"] is not None and gpus:
        add("allocation.granted", times["Start"], {"tenant": tenant, "allocation_id": job_id, "gpus": gpus, "node": node})
    add("job.started", times["Start"], {**base, "allocation_id": job_id, "attempt": 1})
    kind, cause = _END_EVENTS.get(state, (None, None))
    if state.startswith("CANCELLED"):
        kind = "job.cancelled"
        by = state.removeprefix("CANCELLED").strip().removeprefix("by").strip()
        add(kind, times["End"], {**base, "by": by or None, "state": state, **elapsed})
    elif kind is not None:
        add(kind, times["End"], {**base, "cause": cause, "state": state, **elapsed})
    if times["Start"] is not None and gpus and times["End"] is not None and state not in ("RUNNING", "PENDING"):
        add("allocation.released", times["End"], {"tenant": tenant, "allocation_id": job_id, "reason": state})
    return out
