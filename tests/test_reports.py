"""Reports: promises, capacity, outcomes over the hand-built fleet of
tests/reports_scenario.py. Every expected figure is worked out by hand in the comments,
from that file's events; percentiles are nearest-rank (rank ⌈p·n/100⌉ of the sorted
values, reconcile/engine/figures.py)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from rich.table import Table

import ingest
from cli import main
from fixtures.sim import SimConfig, simulate
from ledger import Appender, Store, append_stream
from reconcile.engine.figures import nearest_rank, parse_time
from reconcile.reports import render, report, to_csv, write_reports
from reconcile.reports.capacity import RATES
from tests.reports_scenario import Events, at, make_store, make_store_of, sqlite_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    s = sqlite_store(tmp_path_factory.mktemp("reports"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def docs(store: Store) -> dict[str, dict[str, Any]]:
    return {name: report(store, name) for name in ("promises", "capacity", "outcomes")}


# -- percentiles ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, pct, expected",
    [
        ([1, 2, 3, 4], 50, 2),  # rank ⌈2⌉ = 2
        (list(range(1, 21)), 95, 19),  # rank ⌈19⌉ = 19
        (list(range(1, 11)), 95, 10),  # rank ⌈9.5⌉ = 10
        (list(range(1, 11)), 50, 5),  # rank ⌈5⌉ = 5
        ([7], 95, 7),  # rank ⌈0.95⌉ = 1
        ([30, 10, 20], 50, 20),  # sorted 10 20 30, rank ⌈1.5⌉ = 2
    ],
)
def test_nearest_rank(values: list[int], pct: int, expected: int) -> None:
    con = duckdb.connect()
    rows = ", ".join(f"({v})" for v in values)
    assert con.execute(
        f"SELECT {nearest_rank('x', pct)} FROM (VALUES {rows}) t(x)"
    ).fetchone() == (expected,)
    assert con.execute(
        f"SELECT {nearest_rank('x', pct)} FROM (SELECT 1 AS x WHERE false)"
    ).fetchone() == (None,)


# -- promises -------------------------------------------------------------------------


def _by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["promise_id"]: p for p in doc["promises"]}


def test_each_promise_against_what_happened(docs: dict[str, dict[str, Any]]) -> None:
    p = _by_id(docs["promises"])
    # (start status, start delay, completion status, completion delay, class, missed)
    got = {
        pid: (
            r["start_status"],
            r["start_delay_s"],
            r["completion_status"],
            r["completion_delay_s"],
            r["placement_class"],
            r["missed"],
        )
        for pid, r in p.items()
    }
    assert got == {
        # started 10:02 vs 10:05 → −180 s; completed 10:16 vs 11:00 → −2640 s
        "P1": ("met", -180, "met", -2640, "whole", False),
        # started 10:25 vs 10:10 → +900 s; completed 11:00 vs 12:00 → −3600 s; class from A2
        "P2": ("late", 900, "met", -3600, "mig:1g.10gb", True),
        # started 10:06 vs 10:30 → −1440 s; completed 11:10 vs 10:50 → +1200 s
        "P3": ("met", -1440, "late", 1200, "timeslice", True),
        # J4 started 10:40 vs 10:45 → −300 s; no complete_by
        "P4": ("met", -300, "none", None, "timeslice", False),
        # J5 never started and 11:00 < horizon 11:20
        "P5": ("not_started", None, "none", None, "whole", True),
        # J6 never started, 12:00 is past the horizon: not yet due; no class known
        "P6": ("pending", None, "none", None, "unknown", False),
    }
    assert (p["P2"]["start_by"], p["P2"]["started"], p["P2"]["allocation_id"]) == (
        at("10:10"),
        at("10:25"),
        "A2",
    )


def test_misses_listed_with_their_packet_command(docs: dict[str, dict[str, Any]]) -> None:
    misses = docs["promises"]["misses"]
    # in start_by order: P2 10:10, P3 10:30, P5 11:00
    assert [(m["promise_id"], m["packet_command"]) for m in misses] == [
        ("P2", "gpuledger packet --promise P2 --out packets/P2"),
        ("P3", "gpuledger packet --promise P3 --out packets/P3"),
        ("P5", "gpuledger packet --promise P5 --out packets/P5"),
    ]


def test_start_delay_percentiles_by_tenant_and_class(docs: dict[str, dict[str, Any]]) -> None:
    rows = [
        (
            r["tenant"],
            r["placement_class"],
            r["promises"],
            r["met"],
            r["missed"],
            r["pending"],
            r["started"],
            r["start_delay_p50_s"],
            r["start_delay_p95_s"],
        )
        for r in docs["promises"]["summary"]
    ]
    assert rows == [
        ("acme", "mig:1g.10gb", 1, 0, 1, 0, 1, 900, 900),
        # delays −1440 (P3), −300 (P4): p50 rank ⌈1⌉ = 1 → −1440; p95 rank ⌈1.9⌉ = 2 → −300
        ("acme", "timeslice", 2, 1, 1, 0, 2, -1440, -300),
        ("acme", "unknown", 1, 0, 0, 1, 0, None, None),
        # P1 −180; P5 never started (no delay)
        ("acme", "whole", 2, 1, 1, 0, 1, -180, -180),
    ]


# -- capacity -------------------------------------------------------------------------


def _funnel(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [tuple(row.values()) for row in [*doc["classes"], doc["total"]]]


def test_capacity_by_placement_class(docs: dict[str, dict[str, Any]]) -> None:
    # (class, discovered, admitted, placed, started, started without admission, devices admitted,
    #  placed, started, admitted then started, then the rates: devices admitted / placed /
    #  started ÷ discovered, admitted then started ÷ admitted). Every job is named by a decision
    #  (J4 by A3's admission), so none started without admission.
    assert _funnel(docs["capacity"]) == [
        # n2/0 says mig, the profile comes from A2 on it; J2 admitted and placed (A2), started
        # twice (one job)
        ("mig:1g.10gb", 1, 1, 1, 1, 0, 1, 1, 1, 1, 1.0, 1.0, 1.0, 1.0),
        # n3/0 from A3 (no device list: the node's one device); A3's admission names no job: J3
        # first started on it; J3 placed as pod j3-pod-x; J3 and J4 started on A3
        ("timeslice", 1, 1, 1, 2, 0, 1, 1, 1, 1, 1.0, 1.0, 1.0, 1.0),
        (
            "unknown",
            1,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0.0,
            0.0,
            0.0,
            None,
        ),  # n4/0: no class, no allocation
        (
            "whole",
            2,
            1,
            1,
            1,
            0,
            1,
            1,
            1,
            1,
            0.5,
            0.5,
            0.5,
            1.0,
        ),  # n1/0 held by J1 (A1), n1/1 idle
        ("all", 5, 3, 3, 4, 0, 3, 3, 3, 3, 0.6, 0.6, 0.6, 1.0),
    ]


def test_capacity_window_is_half_open(store: Store) -> None:
    # [10:20, 10:40): J2 admitted at 10:20 (in), placed 10:21, started 10:25; J2's and J4's
    # 10:40 starts are out; J1 (10:00) and A3 (10:05) admissions are before; devices stay
    doc = report(store, "capacity", since=parse_time(at("10:20")), until=parse_time(at("10:40")))
    assert _funnel(doc) == [
        ("mig:1g.10gb", 1, 1, 1, 1, 0, 1, 1, 1, 1, 1.0, 1.0, 1.0, 1.0),
        ("timeslice", 1, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, None),
        ("unknown", 1, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, None),
        ("whole", 2, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, None),
        ("all", 5, 1, 1, 1, 0, 1, 1, 1, 1, 0.2, 0.2, 0.2, 1.0),
    ]
    assert doc["window"] == {"since": at("10:20"), "until": at("10:40")}


def test_capacity_counts_jobs_that_need_no_admission(tmp_path: Path) -> None:
    """A Slurm job (no decision names it) beside a Kueue one on the same two whole GPUs."""
    e = Events()
    for device in (0, 1):
        e.add("device.discovered", "09:00", node="n1", device=device, placement_class="whole")
    e.add("job.submitted", "09:30", job_id="K1")
    e.add("policy.decision", "10:00", decision="admitted", job_id="K1", allocation_id="AK")
    e.add(
        "allocation.granted",
        "10:00",
        allocation_id="AK",
        gpus=1,
        node="n1",
        devices=[0],
        placement_class="whole",
    )
    e.add("job.started", "10:01", job_id="K1", allocation_id="AK")
    e.add("job.submitted", "09:40", job_id="S1")
    e.add(
        "allocation.granted",
        "10:02",
        allocation_id="S1",
        gpus=1,
        node="n1",
        devices=[1],
        placement_class="whole",
    )
    e.add("job.started", "10:02", job_id="S1", allocation_id="S1")
    store = make_store_of(f"sqlite:///{tmp_path / 'mixed.db'}", e.items)
    try:
        doc = report(store, "capacity")
    finally:
        store.close()
    # 2 devices; K1 admitted (holds n1/0), none placed; K1 and S1 started (n1/0, n1/1), S1 without
    # admission: devices admitted 1/2, placed 0/2, started 2/2; admitted jobs started 1/1
    assert _funnel(doc)[0] == ("whole", 2, 1, 0, 2, 1, 1, 0, 2, 1, 0.5, 0.0, 1.0, 1.0)
    table = render("capacity", doc, "table")
    assert isinstance(table, list) and isinstance(table[0], Table)
    assert [str(cell) for cell in table[0].columns[5].cells] == ["1", "1"]
    assert [str(cell) for cell in table[0].columns[6].cells] == ["50.00 % (1/2)", "50.00 % (1/2)"]


def test_capacity_reads_a_grant_s_devices_as_the_touches_rule_does(tmp_path: Path) -> None:
    """An empty device list is none given (the node's devices), as an absent one; a MIG
    instance held is its GPU. Two nodes of two whole GPUs and one of two MIG-partitioned
    GPUs; one job on each node."""
    e = Events()
    for node, cls in (("n1", "whole"), ("n2", "whole"), ("n3", "mig")):
        for device in (0, 1):
            e.add(
                "device.discovered",
                "09:00",
                node=node,
                device=device,
                placement_class=cls,
                profile="3g.40gb" if cls == "mig" else None,
            )
    for job, node, devices in (("A", "n1", []), ("B", "n2", None), ("C", "n3", ["1/2"])):
        cls = "mig" if node == "n3" else "whole"
        grant = {
            "allocation_id": job,
            "gpus": 1,
            "node": node,
            "placement_class": cls,
            **({"profile": "3g.40gb"} if cls == "mig" else {}),
        }
        e.add(
            "allocation.granted",
            "10:00",
            **grant,
            **({} if devices is None else {"devices": devices}),
        )
        e.add("job.started", "10:01", job_id=job, allocation_id=job)
    store = make_store_of(f"sqlite:///{tmp_path / 'held.db'}", e.items)
    try:
        doc = report(store, "capacity")
    finally:
        store.close()
    # devices started: n1 both (empty list), n2 both (no list), n3 GPU 1 only (its instance 1/2)
    started = {
        row["placement_class"]: (row["devices_discovered"], row["devices_started"])
        for row in doc["classes"]
    }
    assert started == {"whole": (4, 4), "mig:3g.40gb": (2, 1)}


def test_capacity_of_another_tenant_counts_the_fleet_only(store: Store) -> None:
    doc = report(store, "capacity", tenant="nobody")
    assert doc["total"]["devices_discovered"] == 5
    assert [doc["total"][k] for k in ("jobs_admitted", "jobs_placed", "workloads_started")] == [
        0,
        0,
        0,
    ]


# -- outcomes -------------------------------------------------------------------------


def test_outcomes_per_tenant(docs: dict[str, dict[str, Any]]) -> None:
    [acme] = docs["outcomes"]["tenants"]
    assert acme["tenant"] == "acme"
    assert (acme["jobs"], acme["completed_runs"], acme["accepted_results"]) == (
        5,
        4,
        2,
    )  # J1..J5; J1-J4; r1, r3
    # first progress − submitted: J1 10:04−09:55 = 540; J2 10:30−09:58 = 1920;
    # J3 (no submission) 10:10 − grant 10:05 = 300. Sorted 300 540 1920: p50 rank 2, p95 rank 3
    assert acme["time_to_first_usable_allocation_s"] == {"n": 3, "p50": 540, "p95": 1920}
    # gaps within an attempt: J1 120 180 60 240; J2 attempt 1: 60 120, attempt 2: 300; J3 600 300.
    # Sorted 60 60 120 120 180 240 300 300 600: p50 rank ⌈4.5⌉ = 5 → 180; p95 rank ⌈8.55⌉ = 9 → 600
    assert acme["step_time_s"] == {"n": 9, "p50": 180, "p95": 600}
    # completed − first start: J1 840, J2 2100, J3 3840, J4 1200; sorted: p50 rank 2 → 1200, p95
    # rank 4 → 3840
    assert acme["completed_run_time_s"] == {"n": 4, "p50": 1200, "p95": 3840}
    # checkpoint c1 [10:10, 10:12) 120 GPU-s + c2 [10:32, 10:33) 60 GPU-s; billed 1200 + 2400 +
    # 4200
    assert acme["checkpoint_overhead"] == {
        "checkpoint_gpu_seconds": 180,
        "billed_gpu_seconds": 7800,
        "ratio": round(180 / 7800, 6),
    }
    # runs: J1 2.40 + J2 4.80 + J3 and J4 share A3's 1.40 → 8.60 over 4 runs = 2.15;
    # billed 2.40 + 4.80 + 1.40 − 0.60 (credit) = 8.00 over 2 accepted results = 4.00
    assert acme["cost"] == {
        "USD": {
            "completed_runs_cost": "8.60",
            "cost_per_completed_run": "2.15",
            "billed": "8.00",
            "cost_per_accepted_result": "4.00",
        }
    }


def test_outcomes_per_job(docs: dict[str, dict[str, Any]]) -> None:
    jobs = {j["job_id"]: j for j in docs["outcomes"]["jobs"]}
    assert list(jobs) == ["J1", "J2", "J3", "J4", "J5"]  # by submission, else first start
    # A3: J3 runs [10:06, 11:10) = 3840 s, J4 [10:40, 11:00) = 1200 s, of 5040:
    # J3 140¢ × 3840/5040 = 106.67¢ → 1.07; J4 140¢ × 1200/5040 = 33.33¢ → 0.33
    assert {k: (j["cost"], j["result"], j["attempts"]) for k, j in jobs.items()} == {
        "J1": ({"USD": "2.40"}, "accepted", 1),
        "J2": ({"USD": "4.80"}, "rejected", 2),
        "J3": ({"USD": "1.07"}, "accepted", 1),
        "J4": ({"USD": "0.33"}, "pending", 1),
        "J5": ({}, "pending", 0),
    }
    assert (jobs["J3"]["granted"], jobs["J3"]["first_progress"], jobs["J3"]["submitted"]) == (
        at("10:05"),
        at("10:10"),
        None,
    )


# -- output ---------------------------------------------------------------------------


def test_csv_rows(docs: dict[str, dict[str, Any]]) -> None:
    promises = list(csv.DictReader(io.StringIO(to_csv("promises", docs["promises"]))))
    # in start_by order; only misses carry a packet command
    assert [(r["promise_id"], r["missed"], r["packet_command"]) for r in promises] == [
        ("P1", "False", ""),
        ("P2", "True", "gpuledger packet --promise P2 --out packets/P2"),
        ("P3", "True", "gpuledger packet --promise P3 --out packets/P3"),
        ("P4", "False", ""),
        ("P5", "True", "gpuledger packet --promise P5 --out packets/P5"),
        ("P6", "False", ""),
    ]
    outcomes = list(csv.DictReader(io.StringIO(to_csv("outcomes", docs["outcomes"]))))
    assert [(r["job_id"], r["cost"], r["currency"]) for r in outcomes] == [
        ("J1", "2.40", "USD"),
        ("J2", "4.80", "USD"),
        ("J3", "1.07", "USD"),
        ("J4", "0.33", "USD"),
        ("J5", "", ""),
    ]
    capacity = list(csv.DictReader(io.StringIO(to_csv("capacity", docs["capacity"]))))
    assert [r["placement_class"] for r in capacity] == [
        "mig:1g.10gb",
        "timeslice",
        "unknown",
        "whole",
        "all",
    ]


def test_write_reports(store: Store, tmp_path: Path, docs: dict[str, dict[str, Any]]) -> None:
    written = write_reports(store, tmp_path / "reports")
    assert sorted(p.name for p in written.paths) == sorted(
        [
            f"{n}.{ext}"
            for n in (
                "promises",
                "capacity",
                "outcomes",
                "placement",
                "envelope",
                "envelope_by_class",
            )
            for ext in ("json", "csv")
        ]
        + ["serving.csv", "capacity_changes.csv", "promise_causes.csv", "envelope.html"]
    )
    assert [m["promise_id"] for m in written.missed_promises] == ["P2", "P3", "P5"]
    for name, doc in docs.items():
        assert json.loads((tmp_path / "reports" / f"{name}.json").read_text()) == doc


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_cli_reports(store: Store, docs: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    for name in ("promises", "capacity", "outcomes"):
        code, out, _ = _cli("report", name, "--db", store.url, "--format", "json")
        assert code == 0 and json.loads(out) == docs[name]
    code, out, _ = _cli("report", "promises", "--db", store.url, "--tenant", "acme")
    assert code == 0 and "missed promises: 3" in out and "gpuledger packet --promise P5" in out
    code, _, err = _cli(
        "report",
        "outcomes",
        "--db",
        store.url,
        "--format",
        "csv",
        "--out",
        str(tmp_path / "o.csv"),
    )
    assert code == 0 and (tmp_path / "o.csv").read_text() == to_csv("outcomes", docs["outcomes"])
    code, _, err = _cli("report", "capacity", "--db", store.url, "--since", "yesterday")
    assert (code, err) == (2, "Error: --since: not an RFC 3339 time: 'yesterday'\n")


def test_a_simulated_fleet_against_its_ground_truth(tmp_path: Path) -> None:
    """The simulator's own record of the promises it broke and the jobs it started, never
    the reports' output, is the expectation."""
    out = tmp_path / "sim"
    simulate(SimConfig(seed=7, gpus=64, days=2, tenants=4, scale=0.25), out)
    manifest = json.loads((out / "manifest.json").read_text())
    fleet_store = Store(f"sqlite:///{tmp_path / 'sim.db'}")
    fleet_store.init()
    try:
        appender = Appender(fleet_store)
        for item in manifest["files"]:
            records = ingest.extract(out / item["path"], item["format"], **item.get("options", {}))
            assert append_stream(appender, records, 5000).quarantined == 0
        missed = [
            json.loads(line)["ids"]
            for line in (out / "anomalies.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == "missed_promise"
        ]
        assert missed, "the fleet should break some promises"
        got = report(fleet_store, "promises")["misses"]
        assert sorted((m["promise_id"], m["job_id"], m["start_by"]) for m in got) == sorted(
            (m["promise_id"], m["job_id"], m["start_by"]) for m in missed
        )
        capacity = report(fleet_store, "capacity")
        started = {
            row["placement_class"].split(":")[0]: row["workloads_started"]
            for row in capacity["classes"]
        }
        counts = manifest["counts"]  # one job per allocation, each started at least once
        assert started == {
            c: counts[f"allocations.{c}"]
            for c in ("whole", "mig", "timeslice")
            if f"allocations.{c}" in counts
        }
        assert capacity["total"]["devices_discovered"] == 64
        # a share of like with like never leaves [0, 1]
        assert all(
            0 <= row[name] <= 1
            for row in [*capacity["classes"], capacity["total"]]
            for name, _, _ in RATES
            if row[name] is not None
        )
    finally:
        fleet_store.close()


def test_an_empty_ledger_reports_nothing(tmp_path: Path) -> None:
    empty = Store(f"sqlite:///{tmp_path / 'empty.db'}")
    empty.init()
    try:
        open_ = {"period": {"since": None, "until": None}}  # every report says its period
        assert report(empty, "promises") == open_ | {
            "summary": [],
            "misses": [],
            "promises": [],
            "causes": [],
            "estimates": [],
        }
        assert report(empty, "outcomes") == open_ | {"tenants": [], "jobs": [], "serving": []}
        assert report(empty, "placement") == open_ | {
            "allocations": [],
            "summary": [],
            "prediction": [],
        }
        capacity = report(empty, "capacity")
        assert (capacity["classes"], capacity["total"]["devices_discovered"]) == ([], 0)
        assert to_csv("promises", report(empty, "promises")) == ""
    finally:
        empty.close()


def test_same_reports_on_postgresql(pg_url: str, docs: dict[str, dict[str, Any]]) -> None:
    pg = make_store(pg_url)
    try:
        for name in ("promises", "capacity", "outcomes"):
            assert report(pg, name) == docs[name], name
    finally:
        pg.close()
