"""Capacity in time: GPU-seconds reserved by quotas and unused, worked by hand.

Node n1, four whole GPUs, discovered 08:00. acme's quota of `whole` is 4 from 09:00 and 6
from 11:00; beta's is 2 from 08:00. acme holds 2 GPUs 10:00-10:30; beta holds none.
Period [09:00, 12:00):
- reserved: acme 4 × 2 h + 6 × 1 h = 14 GPU-h; beta 2 × 3 h = 6 GPU-h: 20 GPU-h = 72000 s;
- used: acme min(2, 4) × 0.5 h = 1 GPU-h = 3600 s; beta 0;
- unused: 72000 − 3600 = 68400 s.
"""

from __future__ import annotations

import json
from typing import Any

from reconcile.engine.figures import parse_time
from reconcile.engine.pipeline import Pipeline
from reconcile.reports import capacity_time
from tests.test_backfill_estimates import at


def entries() -> list[dict[str, Any]]:
    rows: list[tuple[str, str, str | None, dict[str, Any]]] = []
    for d in "0123":
        rows.append(
            (
                "device.discovered",
                "08:00",
                None,
                {"node": "n1", "device": d, "placement_class": "whole"},
            )
        )
    rows += [
        ("policy.quota", "08:00", "beta", {"placement_class": "whole", "gpus": 2}),
        ("policy.quota", "09:00", "acme", {"placement_class": "whole", "gpus": 4}),
        ("policy.quota", "11:00", "acme", {"placement_class": "whole", "gpus": 6}),
        (
            "allocation.granted",
            "10:00",
            "acme",
            {"allocation_id": "A", "gpus": 2, "node": "n1", "placement_class": "whole"},
        ),
        ("allocation.released", "10:30", "acme", {"allocation_id": "A"}),
    ]
    return [
        {
            "seq": i + 1,
            "type": type_,
            "tenant": tenant,
            "event": json.dumps(
                {
                    "specversion": "1.0",
                    "id": f"e{i}",
                    "source": "kueue://a",
                    "type": type_,
                    "time": at(clock),
                    "data": {"tenant": tenant, **data} if tenant else data,
                }
            ),
        }
        for i, (type_, clock, tenant, data) in enumerate(rows)
    ]


def test_reserved_used_and_unused_by_quota() -> None:
    with Pipeline.of_entries(entries()) as pipe:
        doc = capacity_time.in_time(pipe, parse_time(at("09:00")), parse_time(at("12:00")))
    assert doc is not None
    assert doc["quota"] == [
        {
            "placement_class": "whole",
            "reserved_gpu_s": 72000,
            "used_gpu_s": 3600,
            "unused_gpu_s": 68400,
        }
    ]
