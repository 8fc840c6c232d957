"""NVIDIA DCGM job statistics, as printed by `dcgmi stats --job ID -v` (`-j ID -v`).

Layout (dcgmi's ProcessStats.cpp): a line `Successfully retrieved statistics for job: ID.`,
then per GPU a table opened by `| GPU ID: N |`, with the sections Execution Stats,
Performance Stats, Event Stats, Slowdown Stats, process utilisation and Overall Health,
each row `| label | value |`. Without `-v`, one `| Summary |` table stands for the group.
Several outputs may be concatenated (several jobs), and the text often sits in a job's
stdout: lines outside a table are not dcgmi's and are passed over. Tolerated as seen in
real output: indentation, section rules with any number of dashes, `*` after a label,
`Not Specified` / `N/A` / `Still Running` for absent values, day numbers padded or not.

Mapping (fleet events, no tenant; source `dcgm://<node>`, where `node` is an option whose
default is the file's stem, since dcgmi never names its host; `fabric_domain` optional):
- each row under `XID (Hr:Min:Sec since start)` → `health.fault`, severity `critical`, at
  Start Time + the offset. dcgmi prints *when* a critical XID happened, never its number,
  so the code is `xid`; a row that names the number (`0:12:05 (XID 79)` or `0:12:05 xid-79`,
  the simulator's form) gives `xid-79`. The time may also be absolute (ctime or ISO).
  Real dcgmi prints the minutes field as total minutes (`1:75:30`); both readings are taken.
  A non-zero `Critical XID Errors` with no rows listed is one `xid` fault at the window's end.
- `Double Bit ECC Errors` > 0 → `ecc-dbe`, critical; `PCIe Replay Warnings` > 0 →
  `pcie-replay`, warning; both at End Time (Start Time while the job still runs).
- every fault is closed by a `health.cleared` (same node, device, code) at End Time when
  that is later than the fault: the stats window is the only evidence of how long it was open.
- `device` is the GPU index (an int); a Summary table's faults name the node alone.
- data keeps `dcgm_job`, the `window` (start, end) and, as given, the Performance Stats rows
  (`utilisation`), the Event Stats counts (`events`) and `health` (Overall Health).
- id `<job>:<gpu>:<code>:<time>` (`:cleared` for the clearing), so re-reading appends nothing.

Times are ctime text in the host's local zone; they are taken as UTC (DESIGN §2: no zone
means UTC). One GPU table is one record: all its events, or the table in quarantine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, BinaryIO

from ingest.base import UTF8_BOM, event_from_object, open_source
from schemas import Origin, Record, Rejected, format_utc

ABSENT = frozenset({"", "n/a", "not specified", "not found", "not supported", "not permissioned",
                    "has not started", "still running", "unknown"})
XID_LABEL = "XID (Hr:Min:Sec since start)"
_FAULT_COUNTS = {"Double Bit ECC Errors": ("ecc-dbe", "critical"), "PCIe Replay Warnings": ("pcie-replay", "warning")}
_JOB_HEADER = re.compile(r"Successfully retrieved statistics for (?:job\b:?)?\s*(?P<job>.*?)\.?\s*$", re.IGNORECASE)
_PID_HEADER = re.compile(r"Successfully retrieved process info for pid", re.IGNORECASE)
_JOB_LINE = re.compile(r"\|?\s*Job(?: ?ID)?\s*[:|]\s*(?P<job>[^|\s]+)\s*\|?", re.IGNORECASE)
_TABLE_HEADER = re.compile(r"\|\s*(?:GPU ID\b|Summary\b)", re.IGNORECASE)
_SECTION = re.compile(r"[A-Za-z][A-Za-z ]*[A-Za-z]")
_OFFSET = re.compile(r"(\d{1,9}):(\d{1,9}):(\d\d)")
_XID_VALUE = re.compile(r"(?P<when>.+?)\s*(?:\(\s*)?(?:\bXID\b[\s:#-]*|\bxid-)(?P<xid>\d{1,9})\s*\)?", re.IGNORECASE)
_CTIME = "%a %b %d %H:%M:%S %Y"


class _Bad(ValueError):
    """A problem in one row of a table: the row's line, the field and the reason."""

    def __init__(self, line: int, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.line, self.field, self.reason = line, field, reason


@dataclass
class _Table:
    """The raw lines of one GPU (or Summary) table, and the job it belongs to."""

    job: str | None
    job_problem: str
    lines: list[tuple[int, int, bytes]] = field(default_factory=list)  # (line, offset, raw)

    @property
    def raw(self) -> bytes:
        return b"".join(raw for _, _, raw in self.lines)


@dataclass
class _Stats:
    """What one table says, read and checked."""

    gpu: str
    device: int | None
    line: int
    start: datetime | None = None
    end: datetime | None = None
    xids: list[tuple[int, datetime | None, int | None, str]] = field(default_factory=list)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # label -> (count, line)
    sections: dict[str, dict[str, str]] = field(default_factory=dict)


class DcgmStatsIngestor:
    name = "dcgm-stats"
    description = "NVIDIA DCGM job statistics: the text of `dcgmi stats --job ID -v`"

    def identify(self, path: Path, head: bytes) -> bool:
        return b"Successfully retrieved statistics for" in head or (
            b"| GPU ID:" in head and b"Execution Stats" in head)

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        node = options.get("node") or path.stem
        fabric_domain = options.get("fabric_domain")
        with open_source(path) as stream:
            for table in _tables(stream):
                yield from _table_records(str(path), table, node, fabric_domain)


def _tables(stream: BinaryIO) -> Iterator[_Table]:
    """The file's tables in order, each with the job named by the header before it."""
    job: str | None = None
    job_problem = "no job id: no 'Successfully retrieved statistics for job' line before this table"
    table: _Table | None = None
    offset = 0
    for number, raw in enumerate(stream, start=1):
        text = _text(raw.removeprefix(UTF8_BOM) if number == 1 else raw)
        here, offset = offset, offset + len(raw)
        if _TABLE_HEADER.match(text):
            if table is not None:
                yield table
            table = _Table(job, job_problem, [(number, here, raw)])
        elif table is not None and text[:1] in ("|", "+"):
            table.lines.append((number, here, raw))
            continue
        else:
            if table is not None:
                yield table
                table = None
            job, job_problem = _job_from(text, job, job_problem)
    if table is not None:
        yield table


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape").strip()


def _job_from(text: str, job: str | None, problem: str) -> tuple[str | None, str]:
    """The job a header line names (or the current one when the line names none)."""
    if _PID_HEADER.search(text):
        return None, "`dcgmi stats --pid` output names a process, not a job: use `dcgmi stats --job ID -v`"
    match = _JOB_HEADER.search(text) or _JOB_LINE.fullmatch(text)
    if match is None:
        return job, problem
    named = match.group("job").strip()
    if not named:
        return None, "no job id in the 'Successfully retrieved statistics' line"
    if not named.isprintable():
        return None, f"the job id is not valid UTF-8 text: {named.encode('utf-8', 'surrogateescape')!r}"
    return named, problem


def _table_records(name: str, table: _Table, node: str, fabric_domain: str | None) -> Iterator[Record]:
    first_line, first_offset, _ = table.lines[0]
    try:
        if table.job is None:
            raise _Bad(first_line, "dcgm_job", table.job_problem)
        stats = _read_table(table)
        events = _events(stats, table.job, node, fabric_domain)
    except _Bad as bad:
        offset = next((o for n, o, _ in table.lines if n == bad.line), first_offset)
        yield Rejected(Origin(name, bad.line, offset), bad.field, bad.reason, table.raw)
        return
    offsets = {n: o for n, o, _ in table.lines}
    records = [event_from_object(event, Origin(name, line, offsets[line]), table.raw) for line, event in events]
    rejected = [r for r in records if isinstance(r, Rejected)]
    yield from (rejected[:1] if rejected else records)  # a table is one record


def _read_table(table: _Table) -> _Stats:
    stats: _Stats | None = None
    section, last_label = "", ""
    for number, _, raw in table.lines:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Bad(number, "(line)", f"not valid UTF-8 at byte {exc.start}") from None
        text = _text(raw)
        if text.startswith(("+", "|-", "|=")):
            found = _SECTION.search(text)
            section = found.group() if found else section
            continue
        cells = _cells(number, text)
        if stats is None:
            stats = _header(number, cells)
            continue
        if len(cells) != 2:
            raise _Bad(number, "(line)", f"expected 2 cells, found {len(cells)}")
        label = " ".join(cells[0].replace("*", " ").split())
        if label == "" and last_label == XID_LABEL:
            label = XID_LABEL
        _read_row(stats, section, label, cells[1], number)
        last_label = label
    assert stats is not None  # a table starts with its header row
    return stats


def _cells(number: int, text: str) -> list[str]:
    if len(text) < 2 or not text.endswith("|"):
        raise _Bad(number, "(line)", "truncated table row: no closing '|'")
    return [cell.strip() for cell in text[1:-1].split("|")]


def _header(number: int, cells: list[str]) -> _Stats:
    title = cells[0]
    if len(cells) != 1:
        raise _Bad(number, "GPU ID", f"expected one cell in the table's header, found {len(cells)}")
    if title.lower() == "summary":
        return _Stats("summary", None, number)
    gpu = title.partition(":")[2].strip()
    if not (gpu.isdigit() and gpu.isascii() and len(gpu) <= 9):
        raise _Bad(number, "GPU ID", f"not a GPU index: {gpu!r}")
    return _Stats(gpu, int(gpu), number)


def _read_row(stats: _Stats, section: str, label: str, value: str, number: int) -> None:
    if label in ("Start Time", "End Time"):
        moment = None if value.lower() in ABSENT else _time(value, label, number)
        if label == "Start Time":
            stats.start = moment
        else:
            stats.end = moment
    elif label == XID_LABEL:
        stats.xids.append(_xid_row(stats, value, number))
        return
    elif label in _FAULT_COUNTS or label == "Critical XID Errors":
        stats.counts[label] = (_count(value, label, number), number)
    stats.sections.setdefault(section, {})[label] = value


def _time(text: str, label: str, number: int) -> datetime:
    try:
        return datetime.strptime(" ".join(text.split()), _CTIME).replace(tzinfo=timezone.utc)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _Bad(number, label, f"not a time: {text!r}") from None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def _count(text: str, label: str, number: int) -> int:
    if text.lower() in ABSENT:
        return 0
    if re.fullmatch(r"-\d+", text):
        raise _Bad(number, label, f"negative count {text}")
    if not re.fullmatch(r"\d{1,18}", text) or not text.isascii():
        raise _Bad(number, label, f"not a count: {text!r}")
    return int(text)


def _xid_row(stats: _Stats, value: str, number: int) -> tuple[int, datetime | None, int | None, str]:
    """(line, time, XID number or None, time as written); None for the time when Start is unknown."""
    named = _XID_VALUE.fullmatch(value)
    when, xid = (named.group("when"), int(named.group("xid"))) if named else (value, None)
    offset = _OFFSET.fullmatch(when)
    if offset is None:
        return number, _time(when, XID_LABEL, number), xid, when
    hours, minutes, seconds = (int(g) for g in offset.groups())
    # dcgmi prints total minutes (`1:75:30`); a fixed printer would print `1:15:30`.
    total = minutes * 60 + seconds if minutes >= 60 else hours * 3600 + minutes * 60 + seconds
    if seconds >= 60 or (minutes >= 60 and hours != minutes // 60):
        raise _Bad(number, XID_LABEL, f"not an Hr:Min:Sec offset: {when!r}")
    if stats.start is None:
        return number, None, xid, when
    try:
        return number, stats.start + timedelta(seconds=total), xid, when
    except OverflowError:
        raise _Bad(number, XID_LABEL, f"the offset {when!r} runs past the calendar") from None


def _faults(stats: _Stats) -> list[tuple[int, str, str, datetime, str]]:
    """(line, code, severity, time, detail) for every fault the table shows, in table order."""
    closing = stats.end or stats.start
    out: list[tuple[int, str, str, datetime, str]] = []
    for line, moment, xid, text in stats.xids:
        if moment is None:
            raise _Bad(line, "Start Time", "missing: the XID offsets count from it")
        number = "" if xid is None else f" {xid}"
        out.append((line, f"xid-{xid}" if xid is not None else "xid", "critical", moment,
                    f"critical XID{number} at {text} (dcgmi stats)"))
    listed, line = stats.counts.get("Critical XID Errors", (0, stats.line))
    if listed and not stats.xids:
        out.append((line, "xid", "critical", _need(closing, line), f"{listed} critical XID errors; dcgmi listed no times"))
    for label, (code, severity) in _FAULT_COUNTS.items():
        count, line = stats.counts.get(label, (0, stats.line))
        if count:
            out.append((line, code, severity, _need(closing, line), f"{label}: {count} during the job"))
    return out


def _need(moment: datetime | None, line: int) -> datetime:
    if moment is None:
        raise _Bad(line, "End Time", "missing, and no Start Time: a fault needs the stats window's time")
    return moment


def _events(stats: _Stats, job: str, node: str, fabric_domain: str | None) -> list[tuple[int, dict[str, Any]]]:
    source = f"dcgm://{node}"
    place = {"node": node, "device": stats.device, "fabric_domain": fabric_domain}
    window = {"start": _utc(stats.start), "end": _utc(stats.end)}
    evidence = {"dcgm_job": job, "window": {k: v for k, v in window.items() if v},
                "utilisation": stats.sections.get("Performance Stats"), "events": stats.sections.get("Event Stats"),
                "health": stats.sections.get("Overall Health", {}).get("Overall Health")}
    out: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()
    for line, code, severity, moment, detail in _faults(stats):
        key = f"{job}:{stats.gpu}:{code}:{format_utc(moment)}"
        if key in seen:  # two XIDs in the same second on one GPU: one fault
            continue
        seen.add(key)
        data = {**place, "code": code, "severity": severity, "detail": detail, **evidence}
        out.append((line, _event(key, source, "health.fault", moment, data)))
        if stats.end is not None and stats.end > moment:
            cleared = {**place, "code": code, "dcgm_job": job, "detail": "the end of the dcgmi stats window"}
            out.append((line, _event(f"{key}:cleared", source, "health.cleared", stats.end, cleared)))
    return out


def _event(event_id: str, source: str, kind: str, moment: datetime, data: dict[str, Any]) -> dict[str, Any]:
    return {"specversion": "1.0", "id": event_id, "source": source, "type": kind, "time": format_utc(moment),
            "data": {k: v for k, v in data.items() if v is not None}}


def _utc(moment: datetime | None) -> str | None:
    return None if moment is None else format_utc(moment)


__all__ = ["DcgmStatsIngestor"]
