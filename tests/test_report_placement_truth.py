"""`report placement` and the serving view of `report outcomes` against the simulator's own
record of what it made (truth_evidence.json, docs/simulator-evidence.md; truth.jsonl for
the billed amounts): the fleet is simulated, ingested through its manifest and reported
through the CLI; the expected values are the truth's, combined only by the documented
rules (docs/placement.md) where a report row stands for several truth entries."""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import pytest

from fixtures.sim import SimConfig, simulate
from tests.conftest import run_cli

CONFIG = SimConfig(seed=7, gpus=64, days=2, tenants=4)


@pytest.fixture(scope="module")
def reported(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, Any], dict[str, Any], dict[str, Any]]:
    out = tmp_path_factory.mktemp("truth")
    simulate(CONFIG, out / "sim")
    url = f"sqlite:///{out / 'ledger.db'}"
    code, ingested, err = run_cli(
        "ingest", "--db", url, "--manifest", str(out / "sim" / "manifest.json")
    )
    assert code == 0 and ingested.splitlines()[-1].endswith("quarantined 0"), err
    docs = []
    for args in (["placement"], ["outcomes", "--view", "serving"]):
        code, text, err = run_cli("report", *args, "--db", url, "--format", "json")
        assert code == 0, err
        docs.append(json.loads(text))
    truth = json.loads((out / "sim" / "truth_evidence.json").read_text())
    return out / "sim", truth, docs[0], docs[1]


def billed_amounts(sim: Path) -> dict[tuple[str, str], Decimal]:
    """Each allocation's billed amount from truth.jsonl, after corrections: a line the
    simulator corrected (anomalies.jsonl, kind `correction`) is replaced by its fix."""
    corrected = {
        (a["tenant"], a["ids"]["line_id"])
        for a in map(json.loads, (sim / "anomalies.jsonl").read_text().splitlines())
        if a["kind"] == "correction"
    }
    amounts: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for line in (sim / "truth.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if (entry["tenant"], entry["line_id"]) not in corrected:
            amounts[(entry["tenant"], entry["allocation_id"])] += Decimal(entry["amount"])
    return amounts


def test_each_capture_is_the_match_or_mismatch_the_truth_says(reported: Any) -> None:
    _, truth, placement, _ = reported
    rows = {a["allocation_id"]: a for a in placement["allocations"]}
    for expected in truth["placement"]:
        row = rows[expected["allocation_id"]]
        assert (row["tenant"], row["placement_class"], row["gpus"], row["nodes_observed"]) == (
            expected["tenant"],
            expected["placement_class"],
            expected["gpus"],
            [expected["node"]],
        )
        assert row["status"] == ("match" if expected["observed_match"] else "mismatch"), expected
        # the truth writes a slow pair `GPU0-GPU4 SYS`; the report, `GPU0–GPU4 over SYS, class
        # requires NVLink`
        slow = [
            f"{pair.replace('-', '–')} over {link}, class requires NVLink"
            for pair, link in (p.split(" ") for p in expected["non_nvlink_pairs"])
        ]
        assert row["reasons"] == (
            slow or ["every pair of its %d GPUs over NVLink" % expected["gpus"]]
        )
    assert {t["observed_match"] for t in truth["placement"]} == {True, False}


def test_money_billed_on_mismatched_placements_is_the_lines_amounts(reported: Any) -> None:
    sim, truth, placement, _ = reported
    amounts = billed_amounts(sim)
    expected: dict[str, Decimal] = defaultdict(Decimal)
    for t in truth["placement"]:
        if not t["observed_match"]:
            expected[t["tenant"]] += amounts[(t["tenant"], t["allocation_id"])]
    shown = {
        s["tenant"]: Decimal(s["billed_on_mismatch"]["USD"])
        for s in placement["summary"]
        if s["placement_class"] == "whole" and s["billed_on_mismatch"]
    }
    assert shown == {k: v.quantize(Decimal("0.01"), ROUND_HALF_EVEN) for k, v in expected.items()}


def test_busbw_step_time_and_the_rank_correlation_per_class(reported: Any) -> None:
    _, truth, placement, _ = reported
    rows = {a["allocation_id"]: a for a in placement["allocations"]}
    for expected in truth["probes"]["allocations"]:
        row = rows[expected["allocation_id"]]
        assert (row["busbw_gbps"], row["busbw_size_bytes"]) == (expected["busbw_gbps"], 134217728)
        assert Decimal(row["step_time_p50_s"]) == Decimal(expected["step_time_s"]), expected[
            "allocation_id"
        ]
    predicted = {p["placement_class"].split(":")[0]: p for p in placement["prediction"] if p["n"]}
    assert sorted(predicted) == sorted(truth["probes"]["classes"])
    for cls, expected in truth["probes"]["classes"].items():
        mine = predicted[cls]
        assert mine["n"] == expected["allocations"]
        assert Decimal(mine["spearman"]).quantize(Decimal("0.0001")) == Decimal(
            expected["rank_correlation"]
        )
        assert mine["predicts"] == expected["predicts_step_time"]


def test_serving_levels_are_the_windows_as_written(reported: Any) -> None:
    sim, truth, _, serving = reported
    rows = {(r["tenant"], r["concurrency"]): r for r in serving["serving"]}
    levels: dict[tuple[str, Any], list[dict[str, Any]]] = defaultdict(list)
    for w in truth["serving"]:
        levels[(w["tenant"], w["concurrency"])].append(w)
        levels[(w["tenant"], "all")].append(w)
    assert sorted(rows, key=str) == sorted(levels, key=str)
    for key, windows in levels.items():
        row = rows[key]
        assert (row["windows"], row["requests"], row["accepted"]) == (
            len(windows),
            sum(w["requests"] for w in windows),
            sum(w["accepted"] for w in windows),
        )
        # vLLM counts no cancellations: the truth writes 0, the report says none was reported
        assert (row["failed"], row["cancelled"] or 0) == (
            sum(w["failed"] for w in windows),
            sum(w["cancelled"] for w in windows),
        )
        for name in ("ttft_ms", "latency_ms"):
            assert {k: Decimal(v) for k, v in row[name].items()} == {
                stat: max(Decimal(w[name][stat]) for w in windows)
                for stat in ("p50", "p95", "p99")
            }
    # the serving allocation's money is all its lines' amounts, spread over its windows
    amounts = billed_amounts(sim)
    for tenant in {w["tenant"] for w in truth["serving"]}:
        [allocation] = {w["allocation_id"] for w in truth["serving"] if w["tenant"] == tenant}
        total = amounts[(tenant, allocation)]
        accepted = sum(w["accepted"] for w in truth["serving"] if w["tenant"] == tenant)
        assert rows[(tenant, "all")]["cost"]["USD"] == {
            "cost": str(total.quantize(Decimal("0.01"), ROUND_HALF_EVEN)),
            "cost_per_accepted_response": str(
                (total / accepted).quantize(Decimal("0.01"), ROUND_HALF_EVEN)
            ),
        }
