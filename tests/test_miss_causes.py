"""The device timeline and the cause of each missed start (reconcile/RULES.md), worked by hand.

Every scenario has the same fleet: nodes n1 and n2, four whole GPUs each (devices 0-3),
discovered at 08:00, both in fabric domain d1 unless said otherwise. Tenant acme's job j
needs `gpus` whole GPUs, is submitted at 10:00 and promised to start by 10:10; it starts
at 10:30. So the wait examined is [min(submitted, start_by), started) = [10:00, 10:30):
1800 s, of which 0 before the submission. Expected seconds are worked out in the comments
from reconcile/RULES.md's table (first cause that applies, per second), never by running the code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reconcile.engine.pipeline import Pipeline
from reconcile.reports import promises
from tests.conftest import run_cli

DAY = "2026-01-05"


def at(clock: str) -> str:
    return f"{DAY}T{clock}:00Z"


class Fleet:
    def __init__(self, domains: tuple[str, str] = ("d1", "d1")) -> None:
        self.events: list[tuple[str, str | None, dict[str, Any]]] = []
        for node, domain in zip(("n1", "n2"), domains):
            for device in "0123":
                self.add(
                    "device.discovered",
                    "08:00",
                    None,
                    node=node,
                    device=device,
                    fabric_domain=domain,
                    placement_class="whole",
                )

    def add(self, type_: str, clock: str, tenant: str | None, **data: Any) -> None:
        if tenant is not None:
            data = {"tenant": tenant, **data}
        self.events.append((type_, tenant, {"type": type_, "time": at(clock), "data": data}))

    def grant(
        self,
        alloc: str,
        tenant: str,
        gpus: int,
        node: str,
        start: str,
        end: str,
        devices: list[str] | None = None,
    ) -> None:
        extra = {"devices": devices} if devices else {}
        self.add(
            "allocation.granted",
            start,
            tenant,
            allocation_id=alloc,
            gpus=gpus,
            node=node,
            placement_class="whole",
            **extra,
        )
        self.add("allocation.released", end, tenant, allocation_id=alloc)

    def job(self, gpus: int, submitted: str = "10:00", started: str = "10:30") -> None:
        """acme's job j: submitted, promised by 10:10, started at `started` on its own A-j."""
        self.add("job.submitted", submitted, "acme", job_id="j", gpus=gpus)
        self.add(
            "policy.promise",
            "09:00",
            "acme",
            promise_id="p",
            job_id="j",
            start_by=at("10:10"),
            placement_class="whole",
            gpus=gpus,
        )
        self.add(
            "allocation.granted",
            started,
            "acme",
            allocation_id="A-j",
            gpus=gpus,
            node="n1",
            placement_class="whole",
        )
        self.add("job.started", started, "acme", job_id="j", allocation_id="A-j")

    @contextmanager
    def pipeline(self) -> Iterator[Pipeline]:
        entries = [
            {
                "seq": i + 1,
                "type": type_,
                "tenant": tenant,
                "event": json.dumps(
                    {"specversion": "1.0", "id": f"e{i}", "source": "test://f", **event}
                ),
            }
            for i, (type_, tenant, event) in enumerate(self.events)
        ]
        with Pipeline.of_entries(entries) as pipe:
            yield pipe


def miss(fleet: Fleet) -> dict[str, Any]:
    with fleet.pipeline() as pipe:
        (only,) = promises.report(pipe)["misses"]
    found: dict[str, Any] = only
    return found


def test_late_submission_ties_go_to_the_earlier_cause() -> None:
    # submitted 10:20, start_by 10:10: wait [10:10, 10:30); [10:10, 10:20) is before the
    # submission: late_submission 600 s. [10:20, 10:30): every GPU free, 4 on n1 fit: 600 s
    # scheduler. A 600/600 tie goes to the earlier cause of the table: late_submission.
    fleet = Fleet()
    fleet.job(gpus=4, submitted="10:20")
    m = miss(fleet)
    assert m["cause_seconds"] == {"late_submission": 600, "scheduler": 600}
    assert (m["cause"], m["cause_bearer"]) == ("late_submission", "customer")


def test_held_by_tenant() -> None:
    # deactivated at 10:00, queued again at 10:20: [10:00, 10:20) held_by_tenant 1200 s;
    # [10:20, 10:30) it fits on the free fleet: scheduler 600 s.
    fleet = Fleet()
    fleet.job(gpus=4)
    fleet.add("policy.decision", "10:00", "acme", decision="deactivated", job_id="j")
    fleet.add("policy.decision", "10:20", "acme", decision="queued", job_id="j")
    m = miss(fleet)
    assert m["cause_seconds"] == {"held_by_tenant": 1200, "scheduler": 600}
    assert (m["cause"], m["cause_bearer"]) == ("held_by_tenant", "customer")


def test_start_failure() -> None:
    # admitted 10:05, a failed receipt launched 10:10: [10:10, 10:30) start_failure 1200 s;
    # before it ([10:00, 10:10), admitted or not, no failed start yet) it fit: scheduler 600 s.
    fleet = Fleet()
    fleet.job(gpus=4)
    fleet.add("policy.decision", "10:05", "acme", decision="admitted", job_id="j")
    fleet.add(
        "start.receipt",
        "10:10",
        "acme",
        job_id="j",
        allocation_id="A-j",
        placement_class="whole",
        outcome="failed",
        reason="image pull",
        launched_at=at("10:10"),
    )
    m = miss(fleet)
    assert m["cause_seconds"] == {"start_failure": 1200, "scheduler": 600}
    assert (m["cause"], m["cause_bearer"]) == ("start_failure", "provider")


def test_fleet_change() -> None:
    # n1 drained [10:00, 10:20); beta holds 4 GPUs of n2 (no devices listed: 4 of n2) until
    # 10:25. [10:00, 10:20): nothing free; with n1's 4 free it fits: fleet_change 1200 s.
    # [10:20, 10:30): n1 is free again: scheduler 600 s.
    fleet = Fleet()
    fleet.job(gpus=4)
    fleet.grant("B", "beta", 4, "n2", "09:00", "10:25")
    fleet.add(
        "fleet.change",
        "10:00",
        None,
        change_id="c1",
        kind="drain",
        nodes=["n1"],
        started_at=at("10:00"),
        ended_at=at("10:20"),
    )
    m = miss(fleet)
    assert m["cause_seconds"] == {"fleet_change": 1200, "scheduler": 600}
    assert (m["cause"], m["cause_bearer"]) == ("fleet_change", "provider")


def test_fault() -> None:
    # a critical node fault on n1 (no device: all four) open [10:00, 10:20); beta holds n2.
    # [10:00, 10:20): nothing free; with n1 healthy it fits: fault 1200 s; then scheduler 600 s.
    fleet = Fleet()
    fleet.job(gpus=4)
    fleet.grant("B", "beta", 4, "n2", "09:00", "10:25")
    fleet.add("health.fault", "10:00", None, node="n1", code="xid-79", severity="critical")
    fleet.add("health.cleared", "10:20", None, node="n1", code="xid-79")
    m = miss(fleet)
    assert m["cause_seconds"] == {"fault": 1200, "scheduler": 600}
    assert (m["cause"], m["cause_bearer"]) == ("fault", "provider")


def test_quota() -> None:
    # acme's quota of whole is 4; acme already holds 4 on n2 until 10:20 (allocation A-x).
    # [10:00, 10:20): n1 is free (it fits), but 4 held + 4 needed = 8 > 4: quota 1200 s.
    # [10:20, 10:30): 0 + 4 = 4, not over: scheduler 600 s.
    fleet = Fleet()
    fleet.job(gpus=4)
    fleet.add("policy.quota", "09:00", "acme", placement_class="whole", gpus=4)
    fleet.grant("A-x", "acme", 4, "n2", "09:00", "10:20")
    m = miss(fleet)
    assert m["cause_seconds"] == {"quota": 1200, "scheduler": 600}
    assert (m["cause"], m["cause_bearer"]) == ("quota", "customer")


def test_capacity() -> None:
    # beta holds n1's 4 (listed) until 10:20 and 2 of n2 (unlisted) until 10:30: 2 free of
    # 8 < 4 needed: capacity [10:00, 10:20) 1200 s; then n1 is free: scheduler 600 s.
    fleet = Fleet()
    fleet.job(gpus=4)
    fleet.grant("B1", "beta", 4, "n1", "09:00", "10:20", devices=["0", "1", "2", "3"])
    fleet.grant("B2", "beta", 2, "n2", "09:00", "10:30")
    m = miss(fleet)
    assert m["cause_seconds"] == {"capacity": 1200, "scheduler": 600}
    assert (m["cause"], m["cause_bearer"]) == ("capacity", "provider")


def test_fragmentation_on_nodes() -> None:
    # beta holds 2 of n1 and 2 of n2 until 10:20: 4 free in total (enough), 2 per node (4 do
    # not fit on one node): fragmentation 1200 s; then scheduler 600 s.
    fleet = Fleet()
    fleet.job(gpus=4)
    fleet.grant("B1", "beta", 2, "n1", "09:00", "10:20")
    fleet.grant("B2", "beta", 2, "n2", "09:00", "10:20")
    m = miss(fleet)
    assert m["cause_seconds"] == {"fragmentation": 1200, "scheduler": 600}
    assert (m["cause"], m["cause_bearer"]) == ("fragmentation", "provider")


def test_fragmentation_across_fabric_domains() -> None:
    # 8 GPUs are more than a node (4): whole nodes of one domain are needed. n1 is in d1, n2
    # in d2, all free: 8 free in total, at most 4 in one domain: fragmentation for 1800 s.
    fleet = Fleet(domains=("d1", "d2"))
    fleet.job(gpus=8)
    m = miss(fleet)
    assert m["cause_seconds"] == {"fragmentation": 1800}
    assert (m["cause"], m["cause_bearer"]) == ("fragmentation", "provider")


def test_scheduler() -> None:
    # the whole fleet free for the whole wait: it fit and was within quota: scheduler 1800 s.
    fleet = Fleet()
    fleet.job(gpus=4)
    with fleet.pipeline() as pipe:
        doc = promises.report(pipe)
    (m,) = doc["misses"]
    assert m["cause_seconds"] == {"scheduler": 1800}
    assert (m["cause"], m["cause_bearer"]) == ("scheduler", "provider")
    assert doc["causes"] == [
        {"cause": "scheduler", "cause_bearer": "provider", "misses": 1, "seconds": 1800}
    ]


def test_device_timeline_states() -> None:
    # beta's B2 lists no devices and takes 2 of n2: the first two in device order, 0 and 1,
    # from 09:00 to 10:30; n2's 2 and 3 stay free from their discovery at 08:00. A node
    # fault on n2 [10:00, 10:20) makes all four faulted then (faulted comes before allocated).
    fleet = Fleet()
    fleet.grant("B2", "beta", 2, "n2", "09:00", "10:30")
    fleet.add("health.fault", "10:00", None, node="n2", code="xid-79", severity="critical")
    fleet.add("health.cleared", "10:20", None, node="n2", code="xid-79")
    with fleet.pipeline() as pipe:
        rows = (
            pipe.need("device_timeline")
            .execute(
                "SELECT device, strftime(make_timestamp(state_from), '%H:%M'), state, "
                "held_by_allocation "
                "FROM device_timeline WHERE node = 'n2' ORDER BY device, state_from"
            )
            .fetchall()
        )
    assert rows == [
        ("0", "08:00", "free", None),
        ("0", "09:00", "allocated", "B2"),
        ("0", "10:00", "faulted", "B2"),
        ("0", "10:20", "allocated", "B2"),
        ("0", "10:30", "free", None),
        ("1", "08:00", "free", None),
        ("1", "09:00", "allocated", "B2"),
        ("1", "10:00", "faulted", "B2"),
        ("1", "10:20", "allocated", "B2"),
        ("1", "10:30", "free", None),
        ("2", "08:00", "free", None),
        ("2", "10:00", "faulted", None),
        ("2", "10:20", "free", None),
        ("3", "08:00", "free", None),
        ("3", "10:00", "faulted", None),
        ("3", "10:20", "free", None),
    ]


def test_capacity_in_time_adds_up() -> None:
    # period [10:00, 11:00): 8 GPUs of d1 discovered at 08:00: 8 × 3600 = 28800 GPU-s.
    # beta's B (4 of n2, none listed) [09:00, 10:25): allocated 4 × 1500 = 6000.
    # drain of n1 [10:00, 10:20): under change 4 × 1200 = 4800 (the fault's first 10 min too).
    # critical node fault on n1 [10:10, 10:40): faulted [10:20, 10:40): 4 × 1200 = 4800.
    # free: n1 [10:40, 11:00) 4 × 1200 + n2 [10:25, 11:00) 4 × 2100 = 4800 + 8400 = 13200.
    from reconcile.engine.figures import parse_time
    from reconcile.reports import capacity

    fleet = Fleet()
    fleet.grant("B", "beta", 4, "n2", "09:00", "10:25")
    fleet.add(
        "fleet.change",
        "10:00",
        None,
        change_id="c1",
        kind="drain",
        nodes=["n1"],
        started_at=at("10:00"),
        ended_at=at("10:20"),
    )
    fleet.add("health.fault", "10:10", None, node="n1", code="xid-79", severity="critical")
    fleet.add("health.cleared", "10:40", None, node="n1", code="xid-79")
    with fleet.pipeline() as pipe:
        doc = capacity.report(pipe, None, parse_time(at("10:00")), parse_time(at("11:00")))
    assert doc["in_time"] == {
        "since": at("10:00"),
        "until": at("11:00"),
        "groups": [
            {
                "placement_class": "whole",
                "fabric_domain": "d1",
                "discovered_gpu_s": 28800,
                "allocated_gpu_s": 6000,
                "free_gpu_s": 13200,
                "faulted_gpu_s": 4800,
                "under_change_gpu_s": 4800,
            }
        ],
        "quota": [],  # no tenant has a quota
        # per node: n1's xid-79 at 10:10 is its one fault: 1 × 1,000 ÷ 4 GPU-h = 250; its
        # faulted GPU-seconds are the 4,800 above; n2 has none
        "nodes": [
            {
                "node": "n1",
                "faults": 1,
                "critical": 1,
                "gpu_hours": "4.00",
                "faults_per_1000_gpu_hours": "250.00",
                "faulted_gpu_s": 4800,
            },
            {
                "node": "n2",
                "faults": 0,
                "critical": 0,
                "gpu_hours": "4.00",
                "faults_per_1000_gpu_hours": "0.00",
                "faulted_gpu_s": 0,
            },
        ],
    }
    (g,) = doc["in_time"]["groups"]
    states = ("allocated_gpu_s", "free_gpu_s", "faulted_gpu_s", "under_change_gpu_s")
    assert sum(g[k] for k in states) == g["discovered_gpu_s"]


def test_capacity_in_time_adds_up_on_the_report_scenario(tmp_path: Any) -> None:
    # tests/reports_scenario.py: five devices, faults on n1, n2/0 (and n2/1, not discovered)
    from reconcile.reports import report
    from tests.reports_scenario import sqlite_store

    store = sqlite_store(tmp_path)
    try:
        groups = report(store, "capacity")["in_time"]["groups"]
    finally:
        store.close()
    states = ("allocated_gpu_s", "free_gpu_s", "faulted_gpu_s", "under_change_gpu_s")
    assert groups and all(sum(g[k] for k in states) == g["discovered_gpu_s"] for g in groups)
    # n1's two whole GPUs were faulted by the node fault [10:30, 10:59): 2 × 1740 s
    (whole,) = [g for g in groups if g["placement_class"] == "whole"]
    assert whole["faulted_gpu_s"] == 3480


def test_a_tenants_report_judges_the_cause_on_the_whole_fleet(tmp_path: Path) -> None:
    # The capacity scenario (beta holds 6 of 8 until 10:20: capacity 1200 s, then scheduler
    # 600 s), ingested and reported for acme alone. Judged on acme's entries only, beta's
    # grants would be missing and every second would be `scheduler`; judged on the whole
    # fleet, as the unscoped report does, it is `capacity`. acme's output names no id of
    # beta's (its tenant, allocations): the figures are counts.
    fleet = Fleet()
    fleet.job(gpus=4)
    fleet.grant("B1-beta-secret", "beta", 4, "n1", "09:00", "10:20", devices=["0", "1", "2", "3"])
    fleet.grant("B2-beta-secret", "beta", 2, "n2", "09:00", "10:30")
    lines = [
        json.dumps({"specversion": "1.0", "id": f"e{i}", "source": "slurm://a", **event})
        for i, (_, _, event) in enumerate(fleet.events)
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run_cli("ingest", "--db", db, str(path))[0] == 0
    outputs: dict[tuple[str, ...], str] = {}
    for scope in ((), ("--tenant", "acme")):
        code, out, err = run_cli("report", "promises", "--db", db, *scope, "--format", "json")
        assert code == 0, err
        outputs[scope] = out
    whole, mine = (json.loads(outputs[s]) for s in ((), ("--tenant", "acme")))
    (m,) = mine["misses"]
    assert (m["cause"], m["cause_seconds"]) == ("capacity", {"capacity": 1200, "scheduler": 600})
    assert [(w["cause"], w["cause_seconds"]) for w in whole["misses"]] == [
        (m["cause"], m["cause_seconds"])
    ]
    for scope in ((), ("--tenant", "acme")):
        code, out, _ = run_cli("report", "promises", "--db", db, *scope, "--format", "csv")
        outputs[scope + ("csv",)] = out
    for key in (("--tenant", "acme"), ("--tenant", "acme", "csv")):
        assert "beta" not in outputs[key] and "secret" not in outputs[key]
