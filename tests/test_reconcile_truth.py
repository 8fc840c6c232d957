"""The engine against the simulator's ground truth: a multi-day fleet in the real
source formats, ingested as any user would, reconciled, and compared line by line and
category by category, exactly. The truth is the simulator's own (fixtures/sim/truth.py,
worked from its model of the fleet); this test never derives an expected value from the
engine."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import ingest
import ledger
from fixtures.sim import Rates, SimConfig, simulate
from reconcile import Reconciliation, reconcile_store

SECOND = 1_000_000


def _ingest_fleet(out: Path, store: ledger.Store) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    appender = ledger.Appender(store)
    for item in manifest["files"]:
        records = ingest.extract(out / item["path"], item["format"], **item.get("options", {}))
        report = ledger.append_stream(appender, records, 5000)
        assert report.quarantined == 0, (item, report.problems[:3])


def _engine_lines(result: Reconciliation) -> dict[tuple[str, str], dict[str, int]]:
    lines: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for cell in result.cells:
        if cell.category == "money_only":
            continue
        key = cell.category
        if key in ("restart_lost", "restart_recovery"):
            key += ":" + cell.bearer
        lines[(cell.tenant, cell.line_id)][key] += cell.gpu_us
    return {k: {c: us // SECOND for c, us in v.items() if us} for k, v in lines.items()}


def _truth_lines(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    truth = {}
    for text in (out / "truth.jsonl").read_text().splitlines():
        line = json.loads(text)
        if not line.get("replaced_by"):
            truth[(line["tenant"], line["line_id"])] = line
    return truth


@pytest.fixture(scope="module", params=[7, 20261202])
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Reconciliation]:
    out = tmp_path_factory.mktemp(f"fleet-{request.param}")
    # Fabric faults on most days, so that the grants' fabric domains and devices decide
    # what a fault touches on many lines (on these seeds, 19 and 29 lines would be
    # classified otherwise if the grants listed neither).
    rates = replace(Rates(), fabric_fault=0.5)
    simulate(SimConfig(seed=request.param, gpus=64, days=3, tenants=4, rates=rates), out)
    store = ledger.Store(f"sqlite:///{out / 'ledger.db'}")
    store.init()
    _ingest_fleet(out, store)
    return out, reconcile_store(store)


def test_every_line_every_category_exact(fleet: tuple[Path, Reconciliation]) -> None:
    out, result = fleet
    truth = _truth_lines(out)
    engine = _engine_lines(result)
    assert set(engine) == {k for k, v in truth.items() if v["gpu_seconds"]}
    wrong = [
        (k, {c: s for c, s in truth[k]["categories"].items() if s}, engine[k])
        for k in engine
        if {c: s for c, s in truth[k]["categories"].items() if s} != engine[k]
    ]
    assert not wrong, f"{len(wrong)} of {len(engine)} lines differ; first: {wrong[0]}"


def test_every_injected_category_is_exercised(fleet: tuple[Path, Reconciliation]) -> None:
    """The comparison above means something only if the fleet has every category in it."""
    _, result = fleet
    seen = {key for line in _engine_lines(result).values() for key in line}
    assert seen >= {
        "productive",
        "checkpoint",
        "startup",
        "idle_unexplained",
        "unallocated",
        "idle_reserved",
        "restart_lost:provider",
        "restart_lost:customer",
        "restart_recovery:provider",
        "restart_recovery:customer",
        "stalled_fault",
        "double_billed",
        "reclaimed",
    }


def test_productive_time_by_acceptance_and_unbilled(fleet: tuple[Path, Reconciliation]) -> None:
    out, result = fleet
    doc = result.as_json()
    truth_lines = _truth_lines(out)
    for line in doc["lines"]:
        expected = truth_lines[(line["tenant"], line["line_id"])]
        assert line["productive_by_acceptance"] == expected["productive_by_acceptance"], line[
            "line_id"
        ]
    tenants = json.loads((out / "truth_tenants.json").read_text())
    for tenant, figures in tenants.items():
        assert doc["tenants"][tenant]["unbilled_gpu_seconds"] == figures["unbilled_gpu_seconds"], (
            tenant
        )
        assert doc["tenants"][tenant]["billed_gpu_seconds"] == figures["billed_gpu_seconds"], (
            tenant
        )


def test_the_fleet_has_grants_with_devices_and_fabric_domains(
    fleet: tuple[Path, Reconciliation],
) -> None:
    """The touches rule's branches meet the truth only if the ledger's grants list devices
    (whole GPUs and MIG instances), some list none, and some faults name a domain alone."""
    out, _ = fleet
    records = [
        json.loads(text) for path in out.rglob("*.jsonl") for text in path.read_text().splitlines()
    ]
    events = [r for r in records if "specversion" in r]  # the CloudEvents files, not the truth's
    grants = [e["data"] for e in events if e["type"] == "allocation.granted"]
    assert any("/" in str(d) for g in grants for d in g.get("devices", []))
    assert any(isinstance(d, int) for g in grants for d in g.get("devices", []))
    assert all(g.get("fabric_domain") for g in grants if g.get("devices"))
    faults = [e["data"] for e in events if e["type"] == "health.fault"]
    assert any("fabric_domain" in f and "node" not in f for f in faults)
    assert any("fabric_domain" in f and "node" in f for f in faults)
