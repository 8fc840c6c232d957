"""Hand-worked reconciliation scenarios: one per time category and rule of reconcile/RULES.md,
as reconcile/RULES.md states them, and their edge cases. Corrections, credits,
money, unbilled time and the filters are in test_reconcile_billing.py.

Every expected figure below is worked out by hand in the comments beside it, never by
running the engine. Times are on 2026-01-05 in whole minutes. Most lines cost $3.60 per
GPU-hour, so one GPU-second is $0.001 and a category's amount is its GPU-seconds / 1000.
Defaults unless a test sets terms: warmup 600 s, stall threshold 300 s, reclaim notice 0.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.reconcile_helpers import (
    C,
    D,
    P,
    Scenario,
    cats,
    line,
    reconcile,
    run,
    stall_base,
    tenant,
)


def fault(
    opened: str,
    *,
    clear: str | None = None,
    clear_code: str = "xid-79",
    severity: str = "critical",
    **place: Any,
) -> Callable[[Scenario], None]:
    """A health.fault (code xid-79) at `opened` on `place`, and a health.cleared at `clear`."""

    def add(s: Scenario) -> None:
        s.fault(at=opened, severity=severity, **place)
        if clear is not None:
            s.cleared(at=clear, code=clear_code, **place)

    return add


# --- productive, startup, idle_reserved: the plain case ------------------------------------------


def basic() -> Scenario:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:00")
    s.start("j1", "A1", at="10:02")
    s.steps("j1", "10:05", "10:08", "10:11")
    s.complete("j1", at="10:14")
    s.result("j1", "accepted", at="10:30")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")
    return s


def test_productive_startup_and_idle_reserved(tmp_path: Path) -> None:
    doc = reconcile(tmp_path, basic())
    # W = H = [10:00, 11:00) = 3600 s at 8 GPUs = 28800 GPU-s.
    # startup: the first attempt's startup starts at the grant (10:00 <= 10:02), ends at the
    #   first progress 10:05 (before 10:00 + 600 s): 300 s x 8 = 2400.
    # productive: marks 10:05, 10:08, 10:11 (steps rising) and completed 10:14, gaps of
    #   180 s <= 300: 540 s x 8 = 4320.
    # idle_reserved: nothing runs on A1 in [10:14, 11:00) = 2760 s x 8 = 22080.
    expected = {
        "startup": (2400, "2.40", C),
        "productive": (4320, "4.32", C),
        "idle_reserved": (22080, "22.08", C),
    }
    l1 = line(doc, "L1")
    assert (l1["invoice_id"], l1["tenant"], l1["allocation_id"]) == ("INV-1", "acme", "A1")
    assert (l1["gpu_seconds"], l1["amount"]) == (28800, "28.80")
    assert cats(l1) == expected
    t = tenant(doc)
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (28800, 0)  # H is billed whole
    assert cats(t) == expected
    assert t["by_bearer"] == {"provider": "0.00", "customer": "28.80", "disputed": "0.00"}
    assert t["productive_by_acceptance"] == {"accepted": 4320, "rejected": 0, "pending": 0}


def test_gpu_seconds_are_integers_when_times_are_whole_seconds(tmp_path: Path) -> None:
    doc = reconcile(tmp_path, basic())
    l1 = line(doc, "L1")
    numbers = [l1["gpu_seconds"], *(v["gpu_seconds"] for v in l1["categories"].values())]
    assert all(type(n) is int for n in numbers), numbers


# --- unallocated --------------------------------------------------------------------------------


def test_unallocated_gpus_beyond_the_grant_and_time_outside_the_hold(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=4, at="10:10")
    s.release("A1", at="10:50")
    s.line("L1", "A1", "10:00", "11:00", gpus=6, amount="21.60")
    doc = reconcile(tmp_path, s)
    # billed 6 x 3600 = 21600. (6 - 4) x 3600 = 7200 unallocated; W \ H = [10:00, 10:10) and
    # [10:50, 11:00) = 1200 s x min(6, 4) = 4800 unallocated: 12000 in all.
    # W ∩ H = [10:10, 10:50) = 2400 s x 4 = 9600 with no job: idle_reserved.
    assert cats(line(doc, "L1")) == {
        "unallocated": (12000, "12.00", P),
        "idle_reserved": (9600, "9.60", C),
    }
    t = tenant(doc)
    # unbilled: 4 x |H| = 9600 minus the 9600 of H that L1 bills = 0.
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (21600, 0)
    assert t["by_bearer"] == {"provider": "12.00", "customer": "9.60", "disputed": "0.00"}


def test_a_line_for_an_allocation_never_granted_is_all_unallocated(tmp_path: Path) -> None:
    s = Scenario()
    s.line("L1", "A9", "10:00", "10:30", gpus=2, amount="3.60")
    doc = reconcile(tmp_path, s)
    # H is empty, g_a = 0: all of 2 x 1800 = 3600 is unallocated.
    assert cats(line(doc, "L1")) == {"unallocated": (3600, "3.60", P)}


def test_line_starting_before_the_grant_on_an_allocation_never_released(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:20")
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80", at="11:30")
    doc = reconcile(tmp_path, s)
    # H = [10:20, +inf). [10:00, 10:20) = 1200 s x 8 = 9600 unallocated;
    # [10:20, 11:00) = 2400 s x 8 = 19200 idle_reserved (no job).
    assert cats(line(doc, "L1")) == {
        "unallocated": (9600, "9.60", P),
        "idle_reserved": (19200, "19.20", C),
    }
    # horizon = the tenant's latest event = the line at 11:30: 8 x [10:20, 11:30) = 8 x 4200
    # = 33600, minus the 19200 of H billed = 14400 unbilled.
    assert tenant(doc)["unbilled_gpu_seconds"] == 14400


def test_hold_is_the_earliest_grant_by_time_and_the_first_release_after_it(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:10")  # appended first, but not the earliest by time
    s.grant("A1", gpus=4, at="10:00")  # late data: this one gives granted and g_a
    s.release("A1", at="09:30")  # before the grant: not a release of this hold
    s.release("A1", at="10:40")
    s.line("L1", "A1", "10:00", "11:00", gpus=4, amount="14.40")
    doc = reconcile(tmp_path, s)
    # H = [10:00, 10:40), g_a = 4. [10:40, 11:00) = 1200 s x 4 = 4800 unallocated;
    # [10:00, 10:40) = 2400 s x 4 = 9600 idle_reserved.
    assert cats(line(doc, "L1")) == {
        "unallocated": (4800, "4.80", P),
        "idle_reserved": (9600, "9.60", C),
    }


def test_zero_length_gpu_line_is_unallocated(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:00")
    s.release("A1", at="10:10")
    s.line("L0", "A1", "10:00", "10:00", gpus=8, amount="5.00")
    doc = reconcile(tmp_path, s)
    # An empty window bills no GPU-seconds, yet money: all of it is unallocated, the
    # provider's (§Unallocated: the customer bears nothing without cause).
    l0 = line(doc, "L0")
    assert (l0["gpu_seconds"], l0["amount"]) == (0, "5.00")
    assert {
        k: (v["gpu_seconds"], v["amount"], v["bearer"]) for k, v in l0["categories"].items()
    } == {"unallocated": (0, "5.00", P)}
    t = tenant(doc)
    # Nothing of H = [10:00, 10:10) is billed: 8 x 600 = 4800 unbilled (horizon 10:10, the
    # release).
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (0, 4800)
    assert t["by_bearer"] == {"provider": "5.00", "customer": "0.00", "disputed": "0.00"}


# --- double_billed ------------------------------------------------------------------------------


def test_overlapping_lines_the_later_in_ledger_order_is_double_billed(db_url: str) -> None:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:00")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "10:40", gpus=8, amount="19.20")
    s.line("L2", "A1", "10:20", "11:00", gpus=8, amount="19.20")
    doc = run(db_url, s.events)  # on SQLite and PostgreSQL
    # L1: [10:00, 10:40) = 2400 s x 8 = 19200 idle_reserved.
    # L2: [10:20, 10:40) is L1's already: 1200 s x 8 = 9600 double_billed; [10:40, 11:00) = 9600
    # idle.
    assert cats(line(doc, "L1")) == {"idle_reserved": (19200, "19.20", C)}
    assert cats(line(doc, "L2")) == {
        "double_billed": (9600, "9.60", P),
        "idle_reserved": (9600, "9.60", C),
    }
    t = tenant(doc)
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (38400, 0)
    assert cats(t) == {"double_billed": (9600, "9.60", P), "idle_reserved": (28800, "28.80", C)}
    assert t["by_bearer"] == {"provider": "9.60", "customer": "28.80", "disputed": "0.00"}


def test_double_billing_follows_ledger_order_not_the_billing_period(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:00")
    s.release("A1", at="11:00")
    s.line("L-late", "A1", "10:30", "11:00", gpus=8, amount="14.40")  # appended first
    s.line("L-early", "A1", "10:00", "10:45", gpus=8, amount="21.60")
    doc = reconcile(tmp_path, s)
    # L-late: 1800 s x 8 = 14400 idle_reserved. L-early: [10:30, 10:45) = 900 s x 8 = 7200
    # double_billed (L-late is earlier in the ledger); [10:00, 10:30) = 14400 idle_reserved.
    assert cats(line(doc, "L-late")) == {"idle_reserved": (14400, "14.40", C)}
    assert cats(line(doc, "L-early")) == {
        "double_billed": (7200, "7.20", P),
        "idle_reserved": (14400, "14.40", C),
    }


# --- reclaimed ----------------------------------------------------------------------------------


def reclaim_base() -> Scenario:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", *(f"10:{m:02d}" for m in range(5, 50, 5)))  # steps 1..9 at 10:05 ... 10:45
    s.complete("j1", at="10:50")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")
    return s


def _preempt_with_notice(s: Scenario) -> None:
    s.terms(at="09:00", notice=300)
    s.decision("preempted", at="10:30", alloc="A1")


def _evict_job_no_notice(s: Scenario) -> None:
    s.decision("evicted", at="10:30", job="j1")


def _notice_changed_before_the_decision(s: Scenario) -> None:
    s.terms(at="09:00", notice=300)
    s.terms(at="10:20", notice=600)  # in force at t_r = 10:30
    s.decision("reclaimed", at="10:30", alloc="A1")


def _two_decisions_the_earliest_bound(s: Scenario) -> None:
    s.decision("reclaimed", at="10:45", alloc="A1")  # appended first, later bound
    s.decision("preempted", at="10:35", job="j1")


def _admitted_is_not_a_reclaim(s: Scenario) -> None:
    s.decision("admitted", at="10:30", alloc="A1")


# In every case: startup [10:00, 10:05) = 300 s x 8 = 2400 ($2.40); gaps of 300 s are
# productive (<= threshold) until the reclaim bound.
RECLAIM_CASES: list[tuple[Callable[[Scenario], None], dict[str, tuple[Any, ...]]]] = [
    # preempted at 10:30 + notice 300 s: reclaimed [10:35, 11:00) = 1500 s x 8 = 12000;
    # productive [10:05, 10:35) = 1800 s x 8 = 14400.
    (
        _preempt_with_notice,
        {
            "startup": (2400, "2.40", C),
            "productive": (14400, "14.40", C),
            "reclaimed": (12000, "12.00", P),
        },
    ),
    # evicted naming the job on A1, notice 0: reclaimed [10:30, 11:00) = 1800 x 8 = 14400;
    # productive [10:05, 10:30) = 1500 x 8 = 12000.
    (
        _evict_job_no_notice,
        {
            "startup": (2400, "2.40", C),
            "productive": (12000, "12.00", C),
            "reclaimed": (14400, "14.40", P),
        },
    ),
    # terms changed mid-line: notice 600 at t_r: reclaimed [10:40, 11:00) = 1200 x 8 = 9600;
    # productive [10:05, 10:40) = 2100 x 8 = 16800.
    (
        _notice_changed_before_the_decision,
        {
            "startup": (2400, "2.40", C),
            "productive": (16800, "16.80", C),
            "reclaimed": (9600, "9.60", P),
        },
    ),
    # two decisions, bounds 10:45 and 10:35: the earliest, 10:35, as in the first case.
    (
        _two_decisions_the_earliest_bound,
        {
            "startup": (2400, "2.40", C),
            "productive": (14400, "14.40", C),
            "reclaimed": (12000, "12.00", P),
        },
    ),
    # no reclaim: productive [10:05, 10:50) = 2700 x 8 = 21600; idle_reserved [10:50, 11:00)
    # = 600 x 8 = 4800.
    (
        _admitted_is_not_a_reclaim,
        {
            "startup": (2400, "2.40", C),
            "productive": (21600, "21.60", C),
            "idle_reserved": (4800, "4.80", C),
        },
    ),
]


@pytest.mark.parametrize(
    ("variant", "expected"), RECLAIM_CASES, ids=[c[0].__name__.strip("_") for c in RECLAIM_CASES]
)
def test_reclaimed_from_the_decision_plus_notice(
    tmp_path: Path, variant: Callable[[Scenario], None], expected: dict[str, tuple[Any, ...]]
) -> None:
    s = reclaim_base()
    variant(s)
    assert cats(line(reconcile(tmp_path, s), "L1")) == expected


# --- checkpoint ---------------------------------------------------------------------------------


def test_checkpoint_time_is_the_customers(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=2, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:05", "10:10")
    s.checkpoint(
        "j1", "c0", step=1, started="10:06", saved=None
    )  # never saved: no checkpoint time
    s.checkpoint("j1", "c1", step=2, started="10:10", saved="10:13")
    s.progress("j1", step=3, at="10:15")
    s.complete("j1", at="10:20")
    s.release("A1", at="10:20")
    s.line("L1", "A1", "10:00", "10:20", gpus=2, amount="2.40")
    doc = reconcile(tmp_path, s)
    # checkpoint [10:10, 10:13) = 180 s x 2 = 360. startup [10:00, 10:05) = 300 x 2 = 600.
    # productive: [10:05, 10:10) 300 + [10:13, 10:15) 120 (the rest of that gap is the
    # checkpoint's) + [10:15, 10:20) 300 = 720 x 2 = 1440. Sum 2400 = 2 x 1200.
    assert cats(line(doc, "L1")) == {
        "checkpoint": (360, "0.36", C),
        "startup": (600, "0.60", C),
        "productive": (1440, "1.44", C),
    }


def test_a_checkpoint_taken_while_the_job_runs_elsewhere_is_not_this_allocations(
    tmp_path: Path,
) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:02", "10:04")
    s.complete("j1", at="10:06")
    s.grant("A2", gpus=1, at="10:10")
    s.start("j1", "A2", at="10:10", attempt=2)
    s.checkpoint("j1", "c1", step=2, started="10:15", saved="10:18")  # on A2
    s.release("A1", at="10:20")
    s.line("L1", "A1", "10:00", "10:20", gpus=1, amount="1.20")
    doc = reconcile(tmp_path, s)
    # The checkpoint is cut to j1's attempts on A1, [10:00, 10:06): nothing. startup [10:00,
    # 10:02) 120; productive [10:02, 10:06) 240; idle_reserved [10:06, 10:20) 840.
    assert cats(line(doc, "L1")) == {
        "startup": (120, "0.12", C),
        "productive": (240, "0.24", C),
        "idle_reserved": (840, "0.84", C),
    }


# --- restart_lost and restart_recovery, and who bears them ---------------------------------------


def restart_base(cause: str) -> Scenario:
    s = Scenario()
    s.grant("A1", gpus=4, at="10:00", node="n1", devices=[0, 1, 2, 3], fabric_domain="fd-a")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:05", "10:10")
    s.checkpoint("j1", "c1", step=2, started="10:10", saved="10:12")
    s.steps("j1", "10:15", "10:20", first_step=3)
    s.fail("j1", at="10:22", cause=cause)
    s.start("j1", "A1", at="10:25", attempt=2)
    s.restored("j1", "c1", step=2, at="10:26")
    s.steps("j1", "10:30", "10:35", first_step=3)
    s.complete("j1", at="10:40")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=4, amount="14.40")
    return s


# Worked once for every case (4 GPUs, [10:00, 11:00) = 14400 GPU-s):
#   startup          [10:00, 10:05)                      300 s -> 1200
#   productive       [10:05, 10:10) + [10:30, 10:40)     900 s -> 3600
#   checkpoint       [10:10, 10:12)                      120 s ->  480
#   restart_lost     [last save 10:12, failure 10:22)    600 s -> 2400
#                    (beats productive 10:15-10:20)
#   restart_recovery [10:22, first progress of attempt 2 at 10:30)   480 s -> 1920
#                    (covers attempt 2's startup [10:25, 10:30) and the idle 10:22-10:25)
#   idle_reserved    [10:40, 11:00)                     1200 s -> 4800
# The gaps between marks are all 300 s, so no fault makes a stalled_fault here.
RESTART_CASES: list[tuple[str, str, Callable[[Scenario], None] | None, str]] = [
    ("application, no fault", "application", None, C),
    ("hardware", "hardware", None, P),
    ("fabric", "fabric", None, P),
    ("node fault 2 min before", "application", fault("10:20", node="n1"), P),
    ("node fault exactly 300 s before", "application", fault("10:17", node="n1"), P),
    ("node fault 360 s before", "application", fault("10:16", node="n1"), C),
    ("node fault after the failure", "application", fault("10:23", node="n1"), C),
    ("warning, not critical", "application", fault("10:20", severity="warning", node="n1"), C),
    ("one of a's devices", "application", fault("10:20", node="n1", device="2"), P),
    ("a device a does not hold", "application", fault("10:20", node="n1", device="7"), C),
    ("a's fabric domain", "application", fault("10:20", fabric_domain="fd-a"), P),
    ("another fabric domain", "application", fault("10:20", fabric_domain="fd-b"), C),
    ("another node", "application", fault("10:20", node="n2"), C),
]


@pytest.mark.parametrize(
    ("cause", "extra", "bearer"), [c[1:] for c in RESTART_CASES], ids=[c[0] for c in RESTART_CASES]
)
def test_restart_after_a_checkpoint_and_its_bearer(
    tmp_path: Path, cause: str, extra: Callable[[Scenario], None] | None, bearer: str
) -> None:
    s = restart_base(cause)
    if extra is not None:
        extra(s)
    assert cats(line(reconcile(tmp_path, s), "L1")) == {
        "startup": (1200, "1.20", C),
        "productive": (3600, "3.60", C),
        "checkpoint": (480, "0.48", C),
        "restart_lost": (2400, "2.40", bearer),
        "restart_recovery": (1920, "1.92", bearer),
        "idle_reserved": (4800, "4.80", C),
    }


def test_failure_with_no_checkpoint_and_no_return_to_the_allocation(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:05", "10:10")
    s.fail("j1", at="10:12", cause="unknown")
    s.grant("A2", gpus=1, at="10:15")
    s.start("j1", "A2", at="10:15", attempt=2)  # runs again, but not on A1
    s.progress("j1", step=1, at="10:20")
    s.release("A1", at="10:30")
    s.line("L1", "A1", "10:00", "10:30", gpus=1, amount="1.80")
    doc = reconcile(tmp_path, s)
    # No save: restart_lost is [start 10:00, failure 10:12) = 720 s, ahead of the startup and
    # productive time inside it; customer (cause unknown, no fault). No next attempt on A1:
    # no restart_recovery; [10:12, 10:30) = 1080 s idle_reserved.
    assert cats(line(doc, "L1")) == {
        "restart_lost": (720, "0.72", C),
        "idle_reserved": (1080, "1.08", C),
    }


def test_recovery_runs_to_the_end_of_a_next_attempt_that_never_progresses(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:02", "10:04")
    s.fail("j1", at="10:10", cause="application")
    s.start("j1", "A1", at="10:12", attempt=2)
    s.cancel("j1", at="10:20")
    s.release("A1", at="10:30")
    s.line("L1", "A1", "10:00", "10:30", gpus=1, amount="1.80")
    doc = reconcile(tmp_path, s)
    # restart_lost [10:00, 10:10) 600; restart_recovery [10:10, end of attempt 2 at 10:20) 600
    # (it never progresses); idle_reserved [10:20, 10:30) 600. All the customer's.
    assert cats(line(doc, "L1")) == {
        "restart_lost": (600, "0.60", C),
        "restart_recovery": (600, "0.60", C),
        "idle_reserved": (600, "0.60", C),
    }


def test_restart_lost_of_a_second_failure_comes_before_recovery_from_the_first(
    tmp_path: Path,
) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.progress("j1", step=1, at="10:05")
    s.fail("j1", at="10:10", cause="hardware")
    s.start("j1", "A1", at="10:15", attempt=2)
    s.steps("j1", "10:20", "10:25")
    s.fail("j1", at="10:30", cause="application")
    s.start("j1", "A1", at="10:35", attempt=3)
    s.steps("j1", "10:40", "10:45")
    s.complete("j1", at="10:50")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=1, amount="3.60")
    doc = reconcile(tmp_path, s)
    # failure 1 (hardware, provider): lost [10:00, 10:10) = 600; recovery [10:10, 10:20)
    #   less [10:15, 10:20), which rule 4 gives to failure 2's lost time: 300.
    # failure 2 (application, customer): lost [attempt start 10:15, 10:30) = 900 (no save);
    #   recovery [10:30, first progress of attempt 3 at 10:40) = 600.
    # productive [10:40, 10:50) = 600; idle_reserved [10:50, 11:00) = 600. Sum 3600.
    expected = {
        "restart_lost": (1500, "1.50", "mixed", {P: (600, "0.60"), C: (900, "0.90")}),
        "restart_recovery": (900, "0.90", "mixed", {P: (300, "0.30"), C: (600, "0.60")}),
        "productive": (600, "0.60", C),
        "idle_reserved": (600, "0.60", C),
    }
    assert cats(line(doc, "L1")) == expected
    t = tenant(doc)
    assert cats(t) == expected
    assert t["by_bearer"] == {"provider": "0.90", "customer": "2.70", "disputed": "0.00"}


# --- productive marks, stalls and faults ---------------------------------------------------------


def test_a_mark_counts_when_its_step_rises_or_at_equal_step_its_units_rise(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.progress("j1", step=1, units=100, at="10:02")
    s.progress("j1", step=1, units=200, at="10:04")  # units rose: [10:02, 10:04) productive
    s.progress("j1", step=1, units=200, at="10:06")  # nothing rose: [10:04, 10:06) is not
    s.progress("j1", step=2, at="10:08")  # step rose: [10:06, 10:08) productive
    s.complete("j1", at="10:10")  # [10:08, 10:10) productive
    s.release("A1", at="10:10")
    s.line("L1", "A1", "10:00", "10:10", gpus=1, amount="0.60")
    doc = reconcile(tmp_path, s)
    # startup [10:00, 10:02) 120; productive 3 x 120 = 360; [10:04, 10:06): a running job with
    # no progress and no cause: idle_unexplained 120 (disputed).
    assert cats(line(doc, "L1")) == {
        "startup": (120, "0.12", C),
        "productive": (360, "0.36", C),
        "idle_unexplained": (120, "0.12", D),
    }


def test_marks_at_one_instant_are_taken_in_ledger_order(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.progress("j1", step=2, at="10:05")
    s.progress(
        "j1", step=1, at="10:05"
    )  # same instant, later in the ledger: the last mark at 10:05
    s.progress("j1", step=2, at="10:08")  # rose above step 1: [10:05, 10:08) productive
    s.complete("j1", at="10:10")
    s.release("A1", at="10:10")
    s.line("L1", "A1", "10:00", "10:10", gpus=1, amount="0.60")
    doc = reconcile(tmp_path, s)
    # startup [10:00, 10:05) 300; productive [10:05, 10:08) 180 + [10:08, 10:10) 120 = 300.
    # (Taken by step instead, step 2 at 10:08 would not rise and 180 s would be idle_unexplained.)
    assert cats(line(doc, "L1")) == {"startup": (300, "0.30", C), "productive": (300, "0.30", C)}


STALL_CASES: list[tuple[str, Callable[[Scenario], None] | None, str]] = [
    ("no fault", None, "idle_unexplained"),
    (
        "node fault inside the gap, cleared",
        fault("10:06", clear="10:08", node="n1"),
        "stalled_fault",
    ),
    (
        "device as text, a's devices as ints",
        fault("10:06", node="n1", device="1"),
        "stalled_fault",
    ),
    ("device alone, no node", fault("10:06", device="0"), "stalled_fault"),
    ("a device a does not hold", fault("10:06", node="n1", device="5"), "idle_unexplained"),
    ("a's fabric domain", fault("10:06", fabric_domain="fd-a"), "stalled_fault"),
    ("another fabric domain", fault("10:06", fabric_domain="fd-b"), "idle_unexplained"),
    ("another node", fault("10:06", node="n2"), "idle_unexplained"),
    ("warning only", fault("10:06", severity="warning", node="n1"), "idle_unexplained"),
    ("opened before the gap, never cleared", fault("09:50", node="n1"), "stalled_fault"),
    ("cleared before the gap", fault("09:50", clear="10:03", node="n1"), "idle_unexplained"),
    ("cleared at the gap's start", fault("09:50", clear="10:04", node="n1"), "idle_unexplained"),
    (
        "a clear of another code leaves it open",
        fault("09:50", clear="10:03", clear_code="xid-48", node="n1"),
        "stalled_fault",
    ),
    ("opened at the gap's end", fault("10:14", node="n1"), "idle_unexplained"),
]


@pytest.mark.parametrize(
    ("extra", "gap_category"), [c[1:] for c in STALL_CASES], ids=[c[0] for c in STALL_CASES]
)
def test_a_long_gap_is_stalled_fault_only_with_a_critical_fault_touching_the_allocation(
    tmp_path: Path, extra: Callable[[Scenario], None] | None, gap_category: str
) -> None:
    s = stall_base()
    if extra is not None:
        extra(s)
    # startup [10:00, 10:02) 120; productive [10:02, 10:04) + [10:14, 10:16) = 240; the gap
    # [10:04, 10:14) = 600 s; idle_reserved [10:16, 10:20) = 240. Sum 1200.
    bearer = P if gap_category == "stalled_fault" else D
    assert cats(line(reconcile(tmp_path, s), "L1")) == {
        "startup": (120, "0.12", C),
        "productive": (240, "0.24", C),
        gap_category: (600, "0.60", bearer),
        "idle_reserved": (240, "0.24", C),
    }


#: (allocation's devices, the fault's device, the 640 s gap's category). The fault is on the
#: allocation's node n1 unless its device is given alone.
DEVICE_CASES: list[tuple[str, list[Any] | None, dict[str, Any], str]] = [
    (
        "no devices listed, a fault on another device of the node",
        None,
        {"node": "n1", "device": "5"},
        "stalled_fault",
    ),
    (
        "an empty list is none given (docs/events.md)",
        [],
        {"node": "n1", "device": "5"},
        "stalled_fault",
    ),
    ("an empty list, a fault on the node", [], {"node": "n1"}, "stalled_fault"),
    ("an empty list, a fault on another node", [], {"node": "n2"}, "idle_unexplained"),
    (
        "a MIG instance: its whole GPU's fault reaches it",
        ["0/13"],
        {"node": "n1", "device": "0"},
        "stalled_fault",
    ),
    ("a MIG instance: its GPU's fault, no node named", ["0/13"], {"device": 0}, "stalled_fault"),
    ("a MIG instance: its own fault", ["0/13"], {"node": "n1", "device": "0/13"}, "stalled_fault"),
    (
        "a MIG instance: another instance's fault",
        ["0/14"],
        {"node": "n1", "device": "0/13"},
        "idle_unexplained",
    ),
    (
        "a MIG instance: another GPU's fault",
        ["10/13"],
        {"node": "n1", "device": "1"},
        "idle_unexplained",
    ),
    (
        "a whole GPU: one instance's fault does not name it",
        ["0"],
        {"node": "n1", "device": "0/13"},
        "idle_unexplained",
    ),
    (
        "a MIG instance: its GPU's fault on another node",
        ["0/13"],
        {"node": "n2", "device": "0"},
        "idle_unexplained",
    ),
]


@pytest.mark.parametrize(
    ("devices", "place", "gap_category"),
    [c[1:] for c in DEVICE_CASES],
    ids=[c[0] for c in DEVICE_CASES],
)
def test_a_640_s_stall_beside_a_fault_by_the_devices_listed(
    tmp_path: Path, devices: list[Any] | None, place: dict[str, Any], gap_category: str
) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00", node="n1", devices=devices)
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:02", "10:04", "10:14:40")  # the gap [10:04, 10:14:40) is 640 s > 300
    s.complete("j1", at="10:16")
    s.release("A1", at="10:20")
    s.fault(at="10:06", **place)  # critical, never cleared: open through the gap
    s.line("L1", "A1", "10:00", "10:20", gpus=1, amount="1.20")
    # startup [10:00, 10:02) 120 (the grant to the first progress); productive [10:02, 10:04)
    # 120 and [10:14:40, 10:16) 80 (the completion ends a gap of 80 s <= 300) = 200; the gap
    # 640, stalled_fault (provider) when the fault touches A1, else idle_unexplained
    # (disputed); idle_reserved [10:16, 10:20) 240. Sum 1200 = 20 min x 1 GPU. $0.001 a GPU-s.
    bearer = P if gap_category == "stalled_fault" else D
    assert cats(line(reconcile(tmp_path, s), "L1")) == {
        "startup": (120, "0.12", C),
        "productive": (200, "0.20", C),
        gap_category: (640, "0.64", bearer),
        "idle_reserved": (240, "0.24", C),
    }


def test_a_whole_gpu_fault_before_a_failure_makes_a_mig_instances_restart_the_providers(
    tmp_path: Path,
) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00", node="n1", devices=["0/13"])
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:02", "10:04")
    s.fault(at="10:05", node="n1", device="0")  # 60 s before the failure, on the instance's GPU
    s.fail("j1", at="10:06", cause="application")
    s.release("A1", at="10:10")
    s.line("L1", "A1", "10:00", "10:10", gpus=1, amount="0.60")
    # restart_lost [10:00, 10:06) 360: no checkpoint, so from the attempt's start; it
    # outranks the startup [10:00, 10:02) and the productive [10:02, 10:04). The cause is the
    # application's, but the fault at 10:05 touches A1 through GPU 0 and opened within 300 s
    # before t_f: provider. No next attempt, no recovery; idle_reserved [10:06, 10:10) 240.
    assert cats(line(reconcile(tmp_path, s), "L1")) == {
        "restart_lost": (360, "0.36", P),
        "idle_reserved": (240, "0.24", C),
    }


def test_terms_changed_mid_line_apply_from_their_time(tmp_path: Path) -> None:
    s = Scenario()
    s.terms(at="09:00", stall=300)
    s.terms(at="10:10", stall=120)
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:02", "10:06", "10:10", "10:14", "10:16")
    s.complete("j1", at="10:18")
    s.release("A1", at="10:30")
    s.line("L1", "A1", "10:00", "10:30", gpus=1, amount="1.80")
    doc = reconcile(tmp_path, s)
    # startup [10:00, 10:02) 120. Gaps: [10:02, 10:06) and [10:06, 10:10) 240 s under the
    # 300 s terms: productive. [10:10, 10:14) 240 s: terms at m_i = 10:10 say 120, no fault:
    # idle_unexplained 240. [10:14, 10:16) and [10:16, 10:18) 120 s <= 120: productive.
    # productive 240 + 240 + 120 + 120 = 720; idle_reserved [10:18, 10:30) = 720. Sum 1800.
    assert cats(line(doc, "L1")) == {
        "startup": (120, "0.12", C),
        "productive": (720, "0.72", C),
        "idle_unexplained": (240, "0.24", D),
        "idle_reserved": (720, "0.72", C),
    }


# --- startup ------------------------------------------------------------------------------------


def test_startup_beyond_the_allowance_is_idle_unexplained(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:15", "10:18")
    s.complete("j1", at="10:20")
    s.release("A1", at="10:20")
    s.line("L1", "A1", "10:00", "10:20", gpus=1, amount="1.20")
    doc = reconcile(tmp_path, s)
    # startup [10:00, 10:00 + 600 s) = 600; [10:10, 10:15) = 300 running with no progress:
    # idle_unexplained; productive [10:15, 10:18) + [10:18, 10:20) = 300.
    assert cats(line(doc, "L1")) == {
        "startup": (600, "0.60", C),
        "idle_unexplained": (300, "0.30", D),
        "productive": (300, "0.30", C),
    }


def test_first_startup_runs_from_the_grant_and_its_allowance_too(tmp_path: Path) -> None:
    """RULES.md §8 is read here as: for the first attempt s is the grant, in both places
    (reconcile/RULES.md: "from grant ... to the first progress, within warmup_allowance_s")."""
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:04")
    s.progress("j1", step=1, at="10:12")
    s.complete("j1", at="10:15")
    s.release("A1", at="10:15")
    s.line("L1", "A1", "10:00", "10:15", gpus=1, amount="0.90")
    doc = reconcile(tmp_path, s)
    # startup [10:00, 10:00 + 600 s = 10:10) = 600 (10:00-10:04, before the job starts, is
    # startup too: rule 8 comes before idle_reserved); [10:10, 10:12) 120 idle_unexplained;
    # productive [10:12, 10:15) 180.
    assert cats(line(doc, "L1")) == {
        "startup": (600, "0.60", C),
        "idle_unexplained": (120, "0.12", D),
        "productive": (180, "0.18", C),
    }


# --- back-to-back jobs, cancellation, accepted work ----------------------------------------------


def test_back_to_back_jobs_and_productive_time_by_acceptance(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=2, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:03", "10:06")
    s.complete("j1", at="10:10")
    s.start("j2", "A1", at="10:10")
    s.steps("j2", "10:14", "10:18")
    s.complete("j2", at="10:20")
    s.start("j3", "A1", at="10:20")
    s.steps("j3", "10:23", "10:26")
    s.cancel("j3", at="10:28")
    s.release("A1", at="10:40")
    s.result("j1", "rejected", at="10:31")
    s.result("j1", "accepted", at="10:32")  # an accepted result wins over a rejected one
    s.result("j2", "rejected", at="10:33")
    s.line("L1", "A1", "10:00", "10:40", gpus=2, amount="4.80")
    doc = reconcile(tmp_path, s)
    # j1: startup from the grant [10:00, 10:03) 180, productive [10:03, 10:10) 420.
    # j2: startup from its own start [10:10, 10:14) 240, productive [10:14, 10:20) 360.
    # j3: startup [10:20, 10:23) 180, productive [10:23, 10:26) 180; [10:26, 10:28) 120
    #     runs with no mark after it (a cancel is not a mark): idle_unexplained.
    # idle_reserved [10:28, 10:40) 720. Sum 2400; x 2 GPUs:
    assert cats(line(doc, "L1")) == {
        "startup": (1200, "1.20", C),
        "productive": (1920, "1.92", C),
        "idle_unexplained": (240, "0.24", D),
        "idle_reserved": (1440, "1.44", C),
    }
    t = tenant(doc)
    # productive: j1 420 x 2 accepted, j2 360 x 2 rejected, j3 180 x 2 pending.
    assert t["productive_by_acceptance"] == {"accepted": 840, "rejected": 720, "pending": 360}
    assert t["by_bearer"] == {"provider": "0.00", "customer": "4.56", "disputed": "0.24"}


# --- rules for seconds two jobs share, and marks with no units -----------------------------------


def test_a_mark_without_units_never_rises_at_an_equal_step(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.progress("j1", step=1, units=100, at="10:02")
    s.progress("j1", step=1, at="10:04")  # no units, step equal: [10:02, 10:04) did not rise
    s.progress(
        "j1", step=1, units=200, at="10:06"
    )  # after a mark with none: [10:04, 10:06) did not rise
    s.progress("j1", step=2, at="10:08")  # step rose: [10:06, 10:08) productive
    s.complete("j1", at="10:10")  # [10:08, 10:10) productive
    s.release("A1", at="10:10")
    s.line("L1", "A1", "10:00", "10:10", gpus=1, amount="0.60")
    # startup [10:00, 10:02) 120; productive 2 x 120 = 240; idle_unexplained [10:02, 10:06) 240.
    assert cats(line(reconcile(tmp_path, s), "L1")) == {
        "startup": (120, "0.12", C),
        "productive": (240, "0.24", C),
        "idle_unexplained": (240, "0.24", D),
    }


@pytest.mark.parametrize(
    ("j1_state", "j2_state", "shared"),
    [
        ("accepted", None, "accepted"),
        ("rejected", "accepted", "accepted"),
        ("rejected", None, "rejected"),
    ],
)
def test_a_second_productive_for_two_jobs_takes_the_better_acceptance(
    tmp_path: Path, j1_state: str, j2_state: str | None, shared: str
) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.start("j2", "A1", at="10:00")
    s.steps("j1", "10:02", "10:04")
    s.steps("j2", "10:03", "10:05")
    s.complete("j1", at="10:06")
    s.complete("j2", at="10:07")
    s.result("j1", j1_state, at="10:20")
    if j2_state is not None:
        s.result("j2", j2_state, at="10:21")
    s.release("A1", at="10:10")
    s.line("L1", "A1", "10:00", "10:10", gpus=1, amount="0.60")
    doc = reconcile(tmp_path, s)
    # j1 is productive over [10:02, 10:06), j2 over [10:03, 10:07); startup of both from
    # the grant to their first marks: [10:00, 10:02) is startup alone (120). [10:02, 10:06)
    # is j1's: 240, of which [10:03, 10:06) is j2's too and goes to the better state, which
    # is j1's own here or j2's; [10:06, 10:07) is j2's alone: 60. idle_reserved [10:07, 10:10) 180.
    assert cats(line(doc, "L1")) == {
        "startup": (120, "0.12", C),
        "productive": (300, "0.30", C),
        "idle_reserved": (180, "0.18", C),
    }
    j2_alone = j2_state or "pending"
    expected = {"accepted": 0, "rejected": 0, "pending": 0}
    expected[j1_state] += 60  # [10:02, 10:03): j1 alone
    expected[shared] += 180  # [10:03, 10:06)
    expected[j2_alone] += 60  # [10:06, 10:07)
    assert tenant(doc)["productive_by_acceptance"] == expected


def test_seconds_lost_to_two_overlapping_failures_are_the_providers_when_either_is(
    tmp_path: Path,
) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.start("j2", "A1", at="10:00")
    s.fail("j1", at="10:06", cause="hardware")  # provider's
    s.fail("j2", at="10:08", cause="application")  # the customer's
    s.release("A1", at="10:10")
    s.line("L1", "A1", "10:00", "10:10", gpus=1, amount="0.60")
    # No checkpoint: restart_lost [10:00, 10:06) for j1 (provider) and [10:00, 10:08) for j2
    # (customer); no job returns, so no recovery. Shared [10:00, 10:06): provider, 360;
    # [10:06, 10:08): customer, 120; idle_reserved [10:08, 10:10): 120.
    assert cats(line(reconcile(tmp_path, s), "L1")) == {
        "restart_lost": (
            480,
            "0.48",
            "mixed",
            {"provider": (360, "0.36"), "customer": (120, "0.12")},
        ),
        "idle_reserved": (120, "0.12", C),
    }
