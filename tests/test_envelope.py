"""`report envelope` and the receipts and change windows of `report capacity`, against
hand-worked cases. The events are written here as CloudEvents and ingested through the
CLI; every expected figure is worked out in the comments from the definitions
(reconcile/reports/envelope.py, fleet_changes.py, capacity.py; docs/envelope.md).
Percentiles are nearest-rank: rank ⌈p·n/100⌉ of the sorted values. Times on 2026-01-05 UTC."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from reconcile.reports import write_reports
from tests.conftest import run_cli, write_jsonl

DAY = "2026-01-05"
FLEET = ("device.discovered", "fleet.change")


def at(clock: str) -> str:
    return f"{DAY}T{clock}:00Z"


class Log:
    """CloudEvents of one ledger, each with the source given (a provider, a cluster)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, source: str, type_: str, clock: str, **data: Any) -> None:
        if type_ not in FLEET:
            data = {"tenant": "acme", **data}
        self.items.append(
            {
                "specversion": "1.0",
                "id": f"e{len(self.items) + 1}",
                "source": source,
                "type": type_,
                "time": at(clock),
                "data": data,
            }
        )

    def job(
        self,
        source: str,
        job: str,
        cls: str,
        submitted: str,
        starts: list[str],
        completed: str | None,
        amount: str | None = None,
        fails: Sequence[str] = (),
        node: str = "n1",
        device: int = 0,
    ) -> None:
        """A job on its own allocation, granted at its first start and (when it completes)
        released then and billed over exactly that period; `fails[i]` ends attempt i + 1."""
        alloc = f"G-{job}"
        self.add(source, "job.submitted", submitted, job_id=job, gpus=1)
        self.add(
            source,
            "allocation.granted",
            starts[0],
            allocation_id=alloc,
            gpus=1,
            node=node,
            devices=[device],
            placement_class=cls,
        )
        for attempt, start in enumerate(starts, 1):
            self.add(
                source, "job.started", start, job_id=job, allocation_id=alloc, attempt=attempt
            )
            if attempt <= len(fails):
                self.add(source, "job.failed", fails[attempt - 1], job_id=job, cause="application")
        if completed is not None:
            self.add(source, "job.completed", completed, job_id=job)
            self.add(source, "allocation.released", completed, allocation_id=alloc)
        if amount is not None and completed is not None:
            self.add(
                source,
                "billing.line",
                completed,
                invoice_id=f"INV-{source}",
                line_id=f"L-{job}",
                allocation_id=alloc,
                period_start=at(starts[0]),
                period_end=at(completed),
                gpus=1,
                amount=amount,
                currency="USD",
            )


def ledger(tmp_path: Path, log: Log) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run_cli("init", "--db", url)[0] == 0
    code, out, err = run_cli(
        "ingest", "--db", url, str(write_jsonl(tmp_path / "events.jsonl", log.items))
    )
    assert code == 0 and "quarantined 0" in out, err
    return url


def report(url: str, *args: str) -> dict[str, Any]:
    code, out, err = run_cli("report", *args, "--db", url, "--format", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


# -- the envelope -------------------------------------------------------------------------

A, B = "slurm://alpha", "k8s://beta"
#: their providers: each source's authority (docs/envelope.md), the cluster, not the tool
PA, PB = "alpha", "beta"


def two_providers() -> Log:
    """alpha sells `whole` with promises: four jobs, one restart, a checkpoint. beta sells
    `whole` with promises (two jobs, each restarted once) and `timeslice` without."""
    log = Log()
    for job in ("A1", "A2", "A3", "A4", "B1", "B2"):
        # made 09:00: start within 600 s (09:10), complete within 3600 s (10:00)
        log.add(
            A if job[0] == "A" else B,
            "policy.promise",
            "09:00",
            promise_id=f"P-{job}",
            job_id=job,
            start_by=at("09:10"),
            complete_by=at("10:00"),
            placement_class="whole",
        )
    log.job(A, "A1", "whole", "09:00", ["09:02"], "09:32", "3.00", device=0)
    log.job(
        A, "A2", "whole", "09:00", ["09:04", "09:12"], "09:34", "3.00", fails=["09:10"], device=1
    )
    log.job(A, "A3", "whole", "09:00", ["09:06"], "09:36", "3.00", device=2)
    log.job(A, "A4", "whole", "09:00", ["09:20"], "09:50", "3.00", device=3)
    log.add(A, "checkpoint.started", "09:20", job_id="A1", checkpoint_id="c1", step=1)
    log.add(A, "checkpoint.saved", "09:23", job_id="A1", checkpoint_id="c1", step=1)
    log.job(
        B,
        "B1",
        "whole",
        "09:00",
        ["09:01", "09:06"],
        "09:31",
        "2.00",
        fails=["09:05"],
        node="m1",
        device=0,
    )
    log.job(
        B,
        "B2",
        "whole",
        "09:00",
        ["09:03", "09:09"],
        "09:33",
        "2.00",
        fails=["09:08"],
        node="m1",
        device=1,
    )
    log.job(B, "B3", "timeslice", "09:00", ["09:15"], "09:45", "1.00", node="m2", device=0)
    for source, job, result in (
        (A, "A1", "r1"),
        (A, "A2", "r2"),
        (A, "A3", "r3"),
        (B, "B1", "r4"),
        (B, "B2", "r5"),
    ):
        log.add(source, "work.accepted", "10:00", job_id=job, result_id=result)
    log.add(A, "work.rejected", "10:00", job_id="A4", result_id="r6")
    log.add(
        B,
        "billing.line",
        "10:00",
        invoice_id=f"INV-{B}",
        line_id="credit",
        period_start=at("09:00"),
        period_end=at("10:00"),
        gpus=0,
        amount="-0.50",
        currency="USD",
        category="credit",
    )
    return log


@pytest.fixture(scope="module")
def providers(tmp_path_factory: pytest.TempPathFactory) -> str:
    return ledger(tmp_path_factory.mktemp("envelope"), two_providers())


def _dist(n: int, p50: Any, p95: Any) -> dict[str, Any]:
    return {"n": n, "p50": p50, "p95": p95}


def test_two_providers_side_by_side(providers: str) -> None:
    doc = report(providers, "envelope")
    groups = {(g["source"], g["placement_class"]): g for g in doc["groups"]}
    assert list(groups) == [(PA, "whole"), (PB, "timeslice"), (PB, "whole")]  # by the key
    alpha = groups[(PA, "whole")]
    # first starts 120, 240, 360, 1200 s after submission and promise (09:00): p50 rank 2 = 240,
    # p95 rank ⌈3.8⌉ = 4 = 1200; runs 1800 s each (A2's restart inside its 30 minutes)
    assert (alpha["jobs"], alpha["started"], alpha["completed"]) == (4, 4, 4)
    assert alpha["start_wait_s"] == _dist(4, 240, 1200)
    assert alpha["completed_run_time_s"] == _dist(4, 1800, 1800)
    assert alpha["promises"] == {
        # A4 started 09:20 > 09:10: the one miss
        "promises": 4,
        "met": 3,
        "missed": 1,
        "pending": 0,
        # started − start_by: −480 −360 −240 +600; completed − complete_by: −1680 −1560 −1440 −600
        "start_delay_s": _dist(4, -360, 600),
        "completion_delay_s": _dist(4, -1560, -600),
        "promised_start_s": _dist(4, 600, 600),
        "observed_start_s": _dist(4, 240, 1200),
        # completed 09:32 09:34 09:36 09:50 → 1920 2040 2160 3000 s from the promise
        "promised_completion_s": _dist(4, 3600, 3600),
        "observed_completion_s": _dist(4, 2040, 3000),
    }
    # one restart (A2's second attempt) over four started jobs
    assert (alpha["restarts"], alpha["jobs_restarted"], alpha["restart_rate"]) == (1, 1, 0.25)
    # checkpoint [09:20, 09:23) = 180 s of 4 × 1800 = 7200 billed GPU-seconds
    assert alpha["checkpoint_overhead"] == {
        "checkpoint_gpu_seconds": 180,
        "billed_gpu_seconds": 7200,
        "ratio": 0.025,
    }
    # each job alone on its allocation: 3.00 each; 12.00 over 3 accepted results (A4 rejected)
    assert alpha["cost"] == {
        "USD": {
            "completed_runs_cost": "12.00",
            "cost_per_completed_run": "3.00",
            "billed": "12.00",
            "cost_per_accepted_result": "4.00",
        }
    }

    beta = groups[(PB, "whole")]
    # starts 60 and 180 s after 09:00: p95 rank 2 = 180, below alpha's 1200
    assert beta["start_wait_s"] == _dist(2, 60, 180)
    assert beta["promises"]["observed_start_s"] == _dist(2, 60, 180)
    assert (beta["promises"]["met"], beta["promises"]["missed"]) == (2, 0)
    # both jobs restarted once: 2 restarts over 2 started jobs
    assert (beta["restarts"], beta["jobs_restarted"], beta["restart_rate"]) == (2, 2, 1.0)
    assert beta["checkpoint_overhead"]["ratio"] == 0.0
    assert beta["cost"]["USD"]["cost_per_completed_run"] == "2.00"
    assert beta["cost"]["USD"]["cost_per_accepted_result"] == "2.00"  # 4.00 over r4, r5

    slice_ = groups[(PB, "timeslice")]
    assert slice_["promises"] is None  # a class sold without promises: observed figures only
    assert (slice_["start_wait_s"], slice_["restart_rate"]) == (_dist(1, 900, 900), 0.0)
    assert slice_["cost"]["USD"] == {
        "completed_runs_cost": "1.00",
        "cost_per_completed_run": "1.00",
        "billed": "1.00",
        "cost_per_accepted_result": None,
    }
    # the credit names no allocation: in no group, and said so
    assert doc["unassigned"] == {"USD": "-0.50"}


def test_grouped_by_source_or_by_class(providers: str) -> None:
    by_source = {g["source"]: g for g in report(providers, "envelope", "--by", "source")["groups"]}
    beta = by_source[PB]
    # waits 60 180 900: p50 rank 2 = 180, p95 rank 3 = 900; restarts 2 of 3 started jobs
    assert (beta["jobs"], beta["start_wait_s"], beta["restart_rate"]) == (
        3,
        _dist(3, 180, 900),
        0.6667,
    )
    # runs 2.00 + 2.00 + 1.00 over 3 = 1.666… → 1.67; 5.00 billed on its allocations over 2
    # accepted
    assert (
        beta["cost"]["USD"]["cost_per_completed_run"],
        beta["cost"]["USD"]["cost_per_accepted_result"],
    ) == ("1.67", "2.50")
    assert beta["promises"]["promises"] == 2
    by_class = {
        g["placement_class"]: g
        for g in report(providers, "envelope", "--by", "placement_class")["groups"]
    }
    whole = by_class["whole"]
    # waits 60 120 180 240 360 1200: p95 rank ⌈5.7⌉ = 6 = 1200; 3 restarts over 6 started
    assert (whole["start_wait_s"], whole["restart_rate"]) == (_dist(6, 180, 1200), 0.5)
    assert list(by_class) == ["timeslice", "whole"]


def test_csv_table_and_html(providers: str) -> None:
    code, out, _ = run_cli("report", "envelope", "--db", providers, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [(r["source"], r["placement_class"], r["currency"]) for r in rows] == [
        (PA, "whole", "USD"),
        (PB, "timeslice", "USD"),
        (PB, "whole", "USD"),
    ]
    assert (
        rows[0]["promise_observed_start_s_p95"],
        rows[0]["restart_rate"],
        rows[0]["cost_per_accepted_result"],
    ) == ("1200", "0.25", "4.00")
    assert rows[1]["promise_promises"] == "" and rows[1]["cost_per_accepted_result"] == ""
    code, out, _ = run_cli("report", "envelope", "--db", providers)
    assert (
        code == 0
        and "600 → 1200" in out
        and "in no group (lines naming no allocation): -0.50 USD" in out
    )
    code, page, _ = run_cli("report", "envelope", "--db", providers, "--format", "html")
    assert code == 0 and page.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?://", page.replace(A, "").replace(B, ""))  # nothing fetched
    assert (
        "<script" not in page
        and "<link" not in page
        and "@import" not in page
        and "url(" not in page
    )
    # promised beside observed in the table, in people's units: alpha's p95 start, 600 s
    # promised, 1200 s observed
    assert "10 min → 20 min" in page
    # the miss rate first: alpha started A4 at 09:20, 1200 s after the promise, past its
    # 600 s: 1 of 4 missed, 25.00 %, over fewer than 20 promises (the caveat marker)
    assert 'data-figure="missed/alpha/whole">1 of 4</span>' in page
    assert 'data-figure="missed">25.00 % (1 of 4) †</text>' in page
    assert page.index('data-chart="miss_rate"') < page.index('data-chart="start_wait"')
    assert page.count("<svg") >= 5 and page.count('class="axis-title"') == page.count("<svg")


# -- capacity: receipts and a change window ------------------------------------------------

K = "k8s://beta"


def fleet_with_a_change() -> Log:
    """n1: four whole GPUs; n2: two timeslice GPUs. A driver upgrade of n1 over [12:00, 13:00):
    before is [11:00, 12:00), after [13:00, 14:00)."""
    log = Log()
    for device in range(4):
        log.add(
            "inventory://fleet",
            "device.discovered",
            "08:00",
            node="n1",
            device=device,
            placement_class="whole",
        )
    for device in range(2):
        log.add(
            "inventory://fleet",
            "device.discovered",
            "08:00",
            node="n2",
            device=device,
            placement_class="timeslice",
        )
    log.add(
        "changes://fleet",
        "fleet.change",
        "12:00",
        change_id="chg-1",
        kind="driver-upgrade",
        nodes=["n1"],
        started_at=at("12:00"),
        ended_at=at("13:00"),
        detail="550.54.15 -> 550.90.07",
    )
    # before: J1 (waits 300 s), J2 (120 s); during: J3 (12:10 → 13:05, held), J4 (12:30 → 13:10,
    # held), J5 (on n2, 300 s); after: J6 (120 s)
    for job, submitted, start, node, device, cls in (
        ("J1", "11:10", "11:15", "n1", 0, "whole"),
        ("J2", "11:20", "11:22", "n1", 1, "whole"),
        ("J3", "12:10", "13:05", "n1", 2, "whole"),
        ("J4", "12:30", "13:10", "n1", 3, "whole"),
        ("J5", "12:40", "12:45", "n2", 1, "timeslice"),
        ("J6", "13:20", "13:22", "n1", 0, "whole"),
    ):
        log.job(K, job, cls, submitted, [start], None, node=node, device=device)
    log.add(
        K, "job.failed", "12:05", job_id="J1", cause="hardware"
    )  # running since 11:15: interrupted during
    log.add(
        K, "policy.decision", "11:50", decision="evicted", job_id="J2"
    )  # running since 11:22: before
    for job, submitted, launched, node, device, cls in (
        ("R1", "11:29", "11:30", "n1", 0, "whole"),
        ("R2", "12:20", "13:02", "n1", 1, "whole"),
        ("R3", "12:15", "12:16", "n2", 0, "timeslice"),
        ("R4", "13:30", "13:31", "n9", 0, "timeslice"),
    ):
        log.add(
            "receipts://k8s",
            "start.receipt",
            launched,
            job_id=job,
            allocation_id=f"r-{job}",
            placement_class=cls,
            node=node,
            devices=[device],
            driver="550.54.15",
            submitted_at=at(submitted),
            launched_at=at(launched),
        )
    return log


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> str:
    return ledger(tmp_path_factory.mktemp("changes"), fleet_with_a_change())


def test_receipts_fewer_than_devices(changed: str) -> None:
    doc = report(changed, "capacity")
    assert doc["receipts"] == [
        # R1, R2 on n1/0, n1/1: 2 of 4 whole GPUs have a receipt; J1-J4 and J6 started on whole
        {
            "placement_class": "timeslice",
            "devices_discovered": 2,
            "receipts": 2,
            "devices_receipted": 1,
            "devices_without_receipt": 1,
            "workloads_started": 1,
            "start_attempts": 2,  # every receipt started: none failed
            "failed_starts": 0,
        },  # R3 on n2/0; R4 on n9 (never discovered)
        {
            "placement_class": "whole",
            "devices_discovered": 4,
            "receipts": 2,
            "devices_receipted": 2,
            "devices_without_receipt": 2,
            "workloads_started": 5,
            "start_attempts": 2,
            "failed_starts": 0,
        },
    ]
    code, out, _ = run_cli("report", "capacity", "--db", changed, "--format", "csv")
    rows = {r["placement_class"]: r for r in csv.DictReader(io.StringIO(out))}
    assert code == 0 and [
        rows[c]["devices_without_receipt"] for c in ("timeslice", "whole", "all")
    ] == ["1", "2", "3"]
    assert rows["all"]["receipts"] == "4"


def test_a_driver_upgrade_that_delays_starts(changed: str) -> None:
    (change,) = report(changed, "capacity")["changes"]
    assert {
        k: change[k]
        for k in ("change_id", "kind", "nodes", "started_at", "ended_at", "open", "window_s")
    } == {
        "change_id": "chg-1",
        "kind": "driver-upgrade",
        "nodes": ["n1"],
        "started_at": at("12:00"),
        "ended_at": at("13:00"),
        "open": False,
        "window_s": 3600,
    }
    windows = {w["phase"]: w for w in change["windows"]}
    assert list(windows) == ["before", "during", "after"]
    before, during, after = windows["before"], windows["during"], windows["after"]
    assert (before["from"], before["to"], after["from"], after["to"]) == (
        at("11:00"),
        at("12:00"),
        at("13:00"),
        at("14:00"),
    )
    # starts by start time: before J1 J2 + R1; during J5 + R3; after J3 J4 J6 + R2 R4
    assert [
        (w["job_starts"], w["receipt_starts"], w["starts"]) for w in (before, during, after)
    ] == [(2, 1, 3), (1, 1, 2), (3, 2, 5)]
    # delays by submission: before 300 120 60 → p50 120, p95 300; during J3 3300, J4 2400, J5 300,
    # R2 2520, R3 60 → sorted 60 300 2400 2520 3300: p50 rank 3 = 2400, p95 rank 5 = 3300;
    # after J6 120, R4 60 → p50 60, p95 120
    assert [w["queue_delay_s"] for w in (before, during, after)] == [
        _dist(3, 120, 300),
        _dist(5, 2400, 3300),
        _dist(2, 60, 120),
    ]
    assert [
        (w["submitted"], w["started_after_window"], w["not_started"])
        for w in (before, during, after)
    ] == [(3, 0, 0), (5, 3, 0), (2, 0, 0)]
    # J2 evicted at 11:50 (before), J1 failed at 12:05 (during)
    assert [w["interrupted"] for w in (before, during, after)] == [1, 1, 0]
    assert [(h["job_id"], h["submitted"], h["started"]) for h in change["held_past_end"]] == [
        ("J3", at("12:10"), at("13:05")),
        ("R2", at("12:20"), at("13:02")),
        ("J4", at("12:30"), at("13:10")),
    ]
    code, out, _ = run_cli("report", "capacity", "--db", changed)
    assert code == 0 and "fleet changes" in out and "start receipts" in out


def test_the_change_windows_csv(changed: str, tmp_path: Path) -> None:
    """capacity_changes.csv: one row per window, the figures of the test above
    (docs/envelope.md).
    """
    store = Store(changed)
    try:
        write_reports(store, tmp_path)
    finally:
        store.close()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "capacity_changes.csv").read_text())))
    assert [
        (
            r["change_id"],
            r["nodes"],
            r["window_s"],
            r["phase"],
            r["from"],
            r["starts"],
            r["submitted"],
            r["queue_delay_p50_s"],
            r["queue_delay_p95_s"],
            r["started_after_window"],
            r["interrupted"],
            r["held_past_end"],
        )
        for r in rows
    ] == [
        ("chg-1", "n1", "3600", "before", at("11:00"), "3", "3", "120", "300", "0", "1", "0"),
        ("chg-1", "n1", "3600", "during", at("12:00"), "2", "5", "2400", "3300", "3", "1", "3"),
        ("chg-1", "n1", "3600", "after", at("13:00"), "5", "2", "60", "120", "0", "0", "0"),
    ]
    # the class rows stay as `report capacity --format csv` gives them
    code, out, _ = run_cli("report", "capacity", "--db", changed, "--format", "csv")
    assert code == 0 and (tmp_path / "capacity.csv").read_text() == out


def test_an_open_change_has_no_after(tmp_path: Path) -> None:
    log = Log()
    log.add(
        "changes://fleet",
        "fleet.change",
        "12:00",
        change_id="chg-open",
        kind="drain",
        started_at=at("12:00"),
    )
    log.job(K, "J1", "whole", "12:10", ["12:20"], None)  # the ledger's latest event: 12:20
    (change,) = report(ledger(tmp_path, log), "capacity")["changes"]
    # runs to 12:20: during [12:00, 12:20), before [11:40, 12:00), no after
    assert (change["open"], change["ended_at"], change["window_s"]) == (True, None, 1200)
    assert [(w["phase"], w["from"], w["to"]) for w in change["windows"]] == [
        ("before", at("11:40"), at("12:00")),
        ("during", at("12:00"), at("12:20")),
    ]
    # J1's start at 12:20 is the window's end: outside [12:00, 12:20); submitted 12:10, started at
    # the end
    assert [(w["starts"], w["started_after_window"]) for w in change["windows"]] == [
        (0, 0),
        (0, 1),
    ]


def test_no_receipts_and_no_changes_leave_capacity_as_it_was(providers: str) -> None:
    doc = report(providers, "capacity")
    assert (doc["receipts"], doc["changes"]) == ([], [])
    code, out, _ = run_cli("report", "capacity", "--db", providers, "--format", "csv")
    assert code == 0 and "receipts" not in out.splitlines()[0]


# -- the simulator's truth -----------------------------------------------------------------


def test_capacity_agrees_with_the_simulators_truth(tmp_path: Path) -> None:
    """Receipts per class and the driver upgrade's delayed starts, against truth_evidence.json
    (docs/simulator-evidence.md): the report's figures are compared with the truth's lists."""
    from fixtures.sim import SimConfig, simulate

    simulate(SimConfig(seed=7, gpus=64, days=2, tenants=4), tmp_path / "sim")
    manifest = json.loads((tmp_path / "sim" / "manifest.json").read_text())
    truth = json.loads((tmp_path / "sim" / manifest["truth"]["evidence"]).read_text())
    url = f"sqlite:///{tmp_path / 'l.db'}"
    code, out, _ = run_cli(
        "ingest", "--db", url, "--manifest", str(tmp_path / "sim" / "manifest.json")
    )
    assert code == 0 and out.splitlines()[-1].endswith("quarantined 0")
    doc = report(url, "capacity")
    mine: dict[str, dict[str, int]] = {}
    for row in doc["receipts"]:  # mig receipts carry their profile: mig:3g.40gb is the truth's mig
        counts = mine.setdefault(
            row["placement_class"].split(":")[0], {"receipts": 0, "devices_discovered": 0}
        )
        counts["receipts"] += row["receipts"]
        counts["devices_discovered"] += row["devices_discovered"]
    assert mine == {
        c: {"receipts": v["receipts"], "devices_discovered": v["devices_discovered"]}
        for c, v in truth["receipts"]["classes"].items()
    }
    [claimed] = truth["fleet_changes"]
    [change] = doc["changes"]
    assert (change["change_id"], change["started_at"], change["ended_at"]) == (
        claimed["change_id"],
        claimed["started_at"],
        claimed["ended_at"],
    )
    # the receipts its nodes held past the window are the truth's delayed starts; the others
    # submitted during it launched in it; no customer job started or was interrupted in any window
    assert sorted(h["job_id"] for h in change["held_past_end"]) == sorted(
        claimed["delayed_starts"]
    )
    during = next(w for w in change["windows"] if w["phase"] == "during")
    assert (
        during["submitted"],
        during["started_after_window"],
        during["receipt_starts"],
        during["job_starts"],
    ) == (
        len(claimed["delayed_starts"]) + len(claimed["on_time_during"]),
        len(claimed["delayed_starts"]),
        len(claimed["on_time_during"]),
        0,
    )
    assert [w["interrupted"] for w in change["windows"]] == [0, 0, 0]
    # held until after the window: the during p95 queue delay exceeds every before/after one
    assert all(
        during["queue_delay_s"]["p95"] > w["queue_delay_s"]["p95"]
        for w in change["windows"]
        if w is not during
    )


def test_the_provider_is_the_grants_system_and_cluster_not_the_tenants_log(tmp_path: Path) -> None:
    """J1's grant comes from `kueue://k8s-a/queues/gpu` and its start from the tenant's own
    log `app://acme/J1`; J2's grant from `gpu-binding://k8s-a/node-2`. The provider is the
    grant's source cut to its authority (docs/envelope.md): both are the one provider `k8s-a`,
    never `acme`. J3 has no grant: its start's source, cut likewise, `alpha`."""
    log = Log()
    for job, grant_source in (
        ("J1", "kueue://k8s-a/queues/gpu"),
        ("J2", "gpu-binding://k8s-a/node-2"),
    ):
        log.add("app://acme/" + job, "job.submitted", "09:00", job_id=job, gpus=1)
        log.add(
            grant_source,
            "allocation.granted",
            "10:00",
            allocation_id=f"G-{job}",
            gpus=1,
            node="n1",
        )
        log.add("app://acme/" + job, "job.started", "10:00", job_id=job, allocation_id=f"G-{job}")
    log.add("slurm://alpha/jobs", "job.submitted", "09:00", job_id="J3", gpus=1)
    log.add("slurm://alpha/jobs", "job.started", "09:30", job_id="J3", allocation_id="G-J3")
    groups = report(ledger(tmp_path, log), "envelope", "--by", "source")["groups"]
    assert sorted((g["source"], g["jobs"]) for g in groups) == [
        ("alpha", 1),
        ("k8s-a", 2),
    ]
