"""The hand-worked scenarios of issue 33 (reconcile/RULES.md 11-13), as plain CloudEvent
dicts, so that every reader is run on the very same entries: the oracle now
(bench/pandas_reconcile.py), the engine when it implements the rules.

Each function returns the scenario's events in ledger order. Times are clock times on
2026-01-05 (tests/reconcile_helpers.py `when`); the expected figures, worked by hand
from RULES.md, are in tests/test_multinode_rules.py beside the tests that check them.
"""

from __future__ import annotations

from typing import Any

from tests.reconcile_helpers import Scenario

Event = dict[str, Any]

FOUR_NODES = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"]


def four_node_slurm_job() -> list[Event]:
    """A Slurm job on gpu-node-[01-04] (32 GPUs; sacct writes `nodes` and no `node`) whose
    progress stops from 10:15 to 10:40 while a critical xid-79 is open on gpu-node-03, its
    third node. A fault on gpu-node-05, no node of the job, is open at the same time."""
    s = Scenario()
    s.add("allocation.granted", "10:00", {"allocation_id": "S1", "gpus": 32, "nodes": FOUR_NODES})
    s.start("j1", "S1", at="10:00")
    s.steps("j1", "10:05", "10:10", "10:15", "10:40", "10:45")
    s.fault(at="10:16", node="gpu-node-05")  # not one of S1's nodes
    s.cleared(at="10:39", node="gpu-node-05")
    s.fault(at="10:20", node="gpu-node-03")
    s.cleared(at="10:38", node="gpu-node-03")
    s.complete("j1", at="10:50")
    s.release("S1", at="11:00")
    s.line("L1", "S1", "10:00", "11:00", gpus=32, amount="115.20")
    return s.events


def two_pod_gang() -> list[Event]:
    """A PyTorchJob of two pods, one allocation each (P0 on k-node-1, P1 on k-node-2),
    started together as attempt 1. A critical xid-79 on k-node-2 at 10:24, 60 s before the
    job fails with cause `unknown` at 10:25; it restarts in place as attempt 2 at 10:40."""
    s = Scenario()
    s.grant("P0", gpus=8, at="10:00", node="k-node-1")
    s.grant("P1", gpus=8, at="10:00", node="k-node-2")
    s.start("train", "P0", at="10:00", attempt=1)
    s.start("train", "P1", at="10:00", attempt=1)  # a sibling: it does not end P0's attempt
    s.progress("train", step=1, at="10:05")
    s.progress("train", step=2, at="10:10")
    s.checkpoint("train", "ck1", step=2, started="10:10", saved="10:12")
    s.progress("train", step=3, at="10:15")
    s.progress("train", step=4, at="10:20")
    s.fault(at="10:24", node="k-node-2")
    s.fail("train", at="10:25", cause="unknown")
    s.cleared(at="10:30", node="k-node-2")
    s.start("train", "P0", at="10:40", attempt=2)
    s.start("train", "P1", at="10:40", attempt=2)
    s.progress("train", step=3, at="10:45")
    s.progress("train", step=4, at="10:50")
    s.complete("train", at="10:55")
    s.release("P0", at="11:00")
    s.release("P1", at="11:00")
    s.line("L-P0", "P0", "10:00", "11:00", gpus=8, amount="28.80")
    s.line("L-P1", "P1", "10:00", "11:00", gpus=8, amount="28.80")
    return s.events


def gang_restarted_elsewhere() -> list[Event]:
    """A gang on A0 and A1 fails (cause `hardware`) at 10:20; A0 and A1 are released at
    10:30 and the job restarts as attempt 2 on B0 and B1, granted at 10:30."""
    s = Scenario()
    for alloc in ("A0", "A1"):
        s.grant(alloc, gpus=4, at="10:00", node=f"n-{alloc.lower()}")
    for alloc in ("A0", "A1"):
        s.start("train", alloc, at="10:00", attempt=1)
    s.progress("train", step=1, at="10:05")
    s.progress("train", step=2, at="10:10")
    s.fail("train", at="10:20", cause="hardware")
    for alloc in ("A0", "A1"):
        s.release(alloc, at="10:30")
    for alloc in ("B0", "B1"):
        s.grant(alloc, gpus=4, at="10:30", node=f"n-{alloc.lower()}")
    for alloc in ("B0", "B1"):
        s.start("train", alloc, at="10:35", attempt=2)
    s.progress("train", step=3, at="10:40")
    s.progress("train", step=4, at="10:45")
    s.complete("train", at="10:50")
    for alloc in ("B0", "B1"):
        s.release(alloc, at="11:00")
    for alloc in ("A0", "A1"):
        s.line(f"L-{alloc}", alloc, "10:00", "10:30", gpus=4, amount="7.20")
    for alloc in ("B0", "B1"):
        s.line(f"L-{alloc}", alloc, "10:30", "11:00", gpus=4, amount="7.20")
    return s.events


def reclaim_inside_notice() -> list[Event]:
    """Terms promise 300 s of notice. R1 is reclaimed at 10:16 with notice_s 0 and its job
    is killed (`preempted`) at 10:17, 60 s later, inside [10:16, 10:21)."""
    s = Scenario()
    s.terms(at="09:00", notice=300)
    s.grant("R1", gpus=2, at="10:00", node="n1")
    s.start("r1", "R1", at="10:00")
    s.progress("r1", step=1, at="10:05")
    s.progress("r1", step=2, at="10:10")
    s.checkpoint("r1", "ck1", step=2, started="10:10", saved="10:11")
    s.progress("r1", step=3, at="10:15")
    s.add(
        "policy.decision", "10:16", {"decision": "reclaimed", "allocation_id": "R1", "notice_s": 0}
    )
    s.fail("r1", at="10:17", cause="preempted")
    s.release("R1", at="10:20")
    s.line("LR1", "R1", "10:00", "10:20", gpus=2, amount="2.40")
    return s.events


def reclaim_outside_notice() -> list[Event]:
    """Terms promise 300 s of notice. R2 is reclaimed at 10:12 with 300 s of notice; the job
    saves a checkpoint and is stopped (`preempted`) at 10:17:30, after the notice ran out."""
    s = Scenario()
    s.terms(at="09:00", notice=300)
    s.grant("R2", gpus=2, at="10:00", node="n2")
    s.start("r2", "R2", at="10:00")
    s.progress("r2", step=1, at="10:05")
    s.progress("r2", step=2, at="10:10")
    s.add(
        "policy.decision",
        "10:12",
        {"decision": "reclaimed", "allocation_id": "R2", "notice_s": 300},
    )
    s.checkpoint("r2", "ck2", step=2, started="10:13", saved="10:14")
    s.progress("r2", step=3, at="10:15")
    s.fail("r2", at="10:17:30", cause="preempted")
    s.release("R2", at="10:20")
    s.line("LR2", "R2", "10:00", "10:20", gpus=2, amount="2.40")
    return s.events


def topology(links: dict[tuple[int, int], str], gpus: int) -> dict[str, Any]:
    """A `nvidia-smi topo -m` capture of `gpus` GPUs: every pair NV18 unless `links` says."""
    pairs = [(a, b) for a in range(gpus) for b in range(a + 1, gpus)]
    return {
        "gpus": [{"name": f"GPU{i}"} for i in range(gpus)],
        "nics": [],
        "links": [
            {"a": f"GPU{a}", "b": f"GPU{b}", "link": links.get((a, b), "NV18")} for a, b in pairs
        ],
    }


#: Each placement tenant's credit share ("1" also stands for the default: no share given).
PLACEMENT_SHARES = {"zero": "0", "half": "0.5", "one": "1"}


def placements() -> list[Event]:
    """Three tenants with placement_credit_share 0, 0.5 and 1, each with three idle 4-GPU
    `whole` allocations billed 10:00-11:30 and released at 11:00: AS (devices 0-3 of a
    node whose capture shows 8 GPUs, 0-3 joined by NV18), NOT (a capture from inside the
    allocation: GPU2 and GPU3 over SYS to GPU0 and GPU1), UN (no capture). NOT also has a
    credit of -1.00."""
    s = Scenario()
    for tenant, share in PLACEMENT_SHARES.items():
        if tenant != "one":
            s.add("policy.terms", "09:00", {"placement_credit_share": share}, tenant)
        s.grant("AS", gpus=4, at="10:00", node="n-as", devices=[0, 1, 2, 3], tenant=tenant)
        s.grant("NOT", gpus=4, at="10:00", node="n-not", tenant=tenant)
        s.grant("UN", gpus=4, at="10:00", node="n-un", tenant=tenant)
        slow_half = {(a, b): "SYS" for a in (0, 1) for b in (2, 3)}
        eight = topology({(a, b): "SYS" for a in range(4) for b in range(4, 8)}, 8)
        s.add(
            "placement.observed",
            "10:01",
            {"allocation_id": "AS", "node": "n-as", "topology": eight},
            tenant,
        )
        s.add(
            "placement.observed",
            "10:01",
            {"allocation_id": "NOT", "node": "n-not", "topology": topology(slow_half, 4)},
            tenant,
        )
        for alloc in ("AS", "NOT", "UN"):
            s.release(alloc, at="11:00", tenant=tenant)
            s.line(f"L-{alloc}", alloc, "10:00", "11:30", gpus=4, amount="21.60", tenant=tenant)
        s.line(
            "CR-NOT",
            "NOT",
            "10:00",
            "11:00",
            gpus=4,
            amount="-1.00",
            category="credit",
            tenant=tenant,
        )
    return s.events


def placement_edges() -> list[Event]:
    """One tenant (share 1), idle allocations billed 10:00-11:00, each with its capture:
    FEW (4 GPUs, the capture shows 2, NV18), MORE (2 GPUs, no devices, the capture shows 4),
    ONE (1 GPU, the capture shows GPU0 over SYS to GPU1: nothing to join), MIG (mig, any
    capture), TWO (8 GPUs on 2 nodes, each capture 4 GPUs all NV18; the later capture of
    n-two-b replaces an earlier one with a SYS pair), SLOW2 (8 GPUs on 2 nodes, one pair
    over NODE on the second node)."""
    s = Scenario()
    s.grant("FEW", gpus=4, at="10:00", node="n-few")
    s.grant("MORE", gpus=2, at="10:00", node="n-more")
    s.grant("ONE", gpus=1, at="10:00", node="n-one")
    s.add(
        "allocation.granted",
        "10:00",
        {
            "allocation_id": "MIG",
            "gpus": 1,
            "node": "n-mig",
            "placement_class": "mig",
            "profile": "1g.10gb",
        },
    )
    for alloc in ("TWO", "SLOW2"):
        nodes = [f"n-{alloc.lower()}-a", f"n-{alloc.lower()}-b"]
        s.add("allocation.granted", "10:00", {"allocation_id": alloc, "gpus": 8, "nodes": nodes})
    captures = [
        ("FEW", "n-few", topology({}, 2)),
        ("MORE", "n-more", topology({}, 4)),
        ("ONE", "n-one", topology({(0, 1): "SYS"}, 2)),
        ("MIG", "n-mig", topology({(0, 1): "SYS"}, 2)),
        ("TWO", "n-two-a", topology({}, 4)),
        ("TWO", "n-two-b", topology({(0, 3): "SYS"}, 4)),
        ("SLOW2", "n-slow2-a", topology({}, 4)),
        ("SLOW2", "n-slow2-b", topology({(1, 2): "NODE"}, 4)),
    ]
    for alloc, node, topo in captures:
        s.add(
            "placement.observed", "10:01", {"allocation_id": alloc, "node": node, "topology": topo}
        )
    s.add(
        "placement.observed",
        "10:02",
        {"allocation_id": "TWO", "node": "n-two-b", "topology": topology({}, 4)},
    )
    for alloc, gpus in (("FEW", 4), ("MORE", 2), ("ONE", 1), ("MIG", 1), ("TWO", 8), ("SLOW2", 8)):
        s.release(alloc, at="11:00")
        s.line(f"L-{alloc}", alloc, "10:00", "11:00", gpus=gpus, amount=f"{gpus * 3.6:.2f}")
    return s.events
