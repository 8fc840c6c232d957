"""NVIDIA DCGM job statistics, as printed by `dcgmi stats --job ID -v` (`-j ID -v`).

Layout (dcgmi's ProcessStats.cpp): a line `Successfully retrieved statistics for job: ID.`,
then per GPU a table opened by `| GPU ID: N |`, with the sections Execution Stats,
Performance Stats, Event Stats, Slowdown Stats, process utilisation and Overall Health,
each row `| label | value |`. Without `-v`, one `| Summary |` table stands for the group.
Several outputs may be concatenated (several jobs), and the text often sits in a job's
stdout: lines outside a table are not dcgmi's and are passed over. Tolerated as seen in
real output: indentation, section rules with any number of dashes, `*` after a label,
`Not Specified` / `N/A` / `Still Running` for absent values, day numbers padded or not.

Mapping. dcgmi mixes two owners' facts, and the ledger keeps them apart (docs/events.md):
the device's faults are fleet events (no tenant, no job, no telemetry: they may travel in
any tenant's dispute packet), the job's telemetry is its tenant's own event.

Fleet events, source `dcgm://<node>` (`node`: an option, default the file's stem, since
dcgmi never names its host; `fabric_domain` optional):
- each row under `XID (Hr:Min:Sec since start)` → `health.fault`, severity `critical`, at
  Start Time + the offset. dcgmi prints *when* a critical XID happened, never its number,
  so the code is `xid`; a row that names the number (`0:12:05 (XID 79)` or `0:12:05 xid-79`,
  the simulator's form) gives `xid-79`. The time may also be absolute (ctime or ISO).
  Real dcgmi prints the minutes field as total minutes (`1:75:30`); both readings are taken.
- counts with no time: `Critical XID Errors` > 0 with no rows listed (`xid`), `Double Bit
  ECC Errors` > 0 (`ecc-dbe`, critical), `PCIe Replay Warnings` > 0 (`pcie-replay`,
  warning): dcgmi says only that they happened within the stats window, so the fault is
  the window: opened at Start Time, cleared at End Time.
- every fault is closed by a `health.cleared` (same node, device, code) at End Time: the
  stats window is the only evidence of how long it was open. A window still running
  (End `Still Running`) clears nothing yet; a later poll of the same job, once ended,
  adds the clearing and nothing else, since a fault's id and content come from the fault
  alone (device, code, time), never from the window's end or the counts so far.
- `device` is the GPU index (an int). A MIG instance is the text `<gpu>/<gi>` (GPU index,
  GPU instance id: DCGM's own name for it, `dcgmi discovery -c` prints `I 0/13`): a table
  headed `GPU ID: 0/13`, or an XID row naming the instance as the kernel log does
  (`0:12:05 (XID 43, GPU-I:13)`), gives device `0/13`, which touches an allocation whose
  `devices` lists `0/13`, not the GPU's other instances. A Summary table's faults name
  the node alone.
- ids `<device>:<code>:<time>` and `<device>:<code>:<time>:cleared@<end>` (the telemetry:
  `<job>:<gpu>:stats@<start>`), so re-reading appends nothing, and the same fault seen in
  two jobs' stats is one fault.

Tenant event: when `--tenant` names the tenant whose job the file's stats are, each GPU
table of an ended window also yields a `job.submitted` (tenant, job_id = the dcgmi job)
at Start Time carrying the telemetry under `dcgm_stats`: node, gpu, window, the
Performance Stats rows (`utilisation`), the Event Stats counts (`events`) and Overall
Health. `job.submitted` because it is the one tenant type whose required fields the
stats give and that no reconciliation rule reads for time (a scheduler's own, earlier
submission still comes first). A running window's telemetry is recorded once it ends
(it changes until then); without `--tenant` the telemetry is not recorded.

Whose text it is decides what it may become: read as a tenant's (`--owner tenant:NAME`,
for a job's own stdout), its faults are refused and quarantined (schemas/owners.py: a
tenant's source writes no fleet event) and only that tenant's telemetry is kept.

Times are ctime text in the host's local zone, read in `--timezone` (default: this
machine's zone). One GPU table is one record: all its events, or the table in quarantine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

from ingest.base import UTF8_BOM, LocalZone, event_from_object, fixed_tenant, open_source
from ingest.options import ZONE, TenantOptions, Zone, option
from schemas import Origin, Record, Rejected, format_utc
from schemas.errors import BadInput

ABSENT = frozenset(
    {
        "",
        "n/a",
        "not specified",
        "not found",
        "not supported",
        "not permissioned",
        "has not started",
        "still running",
        "unknown",
    }
)
XID_LABEL = "XID (Hr:Min:Sec since start)"
_FAULT_COUNTS = {
    "Double Bit ECC Errors": ("ecc-dbe", "critical"),
    "PCIe Replay Warnings": ("pcie-replay", "warning"),
}
_JOB_HEADER = re.compile(
    r"Successfully retrieved statistics for (?:job\b:?)?\s*(?P<job>.*?)\.?\s*$", re.IGNORECASE
)
_PID_HEADER = re.compile(r"Successfully retrieved process info for pid", re.IGNORECASE)
_JOB_LINE = re.compile(r"\|?\s*Job(?: ?ID)?\s*[:|]\s*(?P<job>[^|\s]+)\s*\|?", re.IGNORECASE)
_TABLE_HEADER = re.compile(r"\|\s*(?:GPU ID\b|Summary\b)", re.IGNORECASE)
_SECTION = re.compile(r"[A-Za-z][A-Za-z ]*[A-Za-z]")
_OFFSET = re.compile(r"(\d{1,9}):(\d{1,9}):(\d\d)")
_XID_VALUE = re.compile(
    r"(?P<when>.+?)\s*(?:\(\s*)?(?:\bXID\b[\s:#-]*|\bxid-)(?P<xid>\d{1,9})\s*\)?", re.IGNORECASE
)
_CTIME = "%a %b %d %H:%M:%S %Y"
_GPU_INSTANCE = re.compile(r"(\d{1,9})\s*/\s*(\d{1,9})")
_XID_INSTANCE = re.compile(r",?\s*\bGPU-I\s*[: ]\s*(\d{1,9})\b", re.IGNORECASE)


class _Bad(BadInput, ValueError):
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
    device: int | str | None  # GPU index, MIG instance `<gpu>/<gi>`, or None for a Summary
    line: int
    zone: LocalZone
    start: datetime | None = None
    end: datetime | None = None
    xids: list[_Xid] = field(default_factory=list)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # label -> (count, line)
    sections: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Xid:
    line: int
    moment: datetime | None
    xid: int | None
    device: int | str | None


@dataclass(frozen=True)
class _Fault:
    """One fault a table shows, with the line that shows it."""

    line: int
    device: int | str | None
    code: str
    severity: str
    opened: datetime
    detail: str
    count_label: str | None = None  # a fault known only by a count: the count goes on its clearing


@dataclass(frozen=True)
class _Options:
    node: str
    fabric_domain: str | None
    zone: LocalZone
    tenant: str | None

    @property
    def source(self) -> str:
        return f"dcgm://{self.node}"


class DcgmStatsOptions(TenantOptions):
    """What dcgm-stats is told beside its file."""

    format = "dcgm-stats"

    node: str | None = option("The host the output came from (default: the file's stem).")
    fabric_domain: str | None = option("The fabric domain the node belongs to.")
    timezone: Zone = option(ZONE)
    tenant: str | None = option("The tenant of every record (dcgmi stats of one tenant's job).")


class DcgmStatsIngestor:
    name = "dcgm-stats"
    options = DcgmStatsOptions
    description = "NVIDIA DCGM job statistics: the text of `dcgmi stats --job ID -v`"
    local_times = True  # dcgmi prints local time with no zone

    def identify(self, path: Path, head: bytes) -> bool:
        return b"Successfully retrieved statistics for" in head or (
            b"| GPU ID:" in head and b"Execution Stats" in head
        )

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        how = _Options(
            options.get("node") or path.stem,
            options.get("fabric_domain"),
            LocalZone(options.get("timezone")),
            fixed_tenant(options),
        )
        with open_source(path) as stream:
            for table in _tables(stream):
                yield from _table_records(str(path), table, how)


def _tables(stream: BinaryIO) -> Iterator[_Table]:
    """The file's tables in order, each with the job named by the header before it."""
    job: str | None = None
    job_problem = (
        "no job id: no 'Successfully retrieved statistics for job' line before this table"
    )
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
        return (
            None,
            "`dcgmi stats --pid` output names a process, not a job: use `dcgmi stats --job ID -v`",
        )
    match = _JOB_HEADER.search(text) or _JOB_LINE.fullmatch(text)
    if match is None:
        return job, problem
    named = match.group("job").strip()
    if not named:
        return None, "no job id in the 'Successfully retrieved statistics' line"
    if not named.isprintable():
        return (
            None,
            f"the job id is not valid UTF-8 text: {named.encode('utf-8', 'surrogateescape')!r}",
        )
    return named, problem


def _table_records(name: str, table: _Table, how: _Options) -> Iterator[Record]:
    first_line, first_offset, _ = table.lines[0]
    try:
        if table.job is None:
            raise _Bad(first_line, "dcgm_job", table.job_problem)
        stats = _read_table(table, how.zone)
        events = _fleet_events(stats, how) + _telemetry(stats, table.job, how)
    except _Bad as bad:
        offset = next((o for n, o, _ in table.lines if n == bad.line), first_offset)
        yield Rejected(Origin(name, bad.line, offset), bad.field, bad.reason, table.raw)
        return
    offsets = {n: o for n, o, _ in table.lines}
    records = [
        event_from_object(event, Origin(name, line, offsets[line]), table.raw)
        for line, event in events
    ]
    rejected = [r for r in records if isinstance(r, Rejected)]
    yield from (rejected[:1] if rejected else records)  # a table is one record


def _read_table(table: _Table, zone: LocalZone) -> _Stats:
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
            stats = _header(number, cells, zone)
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


def _header(number: int, cells: list[str], zone: LocalZone) -> _Stats:
    title = cells[0]
    if len(cells) != 1:
        raise _Bad(
            number, "GPU ID", f"expected one cell in the table's header, found {len(cells)}"
        )
    if title.lower() == "summary":
        return _Stats("summary", None, number, zone)
    gpu = title.partition(":")[2].strip()
    instance = _GPU_INSTANCE.fullmatch(gpu)
    if instance is not None:  # a MIG instance, DCGM's `<gpu>/<gi>`
        return _Stats(gpu, f"{int(instance.group(1))}/{int(instance.group(2))}", number, zone)
    if not (gpu.isdigit() and gpu.isascii() and len(gpu) <= 9):
        raise _Bad(number, "GPU ID", f"not a GPU index: {gpu!r}")
    return _Stats(gpu, int(gpu), number, zone)


def _read_row(stats: _Stats, section: str, label: str, value: str, number: int) -> None:
    if label in ("Start Time", "End Time"):
        moment = None if value.lower() in ABSENT else _time(value, label, number, stats.zone)
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


def _time(text: str, label: str, number: int, zone: LocalZone) -> datetime:
    """ctime text (dcgmi's, in the host's zone), or ISO 8601 (its offset wins when it has one)."""
    try:
        return zone.utc(datetime.strptime(" ".join(text.split()), _CTIME))
    except ValueError:
        pass
    try:
        return zone.utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        raise _Bad(number, label, f"not a time: {text!r}") from None


def _count(text: str, label: str, number: int) -> int:
    if text.lower() in ABSENT:
        return 0
    if re.fullmatch(r"-\d+", text):
        raise _Bad(number, label, f"negative count {text}")
    if not re.fullmatch(r"\d{1,18}", text) or not text.isascii():
        raise _Bad(number, label, f"not a count: {text!r}")
    return int(text)


def _xid_row(stats: _Stats, value: str, number: int) -> _Xid:
    """One XID row; its time is None when Start is unknown."""
    device = stats.device
    instance = _XID_INSTANCE.search(value)
    if instance is not None:  # the kernel's `GPU-I:13`: the fault is that MIG instance's
        value = (value[: instance.start()] + value[instance.end() :]).strip()
        if stats.device is not None:  # a Summary names no GPU, so no instance of one either
            device = f"{stats.gpu.partition('/')[0]}/{int(instance.group(1))}"
    named = _XID_VALUE.fullmatch(value)
    when, xid = (named.group("when"), int(named.group("xid"))) if named else (value, None)
    offset = _OFFSET.fullmatch(when)
    if offset is None:
        return _Xid(number, _time(when, XID_LABEL, number, stats.zone), xid, device)
    hours, minutes, seconds = (int(g) for g in offset.groups())
    # dcgmi prints total minutes (`1:75:30`); a fixed printer would print `1:15:30`.
    total = minutes * 60 + seconds if minutes >= 60 else hours * 3600 + minutes * 60 + seconds
    if seconds >= 60 or (minutes >= 60 and hours != minutes // 60):
        raise _Bad(number, XID_LABEL, f"not an Hr:Min:Sec offset: {when!r}")
    if stats.start is None:
        return _Xid(number, None, xid, device)
    try:
        return _Xid(number, stats.start + timedelta(seconds=total), xid, device)
    except OverflowError:
        raise _Bad(number, XID_LABEL, f"the offset {when!r} runs past the calendar") from None


def _faults(stats: _Stats) -> list[_Fault]:
    """Every fault the table shows, in table order."""
    out: list[_Fault] = []
    for row in stats.xids:
        if row.moment is None:
            raise _Bad(row.line, "Start Time", "missing: the XID offsets count from it")
        number = "" if row.xid is None else f" {row.xid}"
        out.append(
            _Fault(
                row.line,
                row.device,
                "xid" if row.xid is None else f"xid-{row.xid}",
                "critical",
                row.moment,
                f"critical XID{number} (dcgmi stats)",
            )
        )
    counted = [("Critical XID Errors", "xid", "critical")] if not stats.xids else []
    for label, code, severity in counted + [(k, c, s) for k, (c, s) in _FAULT_COUNTS.items()]:
        count, line = stats.counts.get(label, (0, stats.line))
        if count:
            opened = _need(stats.start, line)
            out.append(
                _Fault(
                    line,
                    stats.device,
                    code,
                    severity,
                    opened,
                    f"{label} within a dcgmi stats window (dcgmi gives no time)",
                    label,
                )
            )
    return out


def _need(moment: datetime | None, line: int) -> datetime:
    if moment is None:
        raise _Bad(
            line,
            "Start Time",
            "missing: a fault known by its count alone is placed in the stats window",
        )
    return moment


def _fleet_events(stats: _Stats, how: _Options) -> list[tuple[int, dict[str, Any]]]:
    """The device's faults, each closed at the window's end: fleet facts, no job's."""
    out: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()
    for fault in _faults(stats):
        device = "summary" if fault.device is None else str(fault.device)
        key = f"{device}:{fault.code}:{format_utc(fault.opened)}"
        if key in seen:  # two XIDs in the same second on one device: one fault
            continue
        seen.add(key)
        place = {
            "node": how.node,
            "device": fault.device,
            "fabric_domain": how.fabric_domain,
            "code": fault.code,
        }
        out.append(
            (
                fault.line,
                _event(
                    key,
                    how.source,
                    "health.fault",
                    fault.opened,
                    {**place, "severity": fault.severity, "detail": fault.detail},
                ),
            )
        )
        if stats.end is not None and stats.end >= fault.opened:
            count = (
                f"; {fault.count_label}: {stats.counts[fault.count_label][0]}"
                if fault.count_label
                else ""
            )
            cleared = {**place, "detail": f"the end of the dcgmi stats window{count}"}
            out.append(
                (
                    fault.line,
                    _event(
                        f"{key}:cleared@{format_utc(stats.end)}",
                        how.source,
                        "health.cleared",
                        stats.end,
                        cleared,
                    ),
                )
            )
    return out


def _telemetry(stats: _Stats, job: str, how: _Options) -> list[tuple[int, dict[str, Any]]]:
    """The job's own measurements, for its tenant: only once the window has ended."""
    if how.tenant is None or stats.start is None or stats.end is None:
        return []
    telemetry = {
        "node": how.node,
        "gpu": stats.gpu,
        "window": {"start": format_utc(stats.start), "end": format_utc(stats.end)},
        "utilisation": stats.sections.get("Performance Stats"),
        "events": stats.sections.get("Event Stats"),
        "health": stats.sections.get("Overall Health", {}).get("Overall Health"),
    }
    data = {
        "tenant": how.tenant,
        "job_id": job,
        "dcgm_stats": {k: v for k, v in telemetry.items() if v is not None},
    }
    # a job id reused later is another window
    key = f"{job}:{stats.gpu}:stats@{format_utc(stats.start)}"
    return [(stats.line, _event(key, how.source, "job.submitted", stats.start, data))]


def _event(
    event_id: str, source: str, kind: str, moment: datetime, data: dict[str, Any]
) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": event_id,
        "source": source,
        "type": kind,
        "time": format_utc(moment),
        "data": {k: v for k, v in data.items() if v is not None},
    }


__all__ = ["DcgmStatsIngestor"]
