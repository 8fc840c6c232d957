"""reconcile/RULES.md read the plain way, in pandas and Python: the baseline the DuckDB
engine is timed against, and the oracle the engine's tests compare with.

It shares nothing with the engine (it imports nothing from `reconcile/`): it reads the
ledger's entries as stored (the canonical CloudEvent JSON of each, from a plain SELECT of
`entries`, an exported Parquet file or an exported JSON Lines file), parses every event
and its RFC 3339 times itself, and applies the rules as its own reading of RULES.md. So a
slip in the engine's projection (a time misread, a field left out, progress keyed wrong)
shows as a difference, not as agreement.

Nothing here is clever. The events are grouped with pandas into per-allocation and
per-job lists; each allocation gets the intervals of every category (RULES.md 2–10), a
sweep labels each stretch of its holding with the first category that applies, and each
billing line (after corrections) is cut against that timeline, after `unallocated` and
`double_billed` (RULES.md 1) are taken off.

Times are integer microseconds since the epoch; +∞ is 2**62. "At or after" between two
events means later in (time, seq) order (RULES.md: "events at the same instant are taken
in ledger order"); a comparison with a bare moment (terms in force, the last save before
a failure, a fault within 300 s of one, the first release at or after `granted`) is by
time alone, as RULES.md words it. Progress
marks "with time in [start, end]" are taken in (time, seq) order too: a progress at the
start's instant but earlier in the ledger was made before the attempt started.

Two points RULES.md leaves open, decided here and named in the module's tests: when one
second falls in the restart intervals of two failures with different bearers, `provider`
wins; when it is productive for two jobs in different acceptance states, the order is
accepted, rejected, pending. Money (`line_cents`) follows RULES.md §Money; its rounding
ties between the productive rows of one line go accepted, rejected, pending.

RULES.md 11-13 (one job on many nodes; the engine's reading is pending, issue 33): a grant's
nodes, gang attempts and the touch rule across a gang, notice owed, all inside
`reconcile_frame`; they change nothing where no grant lists `nodes`, no job starts on two
allocations with one attempt number and no preempted failure comes inside the notice.
Each line's placement state and claim are a separate output (`placement_lines`,
`placement_tenants`), so no figure above depends on them.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import pyarrow.parquet as pq
from sqlalchemy import text

from ledger import Store

INF = 2**62
SECOND = 1_000_000
FAULT_LOOKBACK_US = 300 * SECOND
RECLAIM_DECISIONS = frozenset({"preempted", "reclaimed", "evicted"})
JOB_ENDS = ("job.completed", "job.failed", "job.cancelled")
PROVIDER_CAUSES = frozenset({"hardware", "fabric"})

#: Category keys in the order "the first that applies" (RULES.md), restart keys split by
#: bearer and productive by acceptance. `idle_unexplained` marks a running attempt;
#: `idle_reserved` is what no interval claims.
PRIORITY = (
    "double_billed",
    "reclaimed",
    "checkpoint",
    "restart_lost:provider",
    "restart_lost:customer",
    "restart_recovery:provider",
    "restart_recovery:customer",
    "productive:accepted",
    "productive:rejected",
    "productive:pending",
    "stalled_fault",
    "startup",
    "idle_unexplained",
)
IDLE_RESERVED = "idle_reserved"


def category_key(category: str, bearer: str, acceptance: str | None) -> str:
    """The key of an engine cell's (category, bearer, acceptance) in this module's terms."""
    if category in ("restart_lost", "restart_recovery"):
        return f"{category}:{bearer}"
    return f"productive:{acceptance}" if category == "productive" else category


RANK = {key: rank for rank, key in enumerate(PRIORITY)}

Key = tuple[int, int]  # (time µs, seq): ledger order among events at the same instant
LineKey = tuple[str, str]


class Terms(NamedTuple):
    warmup_s: int
    stall_s: int
    notice_s: int
    credit_share: Fraction = Fraction(1)  # RULES.md 13: placement_credit_share


DEFAULT_TERMS = Terms(600, 300, 0)


class Grant(NamedTuple):
    t: int
    seq: int
    gpus: int
    node: str | None
    devices: frozenset[str] | None
    fabric_domain: str | None
    nodes: frozenset[str] = frozenset()  # RULES.md 11: its `nodes` and its `node`
    placement_class: str = "whole"


class Mark(NamedTuple):
    t: int
    seq: int
    step: int | None  # None: the job.completed that ends the attempt
    units: int | None


class Fault(NamedTuple):
    t: int
    close: int
    critical: bool
    node: str | None
    device: str | None
    fabric_domain: str | None


@dataclass(frozen=True)
class Attempt:
    job: str
    start: Key
    end: Key  # (INF, INF) while it runs on
    end_type: str | None
    cause: str | None
    number: int = 1  # RULES.md 11: the start's `attempt`


@dataclass
class Fleet:
    """Every fact the rules read, grouped once by pandas, each list in (time, seq) order."""

    grants: dict[tuple[str, str], Grant] = field(default_factory=dict)
    releases: dict[tuple[str, str], list[Key]] = field(default_factory=dict)
    starts: dict[tuple[str, str], list[tuple[Key, str, int]]] = field(default_factory=dict)
    ends: dict[tuple[str, str], list[tuple[Key, str, str | None]]] = field(default_factory=dict)
    #: (tenant, job): its starts (key, allocation, attempt number) in (time, seq) order
    job_starts: dict[tuple[str, str], list[tuple[Key, str, int]]] = field(default_factory=dict)
    #: (tenant, job, attempt number): the allocations of its gang (RULES.md 11)
    gangs: dict[tuple[str, str, int], set[str]] = field(default_factory=dict)
    #: (tenant, allocation): its latest capture per node, as (link texts between its
    #: GPUs, GPU names) (RULES.md 13)
    captures: dict[tuple[str, str], dict[str, tuple[int, int, Any]]] = field(default_factory=dict)
    progress: dict[tuple[str, str], list[Mark]] = field(default_factory=dict)
    saves_started: dict[tuple[str, str], list[tuple[Key, str]]] = field(default_factory=dict)
    saves_done: dict[tuple[str, str], list[tuple[Key, str]]] = field(default_factory=dict)
    reclaims: dict[str, list[tuple[int, str | None, str | None]]] = field(default_factory=dict)
    terms: dict[str, list[tuple[int, Terms]]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    accepted: set[tuple[str, str]] = field(default_factory=set)
    rejected: set[tuple[str, str]] = field(default_factory=set)

    def terms_at(self, tenant: str, moment: int) -> Terms:
        """The latest terms of `tenant` with time ≤ `moment` (ties: the later seq)."""
        history = self.terms.get(tenant, [])
        index = bisect_right([t for t, _ in history], moment)
        return history[index - 1][1] if index else DEFAULT_TERMS


# ---------------------------------------------------------------- reading raw entries

#: The `data` fields the rules read, each with how its JSON value is taken: text (a
#: number given where text is expected, as devices often are, is the same text), an
#: integer, an RFC 3339 time (as µs), or a list of texts (an allocation's devices).
TEXT, INTEGER, TIME, TEXTS = "text", "integer", "time", "texts"
FIELDS: dict[str, str] = {
    "tenant": TEXT,
    "job_id": TEXT,
    "allocation_id": TEXT,
    "step": INTEGER,
    "units": INTEGER,
    "checkpoint_id": TEXT,
    "cause": TEXT,
    "decision": TEXT,
    "node": TEXT,
    "device": TEXT,
    "devices": TEXTS,
    "fabric_domain": TEXT,
    "code": TEXT,
    "severity": TEXT,
    "gpus": INTEGER,
    "line_id": TEXT,
    "invoice_id": TEXT,
    "period_start": TIME,
    "period_end": TIME,
    "amount": TEXT,
    "currency": TEXT,
    "category": TEXT,
    "corrects": TEXT,
    "warmup_allowance_s": INTEGER,
    "stall_threshold_s": INTEGER,
    "reclaim_notice_s": INTEGER,
    # RULES.md 11-13
    "nodes": TEXTS,
    "attempt": INTEGER,
    "placement_credit_share": TEXT,
    "placement_class": TEXT,
    "topology": "raw",
}
#: Fields the rules read from one event type only.
ONLY_IN = {"nodes": "allocation.granted", "topology": "placement.observed"}
#: Column names of the frame where they differ from the field's.
COLUMN = {"period_start": "ps", "period_end": "pe"}
COLUMNS = ("seq", "type", "t", *(COLUMN.get(name, name) for name in FIELDS))

_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)
_EPOCH_DAY = date(1970, 1, 1).toordinal()


@lru_cache(maxsize=4096)
def _day_s(day: str) -> int:
    """Seconds from the epoch to the start (UTC) of a `YYYY-MM-DD` day."""
    return (date.fromisoformat(day).toordinal() - _EPOCH_DAY) * 86_400


def rfc3339_us(text: str) -> int:
    """An RFC 3339 time as integer µs since the epoch (UTC); digits past the µs are dropped
    (the ledger's canonical times carry at most six). A time without a zone names no instant."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 time with a zone: {text!r}")
    day, hour, minute, second, fraction, _z, sign, off_h, off_m = match.groups()
    offset = 0
    if sign:
        offset = (int(off_h) * 60 + int(off_m)) * 60 * (-1 if sign == "-" else 1)
    seconds = _day_s(day) + (int(hour) * 60 + int(minute)) * 60 + int(second) - offset
    return seconds * SECOND + (int(fraction[:6].ljust(6, "0")) if fraction else 0)


def _taken(kind: str, value: Any) -> Any:
    """A `data` value as the rules read it (RULES.md: devices compare as text)."""
    if kind == TEXT:
        return value if isinstance(value, str) else json.dumps(value)
    if kind == INTEGER:
        return int(value)
    if kind == TIME:
        return rfc3339_us(value)
    if kind == "raw":
        return value
    return tuple(_taken(TEXT, item) for item in value)


Entry = tuple[int, str | bytes | dict[str, Any]]
_PLACE = {name: (index, kind) for index, (name, kind) in enumerate(FIELDS.items())}


def entry_row(seq: int, event: str | bytes | dict[str, Any]) -> list[Any]:
    """One ledger entry (its seq and canonical CloudEvent) as a row of the frame's COLUMNS."""
    document = event if isinstance(event, dict) else json.loads(event)
    row: list[Any] = [seq, document["type"], rfc3339_us(document["time"])] + [None] * len(FIELDS)
    for name, value in (document.get("data") or {}).items():
        place = _PLACE.get(name)
        if name in ONLY_IN and ONLY_IN[name] != document["type"]:
            continue  # the same name means something else there (a probe's `nodes` is a count)
        if place is not None and value is not None:
            row[3 + place[0]] = _taken(place[1], value)
    return row


def frame_of_entries(entries: Iterable[Entry]) -> pd.DataFrame:
    """The entries, each event parsed here, as one frame (object columns: integers stay exact)."""
    rows = [entry_row(seq, event) for seq, event in entries]
    columns = list(zip(*rows)) if rows else [()] * len(COLUMNS)
    return pd.DataFrame(
        {
            name: pd.Series(values, dtype="int64" if name in ("seq", "t") else object)
            for name, values in zip(COLUMNS, columns)
        }
    )


def entries_of_store(store: Store) -> Iterator[Entry]:
    """The ledger's entries as stored: a plain SELECT of `entries`, in seq order."""
    with store.reading() as conn:
        for seq, event in conn.execute(text("SELECT seq, event FROM entries ORDER BY seq")):
            yield int(seq), event


def entries_of_parquet(path: Path) -> Iterator[Entry]:
    """The entries of an export (`gpuledger export --format parquet`), a batch at a time."""
    for batch in pq.ParquetFile(path).iter_batches(columns=["seq", "event"], batch_size=100_000):
        yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())


def entries_of_jsonl(path: Path) -> Iterator[Entry]:
    """The entries of an export (`gpuledger export`, JSON Lines: the event embedded as stored)."""
    with path.open("rb") as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)
                yield int(row["seq"]), row["event"]


def _texts(devices: Any) -> frozenset[str] | None:
    """An allocation's devices; None when it lists none (docs/events.md: an empty list is
    none given)."""
    if devices is None or len(devices) == 0:
        return None
    return frozenset(devices)


def _value(v: Any) -> Any:
    """None for every flavour of missing pandas hands back (NaN, pd.NA, None)."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and v != v:
        return None
    return v


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def _rows(frame: pd.DataFrame, *columns: str) -> Iterator[tuple[Any, ...]]:
    lists = [[_value(v) for v in frame[c].tolist()] for c in columns]
    return zip(*lists)


def _of_type(ev: pd.DataFrame, *types: str) -> pd.DataFrame:
    return ev[ev["type"].isin(types)].sort_values(["t", "seq"], kind="stable")


def _grouped(
    frame: pd.DataFrame, by: list[str], *columns: str
) -> dict[Any, list[tuple[Any, ...]]]:
    """{group key: rows of `columns` in (time, seq) order}."""
    out: dict[Any, list[tuple[Any, ...]]] = {}
    for key, group in frame.groupby(by, sort=False, dropna=False):
        out[key] = list(_rows(group, *columns))
    return out


def read_fleet(ev: pd.DataFrame) -> Fleet:
    fleet = Fleet()
    _read_allocations(ev, fleet)
    _read_jobs(ev, fleet)
    _read_checkpoints(ev, fleet)
    _read_policy(ev, fleet)
    _read_captures(ev, fleet)
    fleet.faults = _read_faults(ev)
    for kind, target in (("work.accepted", fleet.accepted), ("work.rejected", fleet.rejected)):
        target.update(
            (tenant, job) for tenant, job in _rows(_of_type(ev, kind), "tenant", "job_id")
        )
    return fleet


def _read_allocations(ev: pd.DataFrame, fleet: Fleet) -> None:
    grants = _of_type(ev, "allocation.granted")
    for (tenant, aid), rows in _grouped(
        grants,
        ["tenant", "allocation_id"],
        "t",
        "seq",
        "gpus",
        "node",
        "devices",
        "fabric_domain",
        "nodes",
        "placement_class",
    ).items():
        t, seq, gpus, node, devices, fabric, nodes, cls = rows[
            0
        ]  # the earliest grant by (time, seq)
        every = frozenset([*(nodes or ()), *([node] if node is not None else [])])
        fleet.grants[(tenant, aid)] = Grant(
            t, seq, int(gpus), node, _texts(devices), fabric, every, cls or "whole"
        )
    releases = _of_type(ev, "allocation.released")
    for key, rows in _grouped(releases, ["tenant", "allocation_id"], "t", "seq").items():
        fleet.releases[key] = [(t, s) for t, s in rows]


def _read_jobs(ev: pd.DataFrame, fleet: Fleet) -> None:
    starts = _of_type(ev, "job.started")
    for key, rows in _grouped(
        starts, ["tenant", "allocation_id"], "t", "seq", "job_id", "attempt"
    ).items():
        fleet.starts[key] = [((t, s), job, _number(n)) for t, s, job, n in rows]
        for t, s, job, n in rows:
            fleet.job_starts.setdefault((key[0], job), []).append(((t, s), key[1], _number(n)))
            fleet.gangs.setdefault((key[0], job, _number(n)), set()).add(key[1])
    for keys in fleet.job_starts.values():
        keys.sort()
    ends = _of_type(ev, *JOB_ENDS)
    for key, rows in _grouped(ends, ["tenant", "job_id"], "t", "seq", "type", "cause").items():
        fleet.ends[key] = [((t, s), kind, cause) for t, s, kind, cause in rows]
    progress = _of_type(ev, "job.progress")
    for key, rows in _grouped(progress, ["tenant", "job_id"], "t", "seq", "step", "units").items():
        fleet.progress[key] = [Mark(t, s, _int(step), _int(units)) for t, s, step, units in rows]


def _number(attempt: Any) -> int:
    """A start's attempt number (RULES.md 11: default 1)."""
    return 1 if attempt is None else int(attempt)


def _read_captures(ev: pd.DataFrame, fleet: Fleet) -> None:
    """RULES.md 13: the latest `placement.observed` of each (tenant, allocation, node)."""
    for t, seq, tenant, aid, node, topology in _rows(
        _of_type(ev, "placement.observed"),
        "t",
        "seq",
        "tenant",
        "allocation_id",
        "node",
        "topology",
    ):
        fleet.captures.setdefault((tenant, aid), {})[node] = (
            t,
            seq,
            topology,
        )  # (time, seq) order: latest wins


def _read_checkpoints(ev: pd.DataFrame, fleet: Fleet) -> None:
    for kind, target in (
        ("checkpoint.started", fleet.saves_started),
        ("checkpoint.saved", fleet.saves_done),
    ):
        frame = _of_type(ev, kind)
        for key, rows in _grouped(
            frame, ["tenant", "job_id"], "t", "seq", "checkpoint_id"
        ).items():
            target[key] = [((t, s), cid) for t, s, cid in rows]


def _read_policy(ev: pd.DataFrame, fleet: Fleet) -> None:
    terms = _of_type(ev, "policy.terms")
    for tenant, rows in _grouped(
        terms,
        ["tenant"],
        "t",
        "warmup_allowance_s",
        "stall_threshold_s",
        "reclaim_notice_s",
        "placement_credit_share",
    ).items():
        name = tenant[0] if isinstance(tenant, tuple) else tenant
        fleet.terms[name] = [
            (t, _terms(_int(w), _int(s), _int(n), share)) for t, w, s, n, share in rows
        ]
    decisions = _of_type(ev, "policy.decision")
    decisions = decisions[decisions["decision"].isin(RECLAIM_DECISIONS)]
    for tenant, rows in _grouped(decisions, ["tenant"], "t", "allocation_id", "job_id").items():
        name = tenant[0] if isinstance(tenant, tuple) else tenant
        fleet.reclaims[name] = [(t, aid, job) for t, aid, job in rows]


def _terms(
    warmup: int | None, stall: int | None, notice: int | None, share: str | None = None
) -> Terms:
    return Terms(
        DEFAULT_TERMS.warmup_s if warmup is None else warmup,
        DEFAULT_TERMS.stall_s if stall is None else stall,
        DEFAULT_TERMS.notice_s if notice is None else notice,
        DEFAULT_TERMS.credit_share if share is None else Fraction(share),
    )


def _read_faults(ev: pd.DataFrame) -> list[Fault]:
    """Each fault open from its time to the first matching `health.cleared` after it."""
    columns = ("node", "device", "fabric_domain", "code")
    clears: dict[tuple[Any, ...], list[Key]] = defaultdict(list)
    for t, seq, *place in _rows(_of_type(ev, "health.cleared"), "t", "seq", *columns):
        clears[tuple(place)].append((t, seq))
    faults = []
    for t, seq, severity, *place in _rows(
        _of_type(ev, "health.fault"), "t", "seq", "severity", *columns
    ):
        later = clears.get(tuple(place), [])
        index = bisect_right(later, (t, seq))
        close = later[index][0] if index < len(later) else INF
        node, device, fabric, _code = place
        faults.append(Fault(t, close, severity == "critical", node, device, fabric))
    return faults


# ---------------------------------------------------------------- one allocation


def touches(fault: Fault, grant: Grant) -> bool:
    """RULES.md 7: does this fault touch the allocation?"""
    if fault.fabric_domain is not None and fault.fabric_domain == grant.fabric_domain:
        return True
    on_device = (
        fault.device is not None
        and grant.devices is not None
        and _holds(grant.devices, fault.device)
    )
    if fault.node is not None:  # RULES.md 11: one of a's nodes (its `nodes` and its `node`)
        return fault.node in grant.nodes and (
            fault.device is None or grant.devices is None or on_device
        )
    return on_device


def _holds(devices: frozenset[str], device: str) -> bool:
    """Whether an allocation's devices include `device`: listed as such, or the whole GPU
    of a MIG instance it lists (`<gpu>/<gi>`: a fault on GPU `0` reaches instance `0/13`)."""
    return device in devices or any(
        held.split("/", 1)[0] == device for held in devices if "/" in held
    )


@dataclass
class Allocation:
    """One allocation's holding H and the labelled intervals of its categories."""

    tenant: str
    grant: Grant | None
    held: tuple[int, int]
    attempts: list[Attempt]
    intervals: list[tuple[int, int, str]] = field(default_factory=list)

    def add(self, start: int, end: int, key: str) -> None:
        if start < end:
            self.intervals.append((start, end, key))


def allocation_of(fleet: Fleet, tenant: str, aid: str | None) -> Allocation:
    grant = None if aid is None else fleet.grants.get((tenant, aid))
    if aid is None or grant is None:  # no allocation named, or none granted: H is empty
        return Allocation(tenant, None, (0, 0), [])
    # RULES.md 3: the first release at or after `granted`, a moment: by time alone
    released = [k for k in fleet.releases.get((tenant, aid), []) if k[0] >= grant.t]
    held = (grant.t, released[0][0] if released else INF)
    alloc = Allocation(tenant, grant, held, _attempts(fleet, tenant, aid))
    _reclaimed(fleet, alloc, aid)
    _checkpoints(fleet, alloc)
    _restarts(fleet, alloc)
    for attempt in alloc.attempts:
        _marks_and_gaps(fleet, alloc, attempt)
        alloc.add(attempt.start[0], attempt.end[0], "idle_unexplained")
    _startups(fleet, alloc)
    return alloc


def _attempts(fleet: Fleet, tenant: str, aid: str) -> list[Attempt]:
    out = []
    for start, job, number in fleet.starts.get((tenant, aid), []):
        # RULES.md 11: to the job's first end event after the start, or its next start on
        # this allocation or with a higher attempt number, whichever comes first (a gang
        # sibling's start never ends it); an attempt cut short by a start has no end event.
        later = [
            k
            for k, where, n in fleet.job_starts[(tenant, job)]
            if k > start and (where == aid or n > number)
        ]
        cut: Key = later[0] if later else (INF, INF)
        ends = fleet.ends.get((tenant, job), [])
        index = bisect_right([k for k, _, _ in ends], start)
        if index < len(ends) and ends[index][0] < cut:
            end, kind, cause = ends[index]
            out.append(Attempt(job, start, end, kind, cause, number))
        else:
            out.append(Attempt(job, start, cut, None, None, number))
    return out


def gang_grants(fleet: Fleet, tenant: str, attempt: Attempt) -> list[Grant]:
    """The grants of the allocations of the attempt's gang (RULES.md 11), its own included."""
    gang = fleet.gangs.get((tenant, attempt.job, attempt.number), set())
    return [fleet.grants[(tenant, aid)] for aid in sorted(gang) if (tenant, aid) in fleet.grants]


def touches_attempt(fault: Fault, fleet: Fleet, tenant: str, attempt: Attempt) -> bool:
    """RULES.md 11: a fault touches an attempt when it touches any allocation of its gang."""
    return any(touches(fault, grant) for grant in gang_grants(fleet, tenant, attempt))


def notice_owed(fleet: Fleet, tenant: str, attempt: Attempt) -> bool:
    """RULES.md 12: the attempt ended in a `preempted` failure at t_f with t_r ≤ t_f <
    t_r + reclaim_notice_s for a reclaim decision of its job or of its gang's allocations."""
    if attempt.end_type != "job.failed" or attempt.cause != "preempted":
        return False
    t_f = attempt.end[0]
    gang = fleet.gangs.get((tenant, attempt.job, attempt.number), set())
    return any(
        t_r <= t_f < t_r + fleet.terms_at(tenant, t_r).notice_s * SECOND
        for t_r, aid, job in fleet.reclaims.get(tenant, [])
        if job == attempt.job or aid in gang
    )


def _reclaimed(fleet: Fleet, alloc: Allocation, aid: str) -> None:
    jobs = {a.job for a in alloc.attempts}
    bounds = [
        t + fleet.terms_at(alloc.tenant, t).notice_s * SECOND
        for t, decision_aid, job in fleet.reclaims.get(alloc.tenant, [])
        if decision_aid == aid or (job is not None and job in jobs)
    ]
    # RULES.md 12: a failure that was owed notice is reclaimed from its own instant
    bounds += [a.end[0] for a in alloc.attempts if notice_owed(fleet, alloc.tenant, a)]
    if bounds:
        alloc.add(min(bounds), INF, "reclaimed")


def _checkpoints(fleet: Fleet, alloc: Allocation) -> None:
    for job in {a.job for a in alloc.attempts}:
        runs = [(a.start[0], a.end[0]) for a in alloc.attempts if a.job == job]
        saves = fleet.saves_done.get((alloc.tenant, job), [])
        for began, cid in fleet.saves_started.get((alloc.tenant, job), []):
            saved = next((k for k, c in saves if c == cid and k > began), None)
            if saved is None:
                continue
            for run_start, run_end in runs:
                alloc.add(max(began[0], run_start), min(saved[0], run_end), "checkpoint")


def _restarts(fleet: Fleet, alloc: Allocation) -> None:
    for attempt in alloc.attempts:
        if attempt.end_type != "job.failed":
            continue
        t_f = attempt.end[0]
        bearer = _restart_bearer(fleet, alloc, attempt)
        saves = [
            k[0] for k, _ in fleet.saves_done.get((alloc.tenant, attempt.job), []) if k[0] < t_f
        ]
        alloc.add(max([attempt.start[0], *saves]), t_f, f"restart_lost:{bearer}")
        following = [a for a in alloc.attempts if a.job == attempt.job and a.start > attempt.end]
        if following:
            alloc.add(
                t_f, _recovered_at(fleet, alloc.tenant, following[0]), f"restart_recovery:{bearer}"
            )


def _restart_bearer(fleet: Fleet, alloc: Allocation, attempt: Attempt) -> str:
    t_f = attempt.end[0]
    if attempt.cause in PROVIDER_CAUSES or notice_owed(fleet, alloc.tenant, attempt):
        return "provider"
    near = any(
        f.critical
        and t_f - FAULT_LOOKBACK_US <= f.t <= t_f
        and touches_attempt(f, fleet, alloc.tenant, attempt)
        for f in fleet.faults
    )
    return "provider" if near else "customer"


def _recovered_at(fleet: Fleet, tenant: str, attempt: Attempt) -> int:
    """The first progress mark of `attempt`, else its end."""
    firsts = [m.t for m in marks_of(fleet, tenant, attempt) if m.step is not None]
    return firsts[0] if firsts else attempt.end[0]


def marks_of(fleet: Fleet, tenant: str, attempt: Attempt) -> list[Mark]:
    """Progress in [start, end] (in (time, seq) order: a progress at the start's instant but
    earlier in the ledger came before the start), and the job.completed that ends the attempt."""
    progress = fleet.progress.get((tenant, attempt.job), [])
    keys = [(m.t, m.seq) for m in progress]
    marks = progress[bisect_left(keys, attempt.start) : bisect_right(keys, attempt.end)]
    if attempt.end_type == "job.completed":
        marks = sorted(
            [*marks, Mark(attempt.end[0], attempt.end[1], None, None)], key=lambda m: (m.t, m.seq)
        )
    return marks


def _rose(previous: Mark | None, mark: Mark) -> bool:
    if mark.step is None:
        return True  # job.completed
    if previous is None or previous.step is None:
        return False
    if mark.step != previous.step:
        return mark.step > previous.step
    return mark.units is not None and previous.units is not None and mark.units > previous.units


def _marks_and_gaps(fleet: Fleet, alloc: Allocation, attempt: Attempt) -> None:
    """RULES.md 6 and 7 for the gaps between consecutive marks of one attempt."""
    marks = marks_of(fleet, alloc.tenant, attempt)
    productive = f"productive:{_acceptance(fleet, alloc.tenant, attempt.job)}"
    last_progress: Mark | None = None
    for here, there in zip(marks, marks[1:]):
        if here.step is not None:
            last_progress = here
        threshold = fleet.terms_at(alloc.tenant, here.t).stall_s * SECOND
        if there.t - here.t <= threshold:
            if _rose(last_progress, there):
                alloc.add(here.t, there.t, productive)
        elif _fault_open(fleet, alloc, attempt, here.t, there.t):
            alloc.add(here.t, there.t, "stalled_fault")


def _fault_open(fleet: Fleet, alloc: Allocation, attempt: Attempt, start: int, end: int) -> bool:
    return any(
        f.critical
        and max(f.t, start) < min(f.close, end)
        and touches_attempt(f, fleet, alloc.tenant, attempt)
        for f in fleet.faults
    )


def _acceptance(fleet: Fleet, tenant: str, job: str) -> str:
    if (tenant, job) in fleet.accepted:
        return "accepted"
    return "rejected" if (tenant, job) in fleet.rejected else "pending"


def _startups(fleet: Fleet, alloc: Allocation) -> None:
    assert alloc.grant is not None
    for index, attempt in enumerate(sorted(alloc.attempts, key=lambda a: a.start)):
        start = attempt.start[0]
        if index == 0 and alloc.grant.t <= start:
            start = alloc.grant.t
        warmup = fleet.terms_at(alloc.tenant, start).warmup_s * SECOND
        firsts = [m.t for m in marks_of(fleet, alloc.tenant, attempt) if m.step is not None]
        alloc.add(start, min([*firsts[:1], start + warmup, attempt.end[0]]), "startup")


# ---------------------------------------------------------------- the sweep


def timeline(alloc: Allocation) -> list[tuple[int, int, str]]:
    """H cut into stretches, each labelled with the first category that applies."""
    lo, hi = alloc.held
    if lo >= hi:
        return []
    changes: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for start, end, key in alloc.intervals:
        start, end = max(start, lo), min(end, hi)
        if start < end:
            changes[start].append((RANK[key], 1))
            changes[end].append((RANK[key], -1))
    points = sorted({lo, hi, *changes})
    active = [0] * len(PRIORITY)
    out: list[tuple[int, int, str]] = []
    for here, there in zip(points, points[1:]):
        for rank, delta in changes.get(here, []):
            active[rank] += delta
        if here >= lo and there <= hi:
            key = next((PRIORITY[r] for r, n in enumerate(active) if n > 0), IDLE_RESERVED)
            _append(out, here, there, key)
    return out


def _append(out: list[tuple[int, int, str]], start: int, end: int, key: str) -> None:
    if out and out[-1][1] == start and out[-1][2] == key:
        out[-1] = (out[-1][0], end, key)
    else:
        out.append((start, end, key))


# ---------------------------------------------------------------- lines


def effective_lines(ev: pd.DataFrame) -> pd.DataFrame:
    """Every billing line in ledger order, less those another line of the tenant corrects."""
    lines = ev[ev["type"] == "billing.line"].sort_values("seq")
    named = {(t, c) for t, c in _rows(lines, "tenant", "corrects") if c is not None}
    keep = [(t, line) not in named for t, line in _rows(lines, "tenant", "line_id")]
    return lines[keep]


def _bills_gpus(category: str | None, gpus: int | None) -> bool:
    """RULES.md 2: a line is money-only when it is a credit or bills no GPUs; any other is a
    GPU line, whether or not it names an allocation and whatever its window."""
    return category != "credit" and bool(gpus)


def reconcile_frame(ev: pd.DataFrame) -> dict[LineKey, dict[str, int]]:
    """{(tenant, line_id): {category key: GPU-µs}} for every line after corrections.
    A line of no GPU time (money-only, or an empty window) maps to {}."""
    fleet = read_fleet(ev)
    out: dict[LineKey, dict[str, int]] = {}
    per_allocation: dict[tuple[str, str | None], list[tuple[str, int, int, int]]] = defaultdict(
        list
    )
    for tenant, line, category, gpus, aid, ps, pe in _rows(
        effective_lines(ev), "tenant", "line_id", "category", "gpus", "allocation_id", "ps", "pe"
    ):
        out.setdefault((tenant, line), {})
        g_b, start, end = _int(gpus), _int(ps), _int(pe)
        if (
            _bills_gpus(category, g_b)
            and g_b is not None
            and start is not None
            and end is not None
        ):
            # no allocation named: allocation_of finds no grant, so H is empty (§Unallocated)
            per_allocation[(tenant, aid)].append((line, g_b, start, end))
    for (tenant, aid), lines in per_allocation.items():
        alloc = allocation_of(fleet, tenant, aid)
        for line, cells in classify_lines(alloc, timeline(alloc), lines):
            target = out[(tenant, line)]
            for key, us in cells.items():
                target[key] = target.get(key, 0) + us
    return out


def classify_lines(
    alloc: Allocation,
    stretches: list[tuple[int, int, str]],
    lines: Sequence[tuple[str, int, int, int]],
) -> Iterator[tuple[str, dict[str, int]]]:
    """Each line of one allocation, in ledger order, cut into categories."""
    billed_before: list[tuple[int, int]] = []
    starts = [s for s, _, _ in stretches]
    g_a = alloc.grant.gpus if alloc.grant else 0
    for line, g_b, ps, pe in lines:
        cells: dict[str, int] = defaultdict(int)
        g = min(g_b, g_a)
        inside = (max(ps, alloc.held[0]), min(pe, alloc.held[1]))
        inside_us = max(0, inside[1] - inside[0])
        cells["unallocated"] = (g_b - g) * (pe - ps) + g * (pe - ps - inside_us)
        if inside_us:
            again = _overlap(billed_before, inside)
            cells["double_billed"] = g * sum(e - s for s, e in again)
            for start, end in _subtract(inside, again):
                for key, us in _cut(stretches, starts, start, end):
                    cells[key] += g * us
        if pe > ps:  # an empty window holds no second an earlier line could bill
            billed_before = _union(billed_before, (ps, pe))
        yield line, {k: v for k, v in cells.items() if v}


def _overlap(spans: list[tuple[int, int]], window: tuple[int, int]) -> list[tuple[int, int]]:
    return [
        (max(s, window[0]), min(e, window[1]))
        for s, e in spans
        if max(s, window[0]) < min(e, window[1])
    ]


def _subtract(window: tuple[int, int], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, cursor = [], window[0]
    for s, e in spans:  # sorted, disjoint, inside window
        if cursor < s:
            out.append((cursor, s))
        cursor = max(cursor, e)
    if cursor < window[1]:
        out.append((cursor, window[1]))
    return out


def _union(spans: list[tuple[int, int]], new: tuple[int, int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    start, end = new
    for s, e in spans:
        if e < start or s > end:
            out.append((s, e))
        else:
            start, end = min(s, start), max(e, end)
    out.append((start, end))
    return sorted(out)


def _cut(
    stretches: list[tuple[int, int, str]], starts: list[int], lo: int, hi: int
) -> Iterator[tuple[str, int]]:
    index = max(0, bisect_right(starts, lo) - 1)
    while index < len(stretches) and stretches[index][0] < hi:
        s, e, key = stretches[index]
        if max(s, lo) < min(e, hi):
            yield key, min(e, hi) - max(s, lo)
        index += 1


def reconcile_entries(entries: Iterable[Entry]) -> dict[LineKey, dict[str, int]]:
    """`reconcile_frame` of raw entries (seq, canonical CloudEvent), parsed here."""
    return reconcile_frame(frame_of_entries(entries))


# ---------------------------------------------------------------- money (RULES.md §Money)

#: ISO 4217 currencies whose minor unit is not the cent.
MINOR_UNITS = {
    "BHD": 3,
    "BIF": 0,
    "CLF": 4,
    "CLP": 0,
    "DJF": 0,
    "GNF": 0,
    "IQD": 3,
    "ISK": 0,
    "JOD": 3,
    "JPY": 0,
    "KMF": 0,
    "KRW": 0,
    "KWD": 3,
    "LYD": 3,
    "OMR": 3,
    "PYG": 0,
    "RWF": 0,
    "TND": 3,
    "UGX": 0,
    "UYI": 0,
    "UYW": 4,
    "VND": 0,
    "VUV": 0,
    "XAF": 0,
    "XOF": 0,
    "XPF": 0,
}
MONEY_ONLY = "money_only"
UNALLOCATED = "unallocated"
#: RULES.md's category order (unallocated, then rules 1-10, then money_only), restart rows
#: provider before customer, productive rows accepted, rejected, pending: rounding ties.
MONEY_ORDER = (
    UNALLOCATED,
    "double_billed",
    "reclaimed",
    "checkpoint",
    "restart_lost:provider",
    "restart_lost:customer",
    "restart_recovery:provider",
    "restart_recovery:customer",
    "productive:accepted",
    "productive:rejected",
    "productive:pending",
    "stalled_fault",
    "startup",
    IDLE_RESERVED,
    "idle_unexplained",
    MONEY_ONLY,
)


@dataclass
class _Line:
    seq: int
    exact: Fraction  # the billed amount in minor units, exactly
    cells: dict[str, int]  # category key: GPU-µs; {money_only: 0} or {unallocated: 0}: no GPU time
    cents: int = 0


def _half_even(value: Fraction) -> int:
    floor = math.floor(value)
    rest = value - floor
    return floor + (1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2) else 0)


def line_cents(
    ev: pd.DataFrame, gpu: dict[LineKey, dict[str, int]]
) -> dict[LineKey, dict[str, int]]:
    """{(tenant, line_id): {category key: minor units}} (RULES.md §Money), from the lines'
    amounts and `gpu` (reconcile_frame's). An invoice is one tenant's invoice id in one
    currency: its exact total rounded half-even; its lines each rounded half-even, and the
    cents by which they miss the total given to (or taken from) the lines with the largest
    rounding remainders (ties: ledger order); within a line, the cents its cells' floors
    leave go to the cells with the largest remainders (ties: MONEY_ORDER)."""
    invoices: dict[tuple[str, str, str | None], dict[LineKey, _Line]] = defaultdict(dict)
    for seq, tenant, invoice, line, amount, currency, category, gpus in _rows(
        effective_lines(ev),
        "seq",
        "tenant",
        "invoice_id",
        "line_id",
        "amount",
        "currency",
        "category",
        "gpus",
    ):
        exact = Fraction(amount) * 10 ** MINOR_UNITS.get(currency or "", 2)
        # a line of no GPU time is all one cell: money_only, or, for a GPU line (an empty
        # window), unallocated (RULES.md §Unallocated: never the customer's)
        alone = UNALLOCATED if _bills_gpus(category, _int(gpus)) else MONEY_ONLY
        cells = gpu.get((tenant, line)) or {alone: 0}
        invoices[(tenant, invoice, currency)][(tenant, line)] = _Line(int(seq), exact, cells)
    out: dict[LineKey, dict[str, int]] = {}
    for lines in invoices.values():
        _round_lines(list(lines.values()))
        for key, line in lines.items():
            out[key] = _split_line(line)
    return out


def _round_lines(lines: list[_Line]) -> None:
    total = _half_even(sum((line.exact for line in lines), Fraction(0)))
    for line in lines:
        line.cents = _half_even(line.exact)
    missing = total - sum(line.cents for line in lines)
    if missing > 0:  # the lines rounded down, the largest remainder first
        down = sorted(
            (line for line in lines if line.cents < line.exact or line.cents == line.exact),
            key=lambda line: (-(line.exact - line.cents), line.seq),
        )
        for line in down[:missing]:
            line.cents += 1
    elif missing < 0:  # the lines rounded up, the largest push first
        up = sorted(
            (line for line in lines if line.cents > line.exact),
            key=lambda line: (-(line.cents - line.exact), line.seq),
        )
        for line in up[:-missing]:
            line.cents -= 1


def _split_line(line: _Line) -> dict[str, int]:
    billed = sum(line.cells.values())
    shares = {
        key: line.exact * us / billed if billed else line.exact for key, us in line.cells.items()
    }
    floors = {key: math.floor(share) for key, share in shares.items()}
    left = line.cents - sum(floors.values())
    for key in sorted(shares, key=lambda k: (-(shares[k] - floors[k]), MONEY_ORDER.index(k)))[
        :left
    ]:
        floors[key] += 1
    return {key: cents for key, cents in floors.items() if cents}


# ---------------------------------------------------------------- placement (RULES.md 13)

AS_SOLD, NOT_AS_SOLD, UNOBSERVED = "as_sold", "not_as_sold", "unobserved"
PLACEMENT_STATES = (AS_SOLD, NOT_AS_SOLD, UNOBSERVED)
#: The category keys whose bearer is the customer (RULES.md §Bearers), money_only included.
CUSTOMER_KEYS = frozenset(
    {
        "checkpoint",
        "restart_lost:customer",
        "restart_recovery:customer",
        "productive:accepted",
        "productive:rejected",
        "productive:pending",
        "startup",
        IDLE_RESERVED,
        MONEY_ONLY,
    }
)
_NVLINK = re.compile(r"NV\d+")


class LinePlacement(NamedTuple):
    state: str
    currency: str
    gpu_us: int  # g_b × |W| as billed
    amount: Fraction  # the line's amount, exact, in major units
    claim: Fraction  # not_as_sold: share × customer-borne amount; else 0


def _capture_gpus(topology: dict[str, Any], devices: frozenset[str] | None) -> set[str]:
    """The capture's GPUs of the allocation: those its devices name, when all are in it;
    else every GPU of the capture."""
    names = {gpu["name"] for gpu in topology.get("gpus", [])}
    wanted = {
        d if d.startswith("GPU") else f"GPU{d}"
        for d in (x.split("/", 1)[0] for x in devices or ())
    }
    return wanted if wanted and wanted <= names else names


def placement_state(fleet: Fleet, tenant: str, aid: str | None) -> str:
    """RULES.md 13: as_sold, not_as_sold or unobserved, for one allocation."""
    grant = None if aid is None else fleet.grants.get((tenant, aid))
    captures = {} if aid is None else fleet.captures.get((tenant, aid), {})
    if grant is None or not captures:
        return UNOBSERVED
    if grant.placement_class != "whole" or grant.gpus == 1:
        return AS_SOLD
    seen, slow = 0, False
    for _t, _seq, topology in captures.values():
        mine = _capture_gpus(topology, grant.devices)
        seen += len(mine)
        slow = slow or any(
            {link["a"], link["b"]} <= mine and not _NVLINK.fullmatch(link["link"])
            for link in topology.get("links", [])
        )
    if seen > grant.gpus:
        return UNOBSERVED
    return NOT_AS_SOLD if seen < grant.gpus or slow else AS_SOLD


def placement_lines(
    ev: pd.DataFrame, gpu: dict[LineKey, dict[str, int]] | None = None
) -> dict[LineKey, LinePlacement]:
    """Each line's placement state, amount and claim (RULES.md 13), after corrections.
    `gpu`: reconcile_frame's cells of the same entries (computed here when not given)."""
    fleet = read_fleet(ev)
    cells_of = reconcile_frame(ev) if gpu is None else gpu
    out: dict[LineKey, LinePlacement] = {}
    for tenant, line, aid, category, gpus, ps, pe, amount, currency in _rows(
        effective_lines(ev),
        "tenant",
        "line_id",
        "allocation_id",
        "category",
        "gpus",
        "ps",
        "pe",
        "amount",
        "currency",
    ):
        state = placement_state(fleet, tenant, aid)
        exact = Fraction(amount)
        g_b = _int(gpus)
        billed_us = g_b * (pe - ps) if _bills_gpus(category, g_b) and g_b is not None else 0
        claim = Fraction(0)
        if state == NOT_AS_SOLD:
            share = fleet.terms_at(tenant, ps).credit_share
            claim = share * _customer_borne(exact, category, g_b, cells_of.get((tenant, line), {}))
        out[(tenant, line)] = LinePlacement(state, currency or "", billed_us, exact, claim)
    return out


def _customer_borne(
    amount: Fraction, category: str | None, gpus: int | None, cells: dict[str, int]
) -> Fraction:
    """The exact share of a line's amount on the customer (RULES.md §Money)."""
    if not _bills_gpus(category, gpus):
        return amount  # money_only: the customer's
    billed = sum(cells.values())
    if not billed:
        return Fraction(0)  # a GPU line of no GPU time is all unallocated
    return amount * sum(us for key, us in cells.items() if key in CUSTOMER_KEYS) / billed


def placement_tenants(lines: dict[LineKey, LinePlacement]) -> dict[str, dict[str, Any]]:
    """Per tenant: {state: {"gpu_us": …, "amount": {currency: exact}},
    "claim": {currency: exact}}."""
    out: dict[str, dict[str, Any]] = {}
    for (tenant, _line), p in sorted(lines.items()):
        node = out.setdefault(
            tenant, {**{s: {"gpu_us": 0, "amount": {}} for s in PLACEMENT_STATES}, "claim": {}}
        )
        node[p.state]["gpu_us"] += p.gpu_us
        node[p.state]["amount"][p.currency] = (
            node[p.state]["amount"].get(p.currency, Fraction(0)) + p.amount
        )
        if p.state == NOT_AS_SOLD:
            node["claim"][p.currency] = node["claim"].get(p.currency, Fraction(0)) + p.claim
    return out
