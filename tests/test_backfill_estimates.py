"""Backfill and estimates (`report promises`' `ahead` and `estimates`), worked by hand.

Fleet: node n1 with four whole GPUs (0-3), discovered at 08:00. Jobs (queue, submitted,
started, ended, time limit, elapsed):

- acme m: gpu, 09:00, 09:01, 09:11, limit 3600 s, ran 600 s (600 × 2 < 3600: pessimistic);
- acme j: gpu, 10:00, promised by 10:10, started 10:30 on 2 GPUs, ended 11:00, limit
  3600 s, ran 1800 s (1800 × 2 = 3600, not less; nor 1800 ≥ 3600: accurate);
- beta k: batch, 10:05, backfilled and started 10:06 on GPUs 2-3, ended 10:16, limit
  600 s, ran 600 s (600 ≥ 600: optimistic);
- beta q: batch, 10:20, started 10:40 (after j): never ahead of j; no time limit.

j's wait [10:00, 10:30): GPUs 0-1 are free all along, j needs 2: it fits, no quota:
scheduler 1800 s. Ahead of j: the jobs of class whole submitted after 10:00 and started
before 10:30: k only (m was submitted before j; q started after). k was backfilled.
"""

from __future__ import annotations

import json
from typing import Any

from reconcile.engine.pipeline import Pipeline
from reconcile.reports import promises

DAY = "2026-01-05"


def at(clock: str) -> str:
    return f"{DAY}T{clock}:00Z"


def events() -> list[dict[str, Any]]:
    out: list[tuple[str, str, str | None, dict[str, Any]]] = []

    def add(type_: str, clock: str, tenant: str | None, **data: Any) -> None:
        out.append((type_, clock, tenant, {"tenant": tenant, **data} if tenant else data))

    for device in "0123":
        add("device.discovered", "08:00", None, node="n1", device=device, placement_class="whole")

    def job(
        tenant: str,
        job_id: str,
        queue: str,
        times: tuple[str, str, str | None],
        devices: list[str],
        limit: int | None,
        ran: int | None,
    ) -> None:
        submitted, started, ended = times
        add("job.submitted", submitted, tenant, job_id=job_id, queue=queue, gpus=len(devices))
        add(
            "allocation.granted",
            started,
            tenant,
            allocation_id=f"A-{job_id}",
            gpus=len(devices),
            node="n1",
            devices=devices,
            placement_class="whole",
        )
        add("job.started", started, tenant, job_id=job_id, allocation_id=f"A-{job_id}")
        if ended is not None:
            extra = {"timelimit_s": limit, "elapsed_s": ran} if limit is not None else {}
            add("job.completed", ended, tenant, job_id=job_id, **extra)
            add("allocation.released", ended, tenant, allocation_id=f"A-{job_id}")

    add(
        "policy.promise",
        "09:00",
        "acme",
        promise_id="p",
        job_id="j",
        start_by=at("10:10"),
        placement_class="whole",
        gpus=2,
    )
    job("acme", "m", "gpu", ("09:00", "09:01", "09:11"), ["0"], 3600, 600)
    job("beta", "k", "batch", ("10:05", "10:06", "10:16"), ["2", "3"], 600, 600)
    add("policy.decision", "10:06", "beta", decision="backfilled", job_id="k", reason="backfill")
    job("acme", "j", "gpu", ("10:00", "10:30", "11:00"), ["0", "1"], 3600, 1800)
    job("beta", "q", "batch", ("10:20", "10:40", None), ["2"], None, None)
    return [
        {
            "seq": i + 1,
            "type": type_,
            "tenant": tenant,
            "event": json.dumps(
                {
                    "specversion": "1.0",
                    "id": f"e{i}",
                    "source": "slurm://a",
                    "type": type_,
                    "time": at(clock),
                    "data": data,
                }
            ),
        }
        for i, (type_, clock, tenant, data) in enumerate(sorted(out, key=lambda e: e[1]))
    ]


def test_the_operator_sees_who_was_ahead_and_every_queues_estimates() -> None:
    with Pipeline.of_entries(events()) as pipe:
        doc = promises.report(pipe)
    (miss,) = doc["misses"]
    assert (miss["cause"], miss["cause_seconds"]) == ("scheduler", {"scheduler": 1800})
    assert miss["ahead"] == {
        "jobs": 1,
        "backfilled": 1,
        "seen": [
            {
                "tenant": "beta",
                "job_id": "k",
                "submitted": at("10:05"),
                "started": at("10:06"),
                "backfilled": True,
            }
        ],
        "others": 0,
        "scheduler_s": 1800,
    }
    # batch: k alone: 600 asked, 600 ran (share 1.0), optimistic. gpu: m and j: 3600 + 3600
    # = 7200 asked, 600 + 1800 = 2400 ran (share 0.3333), m pessimistic, j accurate.
    assert doc["estimates"] == [
        {
            "queue": "batch",
            "jobs": 1,
            "requested_s": 600,
            "elapsed_s": 600,
            "used_share": 1.0,
            "optimistic": 1,
            "pessimistic": 0,
            "accurate": 0,
        },
        {
            "queue": "gpu",
            "jobs": 2,
            "requested_s": 7200,
            "elapsed_s": 2400,
            "used_share": 0.3333,
            "optimistic": 0,
            "pessimistic": 1,
            "accurate": 1,
        },
    ]


def test_a_tenant_sees_its_own_queues_and_only_a_count_of_others_ahead() -> None:
    with Pipeline.of_entries(events()) as pipe:
        doc = promises.report(pipe, "acme")
    (miss,) = doc["misses"]
    assert miss["ahead"] == {
        "jobs": 1,
        "backfilled": 1,
        "seen": [],
        "others": 1,
        "scheduler_s": 1800,
    }
    assert [e["queue"] for e in doc["estimates"]] == ["gpu"]
    assert "beta" not in json.dumps(doc)
