"""Faults per node (`report capacity`, in_time.nodes), worked by hand.

n1 has GPUs 0 and 1, n2 has GPU 0, all discovered at 08:00. Period [10:00, 12:00):
- n1: a critical xid-79 on GPU 0 at 10:30, cleared at 11:00, and a warning xid-13 on GPU 1
  at 10:45: 2 faults, 1 critical; 2 GPUs × 2 h = 4 GPU-hours; 2 × 1,000 ÷ 4 = 500 per
  1,000 GPU-hours; faulted GPU 0 for 10:30-11:00 = 1,800 GPU-seconds.
- n2: a critical xid-48 at 09:00, before the period, open until 10:15: 0 faults in the
  period, 2 GPU-hours, rate 0; faulted 10:00-10:15 = 900 GPU-seconds.
- a fabric fault (no node) at 10:20 is counted on no node.
"""

from __future__ import annotations

import json
from typing import Any

from reconcile.engine.figures import parse_time
from reconcile.engine.pipeline import Pipeline
from reconcile.reports import capacity_time
from tests.test_backfill_estimates import at

ROWS: list[tuple[str, str, dict[str, Any]]] = [
    ("device.discovered", "08:00", {"node": "n1", "device": "0"}),
    ("device.discovered", "08:00", {"node": "n1", "device": "1"}),
    ("device.discovered", "08:00", {"node": "n2", "device": "0"}),
    ("health.fault", "09:00", {"node": "n2", "code": "xid-48", "severity": "critical"}),
    ("health.cleared", "10:15", {"node": "n2", "code": "xid-48"}),
    ("health.fault", "10:20", {"fabric_domain": "nvl-1", "code": "nvlink-down"}),
    (
        "health.fault",
        "10:30",
        {"node": "n1", "device": "0", "code": "xid-79", "severity": "critical"},
    ),
    (
        "health.fault",
        "10:45",
        {"node": "n1", "device": "1", "code": "xid-13", "severity": "warning"},
    ),
    ("health.cleared", "11:00", {"node": "n1", "device": "0", "code": "xid-79"}),
]


def entries() -> list[dict[str, Any]]:
    return [
        {
            "seq": i + 1,
            "type": type_,
            "tenant": None,
            "event": json.dumps(
                {
                    "specversion": "1.0",
                    "id": f"e{i}",
                    "source": "dcgm://fleet",
                    "type": type_,
                    "time": at(clock),
                    "data": data,
                }
            ),
        }
        for i, (type_, clock, data) in enumerate(ROWS)
    ]


def test_faults_per_node_and_their_rate() -> None:
    with Pipeline.of_entries(entries()) as pipe:
        doc = capacity_time.in_time(pipe, parse_time(at("10:00")), parse_time(at("12:00")))
    assert doc is not None
    assert doc["nodes"] == [
        {
            "node": "n1",
            "faults": 2,
            "critical": 1,
            "gpu_hours": "4.00",
            "faults_per_1000_gpu_hours": "500.00",
            "faulted_gpu_s": 1800,
        },
        {
            "node": "n2",
            "faults": 0,
            "critical": 0,
            "gpu_hours": "2.00",
            "faults_per_1000_gpu_hours": "0.00",
            "faulted_gpu_s": 900,
        },
    ]
