"""One reading of "touches" and of fault windows, proven on every path that uses it: the
engine's classification, the dispute packet (which fleet faults it carries, what its
verifier recomputes and what its claims cite) and the diagnostic packet's fault list.
And the label table as the only place label codes are written.

Expected figures are worked out by hand from reconcile/RULES.md beside each case. The
scenario: 1 GPU on node n1, granted 10:00, released 10:20, billed 10:00-10:20 for $1.20
(one GPU-second is $0.001). Job j1 starts 10:00, progresses 10:02 and 10:04, then not
until 10:14:40, and completes 10:16:40. A critical xid-79 opens 10:06 on n1 (with a
device, or none) and clears 10:10.

    startup        [10:00, 10:02)            120 s   customer  (grant <= start: from the grant)
    productive     [10:02, 10:04) + [10:14:40, 10:16:40)   240 s   customer
    the gap        [10:04, 10:14:40)         640 s > 300: stalled_fault (provider) when the
                                             fault touches A1 (open 10:06-10:10, in the gap),
                                             else idle_unexplained (disputed)
    idle_reserved  [10:16:40, 10:20)         200 s   customer
                                             sum 1200 s = 20 min x 1 GPU
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ledger import Store
from ledger.note import Signer
from reconcile.engine.rules import IDLE_LABEL, LABELS, SPAN_LABELS, winner_sql
from reconcile.packets.diagnostic import build_packet
from reconcile.packets.dispute import build_dispute, touches, verify_dispute
from tests.reconcile_helpers import C, D, P, Scenario, cats, ingest, line, reconcile, when

ROOT = Path(__file__).resolve().parent.parent


def stall(devices: list[Any] | None, fault_device: str | None) -> Scenario:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00", node="n1", devices=devices)
    s.add(
        "policy.promise", "09:50", {"promise_id": "P1", "job_id": "j1", "start_by": when("10:05")}
    )
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:02", "10:04", "10:14:40")
    s.complete("j1", at="10:16:40")
    place = {"node": "n1"} | ({"device": fault_device} if fault_device is not None else {})
    s.fault(at="10:06", **place)
    s.cleared(at="10:10", **place)
    s.release("A1", at="10:20")
    s.line("L1", "A1", "10:00", "10:20", gpus=1, amount="1.20")
    return s


#: (allocation's devices, the fault's device, does the fault touch A1?) by RULES.md §7.
CASES: list[tuple[str, list[Any] | None, str | None, bool]] = [
    # the allocation lists no devices: a node fault on any device touches it
    ("devices absent", None, "3", True),
    ("devices: [] is none given (docs/events.md)", [], "3", True),
    ("a device the allocation does not hold", [0, 1], "3", False),
    ("a node fault naming no device", [0, 1], None, True),
    # MIG: an instance is `<gpu>/<instance>`; a fault on the whole GPU touches its instances
    ("whole-GPU fault on a MIG instance's GPU", ["0/13"], "0", True),
    ("the MIG instance itself", ["0/13"], "0/13", True),
    ("a sibling MIG instance", ["0/13"], "0/14", False),
    ("another GPU whose name starts alike", ["10/13"], "1", False),
]
IDS = [c[0] for c in CASES]


def expected(touching: bool) -> dict[str, tuple[Any, ...]]:
    gap = (
        {"stalled_fault": (640, "0.64", P)} if touching else {"idle_unexplained": (640, "0.64", D)}
    )
    return {
        "startup": (120, "0.12", C),
        "productive": (240, "0.24", C),
        **gap,
        "idle_reserved": (200, "0.20", C),
    }


@pytest.mark.parametrize(("devices", "fault_device", "touching"), [c[1:] for c in CASES], ids=IDS)
def test_the_engine_reads_touches_by_rules_md(
    tmp_path: Path, devices: list[Any] | None, fault_device: str | None, touching: bool
) -> None:
    assert cats(line(reconcile(tmp_path, stall(devices, fault_device)), "L1")) == expected(
        touching
    )


@pytest.mark.parametrize(("devices", "fault_device", "touching"), [c[1:] for c in CASES], ids=IDS)
def test_the_dispute_reads_touches_as_the_engine_does(
    tmp_path: Path, devices: list[Any] | None, fault_device: str | None, touching: bool
) -> None:
    s = stall(devices, fault_device)
    fault_id, cleared_id = (e["id"] for e in s.events if e["type"].startswith("health."))
    store = Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    store.init()
    try:
        ingest(store, s.events)
        signer = Signer.generate("touches.test")
        packet = build_dispute(store, "acme", "INV-1", signer)
        diagnostic = build_packet(store, "P1")
    finally:
        store.close()
    carried = {e["id"]: e["seq"] for e in packet["bundle"]["entries"] if e["tenant"] is None}
    # the packet carries every fleet entry of A1's node n1 (ledger/fleet_heads.py), touching or
    # not, so that they are provably all there; the recomputation below applies the touch rule
    assert sorted(carried) == sorted([fault_id, cleared_id])
    checked = verify_dispute(packet, signer.verifier)
    assert cats(line(checked.findings, "L1")) == expected(touching)
    gap = [c for c in checked.claims if c["category"] in ("stalled_fault", "idle_unexplained")]
    assert [(c["category"], c["bearer"], c["gpu_seconds"], c["stretches"]) for c in gap] == [
        (
            "stalled_fault" if touching else "idle_unexplained",
            P if touching else D,
            640,
            [[when("10:04"), when("10:14:40"), 1]],
        )
    ]
    if touching:  # a stall cites the fault open in it and the clearing that closed it
        assert {carried[fault_id], carried[cleared_id]} <= set(gap[0]["cites"])
    # the diagnostic packet lists the fault against the allocations it touches
    faults = diagnostic["health"]["faults"]
    assert [(f["code"], f["touches"]) for f in faults] == (
        [("xid-79", ["A1"])] if touching else []
    )
    if touching:
        assert (faults[0]["opened"], faults[0]["cleared"]) == (when("10:06"), when("10:10"))


@pytest.mark.parametrize(("devices", "fault_device", "touching"), [c[1:] for c in CASES], ids=IDS)
def test_touches_of_one_event_and_one_grant(
    devices: list[Any] | None, fault_device: str | None, touching: bool
) -> None:
    grant = {"node": "n1"} | ({"devices": devices} if devices is not None else {})
    fault = {"node": "n1"} | ({"device": fault_device} if fault_device is not None else {})
    assert touches(fault, grant) is touching


# -- the label table is the only place label codes are written --------------------------

#: SQL or Python that writes a label code by hand: `label = 12`, `label IN (5, 12)`, a
#: sweep's `WHEN mask & 4096`, a bit `1 << 3`, a category list in a fixed order.
HAND_WRITTEN_CODES = (
    re.compile(r"label\s*(=|<>|IN\s*\()\s*\d", re.I),
    re.compile(r"WHEN\s+mask\s*&", re.I),
    re.compile(r"\b1\s*<<\s*(code|label)\b"),
    re.compile(r"\bLabel\(\s*\d"),
    re.compile(r"\(\s*21\s*,\s*20\s*,"),
    re.compile(r"\"unallocated\",\s*\"double_billed\""),
)
LABEL_TABLE = ROOT / "reconcile" / "engine" / "rules.py"


def hand_written_codes(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for pattern in HAND_WRITTEN_CODES
        for m in pattern.finditer(text)
    ]


def test_label_codes_are_written_only_in_the_label_table() -> None:
    found = [
        hit
        for path in sorted((ROOT / "reconcile").rglob("*.py"))
        if path != LABEL_TABLE
        for hit in hand_written_codes(path)
    ]
    assert found == []


def test_the_check_sees_a_hand_written_code(tmp_path: Path) -> None:
    source = tmp_path / "reconcile_like.py"
    source.write_text(
        'SQL = "SELECT 1 FROM claim k WHERE k.label IN (5, 12)"\n'
        'ORDER = ("unallocated", "double_billed", "reclaimed")\n',
        encoding="utf-8",
    )
    assert len([p for p in HAND_WRITTEN_CODES if p.search(source.read_text())]) == 2


def test_the_label_table_is_in_rules_md_order_with_one_code_each() -> None:
    # by hand from RULES.md: §Unallocated, rules 1-10 of §Categories, §Inputs 2 (money_only)
    assert [label.name for label in LABELS] == [
        "unallocated",
        "double_billed",
        "reclaimed",
        "checkpoint",
        "restart_lost.provider",
        "restart_lost.customer",
        "restart_recovery.provider",
        "restart_recovery.customer",
        "productive.accepted",
        "productive.rejected",
        "productive.pending",
        "stalled_fault",
        "startup",
        "idle_reserved",
        "idle_unexplained",
        "money_only",
    ]
    assert [label.code for label in LABELS] == list(range(16))
    # rule 9, idle_reserved, is what no span claims; the sweep's winner is the first span
    # label open in priority order: reclaimed (rule 2) over every other
    assert IDLE_LABEL.name == "idle_reserved" and IDLE_LABEL not in SPAN_LABELS

    every_bit = sum(label.bit for label in SPAN_LABELS)
    winner = (
        duckdb.connect()
        .execute(f"SELECT {winner_sql(str(every_bit))}, {winner_sql('0')}")
        .fetchone()
    )
    assert winner == (2, 13)  # reclaimed's code, idle_reserved's
