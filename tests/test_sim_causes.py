"""The simulator's causes day (SimConfig.causes, fixtures/sim/causes.py) against the engine:
every situation's miss is named with the cause its truth gives, and the same seconds.

The truth (truth_causes.json) is the simulator's own: each situation's cause and seconds
written from the situation by the rule of reconcile/RULES.md, read here as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.sim import SimConfig, simulate
from ledger import Store
from reconcile.reports import report
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("causes")
    simulate(SimConfig(seed=7, gpus=64, days=1, tenants=4, causes=True), folder / "sim")
    db = f"sqlite:///{folder / 'l.db'}"
    code, out, err = run_cli(
        "ingest", "--db", db, "--manifest", str(folder / "sim" / "manifest.json")
    )
    assert code == 0, err
    assert out.splitlines()[-1].endswith("quarantined 0")
    return folder / "sim", db


def test_every_situation_is_in_the_truth(fleet: tuple[Path, str]) -> None:
    truth = json.loads((fleet[0] / "truth_causes.json").read_text())
    causes = {m["cause"] for m in truth["misses"]}
    assert causes == {
        "late_submission",
        "held_by_tenant",
        "start_failure",
        "fleet_change",
        "fault",
        "quota",
        "capacity",
        "fragmentation",
        "scheduler",
    }
    assert len(truth["misses"]) == 11
    assert {m["experiment"] for m in truth["misses"]} == {None, 5, 6, 8}


def test_the_engines_cause_of_each_miss_is_the_truths(fleet: tuple[Path, str]) -> None:
    folder, db = fleet
    truth = json.loads((folder / "truth_causes.json").read_text())
    store = Store(db)
    try:
        doc = report(store, "promises")
    finally:
        store.close()
    found = {(m["tenant"], m["promise_id"]): m for m in doc["misses"]}
    for expected in truth["misses"]:
        m = found[(expected["tenant"], expected["promise_id"])]
        assert (m["cause"], m["cause_seconds"], m["placement_class"].split(":")[0]) == (
            expected["cause"],
            expected["cause_seconds"],
            expected["placement_class"],
        ), expected["situation"]
