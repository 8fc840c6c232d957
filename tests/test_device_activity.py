"""RULES.md 14: what the GPU did over a stalled or idle claim, worked by hand.

Scenario: acme holds A1 (2 GPUs, n1 devices 0 and 1) from 10:00 to 11:00, billed on one
line L1. Job j1 starts at 10:00, steps at 10:01 and 10:02, then nothing until 10:32: the gap
[10:02, 10:32) is longer than the 300 s stall threshold with no fault, so it is
`idle_unexplained`, 1,800 s (× 2 GPUs).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.tree import TreeReader
from reconcile.engine.activity import merged_activity, sentence
from reconcile.packets.claims import reconcile_claims
from tests.conftest import run_cli, write_jsonl
from tests.reconcile_helpers import Scenario, records, when


def counters(
    s: Scenario,
    device: str,
    start: str,
    end: str,
    sm: str,
    node: str = "n1",
    tenant: str | None = "acme",
) -> None:
    """A window of SM active on `device`: the tenant's own `job.counters` (the exporter
    named its pod there), or with `tenant` None the fleet's `device.counters`."""
    data: dict[str, Any] = {
        "node": node,
        "device": device,
        "window_start": when(start),
        "window_end": when(end),
        "samples": 1,
        "sm_active": sm,
    }
    if tenant is None:
        s.add("device.counters", end, data)
    else:
        s.add("job.counters", end, {**data, "job_id": "pod-j1"}, tenant=tenant)


def idle_scenario() -> Scenario:
    s = Scenario()
    s.grant("A1", gpus=2, at="10:00", devices=["0", "1"])
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:01", "10:02", "10:32", "10:33")
    s.complete("j1", at="10:34")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=2, amount="2.00")
    return s


def entries(s: Scenario) -> list[dict[str, Any]]:
    return [
        {"seq": n, "type": r.type, "tenant": r.tenant, "event": r.body.decode()}
        for n, r in enumerate(records(s.events), 1)
    ]


def idle_claim(s: Scenario) -> dict[str, Any]:
    _, claims = reconcile_claims(entries(s), "INV-1")
    [claim] = [c for c in claims if c["category"] == "idle_unexplained"]
    assert claim["stretches"] == [["2026-01-05T10:02:00Z", "2026-01-05T10:32:00Z", 2]]
    return claim


def test_an_idle_stretch_with_a_quiet_gpu_says_nothing_ran() -> None:
    s = idle_scenario()
    counters(s, "0", "10:02", "10:12", "0.002")
    counters(s, "0", "10:02", "10:12", "0.9")  # the same window again: the first counts
    counters(s, "0", "10:12", "10:22", "0.004")
    counters(s, "1", "10:02", "10:12", "0")
    counters(s, "1", "10:22", "10:30", "0.01")
    counters(s, "0", "10:30", "10:40", "0.5")  # 120 s of it inside the stretch
    counters(s, "0", "10:40", "10:50", "0.9")  # after the stretch: not read
    counters(s, "2", "10:02", "10:32", "0.9")  # device 2 is not A1's
    counters(s, "0", "10:02", "10:32", "0.9", node="n2")  # n2's device 0 is not A1's
    # the fleet's counters and another tenant's are never read for acme (RULES.md 14)
    counters(s, "0", "10:02", "10:32", "0.9", tenant=None)
    counters(s, "1", "10:02", "10:32", "0.9", tenant="globex")
    activity = idle_claim(s)["device_activity"]
    # covered: [10:02, 10:22) ∪ [10:22, 10:30) ∪ [10:30, 10:32) = 1,800 s of 1,800
    # sampled: 600 + 600 + 600 + 480 + 120 = 2,400 device-seconds
    # SM-weighted: 0.002×600 + 0.004×600 + 0×600 + 0.01×480 + 0.5×120 = 68.4
    # mean 68.4 / 2,400 = 0.0285: 2.85 %, half-even to one place: 2.8 %
    assert activity == {
        "samples": 5,
        "seconds": "1800",
        "covered_seconds": "1800",
        "sampled_seconds": "2400",
        "sm_active_seconds": "68.4",
        "coverage": "1",
        "sm_active": "0.0285",
        "says": "SM active 2.8 % over 100 % of the stretch: nothing ran",
    }


def test_an_idle_stretch_with_a_busy_gpu_says_the_job_computed() -> None:
    s = idle_scenario()
    counters(s, "0", "10:02", "10:32", "0.94")
    counters(s, "1", "10:02", "10:17", "0.94")
    activity = idle_claim(s)["device_activity"]
    # 0.94 × (1,800 + 900) / 2,700 = 0.94
    assert (activity["sm_active"], activity["coverage"], activity["sampled_seconds"]) == (
        "0.94",
        "1",
        "2700",
    )
    assert activity["says"] == (
        "SM active 94 % over 100 % of the stretch: the job computed but reported no progress"
    )


def test_a_thinly_sampled_stretch_says_too_little() -> None:
    s = idle_scenario()
    counters(s, "0", "10:02", "10:08", "0.01")  # 360 s of 1,800: 20 %
    activity = idle_claim(s)["device_activity"]
    assert activity["coverage"] == "0.2"
    assert activity["says"] == (
        "SM active 1.0 % over 20 % of the stretch: too little of it sampled to say what the "
        "GPU did"
    )


def test_a_stall_with_a_fault_says_what_the_gpu_did_too() -> None:
    s = idle_scenario()
    s.add("health.fault", "10:10", {"node": "n1", "device": "0", "code": "xid-79",
                                    "severity": "critical"})  # fmt: skip
    s.add("health.cleared", "10:20", {"node": "n1", "device": "0", "code": "xid-79"})
    counters(s, "0", "10:02", "10:32", "0")
    counters(s, "1", "10:02", "10:32", "0.001")
    _, found = reconcile_claims(entries(s), "INV-1")
    [claim] = [c for c in found if c["category"] == "stalled_fault"]
    assert claim["stretches"] == [["2026-01-05T10:02:00Z", "2026-01-05T10:32:00Z", 2]]
    # (0 × 1,800 + 0.001 × 1,800) / 3,600 = 0.0005: 0.05 %, one place half-even: 0.0 %
    assert claim["device_activity"]["sm_active"] == "0.0005"
    assert claim["device_activity"]["says"] == (
        "SM active 0.0 % over 100 % of the stretch: nothing ran"
    )


def test_without_counters_a_claim_has_no_activity() -> None:
    assert "device_activity" not in idle_claim(idle_scenario())


@pytest.mark.parametrize(
    ("mean", "coverage", "says"),
    [
        ("0.002", "0.98", "SM active 0.2 % over 98 % of the stretch: nothing ran"),
        ("0.0499", "1", "SM active 5.0 % over 100 % of the stretch: nothing ran"),
        ("0.05", "1", "SM active 5.0 % over 100 % of the stretch: the GPU was partly busy"),
        (
            "0.5",
            "0.5",
            "SM active 50 % over 50 % of the stretch: the job computed but reported no progress",
        ),
        (
            "0.9",
            "0.499",
            "SM active 90 % over 49 % of the stretch: too little of it sampled "
            "to say what the GPU did",
        ),
    ],
)
def test_the_thresholds(mean: str, coverage: str, says: str) -> None:
    assert sentence(Decimal(mean), Decimal(coverage)) == says


def test_merged_claims_add_their_sums() -> None:
    # two hours of one stall: 3,600 s sampled at 0.01 and 3,600 s at 0.03, each fully covered
    first = {
        "samples": 60,
        "seconds": "3600",
        "covered_seconds": "3600",
        "sampled_seconds": "3600",
        "sm_active_seconds": "36",
    }
    second = {
        "samples": 60,
        "seconds": "3600",
        "covered_seconds": "1800",
        "sampled_seconds": "1800",
        "sm_active_seconds": "54",
    }
    merged = merged_activity([first, None, second])
    assert merged is not None
    # (36 + 54) / 5,400 = 0.016666…: 0.0167; covered 5,400 / 7,200 = 0.75
    assert (merged["sm_active"], merged["coverage"], merged["samples"]) == ("0.0167", "0.75", 120)
    assert merged["says"] == "SM active 1.7 % over 75 % of the stretch: nothing ran"
    assert merged_activity([None]) is None


# -- the dispute packet, verify-packet and the letter -------------------------------------


def busy_and_quiet() -> Scenario:
    """The idle scenario with A1's GPU 0 busy over the stretch (SM 0.94) and GPU 1 quiet
    (SM 0.002): (0.94 + 0.002) × 1,800 / 3,600 = 0.471, 47 %: partly busy. Acme's
    counters on another node (n2) are carried (they are its own) but not read."""
    s = idle_scenario()
    counters(s, "0", "10:02", "10:32", "0.94")
    counters(s, "1", "10:02", "10:32", "0.002")
    counters(s, "0", "10:02", "10:32", "0.5", node="n2")
    # the fleet's view of the same devices and a neighbour's window on them: neither is
    # carried in acme's packet nor read
    counters(s, "0", "10:02", "10:32", "0.5", tenant=None)
    counters(s, "1", "10:32", "10:50", "0.7", tenant="globex")
    return s


@pytest.fixture(scope="module")
def packet_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("activity")
    url = f"sqlite:///{folder / 'ledger.db'}"
    assert run_cli("keygen", "--out", str(folder / "key"))[0] == 0
    events = write_jsonl(folder / "events.jsonl", busy_and_quiet().events)
    assert run_cli("ingest", "--db", url, str(events))[0] == 0
    code, _, err = run_cli(
        "dispute", "--db", url, "--tenant", "acme", "--invoice", "INV-1",
        "--key", str(folder / "key"), "--out", str(folder / "packet.json"),
    )  # fmt: skip
    assert code == 0, err
    return folder


def verify_packet(folder: Path, packet: dict[str, Any]) -> tuple[int, str, str]:
    path = folder / "check.json"
    path.write_text(json.dumps(packet))
    return run_cli("verify-packet", str(path), "--pubkey", str(folder / "key.pub"))


def test_the_packet_carries_the_counters_and_the_line(packet_folder: Path) -> None:
    packet = json.loads((packet_folder / "packet.json").read_text())
    kinds = {e["type"] for e in packet["bundle"]["entries"]}
    assert "device.counters" not in kinds  # the fleet's counters never ride in a packet
    carried = [e for e in packet["bundle"]["entries"] if e["type"] == "job.counters"]
    assert sorted((e["tenant"], json.loads(e["event"])["data"]["node"]) for e in carried) == [
        ("acme", "n1"),
        ("acme", "n1"),
        ("acme", "n2"),
    ]
    assert "globex" not in json.dumps(packet)  # nothing of the neighbour, not even its name
    [claim] = [c for c in packet["claims"] if c["category"] == "idle_unexplained"]
    # 0.94 × 1,800 + 0.002 × 1,800 = 1,695.6 SM-seconds over 3,600 sampled: 0.471
    assert claim["device_activity"]["sm_active_seconds"] == "1695.6"
    assert claim["device_activity"]["says"] == (
        "SM active 47 % over 100 % of the stretch: the GPU was partly busy"
    )
    code, out, err = verify_packet(packet_folder, packet)
    assert code == 0, out + err
    letter = (packet_folder / "packet.letter.html").read_text()
    assert "SM active 47 % over 100 % of the stretch: the GPU was partly busy" in letter


def test_a_packet_without_a_counter_fails_completeness(packet_folder: Path) -> None:
    packet = json.loads((packet_folder / "packet.json").read_text())
    entries = packet["bundle"]["entries"]
    entries.remove(next(e for e in entries if e["type"] == "job.counters"))
    store = Store(f"sqlite:///{packet_folder / 'ledger.db'}")
    size = int(packet["bundle"]["checkpoint"].splitlines()[1])
    with store.reading() as conn:  # a valid inclusion proof for what was kept
        proof = TreeReader(conn).multiproof(sorted(e["seq"] - 1 for e in entries), size)
    store.close()
    packet["bundle"]["inclusion"] = [h.hex() for h in proof]
    code, out, err = verify_packet(packet_folder, packet)
    assert code == 1
    # the tenant's chain proves its entries complete: the keeper cannot drop a window
    assert (
        "the tenant's entries are incomplete: the checkpoint commits to 12, missing tenant_seq"
        in out + err
    )


def test_a_packet_that_overstates_what_the_gpu_did_fails(packet_folder: Path) -> None:
    packet = json.loads((packet_folder / "packet.json").read_text())
    [claim] = [c for c in packet["claims"] if c["category"] == "idle_unexplained"]
    claim["device_activity"]["says"] = "SM active 0.2 % over 100 % of the stretch: nothing ran"
    code, out, err = verify_packet(packet_folder, packet)
    assert code == 1 and "device_activity" in out + err, out + err
