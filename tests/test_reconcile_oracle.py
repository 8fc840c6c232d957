"""The DuckDB engine against the plain pandas reading of RULES.md (bench/pandas_reconcile.py).

Small random fleets (1–3 allocations with devices absent, empty, whole GPUs or MIG
instances, whole, MIG or time-sliced on shared nodes; jobs with attempts, progress with
stalls and steps that do not rise, checkpoints, failures with causes, faults on nodes,
devices, MIG instances and fabric domains with and without clears, terms changes, every
scheduler decision, events at the same instant, lines that overlap, correct, credit or
run past the release; RULES.md 11-13: grants on several nodes, gangs of one attempt on
several allocations, preempted failures inside and outside the notice promised, placement
credit shares and topology captures as sold or not) go into a SQLite ledger. The engine
reconciles the store; the oracle reads the same entries as stored (a plain SELECT of
`entries`) and parses every event itself, never the engine's projection. Both must agree
on every line's GPU-µs and cents per category key, and on its placement state and claim.
The oracle itself is pinned first, on scenarios worked out by hand from RULES.md.
"""

from __future__ import annotations

import ast
import random
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bench.pandas_reconcile
from bench.pandas_reconcile import (
    category_key,
    entries_of_jsonl,
    entries_of_parquet,
    entries_of_store,
    frame_of_entries,
    line_cents,
    placement_lines,
    reconcile_entries,
    reconcile_frame,
    rfc3339_us,
)
from ledger import Appender, Store, export_entries
from reconcile import reconcile_store
from reconcile.engine.result import Cell, customer_borne, placement_claim
from schemas import Accepted, Origin, validate_event
from tests.conftest import SLOW

T0 = datetime(2026, 1, 5, 0, 0, tzinfo=timezone.utc)
S = 1_000_000  # µs in a second
Event = dict[str, Any]


def at(seconds: float) -> str:
    moment = T0 + timedelta(seconds=seconds)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Fleet:
    """Events in ledger order, each with a unique id."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, type_: str, seconds: float, **data: Any) -> Fleet:
        self.events.append(
            {
                "specversion": "1.0",
                "id": f"e{len(self.events)}",
                "source": "test://oracle",
                "type": type_,
                "time": at(seconds),
                "data": data,
            }
        )
        return self


@contextmanager
def ledger_of(events: list[Event]) -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as folder:
        store = Store(f"sqlite:///{Path(folder) / 'ledger.db'}")
        store.init()
        try:
            result = Appender(store).append(
                [Accepted.of(validate_event(e), Origin("gen", i)) for i, e in enumerate(events, 1)]
            )
            assert result.appended == len(events)
            yield store
        finally:
            store.close()


Lines = dict[tuple[str, str], dict[str, int]]


def by_line(cells: list[Cell], money: bool = False) -> Lines:
    """The engine's cells as {(tenant, line_id): {category key: GPU-µs}} (with `money`:
    cents), zeros left out."""
    out: Lines = defaultdict(dict)
    for cell in cells:
        line = out[(cell.tenant, cell.line_id)]
        value = cell.cents if money else cell.gpu_us
        if value:
            key = category_key(cell.category, cell.bearer, cell.acceptance)
            line[key] = line.get(key, 0) + value
    return dict(out)


def engine_lines(store: Store) -> Lines:
    return by_line(reconcile_store(store).cells)


def oracle_lines(events: list[Event]) -> Lines:
    with ledger_of(events) as store:
        return reconcile_entries(entries_of_store(store))


def oracle_and_engine(store: Store) -> tuple[Lines, Lines, Lines, Lines]:
    """(oracle GPU-µs, oracle cents, engine GPU-µs, engine cents) of one ledger."""
    frame = frame_of_entries(entries_of_store(store))
    gpu = reconcile_frame(frame)
    cells = reconcile_store(store).cells
    return gpu, line_cents(frame, gpu), by_line(cells), by_line(cells, money=True)


# ------------------------------------------------------------ the oracle, by hand


def test_a_clean_run_is_startup_then_productive_then_idle() -> None:
    f = Fleet().add("allocation.granted", 0, tenant="t", allocation_id="A", gpus=4)
    f.add("job.started", 100, tenant="t", job_id="j", allocation_id="A")
    for i in range(1, 6):
        f.add("job.progress", 100 + 60 * i, tenant="t", job_id="j", step=i)
    f.add("job.completed", 500, tenant="t", job_id="j")
    f.add("work.accepted", 600, tenant="t", job_id="j", result_id="r")
    f.add(
        "billing.line",
        700,
        tenant="t",
        invoice_id="I",
        line_id="L",
        allocation_id="A",
        period_start=at(0),
        period_end=at(700),
        gpus=6,
        amount="10.00",
        currency="USD",
    )
    # startup [0, 160): first attempt starts its startup at the grant; productive [160, 500)
    # (the first gap, 160→220, rises; completed ends it); idle_reserved [500, 700);
    # 2 GPUs beyond the 4 held for all 700 s are unallocated.
    assert oracle_lines(f.events) == {
        ("t", "L"): {
            "startup": 4 * 160 * S,
            "productive:accepted": 4 * 340 * S,
            "idle_reserved": 4 * 200 * S,
            "unallocated": 2 * 700 * S,
        }
    }


def test_a_hardware_failure_loses_work_since_the_last_save_and_recovers_on_the_provider() -> None:
    f = Fleet().add("allocation.granted", 0, tenant="t", allocation_id="A", gpus=1)
    f.add("job.started", 0, tenant="t", job_id="j", allocation_id="A")
    for i in range(1, 11):
        f.add("job.progress", 60 * i, tenant="t", job_id="j", step=i)
    f.add("checkpoint.started", 200, tenant="t", job_id="j", checkpoint_id="c1", step=3)
    f.add("checkpoint.saved", 230, tenant="t", job_id="j", checkpoint_id="c1", step=3)
    f.add("job.failed", 630, tenant="t", job_id="j", cause="hardware")
    f.add("job.started", 700, tenant="t", job_id="j", allocation_id="A", attempt=2)
    f.add("job.progress", 900, tenant="t", job_id="j", step=11)
    f.add("job.cancelled", 1000, tenant="t", job_id="j")
    f.add("allocation.released", 1100, tenant="t", allocation_id="A")
    f.add(
        "billing.line",
        1200,
        tenant="t",
        invoice_id="I",
        line_id="L",
        allocation_id="A",
        period_start=at(0),
        period_end=at(1200),
        gpus=1,
        amount="1.00",
        currency="USD",
    )
    # startup [0, 60); productive [60, 200) and [230, 600) (the checkpoint [200, 230) ranks
    # above); restart_lost [230, 630) outranks productive; [600, 630) is the trailing stretch
    # of a running attempt, but restart_lost covers it; recovery [630, 900); then
    # [900, 1000) running with no next mark: idle_unexplained; [1000, 1100) idle_reserved;
    # [1100, 1200) after the release: unallocated.
    assert oracle_lines(f.events) == {
        ("t", "L"): {
            "startup": 60 * S,
            "productive:pending": 140 * S,
            "checkpoint": 30 * S,
            "restart_lost:provider": 400 * S,
            "restart_recovery:provider": 270 * S,
            "idle_unexplained": 100 * S,
            "idle_reserved": 100 * S,
            "unallocated": 100 * S,
        }
    }


def test_stalls_faults_terms_reclaim_and_double_billing() -> None:
    f = Fleet().add(
        "policy.terms",
        0,
        tenant="t",
        warmup_allowance_s=30,
        stall_threshold_s=120,
        reclaim_notice_s=60,
    )
    f.add(
        "allocation.granted", 0, tenant="t", allocation_id="A", gpus=2, node="n1", devices=[0, 1]
    )
    f.add("job.started", 0, tenant="t", job_id="j", allocation_id="A")
    f.add("job.progress", 100, tenant="t", job_id="j", step=1)
    f.add("job.progress", 200, tenant="t", job_id="j", step=1)  # no rise: not productive
    f.add("job.progress", 500, tenant="t", job_id="j", step=2)  # 300 s gap > 120: a stall
    f.add(
        "health.fault", 450, node="n1", device=3, code="xid-79", severity="critical"
    )  # not A's device
    f.add(
        "health.fault", 460, device="1", code="xid-48", severity="critical"
    )  # A's device 1, no node
    f.add("health.cleared", 470, device="1", code="xid-48")
    f.add("job.progress", 600, tenant="t", job_id="j", step=3)
    f.add("policy.decision", 640, tenant="t", decision="preempted", job_id="j")
    f.add(
        "billing.line",
        900,
        tenant="t",
        invoice_id="I",
        line_id="L1",
        allocation_id="A",
        period_start=at(0),
        period_end=at(800),
        gpus=2,
        amount="1",
        currency="USD",
    )
    f.add(
        "billing.line",
        900,
        tenant="t",
        invoice_id="I",
        line_id="L2",
        allocation_id="A",
        period_start=at(400),
        period_end=at(900),
        gpus=1,
        amount="1",
        currency="USD",
    )
    lines = oracle_lines(f.events)
    # L1: startup [0, 30) (warmup 30 s); [30, 100) idle_unexplained; [100, 200) not rising;
    # [200, 500) a stall with a fault on device 1 open in it; [500, 600) productive;
    # [600, 700) running, no mark after; reclaimed from 640 + 60 = 700 to 800.
    assert lines[("t", "L1")] == {
        "startup": 2 * 30 * S,
        "idle_unexplained": 2 * 270 * S,
        "stalled_fault": 2 * 300 * S,
        "productive:pending": 2 * 100 * S,
        "reclaimed": 2 * 100 * S,
    }
    # L2 repeats [400, 800) of L1: double billed; [800, 900) is reclaimed.
    assert lines[("t", "L2")] == {"double_billed": 400 * S, "reclaimed": 100 * S}


def test_corrections_replace_and_credits_carry_no_time() -> None:
    f = Fleet().add("allocation.granted", 0, tenant="t", allocation_id="A", gpus=1)
    for line, corrects in (("A1", None), ("B1", "A1"), ("C1", "B1"), ("X", "nobody")):
        extra = {"corrects": corrects} if corrects else {}
        f.add(
            "billing.line",
            10,
            tenant="t",
            invoice_id="I",
            line_id=line,
            allocation_id="A",
            period_start=at(0),
            period_end=at(100),
            gpus=1,
            amount="1",
            currency="USD",
            **extra,
        )
    f.add(
        "billing.line",
        10,
        tenant="t",
        invoice_id="I",
        line_id="K",
        period_start=at(0),
        period_end=at(100),
        gpus=0,
        amount="-5",
        currency="USD",
        category="credit",
    )
    # C1 replaces B1 replaces A1; X names no known line and stays (and bills [0, 100) again).
    assert oracle_lines(f.events) == {
        ("t", "C1"): {"idle_reserved": 100 * S},
        ("t", "X"): {"double_billed": 100 * S},
        ("t", "K"): {},
    }


def test_the_oracle_imports_nothing_of_the_engine() -> None:
    tree = ast.parse(Path(bench.pandas_reconcile.__file__).read_text())
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported and not [
        name for name in imported if name == "reconcile" or name.startswith("reconcile.")
    ]


@pytest.mark.parametrize(
    ("text", "us"),
    [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:01.5Z", 1_500_000),
        ("1970-01-01T01:00:00+01:00", 0),  # an hour east of UTC: the same instant
        ("1969-12-31T23:59:59.000001-00:00", -999_999),
        ("1970-01-02T00:00:00.1234567z", 86_400 * S + 123_456),  # digits past the µs dropped
        (
            "2026-01-05T10:00:00.000250Z",
            (20_458 * 86_400 + 36_000) * S + 250,
        ),  # 20,458 days from 1970-01-01
    ],
)
def test_the_oracle_reads_rfc_3339_times_as_microseconds(text: str, us: int) -> None:
    assert rfc3339_us(text) == us


def test_the_oracle_refuses_a_time_without_a_zone() -> None:
    with pytest.raises(ValueError):
        rfc3339_us("2026-01-05T10:00:00")


def test_the_oracle_reads_an_export_as_it_reads_the_store(tmp_path: Path) -> None:
    events = _attempt_left_running()
    with ledger_of(events) as store:
        with (tmp_path / "entries.jsonl").open("wb") as out:
            export_entries(store, out)
        export_entries(store, tmp_path / "entries.parquet", fmt="parquet")
    assert reconcile_entries(entries_of_jsonl(tmp_path / "entries.jsonl")) == LEFT_RUNNING
    assert reconcile_entries(entries_of_parquet(tmp_path / "entries.parquet")) == LEFT_RUNNING


def test_the_oracle_rounds_money_by_the_rules() -> None:
    f = Fleet().add("allocation.granted", 0, tenant="t", allocation_id="A", gpus=1)
    f.add("allocation.released", 300, tenant="t", allocation_id="A")
    f.add("job.started", 0, tenant="t", job_id="j", allocation_id="A")
    f.add("job.progress", 100, tenant="t", job_id="j", step=1)
    f.add("job.completed", 200, tenant="t", job_id="j")
    for line, amount in (("L1", "0.0031"), ("L2", "0.0220")):
        f.add(
            "billing.line",
            400,
            tenant="t",
            invoice_id="I",
            line_id=line,
            allocation_id="A",
            period_start=at(0),
            period_end=at(300),
            gpus=1,
            amount=amount,
            currency="USD",
        )
    f.add(
        "billing.line",
        400,
        tenant="u",
        invoice_id="I",
        line_id="M",
        period_start=at(0),
        period_end=at(300),
        gpus=0,
        amount="0.0031",
        currency="USD",
        category="credit",
    )
    with ledger_of(f.events) as store:
        frame = frame_of_entries(entries_of_store(store))
    gpu = reconcile_frame(frame)
    # L1: startup [0, 100) (from the grant to the first progress), productive [100, 200)
    # (completed ends the gap), idle_reserved [200, 300); L2 bills the same 300 s again.
    assert gpu[("t", "L1")] == {
        "startup": 100 * S,
        "productive:pending": 100 * S,
        "idle_reserved": 100 * S,
    }
    # t's invoice I: 0.0251 -> 3 cents; lines 0.31 -> 0 and 2.20 -> 2 cents miss it by one,
    # which goes to L1 (remainder 0.31 > 0.20). L1's 1 cent: each third is 0.1033 cents,
    # all floors 0, the cent to the first of three equal remainders in category order:
    # productive (rule 6) before startup (8) and idle_reserved (9). L2 is all double_billed:
    # its 2 cents. u's invoice I is its own: 0.0031 -> 0 cents, whatever t's lines.
    assert line_cents(frame, gpu) == {
        ("t", "L1"): {"productive:pending": 1},
        ("t", "L2"): {"double_billed": 2},
        ("u", "M"): {},
    }


# ------------------------------------------------------------ where the engine differs


def _zero_length_failed_attempt() -> list[Event]:
    f = Fleet().add("allocation.granted", 0, tenant="t", allocation_id="A", gpus=1)
    f.add("job.started", 10, tenant="t", job_id="j", allocation_id="A")
    f.add(
        "job.failed", 10, tenant="t", job_id="j", cause="hardware"
    )  # same instant, later in the ledger
    f.add("job.started", 100, tenant="t", job_id="j", allocation_id="A", attempt=2)
    f.add(
        "billing.line",
        1000,
        tenant="t",
        invoice_id="I",
        line_id="L",
        allocation_id="A",
        period_start=at(0),
        period_end=at(1000),
        gpus=1,
        amount="1",
        currency="USD",
    )
    return f.events


def _attempt_left_running() -> list[Event]:
    f = Fleet().add("allocation.granted", 0, tenant="t", allocation_id="A", gpus=1)
    f.add("job.started", 0, tenant="t", job_id="j", allocation_id="A")
    f.add("job.progress", 60, tenant="t", job_id="j", step=1)
    f.add("job.started", 100, tenant="t", job_id="j", allocation_id="A", attempt=2)
    f.add("job.progress", 200, tenant="t", job_id="j", step=2)
    f.add("job.completed", 260, tenant="t", job_id="j")
    f.add(
        "billing.line",
        300,
        tenant="t",
        invoice_id="I",
        line_id="L",
        allocation_id="A",
        period_start=at(0),
        period_end=at(300),
        gpus=1,
        amount="1",
        currency="USD",
    )
    return f.events


# RULES.md 5: the failure at 10 ends the attempt started at 10 (ties: ledger order), and
# the job runs on A again from 100 and never progresses: recovery is [10, end) = [10, 1000).
# RULES.md 8: the first attempt's startup runs from the grant: [0, min(0 + 600 s, its end 10)).
FAILED_AT_START = {("t", "L"): {"startup": 10 * S, "restart_recovery:provider": 990 * S}}
# RULES.md: an attempt runs to its job's next end event or its next start,
# whichever is first. Attempt 1 runs [0, 100) with one mark (60): startup [0, 60) from the
# grant, then [60, 100) running with no gap closed: idle_unexplained 40. Attempt 2 runs
# [100, 260): startup [100, 200) to its first progress, productive [200, 260) (60 s, ends in
# the completion). Nothing runs in [260, 300): idle_reserved 40.
LEFT_RUNNING = {
    ("t", "L"): {
        "startup": 160 * S,
        "idle_unexplained": 40 * S,
        "productive:pending": 60 * S,
        "idle_reserved": 40 * S,
    }
}
SHAPES = [  # shapes the engine got wrong once (or RULES.md changed under), pinned since
    pytest.param(
        _zero_length_failed_attempt, FAILED_AT_START, id="failure-at-the-instant-of-its-start"
    ),
    pytest.param(
        _attempt_left_running, LEFT_RUNNING, id="a-new-start-ends-an-attempt-left-running"
    ),
]


@pytest.mark.parametrize(("scenario", "expected"), SHAPES)
def test_the_oracle_follows_rules_on_the_edge_shapes(scenario: Any, expected: Any) -> None:
    assert oracle_lines(scenario()) == expected


@pytest.mark.parametrize(("scenario", "expected"), SHAPES)
def test_the_engine_on_the_edge_shapes(scenario: Any, expected: Any) -> None:
    with ledger_of(scenario()) as store:
        assert engine_lines(store) == expected


def _stall_beside_a_fault(devices: list[Any] | None, place: dict[str, Any]) -> list[Event]:
    """One GPU granted at 0 on n1 with `devices` (absent when None); progress at 120, 240
    and 880 (a 640 s gap, past the 300 s default); completed at 960; released at 1200; a
    critical fault at 360 at `place`, never cleared; one line [0, 1200)."""
    grant: dict[str, Any] = {"tenant": "t", "allocation_id": "A", "gpus": 1, "node": "n1"}
    if devices is not None:
        grant["devices"] = devices
    f = Fleet().add("allocation.granted", 0, **grant)
    f.add("job.started", 0, tenant="t", job_id="j", allocation_id="A")
    for step, t in enumerate((120, 240, 880), 1):
        f.add("job.progress", t, tenant="t", job_id="j", step=step)
    f.add("job.completed", 960, tenant="t", job_id="j")
    f.add("allocation.released", 1200, tenant="t", allocation_id="A")
    f.add("health.fault", 360, code="xid-79", severity="critical", **place)
    f.add(
        "billing.line",
        1200,
        tenant="t",
        invoice_id="I",
        line_id="L",
        allocation_id="A",
        period_start=at(0),
        period_end=at(1200),
        gpus=1,
        amount="1.20",
        currency="USD",
    )
    return f.events


#: (the grant's devices, where the fault is, the 640 s gap's category): the touches rule
#: read by hand (RULES.md §Categories 7; docs/events.md: an empty list is none given).
STALL_CASES = [
    pytest.param(
        None, {"node": "n1", "device": "5"}, "stalled_fault", id="no-list-a-fault-on-the-node"
    ),
    pytest.param(
        [], {"node": "n1", "device": "5"}, "stalled_fault", id="an-empty-list-is-none-given"
    ),
    pytest.param(
        [], {"node": "n2"}, "idle_unexplained", id="an-empty-list-a-fault-on-another-node"
    ),
    pytest.param(
        ["3"],
        {"node": "n1", "device": "5"},
        "idle_unexplained",
        id="a-list-without-the-faulty-device",
    ),
    pytest.param(
        ["0/13"],
        {"node": "n1", "device": "0"},
        "stalled_fault",
        id="a-mig-instance-of-the-faulty-gpu",
    ),
]


@pytest.mark.parametrize(("devices", "place", "category"), STALL_CASES)
def test_oracle_and_engine_read_a_grant_s_devices_alike(
    devices: Any, place: dict[str, Any], category: str
) -> None:
    # startup [0, 120) to the first progress; productive [120, 240) and [880, 960) (the
    # completion closes an 80 s gap); the 640 s gap [240, 880); idle_reserved [960, 1200)
    expected = {
        ("t", "L"): {
            "startup": 120 * S,
            "productive:pending": 200 * S,
            category: 640 * S,
            "idle_reserved": 240 * S,
        }
    }
    events = _stall_beside_a_fault(devices, place)
    assert oracle_lines(events) == expected
    with ledger_of(events) as store:
        assert engine_lines(store) == expected


# ------------------------------------------------------------ random fleets

TENANTS = ("acme", "beta")
NODES = ("n1", "n2")
#: Nodes a multi-node grant may list besides (or instead of) its `node` (RULES.md 11).
MORE_NODES = ("n2", "n3", "n4")
#: placement_credit_share of a terms event (RULES.md 13); None: the field left out.
SHARES = (None, "0", "0.5", "1", "0.25", "0.333")
#: Links of a capture between two GPUs: NVLink or not.
LINKS = ("NV18", "NV18", "NV4", "SYS", "NODE", "PIX")
CAUSES = ("hardware", "fabric", "application", "preempted", "unknown")
DECISIONS = (
    "queued",
    "admitted",
    "placed",
    "preempted",
    "reclaimed",
    "evicted",
    "deactivated",
    "borrowed",
    "lent",
    "backfilled",
)
#: Devices an allocation may list: whole GPUs (as numbers or text) and MIG instances of them.
DEVICES = (0, 1, 2, 3, "4", "0/13", "0/14", "1/5")
#: What a fault may name as its device: whole GPUs, instances, one nobody holds.
FAULT_DEVICES = (0, 1, "2", "4", "0/13", "1/5", "1/6")
AMOUNTS = ("12.50", "0.005", "3.335", "7.777", "-1.015", "100", "0.01", "2.5")
CURRENCIES = ("USD", "USD", "JPY", "KWD")
MINUTE = 60
# Edge shapes the random fleets may produce (both pinned above, both agreed on).
OVERLAPPING_ATTEMPTS = True  # a-new-start-ends-an-attempt-left-running
ZERO_LENGTH_ATTEMPTS = True  # failure-at-the-instant-of-its-start


def _when(rng: random.Random, lo: float, hi: float) -> float:
    """A time on a 30 s grid (many ties), now and then with microseconds."""
    seconds = lo + 30 * rng.randint(0, max(0, int((hi - lo) // 30)))
    return seconds + rng.randint(1, 999_999) / 1e6 if rng.random() < 0.05 else seconds


def random_fleet(rng: random.Random) -> list[Event]:
    """Events of a small fleet, roughly in time order with some arriving late."""
    timed: list[tuple[float, str, dict[str, Any]]] = []
    allocations = [_allocation(rng, i, timed) for i in range(rng.randint(1, 3))]
    for j in range(rng.randint(1, 3)):
        _job(rng, f"j{j}", allocations, timed)
    for tenant in TENANTS:
        for _ in range(rng.choice((0, 0, 1, 2))):
            timed.append(
                (
                    _when(rng, 0, 240 * MINUTE),
                    "policy.terms",
                    {
                        "tenant": tenant,
                        "warmup_allowance_s": rng.choice((0, 60, 300, 600)),
                        "stall_threshold_s": rng.choice((60, 120, 300, 900)),
                        "reclaim_notice_s": rng.choice((0, 60, 600)),
                        **_share(rng),
                    },
                )
            )
    _decisions_and_faults(rng, allocations, timed)
    _notice(rng, allocations, timed)
    _captures(rng, allocations, timed)
    _lines(rng, allocations, timed)
    _same_instants(rng, timed)
    order = sorted(
        range(len(timed)),
        key=lambda i: timed[i][0] + (rng.choice((0, 1800)) if rng.random() < 0.1 else 0),
    )
    fleet = Fleet()
    for i in order:
        seconds, type_, data = timed[i]
        fleet.add(type_, seconds, **data)
    return fleet.events


def _same_instants(rng: random.Random, timed: list[tuple[float, str, dict[str, Any]]]) -> None:
    """A few events moved to the instant of another (a fault at a gap's start, a progress at
    its attempt's start, a release at a line's edge): ties broken by ledger order alone."""
    for _ in range(rng.randint(0, 3)):
        i, j = rng.randrange(len(timed)), rng.randrange(len(timed))
        timed[i] = (timed[j][0], *timed[i][1:])


def _allocation(rng: random.Random, i: int, timed: list[Any]) -> dict[str, Any]:
    tenant = rng.choice(TENANTS)
    granted = _when(rng, 0, 60 * MINUTE)
    alloc: dict[str, Any] = {
        "tenant": tenant,
        "allocation_id": f"A{i}",
        "gpus": rng.randint(1, 8),
        "node": rng.choice(NODES),
    }
    devices = rng.choice(("absent", "empty", "listed", "listed"))
    if devices == "empty":
        alloc["devices"] = []  # docs/events.md: the same as none given
    elif devices == "listed":
        alloc["devices"] = rng.sample(DEVICES, rng.randint(1, 3))
    # whole GPUs, MIG instances or time slices; nodes and devices are shared by the draw
    alloc["placement_class"] = rng.choice(("whole", "mig", "timeslice"))
    if alloc["placement_class"] == "mig":
        alloc["profile"] = "1g.18gb"
    if rng.random() < 0.5:
        alloc["fabric_domain"] = rng.choice(("fd1", "fd2"))
    if rng.random() < 0.3:  # on several nodes (RULES.md 11), its `node` kept or not
        alloc["nodes"] = rng.sample(MORE_NODES, rng.randint(1, 3))
        if rng.random() < 0.5:
            del alloc["node"]
    timed.append((granted, "allocation.granted", dict(alloc)))
    if rng.random() < 0.15:  # a second grant of the same id: the earliest one counts
        timed.append(
            (
                granted + rng.choice((-600, 600)),
                "allocation.granted",
                dict(alloc, gpus=rng.randint(1, 8)),
            )
        )
    if rng.random() < 0.7:
        released = _when(rng, granted - 600, granted + 240 * MINUTE)
        timed.append(
            (released, "allocation.released", {"tenant": tenant, "allocation_id": f"A{i}"})
        )
    return dict(alloc, granted=granted)


def _job(
    rng: random.Random, job: str, allocations: list[dict[str, Any]], timed: list[Any]
) -> None:
    alloc = rng.choice(allocations)
    tenant = alloc["tenant"]
    clock, step = alloc["granted"] + rng.choice((-60, 0, 30, 120, 600)), 0
    attempts = rng.randint(1, 3)
    for attempt in range(1, attempts + 1):
        where = alloc if rng.random() < 0.85 else rng.choice(allocations)
        started = clock
        # a gang (RULES.md 11): the attempt started on several allocations, the same number
        gang = [where] + [a for a in allocations if a is not where and rng.random() < 0.25]
        for member in gang:
            timed.append(
                (
                    clock,
                    "job.started",
                    {
                        "tenant": tenant,
                        "job_id": job,
                        "allocation_id": member["allocation_id"],
                        "attempt": attempt,
                    },
                )
            )
        clock, step = _progress(rng, tenant, job, clock, step, timed)
        if clock == started and not ZERO_LENGTH_ATTEMPTS:
            clock += 30
        ends: tuple[str | None, ...] = (
            "job.completed",
            "job.failed",
            "job.failed",
            "job.cancelled",
        )
        if attempt == attempts or OVERLAPPING_ATTEMPTS:
            ends += (None,)  # an attempt with no end runs on, into the next one if there is one
        end = rng.choice(ends)
        if end == "job.failed":
            timed.append(
                (clock, end, {"tenant": tenant, "job_id": job, "cause": rng.choice(CAUSES)})
            )
        elif end is not None:
            timed.append((clock, end, {"tenant": tenant, "job_id": job}))
        clock += rng.choice((0, 30, 300))
    for kind in ("work.accepted", "work.rejected"):
        if rng.random() < 0.3:
            timed.append((clock, kind, {"tenant": tenant, "job_id": job, "result_id": f"r-{job}"}))


def _progress(
    rng: random.Random, tenant: str, job: str, clock: float, step: int, timed: list[Any]
) -> tuple[float, int]:
    """Progress now and then stalled or not rising, with checkpoints between marks."""
    for n in range(rng.randint(0, 12)):
        clock += rng.choice((30, 60, 60, 90, 120, 400, 1000))
        step += rng.choice((1, 1, 1, 0, -1, 5))
        data: dict[str, Any] = {"tenant": tenant, "job_id": job, "step": max(step, 0)}
        if rng.random() < 0.5:
            data["units"] = rng.randint(0, 3) * 100
        timed.append((clock, "job.progress", data))
        if rng.random() < 0.2:
            cid = f"{job}-c{n}-{rng.randint(0, 1)}"
            timed.append(
                (
                    clock,
                    "checkpoint.started",
                    {"tenant": tenant, "job_id": job, "checkpoint_id": cid, "step": max(step, 0)},
                )
            )
            if rng.random() < 0.8:
                timed.append(
                    (
                        clock + rng.choice((0, 30, 90)),
                        "checkpoint.saved",
                        {
                            "tenant": tenant,
                            "job_id": job,
                            "checkpoint_id": cid,
                            "step": max(step, 0),
                        },
                    )
                )
    return clock + rng.choice((0, 30, 60, 600)), step


def _decisions_and_faults(
    rng: random.Random, allocations: list[dict[str, Any]], timed: list[Any]
) -> None:
    for alloc in allocations:
        if rng.random() < 0.3:
            data = {"tenant": alloc["tenant"], "decision": rng.choice(DECISIONS)}
            data.update(
                rng.choice(
                    ({"allocation_id": alloc["allocation_id"]}, {"job_id": "j0"}, {"job_id": "j1"})
                )
            )
            timed.append(
                (
                    _when(rng, alloc["granted"], alloc["granted"] + 120 * MINUTE),
                    "policy.decision",
                    data,
                )
            )
    for _ in range(rng.choice((0, 1, 2, 3))):
        place: dict[str, Any] = rng.choice(
            (
                {"node": rng.choice(NODES)},
                {"node": rng.choice(NODES), "device": rng.choice(FAULT_DEVICES)},
                {"device": rng.choice(FAULT_DEVICES)},
                {"fabric_domain": rng.choice(("fd1", "fd2"))},
                {"node": rng.choice(NODES), "fabric_domain": rng.choice(("fd1", "fd2"))},
            )
        )
        code = rng.choice(("xid-79", "nvlink-down"))
        opened = _when(rng, 0, 180 * MINUTE)
        severity = rng.choice(("critical", "critical", "warning", None))
        timed.append(
            (
                opened,
                "health.fault",
                dict(place, code=code, **({"severity": severity} if severity else {})),
            )
        )
        if rng.random() < 0.6:
            timed.append(
                (opened + rng.choice((0, 60, 600, 3600)), "health.cleared", dict(place, code=code))
            )


def _share(rng: random.Random) -> dict[str, str]:
    share = rng.choice(SHARES)
    return {} if share is None else {"placement_credit_share": share}


def _notice(rng: random.Random, allocations: list[dict[str, Any]], timed: list[Any]) -> None:
    """RULES.md 12: a preemption, reclaim or eviction, and a preempted failure of the job
    soon after: inside the notice the terms promise, at its edge, or past it."""
    for _ in range(rng.choice((0, 0, 1, 2))):
        alloc = rng.choice(allocations)
        job = rng.choice(("j0", "j1", "j2"))
        decided = _when(rng, alloc["granted"], alloc["granted"] + 120 * MINUTE)
        target = rng.choice(({"allocation_id": alloc["allocation_id"]}, {"job_id": job}))
        decision = rng.choice(("preempted", "reclaimed", "evicted"))
        timed.append(
            (
                decided,
                "policy.decision",
                {"tenant": alloc["tenant"], "decision": decision, **target},
            )
        )
        failed = decided + rng.choice((0, 30, 59, 60, 300, 600, 900))
        timed.append(
            (
                failed,
                "job.failed",
                {"tenant": alloc["tenant"], "job_id": job, "cause": "preempted"},
            )
        )


def _captures(rng: random.Random, allocations: list[dict[str, Any]], timed: list[Any]) -> None:
    """RULES.md 13: `nvidia-smi topo -m` captures on an allocation's nodes (or another),
    of about as many GPUs as granted, linked over NVLink or not; some taken again later."""
    for alloc in allocations:
        if rng.random() < 0.4:
            continue
        nodes = [n for n in (alloc.get("node"), *alloc.get("nodes", ())) if n] or list(NODES)
        for node in rng.sample(nodes, rng.randint(1, len(nodes))):
            for _ in range(rng.choice((1, 1, 2))):
                gpus = max(1, alloc["gpus"] // len(nodes) + rng.choice((-1, 0, 0, 0, 1, 4)))
                pairs = [(a, b) for a in range(gpus) for b in range(a + 1, gpus)]
                slow = rng.random() < 0.4
                topology = {
                    "gpus": [{"name": f"GPU{i}"} for i in range(gpus)],
                    "nics": [],
                    "links": [
                        {
                            "a": f"GPU{a}",
                            "b": f"GPU{b}",
                            "link": rng.choice(LINKS) if slow else "NV18",
                        }
                        for a, b in pairs
                    ],
                }
                timed.append(
                    (
                        _when(rng, alloc["granted"], alloc["granted"] + 60 * MINUTE),
                        "placement.observed",
                        {
                            "tenant": alloc["tenant"],
                            "allocation_id": alloc["allocation_id"],
                            "node": node,
                            "topology": topology,
                        },
                    )
                )


def _lines(rng: random.Random, allocations: list[dict[str, Any]], timed: list[Any]) -> None:
    made: list[tuple[str, str]] = []
    for n in range(rng.randint(1, 6)):
        alloc = rng.choice(allocations)
        start = _when(rng, alloc["granted"] - 1200, alloc["granted"] + 180 * MINUTE)
        data: dict[str, Any] = {
            "tenant": alloc["tenant"],
            "invoice_id": rng.choice(("INV-1", "INV-1", "INV-2")),
            "line_id": f"L{n}",
            "allocation_id": alloc["allocation_id"] if rng.random() < 0.9 else "A-unknown",
            "period_start": at(start),
            "period_end": at(start + rng.choice((0, 600, 1800, 3600, 4 * 3600))),
            "gpus": rng.choice((0, 1, 2, 4, 8, 10)),
            "amount": rng.choice(AMOUNTS),
            "currency": rng.choice(CURRENCIES),
            "category": rng.choice(("usage", "usage", "usage", "credit", "adjustment")),
        }
        if made and rng.random() < 0.25:
            data["corrects"] = rng.choice(
                [line for tenant, line in made if tenant == alloc["tenant"]] or ["L-none"]
            )
        made.append((alloc["tenant"], f"L{n}"))
        timed.append((start + 3600, "billing.line", data))


def billed_us(events: list[Event]) -> dict[tuple[str, str], int]:
    """g_b × |W| for each line, straight from the events (corrections not applied)."""
    out = {}
    for e in events:
        if e["type"] == "billing.line":
            d = e["data"]
            window = datetime.fromisoformat(d["period_end"]) - datetime.fromisoformat(
                d["period_start"]
            )
            out[(d["tenant"], d["line_id"])] = d["gpus"] * (window // timedelta(microseconds=1))
    return out


RANDOM_SETTINGS = settings(
    max_examples=300 if SLOW else 40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@RANDOM_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_the_oracle_accounts_for_every_billed_gpu_second(seed: int) -> None:
    events = random_fleet(random.Random(seed))
    billed = billed_us(events)
    for key, cells in oracle_lines(events).items():
        if cells:
            assert sum(cells.values()) == billed[key], (key, cells)


def differences(
    expected: Lines, got: Lines
) -> dict[tuple[str, str], tuple[dict[str, int], dict[str, int]]]:
    """(oracle, engine) of each line on which they differ; a line one side lacks is {}."""
    return {
        k: (expected.get(k, {}), got.get(k, {}))
        for k in sorted(set(expected) | set(got))
        if expected.get(k, {}) != got.get(k, {})
    }


@RANDOM_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_engine_and_pandas_agree_line_by_line(seed: int) -> None:
    events = random_fleet(random.Random(seed))
    with ledger_of(events) as store:
        gpu, cents, engine_gpu, engine_cents = oracle_and_engine(store)
    assert set(engine_gpu) == set(gpu), "lines after corrections differ"
    assert not differences(gpu, engine_gpu), (
        f"seed {seed}: GPU-µs (oracle, engine) per line: {differences(gpu, engine_gpu)}"
    )
    assert not differences(cents, engine_cents), (
        f"seed {seed}: cents (oracle, engine) per line: {differences(cents, engine_cents)}"
    )


def engine_placement(store: Store) -> dict[tuple[str, str], tuple[str, Fraction]]:
    """Each line's placement state and exact claim as the engine gives them: its
    `line_placement` and the one rule for a claim (`placement_claim`)."""
    result = reconcile_store(store)
    placed = result.placed()
    out: dict[tuple[str, str], tuple[str, Fraction]] = {}
    for key, (first, tally) in result.lines().items():
        state, share = placed.get(key, ("unobserved", None))
        claim = (
            placement_claim(share, customer_borne(tally.exact))
            if state == "not_as_sold"
            else Fraction(0)
        )
        out[(first.tenant, first.line_id)] = (state, claim)
    return out


@RANDOM_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_engine_and_pandas_agree_on_each_line_s_placement_and_claim(seed: int) -> None:
    """RULES.md 13 on random fleets with captures and credit shares: the same state for
    every line, and claims within 1e-12 (both are exact; the bound only guards a reading
    through floats)."""
    events = random_fleet(random.Random(seed))
    with ledger_of(events) as store:
        frame = frame_of_entries(entries_of_store(store))
        oracle = placement_lines(frame)
        engine = engine_placement(store)
    assert set(engine) == set(oracle), f"seed {seed}: lines after corrections differ"
    for key, (state, claim) in engine.items():
        expected = oracle[key]
        assert state == expected.state, (seed, key, state, expected)
        assert abs(claim - expected.claim) <= Fraction(1, 10**12), (seed, key, claim, expected)


def test_the_random_fleets_meet_rules_11_to_13() -> None:
    """The draws above reach every reading: grants on several nodes, gangs, preempted
    failures inside the notice, and each placement state with a claim above zero."""
    seen: set[str] = set()
    for seed in range(60):
        events = random_fleet(random.Random(seed))
        grants = [e["data"] for e in events if e["type"] == "allocation.granted"]
        if any(len(g.get("nodes", [])) >= 2 for g in grants):
            seen.add("nodes")
        starts = [
            (e["data"]["job_id"], e["data"]["attempt"], e["data"]["allocation_id"])
            for e in events
            if e["type"] == "job.started"
        ]
        gangs = defaultdict(set)
        for job, attempt, aid in starts:
            gangs[(job, attempt)].add(aid)
        if any(len(a) > 1 for a in gangs.values()):
            seen.add("gang")
        if _owes_notice(events):
            seen.add("notice")
        with ledger_of(events) as store:
            lines = placement_lines(frame_of_entries(entries_of_store(store)))
        seen |= {p.state for p in lines.values()}
        if any(p.claim > 0 for p in lines.values()):
            seen.add("claim")
    assert seen >= {"nodes", "gang", "notice", "as_sold", "not_as_sold", "unobserved", "claim"}, (
        seen
    )


def _owes_notice(events: list[Event]) -> bool:
    """A preempted failure of a job in [t_r, t_r + notice) of a decision naming that job
    (RULES.md 12, the job's own decisions only; notice: the tenant's terms at t_r)."""
    timed = sorted((datetime.fromisoformat(e["time"]), i, e) for i, e in enumerate(events))
    for t_r, _, d in timed:
        data = d["data"]
        if d["type"] != "policy.decision" or data["decision"] not in (
            "preempted",
            "reclaimed",
            "evicted",
        ):
            continue
        terms = [
            e["data"]
            for t, _, e in timed
            if e["type"] == "policy.terms" and e["data"]["tenant"] == data["tenant"] and t <= t_r
        ]
        notice = timedelta(seconds=terms[-1]["reclaim_notice_s"] if terms else 0)
        for t_f, _, f in timed:
            if (
                f["type"] == "job.failed"
                and f["data"]["cause"] == "preempted"
                and f["data"]["tenant"] == data["tenant"]
                and f["data"]["job_id"] == data.get("job_id")
                and t_r <= t_f < t_r + notice
            ):
                return True
    return False


# ------------------------------------------------------------ the benchmark's fleet


def test_the_benchmark_fleet_is_valid_and_both_implementations_agree_on_it(tmp_path: Path) -> None:
    from bench.reconcile import Shape, check_fleet, write_fleet
    from reconcile import reconcile_parquet

    path = tmp_path / "fleet.parquet"
    shape = Shape(gpus=800, days=1)  # 200 allocations: every variant of the hundred, twice
    events = write_fleet(path, shape, threads=1)
    counts = check_fleet(path, project=True)
    assert sum(counts.values()) == events
    assert counts["allocation.granted"] == shape.allocations == 200
    frame = frame_of_entries(entries_of_parquet(path))
    expected = reconcile_frame(frame)
    cells = reconcile_parquet(path).cells
    assert by_line(cells) == expected
    assert not differences(line_cents(frame, expected), by_line(cells, money=True))
    kinds = {key for cells in expected.values() for key in cells}
    assert {
        "stalled_fault",
        "restart_lost:provider",
        "restart_recovery:customer",
        "reclaimed",
        "double_billed",
        "unallocated",
        "productive:rejected",
        "idle_unexplained",
        "checkpoint",
        "startup",
    } <= kinds
