"""Slurm accounting, as printed by `sacct --parsable2` (or `--parsable`, whose rows end
with one more delimiter), with a header line or with `--noheader` and the field list.

sacct is polled: the same job is printed again and again while it waits, runs and ends.
So each event records one transition of the job, and holds only what is fixed once that
transition has happened; a later poll repeats it byte for byte (a duplicate) and adds
only the transitions that are new (docs/events.md: same key, same content):

- `job.submitted` at Submit: what is known at submission (SUBMIT_FIELDS: name, user,
  account, request), `gpus` from ReqTRES. Never the state, the elapsed
  time or the usage, which change while the job runs.
- `job.started` at Start (`allocation.granted` beside it when AllocTRES holds
  `gres/gpu`): what is fixed at start (START_FIELDS: partition, nodes, allocation).
- the end event at End, by State: COMPLETED → job.completed; FAILED, TIMEOUT,
  OUT_OF_MEMORY → job.failed (application); NODE_FAIL, BOOT_FAIL → job.failed
  (hardware); PREEMPTED → job.failed (preempted); CANCELLED… → job.cancelled; and
  `allocation.released` beside it. It carries the final state, Elapsed and every other
  field (the usage), and the job's step rows (`.batch`, `.extern`, `.N`) under `steps`.
  A running job's steps and usage are recorded when it has ended.

allocation_id = JobID and gpus = the `gres/gpu=` count (typed `gres/gpu:<model>=` counts
are never added to it). The grant's nodes are NodeList expanded as Slurm's hostlist
(ingest/hostlist.py: `gpu-a[01-02,07]` is three nodes): one node is `node`, several are
`nodes`; a NodeList that is no hostlist, or names more than 100,000 nodes, quarantines
the row. Event ids are `<JobID>:<kind>@<time>`: a requeued job (Slurm
resets its Submit, and it starts again) makes new transitions, not conflicts. Source
`slurm://<cluster>`: the option `cluster`, else the row's own `Cluster` column (so `sacct
-M all`, whose job ids repeat across clusters, keeps them apart), else `default`.
`Unknown`, `None` and `None assigned` mean absent.

Field names are taken as sacct takes them: in any case (`start,end,elapsed`), and a leading
part of a name for the first field that starts with it (`time` is Timelimit); a name sacct
would refuse is an input error naming it. A header printed by sacct is taken as printed,
whatever field comes first (`--format ALL` starts with Account, users' own lists with User
or State), and its delimiter is read from it when no `delimiter` is given.
Times carry no zone: they are read in `--timezone` (default: this machine's zone). The
tenant is Account, else User (or `--tenant-field`); `--tenant NAME` names it for a file
with neither column.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from ingest.base import (
    UTF8_BOM,
    IngestError,
    LocalZone,
    event_from_object,
    fixed_tenant,
    open_source,
)
from ingest.hostlist import expand
from ingest.options import ZONE, TenantOptions, Zone, option
from schemas import Origin, Record, Rejected, format_utc

#: Every field `sacct --helpformat` lists (Slurm 17.11 to 24.05), in sacct's own spelling.
SACCT_FIELDS = (
    "Account",
    "AdminComment",
    "AllocCPUS",
    "AllocGRES",
    "AllocNodes",
    "AllocTRES",
    "AssocID",
    "AveCPU",
    "AveCPUFreq",
    "AveDiskRead",
    "AveDiskWrite",
    "AvePages",
    "AveRSS",
    "AveVMSize",
    "BlockID",
    "Cluster",
    "Comment",
    "Constraints",
    "ConsumedEnergy",
    "ConsumedEnergyRaw",
    "Container",
    "CPUTime",
    "CPUTimeRAW",
    "DBIndex",
    "DerivedExitCode",
    "Elapsed",
    "ElapsedRaw",
    "Eligible",
    "End",
    "ExitCode",
    "Extra",
    "FailedNode",
    "Flags",
    "GID",
    "Group",
    "JobID",
    "JobIDRaw",
    "JobName",
    "Layout",
    "Licenses",
    "MaxDiskRead",
    "MaxDiskReadNode",
    "MaxDiskReadTask",
    "MaxDiskWrite",
    "MaxDiskWriteNode",
    "MaxDiskWriteTask",
    "MaxPages",
    "MaxPagesNode",
    "MaxPagesTask",
    "MaxRSS",
    "MaxRSSNode",
    "MaxRSSTask",
    "MaxVMSize",
    "MaxVMSizeNode",
    "MaxVMSizeTask",
    "McsLabel",
    "MinCPU",
    "MinCPUNode",
    "MinCPUTask",
    "NCPUS",
    "NNodes",
    "NodeList",
    "NTasks",
    "Partition",
    "Planned",
    "PlannedCPU",
    "PlannedCPURAW",
    "Priority",
    "QOS",
    "QOSRAW",
    "QOSREQ",
    "Reason",
    "ReqCPUFreq",
    "ReqCPUFreqGov",
    "ReqCPUFreqMax",
    "ReqCPUFreqMin",
    "ReqCPUS",
    "ReqGRES",
    "ReqMem",
    "ReqNodes",
    "ReqTRES",
    "Reservation",
    "ReservationId",
    "Reserved",
    "ResvCPU",
    "ResvCPURAW",
    "Start",
    "State",
    "StdErr",
    "StdIn",
    "StdOut",
    "Submit",
    "SubmitLine",
    "Suspended",
    "SystemComment",
    "SystemCPU",
    "Timelimit",
    "TimelimitRaw",
    "TotalCPU",
    "TRESUsageInAve",
    "TRESUsageInMax",
    "TRESUsageInMaxNode",
    "TRESUsageInMaxTask",
    "TRESUsageInMin",
    "TRESUsageInMinNode",
    "TRESUsageInMinTask",
    "TRESUsageInTot",
    "TRESUsageOutAve",
    "TRESUsageOutMax",
    "TRESUsageOutMaxNode",
    "TRESUsageOutMaxTask",
    "TRESUsageOutMin",
    "TRESUsageOutMinNode",
    "TRESUsageOutMinTask",
    "TRESUsageOutTot",
    "UID",
    "User",
    "UserCPU",
    "WCKey",
    "WCKeyID",
    "WorkDir",
)
_BY_LOWER = {name.lower(): name for name in SACCT_FIELDS}
#: Fixed once the job is submitted: they ride on `job.submitted`. Not the time limit or the
#: QOS, which `scontrol update` changes while the job waits or runs: they go with the end.
SUBMIT_FIELDS = frozenset(
    {
        "JobID",
        "JobIDRaw",
        "User",
        "UID",
        "Group",
        "GID",
        "Account",
        "Cluster",
        "WCKey",
        "WCKeyID",
        "QOSREQ",
        "Submit",
        "SubmitLine",
        "ReqTRES",
        "ReqGRES",
        "ReqMem",
        "ReqCPUS",
        "ReqNodes",
        "ReqCPUFreq",
        "ReqCPUFreqGov",
        "ReqCPUFreqMax",
        "ReqCPUFreqMin",
        "Constraints",
        "WorkDir",
        "StdIn",
        "StdOut",
        "StdErr",
        "AssocID",
        "DBIndex",
    }
)
#: Fixed once the job has started: they ride on `job.started`.
START_FIELDS = frozenset(
    {
        "Partition",
        "NodeList",
        "NNodes",
        "NCPUS",
        "AllocCPUS",
        "AllocNodes",
        "AllocTRES",
        "AllocGRES",
        "Start",
        "Eligible",
        "Reservation",
        "ReservationId",
        "Layout",
        "Licenses",
        "McsLabel",
    }
)
#: Read but kept out of every event: a job's name is free text its owner may change at any
#: time (`scontrol update JobName=`), and anonymisers replace it at each sighting, so it
#: would make two polls of one unchanged job disagree; it identifies nothing reconciled.
UNSTABLE_FIELDS = frozenset({"JobName"})
_NOT_FINAL = SUBMIT_FIELDS | START_FIELDS | UNSTABLE_FIELDS
TENANT_FIELDS = ("Account", "User")
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
_WIDTH = re.compile(r"%-?\d*$")  # `JobName%30`: sacct's column width, meaningless when parsable
_HEADER_WORD = re.compile(rb"[A-Za-z][A-Za-z0-9_]*")


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


def sacct_field(name: str) -> str | None:
    """A field as sacct reads one in `--format`: any case, and, like sacct, a leading part
    of a name stands for the first field in sacct's table that starts with it (`time` is
    Timelimit, `node` NodeList). None when sacct would refuse it."""
    wanted = _WIDTH.sub("", name.strip()).lower()
    if not wanted:
        return None
    return _BY_LOWER.get(wanted) or next(
        (f for f in SACCT_FIELDS if f.lower().startswith(wanted)), None
    )


def sacct_fields(names: list[str], option: str) -> list[str]:
    """A field list given by hand (the `option` named, `fields`), in sacct's own spelling."""
    fields = []
    for name in names:
        canonical = sacct_field(name)
        if canonical is None:
            raise IngestError(
                f"unknown sacct field {name.strip()!r} (`sacct --helpformat` lists them)",
                option=option,
            )
        fields.append(canonical)
    return fields


def header_fields(names: list[str]) -> list[str]:
    """The field names of a header sacct printed: its own spelling, kept as printed when a
    newer Slurm prints one this list does not know (`--format=ALL`)."""
    return [_BY_LOWER.get(name.strip().lower(), name.strip()) for name in names]


@dataclass(frozen=True)
class _Context:
    """What every row of one file is read with."""

    file: str
    cluster: str | None  # the option; else each row's Cluster column, else "default"
    zone: LocalZone
    tenant: str | None  # --tenant: one tenant for the whole file
    tenant_field: str | None  # --tenant-field, in sacct's spelling

    def source(self, row: dict[str, str]) -> str:
        cluster = self.cluster or _present(row.get("Cluster", "")) or "default"
        return f"slurm://{cluster}"


def _present(value: str) -> str | None:
    return None if value in ABSENT else value


class SacctOptions(TenantOptions):
    """What sacct is told beside its file."""

    format = "sacct"

    fields: str | None = option(
        "The --format field list the file was made with (then no header is expected)."
    )
    delimiter: str | None = option("The field delimiter (default '|').")
    cluster: str | None = option("The cluster name, part of every event's source.")
    tenant_field: str | None = option(
        "The field to take the tenant from (default: Account, else User)."
    )
    tenant: str | None = option("The tenant of every record, for a file with no Account and User.")
    timezone: Zone = option(ZONE)


class SacctIngestor:
    name = "sacct"
    options = SacctOptions
    description = "Slurm sacct --parsable2 / --parsable output"
    local_times = True  # sacct prints local time with no zone

    def identify(self, path: Path, head: bytes) -> bool:
        first = head.removeprefix(UTF8_BOM).split(b"\n", 1)[0].rstrip(b"\r")
        return header_delimiter(first) is not None

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        tenant = fixed_tenant(options)
        field = options.get("tenant_field")
        context = _Context(
            str(path),
            options.get("cluster") or None,
            LocalZone(options.get("timezone")),
            tenant,
            sacct_fields([field], "tenant_field")[0] if field else None,
        )
        fields = options.get("fields")
        field_list = sacct_fields(fields.split(","), "fields") if fields else None
        if field_list is not None:
            _check_fields(field_list, context, None)
        delimiter = options.get("delimiter") or (None if field_list else _sniffed(path)) or "|"
        with open_source(path) as stream:
            yield from _job_events(_Rows(context, stream, delimiter, field_list), context)


def header_delimiter(line: bytes) -> str | None:
    """The delimiter of a header line sacct printed, or None when the line is not one: field
    names (any case, in any order, JobID or JobIDRaw among them, most of them sacct's)
    joined by one delimiter, perhaps with one more at the end (`--parsable`)."""
    words = _HEADER_WORD.findall(line)
    gaps = _HEADER_WORD.split(line)
    if len(words) < 2 or gaps[0] or len(set(gaps[1:-1])) != 1:
        return None
    raw = gaps[1]
    try:
        delimiter = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if gaps[-1] not in (b"", raw) or not delimiter.strip() or delimiter.strip() != delimiter:
        return None
    names = {w.decode().lower() for w in words}
    known = sum(1 for name in names if name in _BY_LOWER)
    if not names & {"jobid", "jobidraw"} or known * 2 < len(names):
        return None
    return delimiter


def _sniffed(path: Path) -> str | None:
    with open_source(path) as stream:
        first = stream.readline(1 << 16).removeprefix(UTF8_BOM).rstrip(b"\r\n")
    return header_delimiter(first)


def _check_fields(fields: list[str], context: _Context, where: str | None) -> None:
    """`where`: the header line that named the fields; None when the `fields` option did."""
    source, option = (f"{where}: ", None) if where else ("", "fields")
    if "JobID" not in fields and "JobIDRaw" not in fields:
        raise IngestError(f"{source}the field list has no JobID", option=option)
    if not {"Submit", "Start", "End"} & set(fields):
        raise IngestError(
            f"{source}the field list has no Submit, Start or End, so no transition has a time; "
            "add them to the fields sacct prints",
            option=option,
        )
    if context.tenant is not None:
        return
    wanted = [context.tenant_field] if context.tenant_field else list(TENANT_FIELDS)
    if not any(f in fields for f in wanted):
        raise IngestError(
            f"{source}no tenant column: the fields have no {' or '.join(wanted)}; "
            "name the tenant of the whole file",
            option="tenant",
        )


class _Rows:
    """The file's rows as dicts keyed by sacct's field names, with line numbers; rows of
    the wrong width become rejections."""

    def __init__(
        self, context: _Context, stream: BinaryIO, delimiter: str, fields: list[str] | None
    ) -> None:
        self.context, self.stream, self.delimiter, self.fields = context, stream, delimiter, fields

    def __iter__(self) -> Iterator[tuple[Origin, dict[str, str] | Rejected, bytes]]:
        offset = 0
        for number, raw in enumerate(self.stream, start=1):
            origin = Origin(self.context.file, number, offset)
            offset += len(raw)
            try:
                text = raw.decode("utf-8").removeprefix("\ufeff").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                yield (
                    origin,
                    Rejected(origin, "(row)", f"not valid UTF-8 at byte {exc.start}", raw),
                    raw,
                )
                continue
            if not text.strip():
                continue
            values = text.split(self.delimiter)
            if values[-1] == "" and (self.fields is None or len(values) == len(self.fields) + 1):
                values.pop()  # --parsable's trailing delimiter
            if self.fields is None:  # the header names the fields
                where = f"{self.context.file}:{number}: header"
                if values[0][:1].isdigit():
                    raise IngestError(
                        f"{where}: the first line is a job ({values[0]}), not a header: for "
                        "`sacct --noheader` output give the field list",
                        option="fields",
                    )
                self.fields = header_fields(values)
                _check_fields(self.fields, self.context, where)
                continue
            if [v.lower() for v in values] == [f.lower() for f in self.fields]:
                continue  # a header line although --fields was given
            if len(values) != len(self.fields):
                yield (
                    origin,
                    Rejected(
                        origin,
                        "(row)",
                        f"expected {len(self.fields)} fields, found {len(values)}",
                        raw,
                    ),
                    raw,
                )
                continue
            row = dict(zip(self.fields, values))
            if "JobID" not in row:
                row["JobID"] = row["JobIDRaw"]
            yield origin, row, raw


_Group = list[tuple[Origin, dict[str, str], bytes]]


def _job_events(rows: _Rows, context: _Context) -> Iterator[Record]:
    """A job row and the step rows after it are one group, read together."""
    pending: _Group = []
    for origin, row, raw in rows:
        if isinstance(row, Rejected):
            yield from _events_of(pending, context)  # keep file order
            pending = []
            yield row
            continue
        if (
            "." in row["JobID"]
            and pending
            and row["JobID"].split(".")[0] == pending[0][1]["JobID"]
        ):
            pending.append((origin, row, raw))
            continue
        yield from _events_of(pending, context)
        pending = [(origin, row, raw)]
    yield from _events_of(pending, context)


def _events_of(group: _Group, context: _Context) -> Iterator[Record]:
    if not group:
        return
    origin, row, raw = group[0]
    if "." in row["JobID"]:  # steps whose job row is not in this file: kept, in quarantine
        job = row["JobID"].split(".")[0]
        yield from (
            Rejected(o, "JobID", f"step {r['JobID']} without its job row {job}", b)
            for o, r, b in group
        )
        return
    try:
        events = _job_row_events(row, [r for _, r, _ in group[1:]], context)
    except ValueError as exc:
        field, _, reason = str(exc).partition(": ")
        yield Rejected(origin, field if reason else "(row)", reason or str(exc), raw)
        return
    records = [event_from_object(event, origin, raw) for event in events]
    rejected = [r for r in records if isinstance(r, Rejected)]
    # A row is one record: all its events, or the row in quarantine.
    yield from (rejected[:1] if rejected else records)


def _tenant(row: dict[str, str], context: _Context) -> str:
    if context.tenant is not None:
        return context.tenant
    fields = [context.tenant_field] if context.tenant_field else list(TENANT_FIELDS)
    for field in fields:
        value = row.get(field, "")
        if value not in ABSENT:
            return value
    empty = (
        f"{fields[0]} is empty" if len(fields) == 1 else f"{' and '.join(fields)} are both empty"
    )
    raise ValueError(f"{fields[0]}: no tenant: {empty}")


def _time(row: dict[str, str], field: str, context: _Context) -> str | None:
    """ISO local time as sacct prints it, or epoch seconds (`SLURM_TIME_FORMAT=%s`)."""
    text = row.get(field, "")
    if text in ABSENT:
        return None
    try:
        if text.isdigit() and text.isascii() and len(text) <= 12:
            return format_utc(datetime.fromtimestamp(int(text), timezone.utc))
        return format_utc(context.zone.utc(datetime.fromisoformat(text)))
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{field}: not a time: {text!r}") from None


def _seconds(row: dict[str, str], field: str) -> float | None:
    try:
        return parse_elapsed(row[field]) if field in row else None
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None


def gres_gpu_count(gres: str) -> int | None:
    """The GPUs of an old-style GRES list (Slurm before TRES: `gpu:2`, `gpu:tesla:2(IDX:0-1)`)."""
    count = 0
    for item in re.sub(r"\(.*?\)", "", gres).split(","):
        parts = item.split(":")
        if parts[0] == "gpu" and len(parts) >= 2:
            count += int(parts[-1])
    return count or None


def _gpus(row: dict[str, str], field: str) -> int | None:
    """From the TRES list (`AllocTRES`, `ReqTRES`), else the GRES list older Slurm printed."""
    gres = field.replace("TRES", "GRES")
    try:
        if field not in row and gres in row:
            return gres_gpu_count(row[gres])
        return gpu_count(row.get(field, "")) or None
    except ValueError as exc:
        where = field if field in row else gres
        reason = (
            str(exc) if "negative" in str(exc) else f"not a {where[-4:]} list: {row.get(where)!r}"
        )
        raise ValueError(f"{where}: {reason}") from None


def _nodes(row: dict[str, str]) -> dict[str, Any]:
    """NodeList as the grant names it: `node` for one node (as it always was), `nodes` for
    several.
    """
    if row.get("NodeList", "") in ABSENT:
        return {}
    try:
        nodes = expand(row["NodeList"])
    except ValueError as exc:
        raise ValueError(f"NodeList: not a Slurm hostlist: {exc}") from None
    return {"node": nodes[0]} if len(nodes) == 1 else {"nodes": nodes}


def _job_row_events(
    row: dict[str, str], steps: list[dict[str, str]], context: _Context
) -> list[dict[str, Any]]:
    job_id, tenant, state = row["JobID"], _tenant(row, context), row.get("State", "")
    submit, start, end = (_time(row, f, context) for f in ("Submit", "Start", "End"))
    elapsed, timelimit = _seconds(row, "Elapsed"), _seconds(row, "Timelimit")
    gpus = _gpus(row, "AllocTRES")
    job = {"tenant": tenant, "job_id": job_id}
    submitted_fields = {k: v for k, v in row.items() if k in SUBMIT_FIELDS}
    started_fields = {k: v for k, v in row.items() if k in START_FIELDS}
    final_fields = {k: v for k, v in row.items() if k not in _NOT_FINAL}
    steps = [{k: v for k, v in step.items() if k not in UNSTABLE_FIELDS} for step in steps]
    out: list[dict[str, Any]] = []

    def add(kind: str, at: str | None, data: dict[str, Any]) -> None:
        if at is not None:
            out.append(
                {
                    "specversion": "1.0",
                    "id": f"{job_id}:{kind}@{at}",
                    "source": context.source(row),
                    "type": kind,
                    "time": at,
                    "data": {k: v for k, v in data.items() if v is not None},
                }
            )

    add("job.submitted", submit, {**job, "gpus": _gpus(row, "ReqTRES"), "sacct": submitted_fields})
    if start is not None and gpus:
        add(
            "allocation.granted",
            start,
            {"tenant": tenant, "allocation_id": job_id, "gpus": gpus, **_nodes(row)},
        )
    add(
        "job.started",
        start,
        {
            **job,
            "allocation_id": job_id,
            "attempt": 1,
            "queue": row.get("Partition") or None,
            "sacct": started_fields,
        },
    )
    kind, cause = _END_EVENTS.get(state, (None, None))
    final = {
        **job,
        "state": state,
        "elapsed_s": elapsed,
        "timelimit_s": timelimit,
        "sacct": final_fields,
        "steps": steps or None,
    }
    if state.startswith("CANCELLED"):
        by = state.removeprefix("CANCELLED").strip().removeprefix("by").strip()
        add("job.cancelled", end, {**final, "by": by or None})
    elif kind is not None:
        add(kind, end, {**final, "cause": cause})
    if start is not None and gpus and end is not None and state not in ("RUNNING", "PENDING"):
        add(
            "allocation.released",
            end,
            {"tenant": tenant, "allocation_id": job_id, "reason": state},
        )
    return out
