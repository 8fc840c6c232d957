"""The simulator's evidence files (fixtures/sim/evidence.py, docs/simulator-evidence.md):
every one ingests through the manifest with nothing quarantined and nothing appended on a
second run, and truth_evidence.json says what the files say. The files are read here with
small parsers of the tools' printed layouts, never with the ingestors' code, and the rules
(NVLink on every pair, the rank correlation) are worked from the figures as printed."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from fixtures.sim import Rates, SimConfig, simulate
from tests.conftest import run_cli

CONFIG = SimConfig(seed=7, gpus=64, days=2, tenants=4)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    out = tmp_path_factory.mktemp("evidence")
    simulate(CONFIG, out)
    manifest = json.loads((out / "manifest.json").read_text())
    return out, manifest, json.loads((out / manifest["truth"]["evidence"]).read_text())


def entries(manifest: dict[str, Any], fmt: str) -> list[dict[str, Any]]:
    return [f for f in manifest["files"] if f["format"] == fmt]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- independent readers of the printed layouts ------------------------------------------


def topo_matrix(text: str) -> dict[tuple[str, str], str]:
    """(row, column) → link of `nvidia-smi topo -m`'s GPU block (tab-separated)."""
    lines = [line for line in text.splitlines() if line.startswith("\t") or line.startswith("GPU")]
    header = lines[0].strip("\t").split("\t")
    cells = {}
    for line in lines[1:]:
        name, *values = line.split("\t")
        for column, value in zip(header, values):
            if column.startswith("GPU"):
                cells[(name, column)] = value.strip()
    return cells


def nccl_table(text: str) -> tuple[list[list[str]], str]:
    """The rows of the run's table (as printed words) and its `Avg bus bandwidth`."""
    rows = [line.split() for line in text.splitlines() if re.match(r"\s+\d+\s+\d+\s+float", line)]
    avg = re.search(r"# Avg bus bandwidth\s*:\s*(\S+)", text)
    assert avg is not None
    return rows, avg.group(1)


def spearman(xs: list[Decimal], ys: list[Decimal]) -> Decimal:
    """Spearman's rho with average ranks for ties: Pearson's r of the ranks."""

    def ranks(values: list[Decimal]) -> list[Decimal]:
        return [
            Decimal(sum(1 for w in values if w < v))
            + (Decimal(sum(1 for w in values if w == v)) + 1) / 2
            for v in values
        ]

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx, Decimal(0)) / len(rx), sum(ry, Decimal(0)) / len(ry)
    cov = sum(((a - mx) * (b - my) for a, b in zip(rx, ry)), Decimal(0))
    spread = (
        sum(((a - mx) ** 2 for a in rx), Decimal(0)) * sum(((b - my) ** 2 for b in ry), Decimal(0))
    ).sqrt()
    return cov / spread


# -- ingest --------------------------------------------------------------------------------


def test_the_manifest_ingests_every_new_file_once_with_nothing_quarantined(
    fleet: tuple[Path, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    out, manifest, _ = fleet
    db = ["--db", f"sqlite:///{tmp_path / 'l.db'}"]
    code, first, _ = run_cli("ingest", *db, "--manifest", str(out / "manifest.json"))
    assert code == 0 and first.splitlines()[-1].endswith("duplicate 0 · quarantined 0"), first[
        -300:
    ]
    code, again, _ = run_cli("ingest", *db, "--manifest", str(out / "manifest.json"))
    assert code == 0 and re.search(
        r"appended 0 · duplicate \d+ · quarantined 0$", again.splitlines()[-1]
    )
    code, exported, _ = run_cli("export", *db)
    types: dict[str, int] = {}
    for line in exported.splitlines():
        entry = json.loads(line)
        types[entry["type"]] = types.get(entry["type"], 0) + 1
    assert types["placement.observed"] == len(entries(manifest, "nvidia-smi-topo"))
    assert types["probe.result"] == len(entries(manifest, "nccl-tests"))
    receipts = sum(
        len(jsonl(out / f["path"]))
        for f in entries(manifest, "cloudevents")
        if f["path"].startswith("receipts/")
    )
    assert types["start.receipt"] == receipts and types["fleet.change"] == 1


def test_the_evidence_comes_after_every_billed_fact_in_the_manifest(
    fleet: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    _, manifest, _ = fleet
    paths = [f["path"] for f in manifest["files"]]
    last_billing = max(i for i, p in enumerate(paths) if p.startswith("billing/"))
    evidence = [
        i
        for i, p in enumerate(paths)
        if p.startswith(("placement/", "probes/", "serving/", "receipts/", "fleet/changes"))
    ]
    assert evidence and min(evidence) > last_billing


# -- placement -------------------------------------------------------------------------------


def test_each_capture_matches_or_not_as_the_truth_says(
    fleet: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    out, manifest, truth = fleet
    captures = {f["options"]["allocation"]: f for f in entries(manifest, "nvidia-smi-topo")}
    assert sorted(captures) == sorted(t["allocation_id"] for t in truth["placement"])
    for expected in truth["placement"]:
        entry = captures[expected["allocation_id"]]
        assert (entry["options"]["tenant"], entry["options"]["node"]) == (
            expected["tenant"],
            expected["node"],
        )
        cells = topo_matrix((out / entry["path"]).read_text())
        gpus = sorted({a for a, _ in cells}, key=lambda name: int(name[3:]))
        assert len(gpus) == expected["gpus"] >= 2
        slow = [
            f"{a}-{b} {cells[(a, b)]}"
            for i, a in enumerate(gpus)
            for b in gpus[i + 1 :]
            if not cells[(a, b)].startswith("NV")
        ]
        assert all(cells[(a, b)] == cells[(b, a)] for a in gpus for b in gpus)
        assert (expected["observed_match"], expected["non_nvlink_pairs"]) == (not slow, slow)
        assert expected["reason"] == (slow[0] if slow else None)
    assert {t["observed_match"] for t in truth["placement"]} == {True, False}


# -- probes ----------------------------------------------------------------------------------


def test_probe_figures_are_as_printed_and_predict_step_time_on_whole_only(
    fleet: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    out, manifest, truth = fleet
    runs = {f["options"]["allocation"]: f for f in entries(manifest, "nccl-tests")}
    by_class: dict[str, list[tuple[Decimal, Decimal]]] = {}
    for expected in truth["probes"]["allocations"]:
        rows, avg = nccl_table((out / runs[expected["allocation_id"]]["path"]).read_text())
        assert rows[-1][0] == "134217728"
        assert (rows[-1][7], avg) == (
            expected["busbw_gbps"],
            expected["avg_busbw_gbps"],
        )  # out-of-place busbw
        by_class.setdefault(expected["placement_class"], []).append(
            (Decimal(expected["busbw_gbps"]), Decimal(expected["step_time_s"]))
        )
    for placement, pairs in by_class.items():
        rho = spearman([b for b, _ in pairs], [s for _, s in pairs])
        claimed = truth["probes"]["classes"][placement]
        assert Decimal(claimed["rank_correlation"]) == rho.quantize(Decimal("0.0001"))
        assert claimed["allocations"] == len(pairs)
    whole, mig = truth["probes"]["classes"]["whole"], truth["probes"]["classes"]["mig"]
    assert (whole["predicts_step_time"], whole["expected_sign"], whole["rank_correlation"]) == (
        True,
        -1,
        "-1.0000",
    )
    assert (mig["predicts_step_time"], mig["expected_sign"]) == (False, 0)
    assert abs(Decimal(mig["rank_correlation"])) < Decimal("0.5")
    mismatched = {t["allocation_id"] for t in truth["placement"] if not t["observed_match"]}
    busbw = {t["allocation_id"]: Decimal(t["busbw_gbps"]) for t in truth["probes"]["allocations"]}
    assert max(busbw[a] for a in mismatched) < min(
        busbw[a]
        for a in busbw
        if a not in mismatched and any(t["allocation_id"] == a for t in truth["placement"])
    )


def test_step_time_is_the_jobs_progress_period(
    fleet: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    """The step time p50 of the job's own progress marks, from its application log."""
    out, _, truth = fleet
    marks: dict[str, list[tuple[str, int]]] = {}
    for log in (out / "apps").iterdir():
        for e in jsonl(log):
            if e["type"] == "job.progress" and e["data"].get("attempt", 1) == 1:
                marks.setdefault(e["data"]["job_id"], []).append((e["time"], e["data"]["step"]))
    for expected in truth["probes"]["allocations"]:
        seen = sorted((_seconds(t), step) for t, step in marks[expected["job_id"]])
        steps = sorted(Fraction(b[0] - a[0], b[1] - a[1]) for a, b in zip(seen, seen[1:]))
        assert steps[len(steps) // 2] == Fraction(Decimal(expected["step_time_s"])), expected[
            "job_id"
        ]


def _seconds(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


# -- serving ---------------------------------------------------------------------------------


def test_serving_windows_are_as_written(
    fleet: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    out, manifest, truth = fleet
    written = []
    for entry in entries(manifest, "serving-bench"):
        result = json.loads((out / entry["path"]).read_text(), parse_float=Decimal)
        written.append(
            (
                entry["options"]["tenant"],
                result["max_concurrency"],
                result["num_prompts"],
                result["completed"],
                result["failed"],
                0,
                str(result["median_ttft_ms"]),
                str(result["p95_ttft_ms"]),
                str(result["p99_e2el_ms"]),
            )
        )
    for entry in entries(manifest, "cloudevents"):
        if entry["path"].startswith("serving/"):
            for e in jsonl(out / entry["path"]):
                d = e["data"]
                written.append(
                    (
                        d["tenant"],
                        d["concurrency"],
                        d["requests"],
                        d["accepted"],
                        d["failed"],
                        d["cancelled"],
                        d["ttft_ms"]["p50"],
                        d["ttft_ms"]["p95"],
                        d["latency_ms"]["p99"],
                    )
                )
    claimed = [
        (
            t["tenant"],
            t["concurrency"],
            t["requests"],
            t["accepted"],
            t["failed"],
            t["cancelled"],
            t["ttft_ms"]["p50"],
            t["ttft_ms"]["p95"],
            t["latency_ms"]["p99"],
        )
        for t in truth["serving"]
    ]
    assert sorted(written) == sorted(claimed)
    assert len({t["tenant"] for t in truth["serving"]}) == 2
    assert sum(t["cancelled"] for t in truth["serving"]) > 0


# -- receipts and the change ---------------------------------------------------------------


def test_receipts_per_class_and_the_starts_the_change_delayed(
    fleet: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    out, _, truth = fleet
    receipts = [e["data"] for e in jsonl(out / "receipts" / "receipts.jsonl")]
    counts: dict[str, int] = {}
    for r in receipts:
        counts[r["placement_class"]] = counts.get(r["placement_class"], 0) + 1
    assert counts == {c: v["receipts"] for c, v in truth["receipts"]["classes"].items()}
    devices = [e["data"] for e in jsonl(out / "fleet" / "devices.jsonl")]
    for placement, claimed in truth["receipts"]["classes"].items():
        assert claimed["devices_discovered"] == sum(
            1 for d in devices if d["placement_class"] == placement
        )
        assert claimed["attempted"] == claimed["receipts"] + claimed["failed_to_start"]
    assert truth["receipts"]["classes"]["timeslice"]["failed_to_start"] > 0
    [change] = [e["data"] for e in jsonl(out / "fleet" / "changes.jsonl")]
    [claimed_change] = truth["fleet_changes"]
    assert {k: claimed_change[k] for k in change} == change and change["kind"] == "driver-upgrade"
    delayed, on_time = [], []
    for r in receipts:
        if change["started_at"] <= r["submitted_at"] < change["ended_at"]:
            if r["node"] in change["nodes"]:
                assert (
                    r["launched_at"] > change["ended_at"] and r["driver"] != receipts[0]["driver"]
                )
                delayed.append(r["job_id"])
            else:
                on_time.append(r["job_id"])
    assert delayed and (delayed, on_time) == (
        claimed_change["delayed_starts"],
        claimed_change["on_time_during"],
    )


def test_no_customer_allocation_overlaps_the_change(
    fleet: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    """The change falls after every allocation ended, so no billed second is touched by it."""
    out, _, truth = fleet
    [change] = truth["fleet_changes"]
    last_line_end = max(
        json.loads(line)["period_end"] for line in (out / "truth.jsonl").read_text().splitlines()
    )
    assert last_line_end < change["started_at"]


def test_a_fleet_without_mig_or_slurm_still_writes_consistent_evidence(tmp_path: Path) -> None:
    quiet = Rates(**dict.fromkeys(Rates.names(), 0.0))
    manifest = simulate(replace(CONFIG, gpus=16, days=1, tenants=1, rates=quiet), tmp_path)
    truth = json.loads((tmp_path / "truth_evidence.json").read_text())
    assert "mig" not in truth["probes"]["classes"] and set(truth["receipts"]["classes"]) == {
        "whole"
    }
    [change] = truth["fleet_changes"]
    assert change["nodes"] == ["node-001"] and change["on_time_during"]  # node-002 kept serving
    assert any(f["path"] == "fleet/changes.jsonl" for f in manifest.files)
