"""The fleet simulator (fixtures/sim): determinism, a truth that adds up, every injected
anomaly visible in the truth, every file ingestible, scale by count, flat memory, and a
scenario whose truth is worked by hand from reconcile/RULES.md."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import ingest
import ledger
from cli import main
from fixtures.sim import Rates, SimConfig, count_events, simulate
from fixtures.sim.model import (
    Allocation,
    Attempt,
    Cause,
    Checkpoint,
    Fault,
    Job,
    Line,
    Node,
    Run,
    Tenant,
    Terms,
)
from fixtures.sim.truth import line_truths, replaced_lines, unbilled_gpu_seconds
from tests.conftest import ROOT, SLOW, run_cli

#: Every rate at 0: a quiet fleet, into which one anomaly at a time is forced.
QUIET = Rates(**dict.fromkeys(Rates.names(), 0.0))
SMALL = SimConfig(
    seed=11, gpus=32, days=2, tenants=3, rates=replace(QUIET, mig=0.3, timeslice=0.3)
)
BUSY = Rates(
    hardware_failure=0.3,
    application_failure=0.3,
    stall=0.3,
    fault_stall=0.3,
    slow_start=0.3,
    reclaim=0.3,
    past_release=0.3,
    more_gpus=0.3,
    duplicate=0.3,
    correction=0.3,
    never_billed=0.1,
    missed_promise=0.4,
    fabric_fault=0.4,
    node_down=0.4,
    mig=0.3,
    timeslice=0.3,
)


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_with(
    tmp_path: Path, **rates: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Path]:
    """A small fleet with the given rates forced on; its truth lines and anomalies."""
    config = replace(SMALL, rates=replace(SMALL.rates, **rates))
    simulate(config, tmp_path)
    return jsonl(tmp_path / "truth.jsonl"), jsonl(tmp_path / "anomalies.jsonl"), tmp_path


def by_allocation(lines: list[dict[str, Any]], category: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in lines:
        out[line["allocation_id"]] = out.get(line["allocation_id"], 0) + line["categories"].get(
            category, 0
        )
    return out


# -- determinism -----------------------------------------------------------------------


def test_the_same_seed_writes_the_same_bytes_and_another_seed_does_not(tmp_path: Path) -> None:
    config = replace(SMALL, rates=BUSY)
    simulate(config, tmp_path / "a")
    simulate(config, tmp_path / "b")
    simulate(replace(config, seed=12), tmp_path / "c")
    first, second, other = (
        digests(tmp_path / "a"),
        digests(tmp_path / "b"),
        digests(tmp_path / "c"),
    )
    assert first == second
    assert len(first) > 15  # every format, truth and manifest
    sources = [
        name
        for name in first
        if not name.startswith(("truth", "anomalies", "manifest", "fleet/devices", "tenants/"))
    ]
    changed = [
        first[name] != other.get(name) or (tmp_path / "a" / name).stat().st_size == 0
        for name in sources
    ]
    assert all(changed), "a new seed must change every source file that has content"


def test_dry_run_counts_what_simulate_writes(tmp_path: Path) -> None:
    config = replace(SMALL, rates=BUSY)
    manifest = simulate(config, tmp_path)
    assert count_events(config) == manifest.counts
    progress = sum(
        1
        for f in (tmp_path / "apps").iterdir()
        for line in f.read_text().splitlines()
        if '"job.progress"' in line
    )
    lines = sum(len(f.read_text().splitlines()) - 1 for f in (tmp_path / "billing").iterdir())
    assert (progress, lines) == (
        manifest.counts["progress_events"],
        manifest.counts["billing_lines"],
    )


# -- the truth adds up -----------------------------------------------------------------


def test_categories_sum_to_the_billed_gpu_seconds_of_every_line(tmp_path: Path) -> None:
    lines, _, _ = run_with(tmp_path, **{k: getattr(BUSY, k) for k in Rates.names()})
    assert len(lines) > 100
    for line in lines:
        window = _seconds(line["period_end"]) - _seconds(line["period_start"])
        assert line["gpu_seconds"] == line["gpus"] * window
        if "replaced_by" in line:
            assert line["categories"] == {}
            continue
        assert sum(line["categories"].values()) == line["gpu_seconds"], line
        assert sum(line["productive_by_acceptance"].values()) == line["categories"].get(
            "productive", 0
        )


def _seconds(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


# -- every anomaly shows in the truth ---------------------------------------------------

#: (rate forced to 1, anomaly kind, category that must be > 0 on the touched allocation)
ALLOCATION_ANOMALIES = [
    ("hardware_failure", "hardware_failure", "restart_lost:provider"),
    ("application_failure", "application_failure", "restart_lost:customer"),
    ("stall", "stall", "idle_unexplained"),
    ("fault_stall", "fault_stall", "stalled_fault"),
    ("slow_start", "slow_start", "idle_unexplained"),
    ("reclaim", "reclaim", "reclaimed"),
    ("reclaim", "reclaim_with_notice", "reclaimed"),
    ("fabric_fault", "fault_stall", "stalled_fault"),
    ("node_down", "hardware_failure", "restart_lost:provider"),
]


@pytest.mark.parametrize(
    ("rate", "kind", "category"),
    ALLOCATION_ANOMALIES,
    ids=[f"{r}-{k}" for r, k, _ in ALLOCATION_ANOMALIES],
)
def test_each_injected_anomaly_appears_in_the_truth(
    tmp_path: Path, rate: str, kind: str, category: str
) -> None:
    lines, anomalies, _ = run_with(tmp_path, **{rate: 1.0})
    touched = {a["ids"]["allocation_id"] for a in anomalies if a["kind"] == kind}
    assert touched, f"no {kind} injected"
    seconds = by_allocation(lines, category)
    assert all(seconds[a] > 0 for a in touched), {a: seconds[a] for a in touched}
    quiet, _, _ = run_with(tmp_path / "quiet")
    assert sum(by_allocation(quiet, category).values()) == 0, f"{category} without {rate}"


def test_restarts_in_place_give_restart_recovery_on_kubernetes(tmp_path: Path) -> None:
    lines, anomalies, _ = run_with(tmp_path, hardware_failure=1.0)
    k8s = {
        a["ids"]["allocation_id"]
        for a in anomalies
        if a["kind"] == "hardware_failure" and a["ids"]["allocation_id"].startswith("job-")
    }
    assert k8s and all(by_allocation(lines, "restart_recovery:provider")[a] > 0 for a in k8s)


@pytest.mark.parametrize(
    ("rate", "kind", "category", "line_key"),
    [
        ("past_release", "past_release", "unallocated", "line_id"),
        ("more_gpus", "more_gpus", "unallocated", "line_id"),
        ("duplicate", "duplicate", "double_billed", "duplicate_id"),
    ],
)
def test_billing_errors_appear_on_their_lines(
    tmp_path: Path, rate: str, kind: str, category: str, line_key: str
) -> None:
    lines, anomalies, _ = run_with(tmp_path, **{rate: 1.0})
    by_id = {line["line_id"]: line for line in lines}
    touched = [a["ids"][line_key] for a in anomalies if a["kind"] == kind]
    assert touched and all(by_id[i]["categories"].get(category, 0) > 0 for i in touched)
    assert not any(
        line["categories"].get(category) for line in lines if line["line_id"] not in touched
    )


def test_corrected_lines_are_replaced_and_unbilled_allocations_counted(tmp_path: Path) -> None:
    lines, anomalies, folder = run_with(tmp_path, correction=1.0, never_billed=0.5)
    by_id = {line["line_id"]: line for line in lines}
    corrected = [a for a in anomalies if a["kind"] == "correction"]
    assert corrected and all(
        by_id[a["ids"]["line_id"]]["replaced_by"] == a["ids"]["corrected_by"] for a in corrected
    )
    unbilled = {a["ids"]["allocation_id"] for a in anomalies if a["kind"] == "never_billed"}
    assert unbilled and not unbilled & {line["allocation_id"] for line in lines}
    tenants = json.loads((folder / "truth_tenants.json").read_text())
    assert sum(t["unbilled_gpu_seconds"] for t in tenants.values()) > 0


def test_missed_promises_are_listed_and_start_after_start_by(tmp_path: Path) -> None:
    _, anomalies, folder = run_with(tmp_path, promise=1.0, missed_promise=1.0)
    missed = [a for a in anomalies if a["kind"] == "missed_promise"]
    assert missed and all(a["ids"]["started"] > a["ids"]["start_by"] for a in missed)
    promises = {
        e["data"]["promise_id"]: e["data"]["start_by"]
        for f in (folder / "apps").iterdir()
        for e in jsonl(f)
        if e["type"] == "policy.promise"
    }
    assert all(promises[a["ids"]["promise_id"]] == a["ids"]["start_by"] for a in missed)
    tenants = json.loads((folder / "truth_tenants.json").read_text())
    assert sum(t["missed_promises"] for t in tenants.values()) == len(missed)


def test_mig_and_time_sliced_allocations_sit_beside_whole_devices(tmp_path: Path) -> None:
    lines, _, folder = run_with(tmp_path)
    assert {line["placement_class"] for line in lines} == {"whole", "mig", "timeslice"}
    workloads = (folder / "k8s" / "workloads.json").read_text()
    assert '"nvidia.com/mig-3g.40gb"' in workloads and '"nvidia.com/gpu.shared"' in workloads


# -- every file ingests ----------------------------------------------------------------


def test_every_written_file_ingests_with_nothing_quarantined(tmp_path: Path) -> None:
    manifest = simulate(replace(SMALL, rates=BUSY), tmp_path / "sim")
    store = ledger.Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    store.init()
    appender = ledger.Appender(store)
    formats = set()
    for entry in manifest.files:
        records = ingest.extract(
            tmp_path / "sim" / entry["path"], entry["format"], **entry["options"]
        )
        report = ledger.append_stream(appender, records, 5000, None)
        assert (report.quarantined, report.duplicates, report.problems) == (0, 0, []), entry
        assert report.appended == report.read
        formats.add(entry["format"])
    assert formats == {
        "cloudevents",
        "sacct",
        "kueue",
        "k8s-events",
        "dcgm-stats",
        "dcgm-metrics",
        "focus",
        "nvidia-smi-topo",
        "nccl-tests",
        "serving-bench",
    }
    assert ledger.verify_ledger(store).ok


# -- scale and memory ------------------------------------------------------------------

TARGET_PROGRESS, TARGET_LINES = 50_000_000, 5_000_000


def test_scale_two_meets_the_ten_thousand_gpu_month_in_proportion() -> None:
    """Each node's history is drawn from its own seeded streams, so a fleet's counts are
    the sum of its nodes'; a twentieth of the fleet must reach a twentieth of the target.
    (The whole fleet is counted by the slow test below.)"""
    counts = count_events(SimConfig(gpus=500, days=30, scale=2))
    assert counts["progress_events"] * 20 >= TARGET_PROGRESS
    assert counts["billing_lines"] * 20 >= TARGET_LINES


@pytest.mark.skipif(
    not SLOW, reason="counts 10,000 GPUs for 30 days (about a minute): set GPULEDGER_SLOW=1"
)
def test_scale_two_writes_fifty_million_progress_events_for_ten_thousand_gpus() -> None:
    counts = count_events(SimConfig(gpus=10_000, days=30, scale=2))
    assert counts["progress_events"] >= TARGET_PROGRESS and counts["billing_lines"] >= TARGET_LINES


PROBE = """
import sys, pathlib
from fixtures.sim import SimConfig, simulate
simulate(SimConfig(seed=3, gpus=16, days=int(sys.argv[1]), tenants=2), pathlib.Path(sys.argv[2]))
print([l for l in pathlib.Path('/proc/self/status').read_text().splitlines() if \
l.startswith('VmHWM')][0].split()[1])
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_peak_memory_does_not_grow_with_days(tmp_path: Path) -> None:
    def peak_kib(days: int) -> int:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(days), str(tmp_path / f"d{days}")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        return int(done.stdout.split()[-1])

    short, long = peak_kib(2), peak_kib(24)
    written = sum(p.stat().st_size for p in (tmp_path / "d24").rglob("*") if p.is_file())
    assert (
        written
        > 20 * sum(p.stat().st_size for p in (tmp_path / "d2").rglob("*") if p.is_file()) / 2
    )
    assert long - short < 8 * 1024, f"peak RSS grew from {short} KiB to {long} KiB"


# -- the command -----------------------------------------------------------------------


def test_simulate_command_writes_and_says_where(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "simulate",
            "--out",
            str(tmp_path),
            "--gpus",
            "16",
            "--days",
            "1",
            "--tenants",
            "2",
            "--stall-rate",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        f"{tmp_path / 'billing'}" in result.output
        and f"manifest: {tmp_path / 'manifest.json'}" in result.output
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["config"]["rates"]["stall"] == 1.0 and manifest["seed"] == 7
    bad = CliRunner().invoke(main, ["simulate", "--out", str(tmp_path), "--stall-rate", "2"])
    assert bad.exit_code == 2 and "--stall-rate" in bad.output


# -- a scenario worked by hand ---------------------------------------------------------

TENANT = Tenant("acme", "k8s", (Terms(0, 600, 300, 0),), {"whole": Decimal("3.60")})
NODE = Node("n1", 0, "k8s", "nvl-000", 8, "whole", "H100")


def hand_scenario(cause: Cause, early_fault: bool) -> tuple[Allocation, list[Fault]]:
    """4 GPUs held [1000, 4100). Attempt 1 [1100, 2350): marks every 100 s from 1400 to
    2300, checkpoint [1800, 1860), fails at 2350. Attempt 2 [2500, 3950): restores,
    marks 2700–3100, a 600 s stall, marks 3700–3900, completes at 3950. An XID on n1 is
    open [3300, 3950) (inside the stall); with `early_fault` another is open
    [2200, 2350), 150 s before the failure. A fault on another node is open all along."""
    ckpt = Checkpoint("c1", 5, 1800, 1860, 1)
    a1 = Attempt(1, 1100, 2350, "failed", cause=cause, runs=[Run(1400, 100, 10, 1, 1, 1)])
    a2 = Attempt(
        2,
        2500,
        3950,
        "completed",
        runs=[Run(2700, 100, 5, 6, 1, 1), Run(3700, 100, 3, 11, 1, 1)],
        restored=ckpt,
        restored_at=2510,
    )
    job = Job("j1", 900, attempts=[a1, a2], checkpoints=[ckpt], result="accepted")
    alloc = Allocation(
        "acme", "A1", "k8s", NODE, 4, (0, 1, 2, 3), "whole", 1000, 4100, "Succeeded", job
    )
    price = Decimal("3.60")
    alloc.lines = [
        Line("I", "L1", "acme", "A1", 4, 1000, 3000, Decimal(8), price, "whole"),
        Line(
            "I", "L2", "acme", "A1", 4, 3000, 4500, Decimal(6), price, "whole"
        ),  # 400 s past the release
        Line("I", "L3", "acme", "A1", 5, 3500, 3600, Decimal(1), price, "whole"),  # 5 GPUs, again
    ]
    faults = [
        Fault("x2", "xid-74", 3300, 3950, "dcgm", node="n1", device=2),
        Fault("other", "xid-79", 0, None, "dcgm", node="n2", device=0),
    ]
    if early_fault:
        faults.append(Fault("x1", "xid-79", 2200, 2350, "dcgm", node="n1", device=1))
    return alloc, faults


def test_truth_of_a_scenario_worked_by_hand() -> None:
    alloc, faults = hand_scenario("application", early_fault=True)
    l1, l2, l3 = line_truths(alloc, TENANT, faults)
    # L1, W = [1000, 3000), 4 GPUs, inside H. In rule order:
    #   checkpoint [1800, 1860)                                       60 s
    #   restart_lost [max(1100, save 1860), 2350): an application failure, but the XID
    #     at 2200 is within 300 s before 2350, so the provider's     490 s
    #   restart_recovery [2350, first progress of attempt 2 = 2700)  350 s (provider)
    #   productive [1400, 1800) and [2700, 3000)                     700 s
    #   startup [granted 1000, first mark 1400) (allowance to 1600)  400 s; attempt 2's
    #     [2500, 2700) was already restart_recovery; idle [1000, 1100) already startup
    # 2000 s × 4 GPUs = 8000 in all.
    assert l1["categories"] == {
        "checkpoint": 240,
        "restart_lost:provider": 1960,
        "restart_recovery:provider": 1400,
        "productive": 2800,
        "startup": 1600,
    }
    assert l1["productive_by_acceptance"] == {"accepted": 2800, "rejected": 0, "pending": 0}
    # L2, W = [3000, 4500): [4100, 4500) is past the release: 400 s × 4 unallocated.
    #   productive [3000, 3100) and [3700, 3950) (the last gap, 50 s, ends in job.completed)  350 s
    #   stalled_fault: the gap [3100, 3700) is 600 s > 300 s with the XID open from 3300   600 s
    #   idle_reserved [3950, 4100): attempt 2 has ended, the GPUs are still held            150 s
    assert l2["categories"] == {
        "unallocated": 1600,
        "productive": 1400,
        "stalled_fault": 2400,
        "idle_reserved": 600,
    }
    # L3, W = [3500, 3600), 5 GPUs of 4: 1 × 100 unallocated; the rest lies in L2's window.
    assert l3["categories"] == {"unallocated": 100, "double_billed": 400}
    # H holds 4 × 3100 = 12400 GPU-s; L1 bills [1000, 3000) × 4, L2 [3000, 4100) × 4.
    assert unbilled_gpu_seconds(alloc, 4100) == 0


def test_without_a_fault_near_it_an_application_failure_is_the_customers() -> None:
    alloc, faults = hand_scenario("application", early_fault=False)
    l1 = line_truths(alloc, TENANT, faults)[0]["categories"]
    assert (l1["restart_lost:customer"], l1["restart_recovery:customer"]) == (1960, 1400)
    assert "restart_lost:provider" not in l1


def test_corrections_replace_lines_to_the_end_of_a_chain() -> None:
    alloc, faults = hand_scenario("hardware", early_fault=False)
    a, b = alloc.lines[0], alloc.lines[1]
    alloc.lines += [
        replace(a, line_id="L1b", corrects="L1"),
        replace(a, line_id="L1c", corrects="L1b"),
    ]
    assert replaced_lines(alloc.lines) == {"L1": "L1c", "L1b": "L1c"}
    truths = {t["line_id"]: t for t in line_truths(alloc, TENANT, faults)}
    assert truths["L1"]["replaced_by"] == "L1c" and truths["L1"]["categories"] == {}
    # L1c stands where L1 stood, but after L2 and L3 in ledger order: nothing of its
    # window was billed by them, so it is classified as L1 was.
    assert truths["L1c"]["categories"]["restart_lost:provider"] == 1960
    assert sum(truths["L1c"]["categories"].values()) == 8000 and b.line_id in truths


def test_dry_run_counts_the_multinode_pool_too(tmp_path: Path) -> None:
    config = replace(SMALL, multinode=True)
    manifest = simulate(config, tmp_path)
    assert count_events(config) == manifest.counts
    assert manifest.counts["allocations.multinode"] > 0


def test_simulate_multinode_flag_turns_the_knob_on(tmp_path: Path) -> None:
    code, out, err = run_cli(
        "simulate", "--out", str(tmp_path), "--gpus", "16", "--days", "1", "--multinode"
    )
    assert code == 0, err
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["config"]["multinode"] is True
    assert manifest["truth"]["placement"] == "truth_placement.json"
    assert str(tmp_path / "truth_placement.json") in out
