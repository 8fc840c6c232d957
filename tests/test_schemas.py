"""Event models: required fields, money, times, unknown fields, JSON Schema drift."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from schemas import DATA_MODELS, Origin, canonical_event, rejections, validate_event
from schemas.export import SCHEMA_DIR, schema_texts
from tests.conftest import event

#: A minimal valid `data` for every type: each required field and nothing more.
MINIMAL: dict[str, dict[str, Any]] = {
    "device.discovered": {"node": "n1", "device": "GPU-1"},
    "allocation.granted": {"tenant": "t", "allocation_id": "a", "gpus": 1},
    "allocation.released": {"tenant": "t", "allocation_id": "a"},
    "job.submitted": {"tenant": "t", "job_id": "j"},
    "job.started": {"tenant": "t", "job_id": "j", "allocation_id": "a"},
    "job.progress": {"tenant": "t", "job_id": "j", "step": 0},
    "job.completed": {"tenant": "t", "job_id": "j"},
    "job.failed": {"tenant": "t", "job_id": "j", "cause": "hardware"},
    "job.cancelled": {"tenant": "t", "job_id": "j"},
    "checkpoint.started": {"tenant": "t", "job_id": "j", "checkpoint_id": "c", "step": 1},
    "checkpoint.saved": {"tenant": "t", "job_id": "j", "checkpoint_id": "c", "step": 1},
    "checkpoint.restored": {"tenant": "t", "job_id": "j", "checkpoint_id": "c", "step": 1},
    "policy.terms": {"tenant": "t"},
    "policy.promise": {
        "tenant": "t",
        "promise_id": "p",
        "job_id": "j",
        "start_by": "2026-01-05T11:00:00Z",
    },
    "policy.decision": {"tenant": "t", "decision": "admitted"},
    "policy.quota": {"tenant": "t", "placement_class": "whole", "gpus": 0},
    "health.fault": {"fabric_domain": "nvl-1", "code": "nvlink-down"},
    "health.cleared": {"node": "n1", "code": "xid-79"},
    "billing.line": {
        "tenant": "t",
        "invoice_id": "i",
        "line_id": "l",
        "period_start": "2026-01-05T10:00:00Z",
        "period_end": "2026-01-05T11:00:00Z",
        "gpus": 0,
        "amount": "1.00",
        "currency": "USD",
    },
    "work.accepted": {"tenant": "t", "job_id": "j", "result_id": "r"},
    "work.rejected": {"tenant": "t", "job_id": "j", "result_id": "r"},
    "inference.window": {
        "tenant": "t",
        "job_id": "j",
        "window_start": "2026-01-05T10:00:00Z",
        "window_end": "2026-01-05T10:01:00Z",
        "requests": 10,
        "accepted": 10,
    },
    "placement.observed": {
        "tenant": "t",
        "allocation_id": "a",
        "node": "n1",
        "topology": {"gpus": [{"name": "GPU0"}], "nics": [], "links": []},
    },
    "probe.result": {
        "tenant": "t",
        "allocation_id": "a",
        "probe": "nccl-tests",
        "test": "all_reduce_perf",
        "figures": [{"name": "avg_busbw", "value": "68.4048", "unit": "GB/s"}],
    },
    "start.receipt": {
        "tenant": "t",
        "job_id": "j",
        "allocation_id": "a",
        "placement_class": "mig",
        "launched_at": "2026-01-05T10:00:00Z",
    },
    "fleet.change": {
        "change_id": "c",
        "kind": "driver-upgrade",
        "started_at": "2026-01-05T10:00:00Z",
    },
    "device.counters": {
        "node": "n1",
        "device": 0,
        "window_start": "2026-01-05T09:59:30Z",
        "window_end": "2026-01-05T10:00:00Z",
        "samples": 1,
    },
    "job.counters": {
        "tenant": "t",
        "job_id": "j",
        "node": "n1",
        "device": 0,
        "window_start": "2026-01-05T09:59:30Z",
        "window_end": "2026-01-05T10:00:00Z",
        "samples": 1,
    },
    "dispute.answer": {
        "tenant": "t",
        "invoice_id": "i",
        "line_id": "l",
        "category": "unallocated",
        "state": "accepted",
        "finding_amount": "1.00",
        "finding_gpu_seconds": "3600",
        "revision": 1,
        "signer": "provider",
        "signature": "A" * 91 + "=",
    },
}


def error_of(data: dict[str, Any], type_: str, **envelope: Any) -> tuple[str, str]:
    raw = event(type_, "e1", data, **envelope)
    with pytest.raises(ValidationError) as info:
        validate_event(raw)
    rejected = rejections(info.value, Origin("f.jsonl", 7), b"raw")
    return rejected.field, rejected.reason


def test_every_type_has_a_minimal_example() -> None:
    assert set(MINIMAL) == set(DATA_MODELS)


@pytest.mark.parametrize("type_", sorted(MINIMAL))
def test_minimal_event_validates(type_: str) -> None:
    assert validate_event(event(type_, "e1", MINIMAL[type_])).type == type_


REQUIRED = [
    (t, f) for t, d in MINIMAL.items() for f in d if not (t.startswith("health.") and f != "code")
]


@pytest.mark.parametrize(("type_", "field"), REQUIRED)
def test_each_required_field_is_enforced(type_: str, field: str) -> None:
    data = {k: v for k, v in MINIMAL[type_].items() if k != field}
    assert error_of(data, type_) == (f"data.{field}", "Field required")


def test_health_needs_a_place() -> None:
    assert error_of({"code": "xid-79"}, "health.fault") == (
        "data",
        "at least one of node, device, fabric_domain is required",
    )


def test_billing_line_with_gpus_needs_an_allocation() -> None:
    data = dict(MINIMAL["billing.line"], gpus=8)
    assert error_of(data, "billing.line") == ("data", "allocation_id is required when gpus > 0")


def test_money_is_exact_and_never_a_float() -> None:
    data = dict(MINIMAL["billing.line"], amount="0.00000000001")
    line = validate_event(event("billing.line", "b", data)).data
    assert line.amount == Decimal("0.00000000001")  # type: ignore[attr-defined]
    field, reason = error_of(dict(MINIMAL["billing.line"], amount=1.5), "billing.line")
    assert (field, reason) == ("data.amount", "money must be a decimal string, not a float: 1.5")


def test_money_keeps_its_scale_in_canonical_bytes() -> None:
    ev = validate_event(
        event("billing.line", "b", dict(MINIMAL["billing.line"], amount="12.3400"))
    )
    assert b'"amount":"12.3400"' in canonical_event(ev)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("2026-01-05T10:00:00Z", "2026-01-05T10:00:00Z"),
        ("2026-01-05 10:00:00Z", "2026-01-05T10:00:00Z"),
        ("2026-01-05T12:30:00+02:30", "2026-01-05T10:00:00Z"),  # offset: converted
        ("2026-01-05T05:00:00-05:00", "2026-01-05T10:00:00Z"),
        ("2026-01-05t10:00:00.5z", "2026-01-05T10:00:00.500000Z"),
        ("2026-01-05T10:00:00.123456789Z", "2026-01-05T10:00:00.123456Z"),
    ],
)
def test_times_become_utc(given: str, stored: str) -> None:
    ev = validate_event(event("job.completed", "c", MINIMAL["job.completed"], time=given))
    assert f'"time":"{stored}"'.encode() in canonical_event(ev)


@pytest.mark.parametrize("bad", ["1767607200", "2026-01-05", "yesterday", 1767607200])
def test_times_that_would_be_guessed_are_refused(bad: Any) -> None:
    raw = event("job.completed", "c", MINIMAL["job.completed"], time=bad)
    with pytest.raises(ValidationError):
        validate_event(raw)


@pytest.mark.parametrize(
    "naive", ["2026-01-05T10:00:00", "2026-01-05 10:00:00", "2026-01-05T10:00:00.5"]
)
def test_a_time_with_no_zone_is_refused_unless_a_parser_says_it_means_utc(naive: str) -> None:
    field, reason = error_of(MINIMAL["job.completed"], "job.completed", time=naive)
    assert (field, reason) == (
        "time",
        f"a time with no zone: {naive!r} (RFC 3339 requires Z or an offset)",
    )
    ev = validate_event(
        event("job.completed", "c", MINIMAL["job.completed"], time=naive), naive_is_utc=True
    )
    assert ev.time == datetime(
        2026, 1, 5, 10, 0, 0, 500000 if naive.endswith(".5") else 0, tzinfo=timezone.utc
    )


def test_counts_are_strict_integers() -> None:
    assert (
        error_of(dict(MINIMAL["allocation.granted"], gpus="8"), "allocation.granted")[0]
        == "data.gpus"
    )
    assert (
        error_of(dict(MINIMAL["allocation.granted"], gpus=0), "allocation.granted")[0]
        == "data.gpus"
    )
    assert error_of(dict(MINIMAL["job.progress"], step=2**53), "job.progress")[0] == "data.step"


def test_unknown_data_fields_and_extension_attributes_are_kept() -> None:
    data = dict(MINIMAL["job.progress"], gpu_util=0.93, note=None, nested={"b": [1, "x"]})
    ev = validate_event(event("job.progress", "p", data, traceparent="00-abc"))
    body = canonical_event(ev)
    assert b'"gpu_util":0.93' in body and b'"note":null' in body
    assert b'"nested":{"b":[1,"x"]}' in body and b'"traceparent":"00-abc"' in body


def test_defaults_are_written_out() -> None:
    ev = validate_event(event("allocation.granted", "a", MINIMAL["allocation.granted"]))
    assert b'"placement_class":"whole"' in canonical_event(ev)


def test_unknown_type_is_named() -> None:
    assert error_of({}, "job.teleported") == ("type", "unknown event type 'job.teleported'")


def test_exported_json_schemas_match_the_models() -> None:
    expected = schema_texts()
    on_disk = {
        p.relative_to(SCHEMA_DIR).as_posix(): p.read_text(encoding="utf-8")
        for p in SCHEMA_DIR.rglob("*.json")
    }
    assert sorted(on_disk) == sorted(expected), "run `make schemas`"
    for name, text in expected.items():
        assert on_disk[name] == text, f"{name} drifted from the models: run `make schemas`"


def test_a_grant_names_its_nodes_as_a_bounded_list_of_names() -> None:
    grant = {
        "tenant": "t",
        "allocation_id": "a",
        "gpus": 16,
        "nodes": ["gpu-node-13", "gpu-node-14"],
    }
    assert validate_event(event("allocation.granted", "g1", grant)).data.model_dump()["nodes"] == [
        "gpu-node-13",
        "gpu-node-14",
    ]
    assert (
        error_of({**grant, "nodes": "gpu-node-[13-14]"}, "allocation.granted")[0] == "data.nodes"
    )
    assert (
        error_of({**grant, "nodes": ["gpu-node-13", ""]}, "allocation.granted")[0]
        == "data.nodes[1]"
    )
    too_many = [f"n{i}" for i in range(100_001)]  # MAX_NODES is 100,000
    assert error_of({**grant, "nodes": too_many}, "allocation.granted") == (
        "data.nodes",
        "List should have at most 100000 items after validation, not 100001",
    )
