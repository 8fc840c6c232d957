"""Issue 33's hand-worked scenarios (reconcile/RULES.md 11-13: one job on many nodes, gangs,
notice owed, placement as sold), checked against the oracle (bench/pandas_reconcile.py)
now and against the engine when it implements the rules.

Every expected figure is worked by hand below from RULES.md, never by running code under
test. The scenarios' events are in tests/multinode_scenarios.py, so both readers see the
very same entries. Times are on 2026-01-05; a GPU-second costs 0.001 USD in every line
here (3.60 USD per GPU-hour), so amounts are GPU-seconds / 1000.

The engine's tests are the same scenarios and figures, read through `reconcile --format json`.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from bench.pandas_reconcile import (
    frame_of_entries,
    line_cents,
    placement_lines,
    placement_tenants,
    reconcile_frame,
)
from tests import multinode_scenarios as sc
from tests.reconcile_helpers import line, reconcile

S = 1_000_000  # µs in a second
Figures = dict[str, tuple[int, str]]  # category key: (GPU-seconds, amount)


def oracle(events: list[dict[str, Any]]) -> dict[str, Figures]:
    """{line_id: {category key: (GPU-seconds, amount)}} as the oracle reads the entries."""
    frame = frame_of_entries(enumerate(events, 1))
    gpu = reconcile_frame(frame)
    cents = line_cents(frame, gpu)
    out: dict[str, Figures] = {}
    for (_tenant, line_id), cells in gpu.items():
        assert all(us % S == 0 for us in cells.values())
        out[line_id] = {
            k: (us // S, _usd(cents[(_tenant, line_id)].get(k, 0))) for k, us in cells.items()
        }
    return out


def engine(tmp_path: Path, events: list[dict[str, Any]], line_id: str, **filters: str) -> Figures:
    """One line's figures as the engine reports them, in the oracle's category keys."""
    node = line(reconcile(tmp_path, events, **filters), line_id)
    out: Figures = {}
    for name, v in node["categories"].items():
        if not v["gpu_seconds"]:
            continue
        if name == "productive":
            for state, seconds in node["productive_by_acceptance"].items():
                if seconds:  # every productive second here is pending: its amount is the whole
                    out[f"productive:{state}"] = (seconds, v["amount"])
        elif name in ("restart_lost", "restart_recovery"):
            split = v.get("by_bearer") or {v["bearer"]: v}
            for bearer, part in split.items():
                out[f"{name}:{bearer}"] = (part["gpu_seconds"], part["amount"])
        else:
            out[name] = (v["gpu_seconds"], v["amount"])
    return out


def _usd(cents: int) -> str:
    return (
        f"{cents // 100}.{cents % 100:02d}"
        if cents >= 0
        else f"-{-cents // 100}.{-cents % 100:02d}"
    )


# -- a 4-node Slurm job with a fault on its third node -----------------------------------

# S1: 32 GPUs on gpu-node-[01-04], H = W = [10:00, 11:00). Marks 10:05, 10:10, 10:15, 10:40,
# 10:45 (steps 1-5) and the completion at 10:50; stall threshold 300 s, warm-up 600 s.
# - startup [10:00, 10:05) = 300 s (first attempt: from the grant; first progress at 10:05)
# - productive [10:05, 10:15) and [10:40, 10:50): gaps of 300 s, steps rising, the last
#   ending in job.completed: 600 + 600 = 1200 s
# - [10:15, 10:40) is a 1500 s gap > 300; the xid-79 on gpu-node-03 [10:20, 10:38) is open
#   in it and gpu-node-03 is one of S1's nodes (rule 11): stalled_fault 1500 s. (The fault
#   on gpu-node-05 touches no node of S1.)
# - [10:50, 11:00) no job running: idle_reserved 600 s
# x 32 GPUs: 9600 + 38400 + 48000 + 19200 = 115200 GPU-s = 115.20 USD billed.
FOUR_NODES = {
    "L1": {
        "startup": (9600, "9.60"),
        "productive:pending": (38400, "38.40"),
        "stalled_fault": (48000, "48.00"),
        "idle_reserved": (19200, "19.20"),
    }
}


def test_oracle_a_fault_on_the_third_node_of_four_stalls_the_job_on_the_provider() -> None:
    assert oracle(sc.four_node_slurm_job()) == FOUR_NODES


def test_engine_a_fault_on_the_third_node_of_four_stalls_the_job_on_the_provider(
    tmp_path: Path,
) -> None:
    assert engine(tmp_path, sc.four_node_slurm_job(), "L1") == FOUR_NODES["L1"]


# -- a 2-pod gang, a fault on one pod's node 60 s before a failure of unknown cause ------

# P0 and P1: 8 GPUs each, H = W = [10:00, 11:00). Attempt 1 on each runs [10:00, 10:25):
# P1's start at 10:00 is a sibling (another allocation, attempt 1 not above 1) and does not
# end P0's attempt (rule 11); the failure at 10:25 ends it on both. Attempt 2 on each runs
# [10:40, 10:55) (completed). Per allocation, alike:
# - checkpoint [10:10, 10:12) = 120 s
# - restart_lost [last save 10:12, t_f 10:25) = 780 s; cause unknown, but the critical
#   xid-79 on k-node-2 at 10:24 is in [10:20, 10:25] and touches P1, so it touches the
#   attempt (its gang is {P0, P1}): provider on P0 too
# - restart_recovery [10:25, first progress of attempt 2 at 10:45) = 1200 s, provider
# - startup [10:00, 10:05) = 300 s; attempt 2's startup [10:40, 10:45) is recovery already
# - productive [10:05, 10:10) = 300 s (the rest of attempt 1's gaps is checkpoint or
#   restart_lost), and attempt 2's [10:45, 10:50) and [10:50, 10:55) = 600 s: 900 s
# - idle_reserved [10:55, 11:00) = 300 s
# 120 + 780 + 1200 + 300 + 900 + 300 = 3600 s; x 8 GPUs:
GANG_LINE = {
    "checkpoint": (960, "0.96"),
    "restart_lost:provider": (6240, "6.24"),
    "restart_recovery:provider": (9600, "9.60"),
    "startup": (2400, "2.40"),
    "productive:pending": (7200, "7.20"),
    "idle_reserved": (2400, "2.40"),
}
GANG = {"L-P0": GANG_LINE, "L-P1": GANG_LINE}


def test_oracle_a_fault_on_one_pod_s_node_puts_the_whole_gang_s_restart_on_the_provider() -> None:
    assert oracle(sc.two_pod_gang()) == GANG


@pytest.mark.parametrize("line_id", ["L-P0", "L-P1"])
def test_engine_a_fault_on_one_pod_s_node_puts_the_whole_gang_s_restart_on_the_provider(
    tmp_path: Path, line_id: str
) -> None:
    assert engine(tmp_path, sc.two_pod_gang(), line_id) == GANG_LINE


# -- a gang that restarts on a different set of allocations ------------------------------

# A0, A1: 4 GPUs, H = W = [10:00, 10:30). Attempt 1 on each: [10:00, 10:20), ended by the
# `hardware` failure (A1's start at 10:00 does not end A0's). No checkpoint saved:
# restart_lost [10:00, 10:20) = 1200 s, provider (cause hardware); it covers the startup
# and productive stretches (rule 4 comes first). The job has no next attempt on A0 or A1:
# no restart_recovery; [10:20, 10:30) idle_reserved 600 s. x 4: 4800 + 2400.
# B0, B1: 4 GPUs, H = W = [10:30, 11:00). Attempt 2 on each: [10:35, 10:50) (completed);
# the first attempt on B0, so startup runs from the grant: [10:30, min(first progress
# 10:40, 10:30 + 600 s, 10:50)) = 600 s; productive [10:40, 10:45) and [10:45, 10:50)
# = 600 s; idle_reserved [10:50, 11:00) = 600 s. x 4: 2400 each.
OLD_SET = {"restart_lost:provider": (4800, "4.80"), "idle_reserved": (2400, "2.40")}
NEW_SET = {
    "startup": (2400, "2.40"),
    "productive:pending": (2400, "2.40"),
    "idle_reserved": (2400, "2.40"),
}
RESTARTED = {"L-A0": OLD_SET, "L-A1": OLD_SET, "L-B0": NEW_SET, "L-B1": NEW_SET}


def test_oracle_a_gang_restarted_on_other_allocations() -> None:
    assert oracle(sc.gang_restarted_elsewhere()) == RESTARTED


def test_engine_a_gang_restarted_on_other_allocations(tmp_path: Path) -> None:
    events = sc.gang_restarted_elsewhere()
    assert {k: engine(tmp_path, events, k) for k in RESTARTED} == RESTARTED


# -- reclaims inside and outside the promised notice -------------------------------------

# Terms: reclaim_notice_s 300. R1, 2 GPUs, H = W = [10:00, 10:20). Decision at t_r = 10:16;
# the job fails `preempted` at t_f = 10:17, inside [10:16, 10:21): notice owed (rule 12).
# - reclaimed from min(t_r + 300 s = 10:21, t_f = 10:17): [10:17, 10:20) = 180 s
# - checkpoint [10:10, 10:11) = 60 s
# - restart_lost [10:11, 10:17) = 360 s, the provider's (notice owed)
# - startup [10:00, 10:05) = 300 s; productive [10:05, 10:10) = 300 s
# 180 + 60 + 360 + 300 + 300 = 1200 s; x 2:
INSIDE = {
    "LR1": {
        "reclaimed": (360, "0.36"),
        "checkpoint": (120, "0.12"),
        "restart_lost:provider": (720, "0.72"),
        "startup": (600, "0.60"),
        "productive:pending": (600, "0.60"),
    }
}
# R2, the same terms: decision at 10:12, failure at 10:17:30, at or after 10:12 + 300 s =
# 10:17: the notice was given, nothing is owed.
# - reclaimed [10:17, 10:20) = 180 s (rule 2, unchanged)
# - checkpoint [10:13, 10:14) = 60 s
# - restart_lost [10:14, 10:17:30) less reclaimed's [10:17, 10:17:30): 180 s, customer
#   (cause preempted, no fault, notice given)
# - startup [10:00, 10:05) = 300 s; productive [10:05, 10:13) = 480 s (gaps of 300 s to
#   10:10 and 10:15, steps rising; checkpoint from 10:13)
# 180 + 60 + 180 + 300 + 480 = 1200 s; x 2:
OUTSIDE = {
    "LR2": {
        "reclaimed": (360, "0.36"),
        "checkpoint": (120, "0.12"),
        "restart_lost:customer": (360, "0.36"),
        "startup": (600, "0.60"),
        "productive:pending": (960, "0.96"),
    }
}


def test_oracle_a_reclaim_inside_the_promised_notice_is_the_provider_s() -> None:
    assert oracle(sc.reclaim_inside_notice()) == INSIDE


def test_oracle_a_reclaim_after_the_promised_notice_is_as_before() -> None:
    assert oracle(sc.reclaim_outside_notice()) == OUTSIDE


def test_engine_a_reclaim_inside_the_promised_notice_is_the_provider_s(tmp_path: Path) -> None:
    assert engine(tmp_path, sc.reclaim_inside_notice(), "LR1") == INSIDE["LR1"]


def test_engine_a_reclaim_after_the_promised_notice_is_as_before(tmp_path: Path) -> None:
    """Rule 12 owes nothing here, so the engine already meets it (no xfail)."""
    assert engine(tmp_path, sc.reclaim_outside_notice(), "LR2") == OUTSIDE["LR2"]


# -- placements as sold, not as sold and unobserved --------------------------------------

# Each tenant's lines, categories alike: 4 GPUs idle [10:00, 11:00) (idle_reserved 14400
# GPU-s, 14.40, customer), billed to 11:30: [11:00, 11:30) unallocated 7200 GPU-s, 7.20.
# AS: devices 0-3, all in the 8-GPU capture, so its GPUs are GPU0-GPU3; every pair among
# them NV18 (the SYS links go to GPU4-7): 4 seen = 4 granted: as_sold.
# NOT: no devices: the capture's 4 GPUs; GPU0-GPU2 (and three more pairs) over SYS:
# not_as_sold. UN: no capture: unobserved.
# NOT's customer-borne amount: 14.40 of L-NOT, -1.00 of its credit CR-NOT (money_only):
# 13.40. Claim = share x 13.40: share 0 -> 0.00; 0.5 -> 6.70; 1 (the default) -> 13.40.
# Per tenant: as_sold 21600 GPU-s, 21.60; not_as_sold 21600 GPU-s (the credit bills none),
# 21.60 - 1.00 = 20.60; unobserved 21600 GPU-s, 21.60.
PLACEMENT_CLAIMS = {"zero": Fraction(0), "half": Fraction("6.70"), "one": Fraction("13.40")}
PLACEMENT_STATES = {
    "as_sold": (21600, Fraction("21.60")),
    "not_as_sold": (21600, Fraction("20.60")),
    "unobserved": (21600, Fraction("21.60")),
}
IDLE_LINE = {"idle_reserved": (14400, "14.40"), "unallocated": (7200, "7.20")}


def test_oracle_placement_state_and_claim_per_tenant() -> None:
    frame = frame_of_entries(enumerate(sc.placements(), 1))
    lines = placement_lines(frame)
    assert {(t, k): p.state for (t, k), p in lines.items() if t == "half"} == {
        ("half", "L-AS"): "as_sold",
        ("half", "L-NOT"): "not_as_sold",
        ("half", "CR-NOT"): "not_as_sold",
        ("half", "L-UN"): "unobserved",
    }
    # 0.5 x 14.40 and 0.5 x -1.00
    assert (lines[("half", "L-NOT")].claim, lines[("half", "CR-NOT")].claim) == (
        Fraction("7.20"),
        Fraction("-0.50"),
    )
    tenants = placement_tenants(lines)
    for tenant, claim in PLACEMENT_CLAIMS.items():
        got = tenants[tenant]
        assert got["claim"] == {"USD": claim}
        assert {
            s: (got[s]["gpu_us"] // S, got[s]["amount"]["USD"]) for s in PLACEMENT_STATES
        } == PLACEMENT_STATES


def test_oracle_the_placement_state_changes_no_category() -> None:
    got = oracle(sc.placements())  # one tenant's lines after another's, alike
    assert got == {**{k: IDLE_LINE for k in ("L-AS", "L-NOT", "L-UN")}, "CR-NOT": {}}


# Edges, one tenant with the default share 1; idle lines 10:00-11:00, all customer-borne:
# FEW: 4 GPUs, the capture shows 2: not_as_sold (14400 GPU-s, 14.40; claim 14.40).
# MORE: 2 GPUs, no devices, the capture shows 4: nothing says which: unobserved (7.20).
# ONE: 1 whole GPU: as_sold, whatever links the capture shows (3.60).
# MIG: class mig: as_sold with any capture (3.60).
# TWO: 8 GPUs on 2 nodes, 4 + 4 seen, all NV18 in the latest capture of each node (10:02
# replaces n-two-b's capture with a SYS pair): as_sold (28.80). Pairs across nodes are in
# no capture.
# SLOW2: 8 GPUs on 2 nodes, GPU1-GPU2 over NODE on the second: not_as_sold (28.80).
# as_sold 3600 + 3600 + 28800 = 36000 GPU-s, 36.00; not_as_sold 14400 + 28800 = 43200,
# 43.20, claim 43.20; unobserved 7200, 7.20.
EDGE_STATES = {
    "L-FEW": "not_as_sold",
    "L-MORE": "unobserved",
    "L-ONE": "as_sold",
    "L-MIG": "as_sold",
    "L-TWO": "as_sold",
    "L-SLOW2": "not_as_sold",
}


def test_oracle_placement_edges() -> None:
    lines = placement_lines(frame_of_entries(enumerate(sc.placement_edges(), 1)))
    assert {k: p.state for (_, k), p in lines.items()} == EDGE_STATES
    got = placement_tenants(lines)["acme"]
    assert got["claim"] == {"USD": Fraction("43.20")}
    assert {s: (got[s]["gpu_us"] // S, got[s]["amount"]["USD"]) for s in PLACEMENT_STATES} == {
        "as_sold": (36000, Fraction("36.00")),
        "not_as_sold": (43200, Fraction("43.20")),
        "unobserved": (7200, Fraction("7.20")),
    }


def engine_placement(doc: dict[str, Any], tenant: str) -> dict[str, Any]:
    """docs/placement.md: per tenant, `placement` gives GPU-seconds and amount per state and, for
    not_as_sold, a claim."""
    node: dict[str, Any] = doc["tenants"][tenant]["placement"]
    return node


def test_engine_placement_state_and_claim_per_tenant(tmp_path: Path) -> None:
    doc = reconcile(tmp_path, sc.placements())
    for tenant, claim in PLACEMENT_CLAIMS.items():
        got = engine_placement(doc, tenant)
        assert Fraction(got["not_as_sold"]["claim"]) == claim
        for state, (seconds, amount) in PLACEMENT_STATES.items():
            assert (got[state]["gpu_seconds"], Fraction(got[state]["amount"])) == (seconds, amount)


def test_engine_the_placement_captures_change_no_category(tmp_path: Path) -> None:
    """Rule 13 never changes a category: the engine meets that already (no xfail)."""
    events = sc.placements()
    for tenant in sc.PLACEMENT_SHARES:
        for line_id in ("L-AS", "L-NOT", "L-UN"):
            assert engine(tmp_path, events, line_id, tenant=tenant) == IDLE_LINE


def test_engine_placement_edges(tmp_path: Path) -> None:
    got = engine_placement(reconcile(tmp_path, sc.placement_edges()), "acme")
    assert Fraction(got["not_as_sold"]["claim"]) == Fraction("43.20")
    assert {s: (got[s]["gpu_seconds"], Fraction(got[s]["amount"])) for s in PLACEMENT_STATES} == {
        "as_sold": (36000, Fraction("36.00")),
        "not_as_sold": (43200, Fraction("43.20")),
        "unobserved": (7200, Fraction("7.20")),
    }
