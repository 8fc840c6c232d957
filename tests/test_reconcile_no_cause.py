"""A GPU line with no cause to be the customer's (RULES.md §Unallocated): one with an empty
window, or one naming no allocation the tenant was granted, bills money for GPU time nobody
can show was allocated. The customer bears none of it: it is `unallocated`, the provider's.

The attack (issue 28): a zero-length window with 8 GPUs on an allocation that does not
exist bills 5,000.00 USD. It used to be `money_only` on the customer, and
`reconcile --fail-on-disputed 0.01` passed. Every figure below is worked by hand from
RULES.md; times are on 2026-01-05.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.pandas_reconcile import frame_of_entries, line_cents, reconcile_frame
from reconcile import reconcile_entries
from tests.conftest import run_cli, write_jsonl
from tests.reconcile_helpers import C, P, Scenario, line, run, tenant


def figures(node: dict[str, Any]) -> dict[str, tuple[Any, str, str]]:
    """Every category of a line, with no time or with time: (GPU-seconds, amount, bearer)."""
    return {
        name: (v["gpu_seconds"], v["amount"], v["bearer"])
        for name, v in node["categories"].items()
    }


def attack() -> Scenario:
    s = Scenario()
    s.line("L-EMPTY", "A-NONE", "10:00", "10:00", gpus=8, amount="5000.00")
    return s


def test_an_empty_window_on_an_unknown_allocation_is_the_provider_s(db_url: str) -> None:
    doc = run(db_url, attack().events)
    l0 = line(doc, "L-EMPTY")
    # |W| = 0: 8 x 0 = 0 GPU-seconds billed; A-NONE was never granted. A GPU line
    # (gpus 8, no credit), so not money_only: its whole 5000.00 is unallocated, provider.
    assert (l0["gpu_seconds"], l0["amount"]) == (0, "5000.00")
    assert figures(l0) == {"unallocated": (0, "5000.00", P)}
    assert l0["categories"]["unallocated"]["amount_exact"] == "5000.00"
    t = tenant(doc)
    assert t["by_bearer"] == {"provider": "5000.00", "customer": "0.00", "disputed": "0.00"}
    assert t["billed_gpu_seconds"] == 0


def test_every_kind_of_line_without_cause_beside_the_ordinary_ones(db_url: str) -> None:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:00")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")  # no job: idle_reserved
    s.line(
        "L0", "A1", "10:30", "10:30", gpus=8, amount="5.00"
    )  # a granted allocation, empty window
    s.line("LN", "A-GHOST", "10:00", "10:30", gpus=2, amount="3.60")  # never granted
    s.line("CR", "A1", "10:00", "11:00", gpus=8, amount="-1.00", category="credit")
    s.line("FEE", None, "10:00", "11:00", gpus=0, amount="10.00")
    doc = run(db_url, s.events)
    # L1: W = H = [10:00, 11:00) x 8 = 28800 GPU-s, nothing running: idle_reserved.
    assert figures(line(doc, "L1")) == {"idle_reserved": (28800, "28.80", C)}
    # L0: no second in its window, so it bills no second of L1's twice; all 5.00 unallocated.
    assert figures(line(doc, "L0")) == {"unallocated": (0, "5.00", P)}
    # LN: A-GHOST never granted, H empty: all of 2 x 1800 s = 3600 GPU-s unallocated, 3.60.
    assert figures(line(doc, "LN")) == {"unallocated": (3600, "3.60", P)}
    # A credit, and a line of no GPUs, stay money_only and the customer's.
    assert figures(line(doc, "CR")) == {"money_only": (0, "-1.00", C)}
    assert figures(line(doc, "FEE")) == {"money_only": (0, "10.00", C)}
    t = tenant(doc)
    # provider 5.00 + 3.60 = 8.60; customer 28.80 - 1.00 + 10.00 = 37.80
    assert t["by_bearer"] == {"provider": "8.60", "customer": "37.80", "disputed": "0.00"}
    # billed 28800 + 3600; H = [10:00, 11:00) x 8 = 28800, all billed by L1 (horizon 11:00)
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (32400, 0)


def _ledger(folder: Path) -> str:
    url = f"sqlite:///{folder / 'ledger.db'}"
    assert run_cli("init", "--db", url)[0] == 0
    code, _, err = run_cli(
        "ingest", "--db", url, str(write_jsonl(folder / "lines.jsonl", attack().events))
    )
    assert code == 0, err
    return url


def test_fail_on_disputed_catches_the_attack(tmp_path: Path) -> None:
    url = _ledger(tmp_path)
    code, _, err = run_cli(
        "reconcile", "--db", url, "--format", "json", "--fail-on-disputed", "0.01"
    )
    # provider-borne 5000.00 > 0.01
    assert (code, err) == (1, "provider-borne and disputed money exceeds 0.01\n")
    # 5000.00 does not exceed 5000.00
    code, _, err = run_cli(
        "reconcile", "--db", url, "--format", "json", "--fail-on-disputed", "5000.00"
    )
    assert (code, err) == (0, "")


def test_the_dispute_of_the_attack_claims_it_and_verifies(tmp_path: Path) -> None:
    url = _ledger(tmp_path)
    key, out = tmp_path / "key", tmp_path / "packet.json"
    assert run_cli("keygen", "--out", str(key))[0] == 0
    code, _, err = run_cli(
        "dispute",
        "--db",
        url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-1",
        "--key",
        str(key),
        "--out",
        str(out),
    )
    assert code == 0, err
    packet = json.loads(out.read_text())
    # one claim: the whole 5000.00, no GPU-second, no stretch of time to show
    assert [
        (
            c["line_id"],
            c["allocation_id"],
            c["category"],
            c["bearer"],
            c["gpu_seconds"],
            c["amount"],
            c["stretches"],
        )
        for c in packet["claims"]
    ] == [("L-EMPTY", "A-NONE", "unallocated", "provider", 0, "5000.00", [])]
    code, said, err = run_cli("verify-packet", str(out), "--pubkey", f"{key}.pub")
    assert (code, err) == (0, "")
    assert said.startswith("ok: invoice INV-1 of acme, 1 lines;")


def test_a_gpu_line_naming_no_allocation_is_unallocated_below_the_schema() -> None:
    # The schema refuses a GPU line without allocation_id, so no ingest stores one; the
    # rule holds anyway for entries read from elsewhere (an export, a packet), in the
    # engine and in the oracle alike.
    s = Scenario()
    s.line("LN", "A-X", "10:00", "10:30", gpus=2, amount="3.60")
    s.line("L0", "A-X", "10:30", "10:30", gpus=8, amount="1.00")
    for e in s.events:
        del e["data"]["allocation_id"]
    entries = [
        {"seq": i, "type": e["type"], "tenant": "acme", "event": json.dumps(e)}
        for i, e in enumerate(s.events, 1)
    ]
    doc = reconcile_entries(entries).as_json()
    # LN: H empty, 2 x 1800 s = 3600 GPU-s, all unallocated; L0: no time, all its money
    assert figures(line(doc, "LN")) == {"unallocated": (3600, "3.60", P)}
    assert figures(line(doc, "L0")) == {"unallocated": (0, "1.00", P)}
    frame = frame_of_entries((e["seq"], e["event"]) for e in entries)
    gpu = reconcile_frame(frame)
    assert gpu == {("acme", "LN"): {"unallocated": 3600 * 10**6}, ("acme", "L0"): {}}
    assert line_cents(frame, gpu) == {
        ("acme", "LN"): {"unallocated": 360},
        ("acme", "L0"): {"unallocated": 100},
    }
