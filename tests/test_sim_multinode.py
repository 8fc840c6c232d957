"""The simulator with `multinode` on (fixtures/sim/multinode.py; reconcile/RULES.md 11-13):
its ground truth against the oracle (bench/pandas_reconcile.py) and the engine. Every
written file is ingested into a fresh ledger; the oracle and the engine read the stored
entries and must give every line the truth's GPU-seconds per category, and each pool
line (each tenant, for the engine) the truth's placement state and claim.
With the knob off, the simulator writes what it wrote before.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import ingest
import ledger
from bench.pandas_reconcile import (
    entries_of_store,
    frame_of_entries,
    placement_lines,
    placement_tenants,
    reconcile_frame,
)
from fixtures.sim import Rates, SimConfig, simulate
from reconcile import reconcile_store

S = 1_000_000
Fleet = tuple[Path, Any, dict[str, Any]]  # its folder, the oracle's frame, the engine's JSON
#: Fabric faults on most days, and reclaims, so that every reading meets its case.
RATES = replace(Rates(), fabric_fault=0.5, reclaim=0.3)


@pytest.fixture(scope="module", params=[7, 20261205])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    out = tmp_path_factory.mktemp(f"mn-{request.param}")
    simulate(
        SimConfig(seed=request.param, gpus=32, days=3, tenants=4, rates=RATES, multinode=True), out
    )
    store = ledger.Store(f"sqlite:///{out / 'ledger.db'}")
    store.init()
    appender = ledger.Appender(store)
    for item in json.loads((out / "manifest.json").read_text())["files"]:
        report = ledger.append_stream(
            appender, ingest.extract(out / item["path"], item["format"], **item["options"]), 5000
        )
        assert (report.quarantined, report.problems) == (0, []), item
    frame = frame_of_entries(entries_of_store(store))
    engine = reconcile_store(store).as_json()
    store.close()
    return out, frame, engine


def _truth(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    lines = (json.loads(text) for text in (out / "truth.jsonl").read_text().splitlines())
    return {
        (line["tenant"], line["line_id"]): line for line in lines if not line.get("replaced_by")
    }


def _oracle_as_truth(cells: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """The oracle's GPU-µs per key as the truth writes them: seconds, productive in one."""
    categories: Counter[str] = Counter()
    acceptance = dict.fromkeys(("accepted", "rejected", "pending"), 0)
    for key, us in cells.items():
        assert us % S == 0
        if key.startswith("productive:"):
            categories["productive"] += us // S
            acceptance[key.split(":")[1]] += us // S
        else:
            categories[key] += us // S
    return dict(categories), acceptance


def test_every_line_every_category_as_the_oracle_reads_the_ledger(fleet: Fleet) -> None:
    out, frame, _ = fleet
    truth = _truth(out)
    oracle = reconcile_frame(frame)
    assert set(oracle) == set(truth)
    wrong = {}
    for key, line in truth.items():
        categories, acceptance = _oracle_as_truth(oracle[key])
        if (categories, acceptance) != (line["categories"], line["productive_by_acceptance"]):
            wrong[key] = (line["categories"], categories)
    assert not wrong, list(wrong.items())[:3]


def test_the_pool_exercises_every_reading(fleet: Fleet) -> None:
    """Rules 11-13 meet their cases: faults off the first node stalling and failing jobs
    on the provider, notice owed, gangs restarted elsewhere, every placement state."""
    out, _, _ = fleet
    kinds = Counter(
        json.loads(text)["kind"] for text in (out / "anomalies.jsonl").read_text().splitlines()
    )
    for kind in ("node_stall", "fabric_stall", "gang_fault", "reclaim_inside_notice"):
        assert kinds[f"multinode_{kind}"], kind
    placement = json.loads((out / "truth_placement.json").read_text())
    assert {line["state"] for line in placement["lines"]} == {
        "as_sold",
        "not_as_sold",
        "unobserved",
    }
    pool = {(line["tenant"], line["line_id"]) for line in placement["lines"]}
    truth = _truth(out)
    seen = Counter(k for key in pool for k in truth[key]["categories"])
    for category in (
        "stalled_fault",
        "restart_lost:provider",
        "restart_recovery:provider",
        "reclaimed",
    ):
        assert seen[category], category
    events = [
        json.loads(text) for text in (out / "multinode" / "events.jsonl").read_text().splitlines()
    ]
    grants = [e["data"] for e in events if e["type"] == "allocation.granted"]
    assert any(len(g.get("nodes", [])) >= 3 for g in grants)
    starts = Counter(
        (e["data"]["job_id"], e["data"]["attempt"]) for e in events if e["type"] == "job.started"
    )
    assert max(starts.values()) == 2  # gangs of two pods


def test_each_pool_line_s_placement_state_and_claim(fleet: Fleet) -> None:
    out, frame, _ = fleet
    truth = json.loads((out / "truth_placement.json").read_text())
    oracle = placement_lines(frame)
    for line in truth["lines"]:
        got = oracle[(line["tenant"], line["line_id"])]
        assert (got.state, got.claim, got.gpu_us // S, got.amount) == (
            line["state"],
            Fraction(line["claim"]),
            line["gpu_seconds"],
            Fraction(line["amount"]),
        ), line
    shares = {t: v["claim"] for t, v in truth["tenants"].items()}
    assert any(Fraction(c) > 0 for c in shares.values()), shares


def test_the_engine_gives_every_line_the_truth_s_categories(fleet: Fleet) -> None:
    out, _, engine = fleet
    truth = _truth(out)
    got: dict[tuple[str, str], dict[str, int]] = {}
    for line in engine["lines"]:
        cells: Counter[str] = Counter()
        for name, v in line["categories"].items():
            for bearer, part in (v.get("by_bearer") or {v["bearer"]: v}).items():
                key = f"{name}:{bearer}" if name in ("restart_lost", "restart_recovery") else name
                if name != "money_only" and part["gpu_seconds"]:
                    cells[key] += part["gpu_seconds"]
        got[(line["tenant"], line["line_id"])] = dict(cells)
    wrong = {
        k: (truth[k]["categories"], got.get(k))
        for k in truth
        if {c: s for c, s in truth[k]["categories"].items() if s} != got.get(k, {})
    }
    assert not wrong, list(wrong.items())[:3]


def test_the_engine_gives_each_tenant_the_oracle_s_placement(fleet: Fleet) -> None:
    """Every tenant's lines by placement state, and the claim, as the oracle reads the
    whole ledger (whose pool lines agree with the truth above), rounded as reported."""
    _, frame, engine = fleet
    oracle = placement_tenants(placement_lines(frame))
    assert set(oracle) <= set(engine["tenants"])
    claimed = 0
    for tenant, figures in oracle.items():
        got = engine["tenants"][tenant]["placement"]
        for state in ("as_sold", "not_as_sold", "unobserved"):
            amount = round(sum(figures[state]["amount"].values(), Fraction(0)), 2)
            assert (got[state]["gpu_seconds"], Fraction(got[state]["amount"])) == (
                figures[state]["gpu_us"] // S,
                amount,
            ), (tenant, state)
        claim = round(sum(figures["claim"].values(), Fraction(0)), 2)
        assert Fraction(got["not_as_sold"]["claim"]) == claim, tenant
        claimed += claim > 0
    assert claimed


def test_without_the_knob_nothing_of_it_is_written(tmp_path: Path) -> None:
    config = SimConfig(seed=7, gpus=16, days=2, tenants=4)
    manifest = simulate(config, tmp_path / "off")
    assert "multinode" not in manifest.config and "placement" not in manifest.truth
    assert not (tmp_path / "off" / "multinode").exists()
    terms = (tmp_path / "off" / "tenants" / "terms.jsonl").read_text()
    assert "placement_credit_share" not in terms
    on = simulate(replace(config, multinode=True), tmp_path / "on")
    # the fleet's own allocations are the same with it on: the pool only adds
    assert (
        on.counts["allocations"] - on.counts["allocations.multinode"]
        == manifest.counts["allocations"]
    )


def test_the_same_seed_writes_the_same_pool(tmp_path: Path) -> None:
    config = SimConfig(seed=11, gpus=16, days=2, tenants=4, multinode=True)
    digests = []
    for name in ("a", "b"):
        simulate(config, tmp_path / name)
        digests.append(
            hashlib.sha256(
                (tmp_path / name / "multinode" / "events.jsonl").read_bytes()
            ).hexdigest()
        )
    assert digests[0] == digests[1]
