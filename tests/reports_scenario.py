"""One small hand-built fleet for the report and packet tests (tests/test_reports.py,
tests/test_packet.py). Every figure those tests expect is worked out by hand from the
events below (times on 2026-01-05, UTC); the arithmetic is in the tests' comments.

Tenant acme, five devices, four allocations' worth of jobs:

    device   n1/0, n1/1 (whole)   n2/0 (mig, no profile)   n3/0 (no class)   n4/0 (no class)

    J1  promise P1 start_by 10:05 complete_by 11:00 whole      submitted 09:55
        A1 whole n1 [0] granted 10:00, released 10:20; admitted 10:00 (J1, A1); placed 10:01 (J1)
        started 10:02; progress 10:04 10:06 10:09 10:10 10:14; checkpoint c1 [10:10, 10:12)
        completed 10:16; accepted (r1); line L1 A1 [10:00, 10:20) 1 GPU 2.40 USD
    J2  promise P2 start_by 10:10 complete_by 12:00 (no class)  submitted 09:58
        A2 mig 1g.10gb n2 [0] granted 10:20, released 11:00
        decisions (ledger order): admitted 10:20 (J2, A2), queued 10:00 (J2), placed 10:21 (J2)
        attempt 1 started 10:25, progress 10:30 10:31 10:33, checkpoint c2 [10:32, 10:33),
        failed 10:35 (hardware, "XID 79 on GPU 0"); fault xid-79 n2/0 10:34, cleared 10:50
        attempt 2 started 10:40, restored c2 10:41, progress 10:45 10:50, completed 11:00
        rejected (r2); line L2 A2 [10:20, 11:00) 1 GPU 4.80 USD
    J3  promise P3 start_by 10:30 complete_by 10:50 timeslice   (no submission)
        queued 10:00 (J3); admitted 10:05 (A3 only); A3 timeslice n3 granted 10:05, released 11:15
        placed 10:06 (pod j3-pod-x); started 10:06 (pod j3-pod-x); progress 10:10 10:20 10:25
        completed 11:10; accepted (r3); line L3 A3 [10:05, 11:15) 1 GPU 1.40 USD
    J4  promise P4 start_by 10:45 (no complete_by) timeslice; started 10:40 on A3 (shares it
        with J3), no progress, completed 11:00
    J5  promise P5 start_by 11:00 whole; submitted 10:50, never started
    J6  promise P6 start_by 12:00 (no class); nothing else
    L4  credit line, no allocation, -0.60 USD
    other faults: n1 10:30 (not A2's node), n2/1 10:36 (not A2's device), n2/0 13:00 (after
    the packet's window); all cleared.

acme's horizon (its latest event time) is 11:20 (the acceptance of r3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger import Appender, Store, append_stream
from schemas import Accepted, Origin, validate_event

DAY = "2026-01-05"
FLEET_TYPES = ("device.discovered", "health.fault", "health.cleared")


def at(clock: str) -> str:
    return f"{DAY}T{clock}:00Z" if clock.count(":") == 1 else f"{DAY}T{clock}Z"


class Events:
    def __init__(self, tenant: str = "acme") -> None:
        self.tenant = tenant
        self.items: list[dict[str, Any]] = []

    def add(self, type_: str, clock: str, **data: Any) -> None:
        if type_ not in FLEET_TYPES:
            data = {"tenant": self.tenant, **data}
        self.items.append(
            {
                "specversion": "1.0",
                "id": f"e{len(self.items) + 1}",
                "source": "test://reports",
                "type": type_,
                "time": at(clock),
                "data": data,
            }
        )

    def steps(self, job: str, *clocks: str) -> None:
        for step, clock in enumerate(clocks, 1):
            self.add("job.progress", clock, job_id=job, step=step, units=step * 100)


def fleet() -> list[dict[str, Any]]:
    e = Events()
    e.add("device.discovered", "09:00", node="n1", device=0, placement_class="whole")
    e.add("device.discovered", "09:00", node="n1", device=1, placement_class="whole")
    e.add("device.discovered", "09:00", node="n2", device=0, placement_class="mig")
    e.add("device.discovered", "09:00", node="n3", device=0)
    e.add("device.discovered", "09:00", node="n4", device=0)
    _promises(e)
    _job1(e)
    _job2(e)
    _job3_and_4(e)
    e.add("job.submitted", "10:50", job_id="J5")
    e.add(
        "billing.line",
        "11:15",
        invoice_id="INV-1",
        line_id="L4",
        period_start=at("10:00"),
        period_end=at("11:00"),
        gpus=0,
        amount="-0.60",
        currency="USD",
        category="credit",
    )
    for clock, place in (
        ("10:30", {"node": "n1"}),
        ("10:36", {"node": "n2", "device": 1}),
        ("13:00", {"node": "n2", "device": 0}),
    ):
        e.add("health.fault", clock, code="xid-48", severity="critical", **place)
        e.add(
            "health.cleared",
            clock[:3] + "59" if clock != "13:00" else "13:30",
            code="xid-48",
            **place,
        )
    return e.items


def _promises(e: Events) -> None:
    e.add(
        "policy.promise",
        "09:50",
        promise_id="P1",
        job_id="J1",
        start_by=at("10:05"),
        complete_by=at("11:00"),
        placement_class="whole",
    )
    e.add(
        "policy.promise",
        "09:50",
        promise_id="P2",
        job_id="J2",
        start_by=at("10:10"),
        complete_by=at("12:00"),
    )
    e.add(
        "policy.promise",
        "09:40",
        promise_id="P3",
        job_id="J3",
        start_by=at("10:30"),
        complete_by=at("10:50"),
        placement_class="timeslice",
    )
    e.add(
        "policy.promise",
        "09:40",
        promise_id="P4",
        job_id="J4",
        start_by=at("10:45"),
        placement_class="timeslice",
    )
    e.add(
        "policy.promise",
        "09:40",
        promise_id="P5",
        job_id="J5",
        start_by=at("11:00"),
        placement_class="whole",
    )
    e.add("policy.promise", "09:40", promise_id="P6", job_id="J6", start_by=at("12:00"))


def _job1(e: Events) -> None:
    e.add("job.submitted", "09:55", job_id="J1", gpus=1)
    e.add("policy.decision", "10:00", decision="admitted", job_id="J1", allocation_id="A1")
    e.add(
        "allocation.granted",
        "10:00",
        allocation_id="A1",
        gpus=1,
        node="n1",
        devices=[0],
        placement_class="whole",
    )
    e.add("policy.decision", "10:01", decision="placed", job_id="J1")
    e.add("job.started", "10:02", job_id="J1", allocation_id="A1")
    e.steps("J1", "10:04", "10:06", "10:09", "10:10", "10:14")
    e.add("checkpoint.started", "10:10", job_id="J1", checkpoint_id="c1", step=4)
    e.add("checkpoint.saved", "10:12", job_id="J1", checkpoint_id="c1", step=4)
    e.add("job.completed", "10:16", job_id="J1")
    e.add("allocation.released", "10:20", allocation_id="A1")
    e.add(
        "billing.line",
        "10:20",
        invoice_id="INV-1",
        line_id="L1",
        allocation_id="A1",
        period_start=at("10:00"),
        period_end=at("10:20"),
        gpus=1,
        amount="2.40",
        currency="USD",
    )
    e.add("work.accepted", "10:30", job_id="J1", result_id="r1")


def _job2(e: Events) -> None:
    e.add("job.submitted", "09:58", job_id="J2", gpus=1)
    e.add(
        "policy.decision",
        "10:20",
        decision="admitted",
        job_id="J2",
        allocation_id="A2",
        reason="Admitted",
    )
    e.add(
        "policy.decision", "10:00", decision="queued", job_id="J2", reason="Pending"
    )  # later in the ledger, earlier in time
    e.add(
        "allocation.granted",
        "10:20",
        allocation_id="A2",
        gpus=1,
        node="n2",
        devices=[0],
        placement_class="mig",
        profile="1g.10gb",
    )
    e.add("policy.decision", "10:21", decision="placed", job_id="J2")
    e.add("job.started", "10:25", job_id="J2", allocation_id="A2", attempt=1)
    e.steps("J2", "10:30", "10:31", "10:33")
    e.add("checkpoint.started", "10:32", job_id="J2", checkpoint_id="c2", step=3)
    e.add("checkpoint.saved", "10:33", job_id="J2", checkpoint_id="c2", step=3)
    e.add("health.fault", "10:34", node="n2", device=0, code="xid-79", severity="critical")
    e.add("job.failed", "10:35", job_id="J2", cause="hardware", detail="XID 79 on GPU 0")
    e.add("job.started", "10:40", job_id="J2", allocation_id="A2", attempt=2)
    e.add("checkpoint.restored", "10:41", job_id="J2", checkpoint_id="c2", step=3)
    e.add("job.progress", "10:45", job_id="J2", step=4, units=400)
    e.add("health.cleared", "10:50", node="n2", device=0, code="xid-79")
    e.add("job.progress", "10:50", job_id="J2", step=5, units=500)
    e.add("job.completed", "11:00", job_id="J2")
    e.add("allocation.released", "11:00", allocation_id="A2")
    e.add(
        "billing.line",
        "11:00",
        invoice_id="INV-1",
        line_id="L2",
        allocation_id="A2",
        period_start=at("10:20"),
        period_end=at("11:00"),
        gpus=1,
        amount="4.80",
        currency="USD",
    )
    e.add("work.rejected", "11:05", job_id="J2", result_id="r2")


def _job3_and_4(e: Events) -> None:
    e.add("policy.decision", "10:00", decision="queued", job_id="J3")
    e.add("policy.decision", "10:05", decision="admitted", allocation_id="A3")
    e.add(
        "allocation.granted",
        "10:05",
        allocation_id="A3",
        gpus=1,
        node="n3",
        placement_class="timeslice",
    )
    e.add("policy.decision", "10:06", decision="placed", job_id="j3-pod-x")
    e.add("job.started", "10:06", job_id="J3", allocation_id="A3", pod="j3-pod-x")
    e.steps("J3", "10:10", "10:20", "10:25")
    e.add("job.started", "10:40", job_id="J4", allocation_id="A3")
    e.add("job.completed", "11:00", job_id="J4")
    e.add("job.completed", "11:10", job_id="J3")
    e.add("allocation.released", "11:15", allocation_id="A3")
    e.add(
        "billing.line",
        "11:15",
        invoice_id="INV-1",
        line_id="L3",
        allocation_id="A3",
        period_start=at("10:05"),
        period_end=at("11:15"),
        gpus=1,
        amount="1.40",
        currency="USD",
    )
    e.add("work.accepted", "11:20", job_id="J3", result_id="r3")


def make_store(url: str) -> Store:
    """A store at `url` holding the fleet, appended in list order."""
    return make_store_of(url, fleet())


def make_store_of(url: str, events: list[dict[str, Any]]) -> Store:
    store = Store(url)
    store.init()
    records = [
        Accepted.of(validate_event(e), Origin("scenario", i)) for i, e in enumerate(events, 1)
    ]
    report = append_stream(Appender(store), records, 5000)
    assert report.appended == len(records), report
    return store


def sqlite_store(folder: Path) -> Store:
    return make_store(f"sqlite:///{folder / 'reports.db'}")
