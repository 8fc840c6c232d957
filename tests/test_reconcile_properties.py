"""Reconciliation as algebra: for random event sets every line's categories add
up to its GPU-seconds and its money, no second of an allocation is counted twice, and the
ledger order of events (other than billing lines') never changes the answer.

The references computed here are the first rules of reconcile/RULES.md only (unallocated,
double_billed), minute by minute over the generated inputs; the finer categories are
checked by the hand-worked scenarios in test_reconcile_rules.py.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SLOW
from tests.reconcile_helpers import C, D, P, Scenario, cats, line, run, shuffled

BASE = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)
CENT = Decimal("0.01")
FIXED_BEARER = {
    "unallocated": P,
    "double_billed": P,
    "reclaimed": P,
    "stalled_fault": P,
    "checkpoint": C,
    "productive": C,
    "startup": C,
    "idle_reserved": C,
    "idle_unexplained": D,
}
RESTART = {"restart_lost", "restart_recovery"}
TIME_CATEGORIES = set(FIXED_BEARER) | RESTART


def clock(minute: int) -> str:
    return (BASE + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- a hand-worked scenario with every kind of event, at distinct instants -----------------------


def rich() -> Scenario:
    s = Scenario()
    s.terms(at="09:00")
    s.grant("A1", gpus=1, at="10:00", node="n1")
    s.start("j1", "A1", at="10:01")
    s.progress("j1", step=1, at="10:05")
    s.fail("j1", at="10:10", cause="hardware")
    s.start("j1", "A1", at="10:15", attempt=2)
    s.progress("j1", step=1, at="10:20")
    s.checkpoint("j1", "c1", step=1, started="10:22", saved="10:23")
    s.progress("j1", step=2, at="10:25")
    s.fail("j1", at="10:30", cause="application")
    s.start("j1", "A1", at="10:35", attempt=3)
    s.restored("j1", "c1", step=1, at="10:36")
    s.steps("j1", "10:40", "10:45", first_step=2)
    s.complete("j1", at="10:50")
    s.fault(at="10:52", node="n1")
    s.cleared(at="10:53", node="n1")
    s.decision("preempted", at="10:55", alloc="A1")
    s.result("j1", "accepted", at="10:56")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=1, amount="3.60", at="11:01")
    return s


# Worked by hand (1 GPU, 3600 GPU-s, $0.001 a GPU-second):
#   startup          [grant 10:00, attempt 1 start 10:01); the rest of its startup is lost   60
#   restart_lost     failure 1 (hardware): [10:01, 10:10), no save before it    540 provider
#                    failure 2 (application): [save 10:23, 10:30)               420 customer
#   restart_recovery failure 1: [10:10, attempt 2's first progress 10:20)       600 provider
#                    failure 2: [10:30, attempt 3's first progress 10:40)       600 customer
#   checkpoint       [10:22, 10:23)                                               60
#   productive       [10:20, 10:22) (rest of that gap: checkpoint, lost) 120 + [10:40, 10:50) 600
#   idle_reserved    [10:50, 10:55)  (the fault 10:52-10:53 touches no gap)     300
#   reclaimed        [10:55 + notice 0, 11:00)                                  300
RICH_EXPECTED = {
    "startup": (60, "0.06", C),
    "restart_lost": (960, "0.96", "mixed", {P: (540, "0.54"), C: (420, "0.42")}),
    "restart_recovery": (1200, "1.20", "mixed", {P: (600, "0.60"), C: (600, "0.60")}),
    "checkpoint": (60, "0.06", C),
    "productive": (720, "0.72", C),
    "idle_reserved": (300, "0.30", C),
    "reclaimed": (300, "0.30", P),
}


def test_rich_scenario_by_hand_on_each_backend(db_url: str) -> None:
    doc = run(db_url, rich().events)
    l1 = line(doc, "L1")
    assert (l1["gpu_seconds"], l1["amount"]) == (3600, "3.60")
    assert cats(l1) == RICH_EXPECTED
    t = doc["tenants"]["acme"]
    assert cats(t) == RICH_EXPECTED
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (3600, 0)
    assert t["by_bearer"] == {"provider": "1.44", "customer": "2.16", "disputed": "0.00"}
    assert t["productive_by_acceptance"] == {"accepted": 720, "rejected": 0, "pending": 0}


def test_events_in_any_ledger_order_give_the_same_answer(tmp_path: Path) -> None:
    events = rich().events
    assert len({e["time"] for e in events}) == len(events)  # no ties for ledger order to break
    in_time_order = sorted(events, key=lambda e: str(e["time"]))
    expected = run(f"sqlite:///{tmp_path / 'sorted.db'}", in_time_order)
    assert cats(line(expected, "L1")) == RICH_EXPECTED
    for seed in (1, 2, 3):
        order = shuffled(events, seed)
        assert order != in_time_order
        assert run(f"sqlite:///{tmp_path / f'shuffled{seed}.db'}", order) == expected, (
            f"seed {seed}"
        )


def test_progress_before_its_jobs_start_on_an_earlier_page_gives_the_same_answer(
    tmp_path: Path,
) -> None:
    """Progress is keyed by its job's start, which may come on a later page of the ledger
    (late data): read two events a page, it must give what one page gives, and progress of
    a job that never starts keeps its tenant and job in `ev`."""
    from ledger import Store
    from reconcile import reconcile_tables
    from reconcile.engine.snapshot import load_pages, open_engine, store_pages

    events = shuffled(rich().events, 2)
    stray = Scenario()
    stray.progress("never-started", step=7, at="10:30")
    events += stray.events
    first = {e["type"]: i for i, e in reversed(list(enumerate(events)))}
    assert first["job.progress"] < first["job.started"]  # a page of progress before any start
    url = f"sqlite:///{tmp_path / 'late.db'}"
    expected = run(url, events)
    store = Store(url)
    try:
        with store.reading() as conn:
            paged = reconcile_tables(store_pages(conn, page_rows=2)).as_json()
            views = []
            for page_rows in (2, 10_000):
                con = open_engine()
                load_pages(con, store_pages(conn, page_rows=page_rows))
                views.append(con.execute("SELECT * FROM ev ORDER BY seq").fetchall())
                con.close()
    finally:
        store.close()
    assert paged == expected
    assert views[0] == views[1]
    stray_rows = [row for row in views[0] if row[1] == "job.progress" and "never-started" in row]
    assert len(stray_rows) == 1 and "acme" in stray_rows[0]


# --- random event sets --------------------------------------------------------------------------


@dataclass(frozen=True)
class Hold:
    gpus: int
    granted: int  # minutes after 10:00
    released: int | None

    def covers(self, minute: int) -> bool:
        return self.granted <= minute and (self.released is None or minute < self.released)


@dataclass(frozen=True)
class Bill:
    line_id: str
    alloc: str
    start: int
    end: int
    gpus: int
    amount: Decimal
    category: str
    corrects: str | None

    @property
    def bills_time(self) -> bool:
        return self.category != "credit" and self.gpus > 0 and self.end > self.start


@dataclass
class Fleet:
    scenario: Scenario = field(default_factory=Scenario)
    holds: dict[str, Hold] = field(default_factory=dict)
    bills: list[Bill] = field(default_factory=list)

    def surviving(self) -> list[Bill]:
        named = {b.corrects for b in self.bills}
        return [b for b in self.bills if b.line_id not in named]


def draw_holds(draw: st.DrawFn, f: Fleet) -> None:
    for i in range(draw(st.integers(1, 3))):
        alloc, granted = f"A{i + 1}", draw(st.integers(0, 60))
        released = draw(st.none() | st.integers(granted, 150))
        gpus = draw(st.integers(1, 4))
        f.scenario.grant(
            alloc,
            gpus=gpus,
            at=clock(granted),
            node=f"n{i % 2}",
            devices=list(range(gpus)),
            fabric_domain="fd-a" if i == 0 else None,
        )
        if released is not None:
            f.scenario.release(alloc, at=clock(released))
        f.holds[alloc] = Hold(gpus, granted, released)


def draw_jobs(draw: st.DrawFn, f: Fleet) -> None:
    s, allocs = f.scenario, list(f.holds)
    for j in range(draw(st.integers(0, 3))):
        job, t = f"j{j + 1}", draw(st.integers(0, 90))
        for attempt in range(1, draw(st.integers(1, 2)) + 1):
            s.start(job, draw(st.sampled_from(allocs)), at=clock(t), attempt=attempt)
            for _ in range(draw(st.integers(0, 4))):
                t += draw(st.integers(0, 8))
                s.progress(job, step=draw(st.integers(0, 6)), at=clock(t))
            if draw(st.booleans()):
                saved = t + draw(st.integers(0, 4)) if draw(st.booleans()) else None
                s.checkpoint(
                    job,
                    f"c{attempt}",
                    step=1,
                    started=clock(t),
                    saved=None if saved is None else clock(saved),
                )
            t += draw(st.integers(0, 8))
            end = draw(st.sampled_from(["complete", "fail", "cancel", "none"]))
            if end == "complete":
                s.complete(job, at=clock(t))
            elif end == "fail":
                s.fail(
                    job,
                    at=clock(t),
                    cause=draw(
                        st.sampled_from(
                            ["hardware", "fabric", "application", "preempted", "unknown"]
                        )
                    ),
                )
            elif end == "cancel":
                s.cancel(job, at=clock(t))
            t += draw(st.integers(0, 6))
        if draw(st.booleans()):
            s.result(job, draw(st.sampled_from(["accepted", "rejected"])), at=clock(t))


def draw_policy_and_health(draw: st.DrawFn, f: Fleet) -> None:
    s = f.scenario
    for _ in range(draw(st.integers(0, 2))):
        place = draw(
            st.sampled_from(
                [
                    {"node": "n0"},
                    {"node": "n1"},
                    {"node": "n0", "device": "1"},
                    {"device": "0"},
                    {"fabric_domain": "fd-a"},
                ]
            )
        )
        opened = draw(st.integers(0, 120))
        s.fault(at=clock(opened), severity=draw(st.sampled_from(["critical", "warning"])), **place)
        if draw(st.booleans()):
            s.cleared(at=clock(opened + draw(st.integers(0, 30))), **place)
    if draw(st.booleans()):
        s.decision(
            draw(st.sampled_from(["preempted", "reclaimed", "evicted", "admitted"])),
            at=clock(draw(st.integers(0, 150))),
            alloc=draw(st.sampled_from(list(f.holds))),
        )
    if draw(st.booleans()):
        s.terms(
            at=clock(draw(st.integers(-60, 120))),
            warmup=60 * draw(st.integers(0, 15)),
            stall=60 * draw(st.integers(1, 10)),
            notice=60 * draw(st.integers(0, 10)),
        )


#: Whole cents, or four places as FOCUS exports have them (e.g. "0.0031").
amounts = st.one_of(
    st.integers(-5_000, 20_000).map(lambda c: Decimal(c) / 100),
    st.integers(-500_000, 2_000_000).map(lambda c: Decimal(c) / 10_000),
)


def draw_bills(draw: st.DrawFn, f: Fleet) -> None:
    for k in range(draw(st.integers(1, 4))):
        start, length = draw(st.integers(-10, 120)), draw(st.integers(0, 90))
        bill = Bill(
            line_id=f"L{k + 1}",
            alloc=draw(st.sampled_from([*f.holds, "A9"])),
            start=start,
            end=start + length,
            gpus=draw(st.integers(0, 5)),
            amount=draw(amounts),
            category=draw(
                st.sampled_from(["usage", "usage", "credit", "adjustment", "correction"])
            ),
            corrects=draw(st.sampled_from([None, *(b.line_id for b in f.bills)])),
        )
        f.scenario.line(
            bill.line_id,
            bill.alloc,
            clock(bill.start),
            clock(bill.end),
            gpus=bill.gpus,
            amount=format(bill.amount, "f"),
            category=bill.category,
            corrects=bill.corrects,
        )
        f.bills.append(bill)


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    f = Fleet()
    draw_holds(draw, f)
    draw_jobs(draw, f)
    draw_policy_and_health(draw, f)
    draw_bills(draw, f)
    return f


def reconciled(f: Fleet) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return run(f"sqlite:///{Path(tmp) / 'ledger.db'}", f.scenario.events)


def seconds(node: dict[str, Any], name: str) -> Any:
    return node["categories"].get(name, {}).get("gpu_seconds", 0)


def first_rules(f: Fleet) -> dict[str, tuple[int, int, int]]:
    """Per surviving GPU line: (billed, unallocated, double_billed) GPU-seconds, minute by
    minute: RULES.md "Unallocated" and category 1, nothing else."""
    out: dict[str, tuple[int, int, int]] = {}
    billed_before: dict[str, set[int]] = {}
    for b in f.surviving():
        if not b.bills_time:
            continue
        hold = f.holds.get(b.alloc, Hold(0, 0, 0))
        window = set(range(b.start, b.end))
        held = {m for m in window if hold.covers(m)}
        g = min(b.gpus, hold.gpus)
        unallocated = max(b.gpus - hold.gpus, 0) * len(window) + g * len(window - held)
        double = g * len(held & billed_before.setdefault(b.alloc, set()))
        billed_before[b.alloc] |= window
        out[b.line_id] = (60 * b.gpus * len(window), 60 * unallocated, 60 * double)
    return out


#: More examples with GPULEDGER_SLOW=1; the default keeps the shared suite quick.
PROPERTY_SETTINGS = settings(
    max_examples=200 if SLOW else 20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(fleets())
def test_every_second_is_classified_once(f: Fleet) -> None:
    doc = reconciled(f)
    reference = first_rules(f)
    assert [ln["line_id"] for ln in doc["lines"]] == [b.line_id for b in f.surviving()]
    for ln in doc["lines"]:
        categories = ln["categories"]
        numbers = [ln["gpu_seconds"], *(v["gpu_seconds"] for v in categories.values())]
        assert all(type(n) is int for n in numbers), numbers
        assert sum(v["gpu_seconds"] for v in categories.values()) == ln["gpu_seconds"], ln
        if (
            ln["line_id"] not in reference
        ):  # no time at all: money-only, or a GPU line's empty window
            bill = next(b for b in f.surviving() if b.line_id == ln["line_id"])
            alone = "unallocated" if bill.category != "credit" and bill.gpus > 0 else "money_only"
            assert (ln["gpu_seconds"], set(categories)) == (0, {alone}), ln
            assert Decimal(categories[alone]["amount_exact"]) == bill.amount, ln  # all of it
            continue
        billed, unallocated, double = reference[ln["line_id"]]
        assert (ln["gpu_seconds"], seconds(ln, "unallocated"), seconds(ln, "double_billed")) == (
            billed,
            unallocated,
            double,
        ), ln
        assert set(categories) <= TIME_CATEGORIES, ln
        for name, v in categories.items():
            assert v["bearer"] == FIXED_BEARER.get(name, v["bearer"]), (name, v)
            assert v["bearer"] in ({P, C, "mixed"} if name in RESTART else {P, C, D}), (name, v)
    assert_no_second_counted_twice(f, doc)
    assert_tenant_seconds(doc)


def assert_no_second_counted_twice(f: Fleet, doc: dict[str, Any]) -> None:
    """Per allocation: the seconds left after unallocated and double_billed are at most
    g_a x |H ∩ (union of the windows billing it)|."""
    for alloc, hold in f.holds.items():
        lines = [ln for ln in doc["lines"] if ln["allocation_id"] == alloc and ln["gpu_seconds"]]
        counted = sum(
            ln["gpu_seconds"] - seconds(ln, "unallocated") - seconds(ln, "double_billed")
            for ln in lines
        )
        windows = {
            m
            for b in f.surviving()
            if b.alloc == alloc and b.bills_time
            for m in range(b.start, b.end)
        }
        assert counted <= hold.gpus * 60 * sum(1 for m in windows if hold.covers(m)), alloc


def assert_tenant_seconds(doc: dict[str, Any]) -> None:
    for name, t in doc["tenants"].items():
        lines = [ln for ln in doc["lines"] if ln["tenant"] == name]
        assert t["billed_gpu_seconds"] == sum(ln["gpu_seconds"] for ln in lines)
        assert sum(v["gpu_seconds"] for v in t["categories"].values()) == t["billed_gpu_seconds"]
        assert sum(t["productive_by_acceptance"].values()) == seconds(t, "productive")


@PROPERTY_SETTINGS
@given(fleets())
def test_money_follows_time_and_adds_up_to_the_cent(f: Fleet) -> None:
    doc = reconciled(f)
    amounts = {b.line_id: b.amount for b in f.surviving()}
    for ln in doc["lines"]:
        exact, reported_line = amounts[ln["line_id"]], Decimal(ln["amount"])
        # RULES.md: each line rounded half-even, then moved by at most a cent to meet the invoice
        assert abs(reported_line - exact.quantize(CENT, ROUND_HALF_EVEN)) <= CENT, ln
        if exact == exact.quantize(CENT):  # whole cents: nothing to round, nothing to meet
            assert reported_line == exact, ln
        reported = {name: Decimal(v["amount"]) for name, v in ln["categories"].items()}
        assert sum(reported.values()) == reported_line, ln
        for name, v in ln["categories"].items():  # largest remainder moves a share by under a cent
            share = exact * v["gpu_seconds"] / ln["gpu_seconds"] if ln["gpu_seconds"] else exact
            assert abs(reported[name] - share) < 2 * CENT, (name, share, ln)
    exact_invoice = sum(amounts.values(), Decimal(0)).quantize(
        CENT, ROUND_HALF_EVEN
    )  # one invoice, INV-1
    assert sum(Decimal(ln["amount"]) for ln in doc["lines"]) == exact_invoice
    for name, t in doc["tenants"].items():
        total = sum(Decimal(ln["amount"]) for ln in doc["lines"] if ln["tenant"] == name)
        assert sum(Decimal(v) for v in t["by_bearer"].values()) == total
        assert sum(Decimal(v["amount"]) for v in t["categories"].values()) == total


def distinct_times(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same events, each at its own instant, their time order kept: time t becomes
    t x n + i for the i-th of n events (seconds since 10:00)."""
    n = len(events)
    out = []
    for i, e in enumerate(events):
        t = datetime.strptime(e["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        moved = BASE + timedelta(seconds=(t - BASE).total_seconds() * n + i)
        out.append({**e, "time": moved.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return out


@settings(
    max_examples=50 if SLOW else 6, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(fleets(), st.integers(0, 2**32))
def test_random_event_sets_give_the_same_answer_in_any_ledger_order(f: Fleet, seed: int) -> None:
    events = distinct_times(f.scenario.events)
    with tempfile.TemporaryDirectory() as tmp:
        in_time_order = sorted(events, key=lambda e: str(e["time"]))
        lines = iter(
            [e for e in events if e["type"] == "billing.line"]
        )  # lines keep their relative order
        in_time_order = [next(lines) if e["type"] == "billing.line" else e for e in in_time_order]
        expected = run(f"sqlite:///{Path(tmp) / 'a.db'}", in_time_order)
        assert run(f"sqlite:///{Path(tmp) / 'b.db'}", shuffled(events, seed)) == expected
        assert run(f"sqlite:///{Path(tmp) / 'c.db'}", shuffled(events, seed + 1)) == expected
