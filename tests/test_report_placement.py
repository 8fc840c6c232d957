"""`report placement` and the serving view of `report outcomes`
over a small fleet written as CloudEvents and ingested through the CLI. Every expected
figure is worked by hand below from the rules in docs/placement.md.

acme, 2026-01-05, five allocations of one hour each (10:00–11:00), one job on each:

| alloc | class sold         | topology                 | busbw | step gaps s | p50 | billed |
|-------|--------------------|--------------------------|-------|-------------|-----|--------|
| A1    | whole (promise P1) | GPU0–GPU1 NV12           | 200   | 10 10 10    | 10  | 12.00  |
| A2    | whole              | GPU0–GPU1 SYS → mismatch | 20    | 40 40       | 40  | 30.00  |
| A3    | whole              | GPU0–GPU1 NV4            | 150   | 10 10       | 10  | 8.00   |
| A4    | whole, devices 2,3 | GPU2–GPU3 NV12, rest SYS | 150   | 20 30 20    | 20  | 10.00  |
| A5    | mig:1g.10gb        | GPU0                     | 5     | 5 5         | 5   | 2.00   |
| A6    | whole, 1 GPU       | none → unobserved        | –     | –           | –   | –      |

busbw: of the largest size, out-of-place (A1: its latest run; an older one read 10). A4 is
on a 4-GPU host (its devices 2 and 3; the rest of the pairs are SYS).

Spearman for `whole` (A1..A4): x ranks (20, 150, 150, 200) → A2 1, A3 2.5, A4 2.5, A1 4;
y ranks (10, 10, 20, 40) → A1 1.5, A3 1.5, A4 3, A2 4. Mean rank 5/2; deviations
x (A1, A2, A3, A4) = (3/2, −3/2, 0, 0), y = (−1, 3/2, −1, 1/2):
Sxy = −3/2 − 9/4 = −15/4, Sxx = 9/2, Syy = 1 + 9/4 + 1 + 1/4 = 9/2, so ρ = −15/4 ÷ 9/2 =
−5/6 = −0.833333…, ρ² = 25/36: predicts (ρ ≤ −1/2). `mig:1g.10gb` has one point: not
enough data.

beta serves job S1 on B1 (12:00–13:00, billed 360.00 USD) in three windows:

| window | concurrency | span s | requests | accepted | failed | cancelled | out tokens |
|--------|-------------|--------|----------|----------|--------|-----------|------------|
| W1     | 1           | 600    | 120      | 118      | –      | 2         | 24000      |
| W2     | 8           | 600    | 600      | 590      | 4      | 6         | 120000     |
| W3     | 8           | 1200   | 1000     | 1000     | –      | 0         | 210000     |

| window | TTFT p50/p95/p99 | latency p50/p95/p99 |
|--------|------------------|---------------------|
| W1     | 50/80/95         | 900/1200/1500       |
| W2     | 70/150/260       | 1500/2600/3900      |
| W3     | 65/170/240       | 1400/2500/4100      |

Money by window length over the 2400 s of windows: W1 90.00, W2 90.00, W3 180.00.
"""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconcile.reports.placement import average_ranks, shown, spearman
from tests.conftest import REALDATA, run_cli, write_jsonl

DAY = "2026-01-05"


def at(clock: str) -> str:
    return f"{DAY}T{clock}Z" if clock.count(":") == 2 else f"{DAY}T{clock}:00Z"


class Events:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, type_: str, clock: str, tenant: str = "acme", **data: Any) -> None:
        self.items.append(
            {
                "specversion": "1.0",
                "id": f"e{len(self.items) + 1}",
                "source": "test://placement",
                "type": type_,
                "time": at(clock),
                "data": {"tenant": tenant, **data},
            }
        )


def topology(*links: tuple[str, str, str], gpus: int = 2) -> dict[str, Any]:
    return {
        "gpus": [{"name": f"GPU{i}"} for i in range(gpus)],
        "nics": [],
        "links": [{"a": a, "b": b, "link": link} for a, b, link in links],
    }


def all_reduce(*rows: tuple[int, str, str]) -> list[dict[str, Any]]:
    """(size, out-of-place busbw, in-place busbw) rows, and an average that is not read."""
    figures: list[dict[str, Any]] = []
    for size, out_of_place, in_place in rows:
        figures += [
            {
                "name": "busbw",
                "value": out_of_place,
                "unit": "GB/s",
                "size_bytes": size,
                "placement": "out-of-place",
            },
            {
                "name": "busbw",
                "value": in_place,
                "unit": "GB/s",
                "size_bytes": size,
                "placement": "in-place",
            },
        ]
    return figures + [{"name": "avg_busbw", "value": "999", "unit": "GB/s"}]


def allocation(e: Events, name: str, job: str, gaps: list[int], amount: str, **grant: Any) -> None:
    e.add("allocation.granted", "10:00", allocation_id=name, **{"gpus": 2} | grant)
    e.add("job.started", "10:00", job_id=job, allocation_id=name)
    t = 5 * 60
    e.add("job.progress", "10:05:00", job_id=job, step=1)
    for i, gap in enumerate(gaps, 2):
        t += gap
        e.add("job.progress", f"10:{t // 60:02d}:{t % 60:02d}", job_id=job, step=i)
    e.add("job.completed", "10:59", job_id=job)
    e.add("allocation.released", "11:00", allocation_id=name)
    e.add(
        "billing.line",
        "11:00",
        invoice_id="INV-1",
        line_id=f"L-{name}",
        allocation_id=name,
        period_start=at("10:00"),
        period_end=at("11:00"),
        gpus=grant.get("gpus", 2),
        amount=amount,
        currency="USD",
    )


def placement_fleet(e: Events) -> None:
    e.add(
        "policy.promise",
        "09:00",
        promise_id="P1",
        job_id="J1",
        start_by=at("10:10"),
        placement_class="whole",
    )
    allocation(e, "A1", "J1", [10, 10, 10], "12.00")
    allocation(e, "A2", "J2", [40, 40], "30.00")
    allocation(e, "A3", "J3", [10, 10], "8.00")
    allocation(e, "A4", "J4", [20, 30, 20], "10.00", devices=["2", "3"])
    allocation(e, "A5", "J5", [5, 5], "2.00", gpus=1, placement_class="mig", profile="1g.10gb")
    e.add("allocation.granted", "10:00", allocation_id="A6", gpus=1)
    observed = {
        "A1": topology(("GPU0", "GPU1", "NV12")),
        "A2": topology(("GPU0", "GPU1", "SYS")),
        "A3": topology(("GPU0", "GPU1", "NV4")),
        "A4": topology(
            ("GPU0", "GPU1", "NV12"),
            ("GPU0", "GPU2", "SYS"),
            ("GPU0", "GPU3", "SYS"),
            ("GPU1", "GPU2", "SYS"),
            ("GPU1", "GPU3", "SYS"),
            ("GPU2", "GPU3", "NV12"),
            gpus=4,
        ),
        "A5": topology(gpus=1),
    }
    for name, topo in observed.items():
        e.add(
            "placement.observed", "10:01", allocation_id=name, node=f"node-{name}", topology=topo
        )
    busbw = {"A2": "20", "A3": "150.00", "A4": "150", "A5": "5"}
    # A1's older run says 10: the latest run (10:03) counts
    e.add(
        "probe.result",
        "10:02",
        allocation_id="A1",
        probe="nccl-tests",
        test="all_reduce_perf",
        figures=all_reduce((1024, "1", "1"), (1 << 30, "10", "10")),
    )
    e.add(
        "probe.result",
        "10:03",
        allocation_id="A1",
        probe="nccl-tests",
        test="all_reduce_perf",
        figures=all_reduce((1024, "1", "300"), (1 << 30, "200", "300")),
    )
    # an all_gather run is not the reading, whatever it says
    e.add(
        "probe.result",
        "10:04",
        allocation_id="A2",
        probe="nccl-tests",
        test="all_gather_perf",
        figures=all_reduce((1 << 30, "900", "900")),
    )
    for name, value in busbw.items():
        e.add(
            "probe.result",
            "10:02",
            allocation_id=name,
            probe="nccl-tests",
            test="all_reduce_perf",
            figures=all_reduce((1024, "0.50", "0.50"), (1 << 30, value, "999")),
        )


def window(
    e: Events,
    start: str,
    end: str,
    concurrency: int,
    requests: int,
    accepted: int,
    tokens: int,
    ttft: tuple[str, str, str],
    latency: tuple[str, str, str],
    **extra: Any,
) -> None:
    e.add(
        "inference.window",
        end,
        tenant="beta",
        job_id="S1",
        window_start=at(start),
        window_end=at(end),
        concurrency=concurrency,
        requests=requests,
        accepted=accepted,
        output_tokens=tokens,
        ttft_ms=dict(zip(("p50", "p95", "p99"), ttft)),
        latency_ms=dict(zip(("p50", "p95", "p99"), latency)),
        **extra,
    )


def serving_fleet(e: Events) -> None:
    e.add("allocation.granted", "12:00", tenant="beta", allocation_id="B1", gpus=1)
    e.add("job.started", "12:00", tenant="beta", job_id="S1", allocation_id="B1")
    window(
        e,
        "12:00",
        "12:10",
        1,
        120,
        118,
        24000,
        ("50", "80", "95"),
        ("900", "1200", "1500"),
        cancelled=2,
        allocation_id="B1",
    )
    window(
        e,
        "12:10",
        "12:20",
        8,
        600,
        590,
        120000,
        ("70", "150", "260"),
        ("1500", "2600", "3900"),
        cancelled=6,
        failed=4,
    )
    window(
        e,
        "12:20",
        "12:40",
        8,
        1000,
        1000,
        210000,
        ("65", "170", "240"),
        ("1400", "2500", "4100"),
        cancelled=0,
    )
    e.add("allocation.released", "13:00", tenant="beta", allocation_id="B1")
    e.add(
        "billing.line",
        "13:00",
        tenant="beta",
        invoice_id="INV-B",
        line_id="L-B1",
        allocation_id="B1",
        period_start=at("12:00"),
        period_end=at("13:00"),
        gpus=1,
        amount="360.00",
        currency="USD",
    )


def ingested(url: str, folder: Path) -> str:
    e = Events()
    placement_fleet(e)
    serving_fleet(e)
    assert run_cli("init", "--db", url)[0] == 0
    code, out, err = run_cli(
        "ingest", "--db", url, str(write_jsonl(folder / "events.jsonl", e.items))
    )
    assert code == 0 and "quarantined 0" in out, err
    return url


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("placement")
    return ingested(f"sqlite:///{folder / 'ledger.db'}", folder)


def report_json(db: str, *args: str) -> dict[str, Any]:
    code, out, err = run_cli("report", *args, "--db", db, "--format", "json")
    assert code == 0, err
    return dict(json.loads(out))


@pytest.fixture(scope="module")
def placement(db: str) -> dict[str, Any]:
    return report_json(db, "placement")


def by_allocation(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["allocation_id"]: a for a in doc["allocations"]}


# -- placement ----------------------------------------------------------------------------


def test_a_mismatch_names_the_pair_and_its_link(placement: dict[str, Any]) -> None:
    a2 = by_allocation(placement)["A2"]
    assert (a2["status"], a2["reason"], a2["placement_class"], a2["class_from"]) == (
        "mismatch",
        "GPU0–GPU1 over SYS, class requires NVLink",
        "whole",
        "allocation",
    )
    assert (a2["billed"], a2["links_observed"], a2["nodes_observed"]) == (
        {"USD": "30.00"},
        {"SYS": 1},
        ["node-A2"],
    )


def test_matches_and_their_reasons(placement: dict[str, Any]) -> None:
    rows = by_allocation(placement)
    assert [(k, rows[k]["status"], rows[k]["reason"]) for k in ("A1", "A3", "A4", "A5", "A6")] == [
        ("A1", "match", "every pair of its 2 GPUs over NVLink"),
        ("A3", "match", "every pair of its 2 GPUs over NVLink"),
        ("A4", "match", "every pair of its 2 GPUs over NVLink"),  # only GPU2–GPU3 are A4's
        ("A5", "match", "class mig:1g.10gb: a share of one GPU on one node, no link required"),
        ("A6", "unobserved", "no nvidia-smi topo -m capture"),
    ]
    assert (rows["A1"]["class_from"], rows["A1"]["promise_id"]) == ("promise", "P1")
    assert rows["A4"]["links_observed"] == {"NV12": 1}
    assert rows["A5"]["placement_class"] == "mig:1g.10gb"


def test_the_probe_reading_and_step_time_per_allocation(placement: dict[str, Any]) -> None:
    rows = by_allocation(placement)
    assert [(k, rows[k]["busbw_gbps"], rows[k]["step_time_p50_s"]) for k in sorted(rows)] == [
        ("A1", "200", "10"),
        ("A2", "20", "40"),
        ("A3", "150.00", "10"),
        ("A4", "150", "20"),
        ("A5", "5", "5"),
        ("A6", None, None),
        ("B1", None, None),
    ]


def test_billed_money_on_mismatches_per_class(placement: dict[str, Any]) -> None:
    summary = {(s["tenant"], s["placement_class"]): s for s in placement["summary"]}
    whole = summary[("acme", "whole")]
    assert (whole["allocations"], whole["match"], whole["mismatch"], whole["unobserved"]) == (
        5,
        3,
        1,
        1,
    )
    assert whole["billed_on_mismatch"] == {"USD": "30.00"}
    assert summary[("acme", "mig:1g.10gb")]["billed_on_mismatch"] == {}


def test_rank_correlation_with_ties_and_a_class_short_of_data(placement: dict[str, Any]) -> None:
    rho = {p["placement_class"]: p for p in placement["prediction"]}
    assert rho["whole"] == {
        "placement_class": "whole",
        "n": 4,
        "spearman": "-0.833333",
        "spearman_squared": "25/36",
        "predicts": True,
        "reading": "more bus bandwidth, shorter steps",
    }
    assert rho["mig:1g.10gb"] == {
        "placement_class": "mig:1g.10gb",
        "n": 1,
        "spearman": None,
        "spearman_squared": None,
        "predicts": None,
        "reading": "not enough data",
    }


def test_ranks_average_ties_and_an_irrational_rho_is_rounded() -> None:
    assert average_ranks([7, 3, 7, 1]) == [3.5, 2, 3.5, 1]
    # x ranks (3/2, 3/2, 3), y ranks (1, 2, 3): Sxy = 3/2, Sxx = 3/2, Syy = 2: ρ² = 3/4, ρ = √3/2
    rho_squared, sign = spearman([1, 1, 2], [1, 2, 3])
    assert (rho_squared, sign) == (Fraction(3, 4), 1)
    assert rho_squared is not None and shown(rho_squared, sign) == "0.866025"  # √3/2 = 0.8660254…
    assert spearman([1, 1, 1], [1, 2, 3]) == (None, 0)


@settings(deadline=None, max_examples=60, derandomize=True)
@given(
    st.integers(min_value=3, max_value=12).flatmap(
        lambda n: st.tuples(st.permutations(range(n)), st.permutations(range(n)))
    )
)
def test_without_ties_rho_is_the_textbook_formula(pair: tuple[list[int], list[int]]) -> None:
    """With distinct values ρ = 1 − 6 Σ d² / (n (n² − 1)), d the rank differences."""
    xs, ys = pair
    n = len(xs)
    expected = 1 - Fraction(6 * sum((x - y) ** 2 for x, y in zip(xs, ys)), n * (n * n - 1))
    rho_squared, sign = spearman(xs, ys)
    assert (rho_squared, sign) == (expected**2, (expected > 0) - (expected < 0))


def test_placement_csv_and_table(db: str, placement: dict[str, Any]) -> None:
    code, out, _ = run_cli("report", "placement", "--db", db, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    a2 = next(r for r in rows if r["allocation_id"] == "A2")
    assert (a2["status"], a2["billed"], a2["currency"], a2["links_observed"]) == (
        "mismatch",
        "30.00",
        "USD",
        "SYS:1",
    )
    assert len(rows) == len(placement["allocations"])
    code, out, _ = run_cli("report", "placement", "--db", db)
    assert code == 0 and "GPU0–GPU1 over SYS, class requires NVLink" in out and "-0.833333" in out


# -- serving ------------------------------------------------------------------------------


def test_serving_per_concurrency_level(db: str) -> None:
    serving = {(r["tenant"], r["concurrency"]): r for r in report_json(db, "outcomes")["serving"]}
    assert list(serving) == [("beta", 1), ("beta", 8), ("beta", "all")]
    one, eight, mix = serving[("beta", 1)], serving[("beta", 8)], serving[("beta", "all")]
    # 120 / 600 s; 24000 tokens / 600 s; 90.00 / 118 accepted = 0.7627… → 0.76
    assert (
        one["windows"],
        one["seconds"],
        one["requests"],
        one["accepted"],
        one["cancelled"],
        one["failed"],
    ) == (1, 600, 120, 118, 2, None)
    assert (one["request_rate_per_s"], one["output_tokens_per_s"]) == ("0.200", "40.000")
    assert one["cost"] == {"USD": {"cost": "90.00", "cost_per_accepted_response": "0.76"}}
    # 1600 / 1800 s = 0.888…; 330000 / 1800 = 183.333…; 270.00 / 1590 = 0.1698… → 0.17
    assert (
        eight["windows"],
        eight["seconds"],
        eight["requests"],
        eight["accepted"],
        eight["cancelled"],
        eight["failed"],
    ) == (2, 1800, 1600, 1590, 6, 4)
    assert (eight["request_rate_per_s"], eight["output_tokens_per_s"]) == ("0.889", "183.333")
    assert eight["ttft_ms"] == {
        "p50": "70",
        "p95": "170",
        "p99": "260",
    }  # the worst window's, each
    assert eight["latency_ms"] == {"p50": "1500", "p95": "2600", "p99": "4100"}
    assert eight["cost"] == {"USD": {"cost": "270.00", "cost_per_accepted_response": "0.17"}}
    # 1720 / 2400 s = 0.7166…; 354000 / 2400 = 147.5; 360.00 / 1708 = 0.2107… → 0.21
    assert (
        mix["requests"],
        mix["accepted"],
        mix["cancelled"],
        mix["request_rate_per_s"],
        mix["output_tokens_per_s"],
    ) == (1720, 1708, 8, "0.717", "147.500")
    assert mix["cost"] == {"USD": {"cost": "360.00", "cost_per_accepted_response": "0.21"}}
    assert mix["ttft_ms"] == {"p50": "70", "p95": "170", "p99": "260"}


def test_serving_view_alone_as_csv(db: str) -> None:
    code, out, err = run_cli(
        "report", "outcomes", "--view", "serving", "--db", db, "--format", "csv"
    )
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [
        (r["concurrency"], r["ttft_ms_p99"], r["cost_per_accepted_response"], r["currency"])
        for r in rows
    ] == [("1", "95", "0.76", "USD"), ("8", "260", "0.17", "USD"), ("all", "260", "0.21", "USD")]
    code, out, _ = run_cli("report", "outcomes", "--db", db)
    assert code == 0 and "serving: per concurrency level" in out


def test_same_reports_on_postgresql(
    pg_url: str, tmp_path: Path, db: str, placement: dict[str, Any]
) -> None:
    ingested(pg_url, tmp_path)
    assert report_json(pg_url, "placement") == placement
    assert report_json(pg_url, "outcomes") == report_json(db, "outcomes")


def test_a_tenant_sees_only_its_own(db: str) -> None:
    assert {
        a["tenant"] for a in report_json(db, "placement", "--tenant", "beta")["allocations"]
    } == {"beta"}
    assert report_json(db, "outcomes", "--tenant", "acme")["serving"] == []


# -- more rules, one allocation each ------------------------------------------------------


def placement_of(tmp_path: Path, build: Any) -> dict[str, dict[str, Any]]:
    e = Events()
    build(e)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run_cli("init", "--db", url)[0] == 0
    code, out, err = run_cli(
        "ingest", "--db", url, str(write_jsonl(tmp_path / "events.jsonl", e.items))
    )
    assert code == 0 and "quarantined 0" in out, err
    return by_allocation(report_json(url, "placement"))


def test_a_promise_for_another_class_several_nodes_and_too_few_gpus(tmp_path: Path) -> None:
    def build(e: Events) -> None:
        # sold whole by promise, granted as a time slice: a mismatch whatever the topology
        e.add(
            "policy.promise",
            "09:00",
            promise_id="P9",
            job_id="J9",
            start_by=at("10:10"),
            placement_class="whole",
        )
        e.add(
            "allocation.granted", "10:00", allocation_id="C1", gpus=1, placement_class="timeslice"
        )
        e.add("job.started", "10:00", job_id="J9", allocation_id="C1")
        e.add(
            "placement.observed", "10:01", allocation_id="C1", node="n1", topology=topology(gpus=1)
        )
        # 4 whole GPUs seen as 2 + 2 on two nodes, each pair over NVLink, with no fabric
        # domain: judged per node, as RULES.md 13 judges it, so the claims agree
        e.add("allocation.granted", "10:00", allocation_id="C2", gpus=4)
        for node in ("n2", "n3"):
            e.add(
                "placement.observed",
                "10:01",
                allocation_id="C2",
                node=node,
                topology=topology(("GPU0", "GPU1", "NV18")),
            )
        # the same, granted in a fabric domain (NVL72): the nodes are one domain
        e.add("allocation.granted", "10:00", allocation_id="C3", gpus=4, fabric_domain="nvl-1")
        for node in ("n4", "n5"):
            e.add(
                "placement.observed",
                "10:01",
                allocation_id="C3",
                node=node,
                topology=topology(("GPU0", "GPU1", "NV18")),
            )
        # 4 granted, a capture of 2
        e.add("allocation.granted", "10:00", allocation_id="C4", gpus=4)
        e.add(
            "placement.observed",
            "10:01",
            allocation_id="C4",
            node="n6",
            topology=topology(("GPU0", "GPU1", "NV18")),
        )
        # 2 granted with no devices named, a capture of a whole 4-GPU host: which two?
        e.add("allocation.granted", "10:00", allocation_id="C5", gpus=2)
        e.add(
            "placement.observed",
            "10:01",
            allocation_id="C5",
            node="n7",
            topology=topology(
                *((f"GPU{a}", f"GPU{b}", "NV12") for a in range(4) for b in range(a + 1, 4)),
                gpus=4,
            ),
        )
        # a capture of an allocation nothing granted or promised: no class to hold it to
        e.add(
            "placement.observed",
            "10:01",
            allocation_id="C6",
            node="n8",
            topology=topology(("GPU0", "GPU1", "SYS")),
        )

    rows = placement_of(tmp_path, build)
    assert [(k, rows[k]["status"], rows[k]["reason"]) for k in sorted(rows)] == [
        ("C1", "mismatch", "sold whole (promise P9), granted timeslice"),
        # whole is judged per node (RULES.md 13): pairs on different nodes are not judged
        ("C2", "match", "every pair of its 4 GPUs over NVLink"),
        ("C3", "match", "every pair of its 4 GPUs over NVLink"),
        ("C4", "mismatch", "capture shows 2 GPUs, the allocation has 4"),
        (
            "C5",
            "undetermined",
            "capture shows 4 GPUs, the allocation has 2 and its devices do not say "
            "which are its own",
        ),
        ("C6", "undetermined", "no grant or promise names the class sold"),
    ]
    assert (rows["C6"]["placement_class"], rows["C6"]["class_from"]) == ("unknown", None)
    assert (rows["C1"]["placement_class"], rows["C1"]["class_from"]) == ("whole", "promise")


def test_many_slow_pairs_are_listed_and_the_line_is_cut(tmp_path: Path) -> None:
    def build(e: Events) -> None:
        e.add("allocation.granted", "10:00", allocation_id="D1", gpus=4)
        e.add(
            "placement.observed",
            "10:01",
            allocation_id="D1",
            node="n1",
            topology=topology(
                *((f"GPU{a}", f"GPU{b}", "PHB") for a in range(4) for b in range(a + 1, 4)), gpus=4
            ),
        )

    d1 = placement_of(tmp_path, build)["D1"]
    assert (
        len(d1["reasons"]) == 6 and d1["reasons"][5] == "GPU2–GPU3 over PHB, class requires NVLink"
    )
    assert d1["reason"] == (
        "GPU0–GPU1 over PHB, class requires NVLink; GPU0–GPU2 over PHB, class requires NVLink; "
        "GPU0–GPU3 over PHB, class requires NVLink; and 3 more"
    )


def test_step_time_is_per_step_when_marks_skip_steps(tmp_path: Path) -> None:
    """Marks at steps 0, 3, 6, 8, 40 s, 40 s and 25 s apart: 40/3, 40/3 and 25/2 s a step;
    sorted 12.5, 13.33…, 13.33…, nearest-rank p50 (rank 2) = 40/3 = 13.333333 (6 places).
    A mark that repeats its step (8 again, 5 s later) measures no step and is left out."""

    def build(e: Events) -> None:
        e.add("allocation.granted", "10:00", allocation_id="E1", gpus=1)
        e.add("job.started", "10:00", job_id="JE", allocation_id="E1")
        for clock, step in (
            ("10:05:00", 0),
            ("10:05:40", 3),
            ("10:06:20", 6),
            ("10:06:45", 8),
            ("10:06:50", 8),
        ):
            e.add("job.progress", clock, job_id="JE", step=step)
        e.add(
            "probe.result",
            "10:01",
            allocation_id="E1",
            probe="nccl-tests",
            test="all_reduce_perf",
            figures=all_reduce((1 << 20, "7.5", "7.5")),
        )

    e1 = placement_of(tmp_path, build)["E1"]
    assert (e1["step_time_p50_s"], e1["step_times"], e1["busbw_gbps"]) == ("13.333333", 3, "7.5")


# -- real outputs (../shared/realdata, PROBES.md) -------------------------------------------

REAL_TOPO = REALDATA / "topo"
REAL_NCCL = REALDATA / "nccl-tests"
ABSENT_REASON = "real data not present at {} (it lives beside the project, not in it)"


def real_file(path: Path) -> str:
    if not path.exists():
        pytest.skip(ABSENT_REASON.format(path))
    return str(path)


def test_real_captures_and_probe_against_the_class_sold(tmp_path: Path) -> None:
    """PROBES.md: the AutoDL post's 2× RTX 2080 Ti are PIX to each other and its all_reduce
    gives busbw 4.00 at 1 GiB; Traverse's V100s pair NV3 only within GPU0–1 and GPU2–3; the
    A100 capture is NV12 between all 8. Each sold as one whole allocation of all its GPUs."""
    autodl = real_file(REAL_TOPO / "Anthony-Hoo-github-io_AutoDL-post_2080ti-2gpu-pix.txt")
    autodl_nccl = real_file(REAL_NCCL / "Anthony-Hoo-github-io_AutoDL-post_2080ti-x2_six-runs.txt")
    traverse = real_file(REAL_TOPO / "jdh4-della-gpu-A100_README_traverse-v100-4gpu-nv3-pix.txt")
    a100 = real_file(
        REAL_TOPO / "stas00-ml-engineering_network-README_a100-8gpu-nv12-space-aligned.txt"
    )
    e = Events()
    for name, gpus in (("R1", 2), ("R2", 4), ("R3", 8)):
        e.add("allocation.granted", "10:00", allocation_id=name, gpus=gpus)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run_cli("init", "--db", url)[0] == 0
    ingests = [
        [str(write_jsonl(tmp_path / "grants.jsonl", e.items))],
        [
            "--format",
            "nvidia-smi-topo",
            "--tenant",
            "acme",
            "--allocation",
            "R1",
            "--node",
            "autodl",
            autodl,
        ],
        ["--format", "nccl-tests", "--tenant", "acme", "--allocation", "R1", autodl_nccl],
        [
            "--format",
            "nvidia-smi-topo",
            "--tenant",
            "acme",
            "--allocation",
            "R2",
            "--node",
            "traverse",
            traverse,
        ],
        [
            "--format",
            "nvidia-smi-topo",
            "--tenant",
            "acme",
            "--allocation",
            "R3",
            "--node",
            "a100",
            a100,
        ],
    ]
    for args in ingests:
        dated = ["--scrape-time", "2026-01-05T10:05:00Z"] if "--format" in args else []
        code, out, err = run_cli("ingest", "--db", url, *dated, *args)
        assert code == 0 and "quarantined 0" in out, (args, out, err)
    rows = by_allocation(report_json(url, "placement"))
    assert (rows["R1"]["status"], rows["R1"]["reason"]) == (
        "mismatch",
        "GPU0–GPU1 over PIX, class requires NVLink",
    )
    assert (rows["R1"]["busbw_gbps"], rows["R1"]["busbw_size_bytes"]) == ("4.00", 1 << 30)
    assert rows["R2"]["status"] == "mismatch" and rows["R2"]["reasons"] == [
        f"GPU{a}–GPU{b} over SYS, class requires NVLink"
        for a, b in ((0, 2), (0, 3), (1, 2), (1, 3))
    ]
    assert rows["R2"]["links_observed"] == {"NV3": 2, "SYS": 4}
    assert (rows["R3"]["status"], rows["R3"]["reason"], rows["R3"]["links_observed"]) == (
        "match",
        "every pair of its 8 GPUs over NVLink",
        {"NV12": 28},
    )


def test_real_vllm_results_as_one_rate_set_level(tmp_path: Path) -> None:
    """PROBES.md: nerdalert's results.json is 9 vLLM `--save-result` lines (3 deployments × 10,
    30 and inf QPS), 300 or 900 requests each, all completed, no `max_concurrency`: one level
    with no stated concurrency. Its worst p99 TTFT is the highest `p99_ttft_ms` of the 9 lines,
    read here from the file as text."""
    path = Path(
        real_file(
            REALDATA
            / "inference-bench"
            / "nerdalert-vllm-bench-automation_vllm-benchmark-graphs_results.json"
        )
    )
    lines = [
        json.loads(line, parse_float=str) for line in path.read_text().splitlines() if line.strip()
    ]
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run_cli("init", "--db", url)[0] == 0
    code, out, err = run_cli(
        "ingest",
        "--db",
        url,
        "--format",
        "serving-bench",
        "--tenant",
        "acme",
        "--job",
        "chat",
        "--timezone",
        "UTC",
        str(path),
    )
    assert code == 0 and "appended 9" in out, err
    rows = {r["concurrency"]: r for r in report_json(url, "outcomes")["serving"]}
    assert list(rows) == [None, "all"]
    level = rows[None]
    assert (level["windows"], level["requests"], level["accepted"], level["cancelled"]) == (
        9,
        6300,
        6300,
        None,
    )
    assert len(lines) == 9 and all(line["max_concurrency"] is None for line in lines)
    assert (
        Decimal(level["ttft_ms"]["p99"])
        == max(Decimal(line["p99_ttft_ms"]) for line in lines)
        == Decimal("9951.535929819987")
    )
    assert level["cost"] == {}
