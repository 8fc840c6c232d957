"""Bounds at the door (docs/events.md, docs/canonical-and-bounds.md): each bound's edge is
accepted, one step past it is quarantined with its field and reason; and absurd values far
past the bounds, ingested through the CLI, are quarantined while every later command still runs.
Edges are worked out by hand from the rules in schemas/types.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from cli import main
from ingest.base import event_from_object
from schemas import Accepted, Origin, Rejected, rejections, validate_event, validate_event_json
from schemas.records import EventTooLarge
from tests.conftest import event

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
ORIGIN = Origin("bounds.jsonl", 4)
LINE = {
    "tenant": "t",
    "invoice_id": "i",
    "line_id": "l",
    "allocation_id": "a",
    "period_start": "2026-01-05T10:00:00Z",
    "period_end": "2026-01-05T11:00:00Z",
    "gpus": 8,
    "amount": "16.00",
    "currency": "USD",
}
LE = "Input should be less than or equal to {}"
RECEIPT = {
    "tenant": "t",
    "job_id": "j",
    "allocation_id": "a",
    "placement_class": "whole",
    "launched_at": "2026-06-02T12:00:00Z",
}
CHANGE = {
    "change_id": "c",
    "kind": "drain",
    "started_at": "2026-01-05T10:00:00Z",
    "ended_at": "2026-06-02T12:00:00Z",
}


def outcome(type_: str, data: dict[str, Any], **envelope: Any) -> tuple[str, str] | None:
    """None when the event is accepted; else the (field, reason) its quarantine row holds."""
    raw = event(type_, "e1", data, **envelope)
    try:
        Accepted.of(validate_event(raw, now=NOW), ORIGIN)
    except ValidationError as exc:
        rejected = rejections(exc, ORIGIN, b"")
        return rejected.field, rejected.reason
    return None


def line(**changes: Any) -> dict[str, Any]:
    return {**LINE, **changes}


#: name → (type, data, envelope, expected): None for accepted, else (field, reason).
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any], tuple[str, str] | None]] = {
    # GPU counts: at most 1,000,000
    "gpus 1,000,000": (
        "allocation.granted",
        {"tenant": "t", "allocation_id": "a", "gpus": 1_000_000},
        {},
        None,
    ),
    "gpus 1,000,001": (
        "allocation.granted",
        {"tenant": "t", "allocation_id": "a", "gpus": 1_000_001},
        {},
        ("data.gpus", LE.format(1_000_000)),
    ),
    "gpus 10**11 (absurd)": (
        "job.submitted",
        {"tenant": "t", "job_id": "j", "gpus": 10**11},
        {},
        ("data.gpus", LE.format(1_000_000)),
    ),
    "promise gpus 1,000,001": (
        "policy.promise",
        {
            "tenant": "t",
            "promise_id": "p",
            "job_id": "j",
            "start_by": "2026-01-05T11:00:00Z",
            "gpus": 1_000_001,
        },
        {},
        ("data.gpus", LE.format(1_000_000)),
    ),
    "line gpus 1,000,001": (
        "billing.line",
        line(gpus=1_000_001),
        {},
        ("data.gpus", LE.format(1_000_000)),
    ),
    # declared integers: within ±(2**53 - 1)
    "priority 2**53 - 1": (
        "job.submitted",
        {"tenant": "t", "job_id": "j", "priority": 2**53 - 1},
        {},
        None,
    ),
    "priority -(2**53 - 1)": (
        "policy.decision",
        {"tenant": "t", "decision": "queued", "priority": -(2**53 - 1)},
        {},
        None,
    ),
    "priority 2**64 (absurd)": (
        "job.submitted",
        {"tenant": "t", "job_id": "j", "priority": 2**64},
        {},
        ("data.priority", LE.format(2**53 - 1)),
    ),
    "priority -(2**53)": (
        "policy.decision",
        {"tenant": "t", "decision": "queued", "priority": -(2**53)},
        {},
        ("data.priority", f"Input should be greater than or equal to {-(2**53 - 1)}"),
    ),
    "device index 2**53": (
        "device.discovered",
        {"node": "n", "device": 2**53},
        {},
        (
            "data.device",
            f"Input should be a valid string (and 1 more: data.device: {LE.format(2**53 - 1)})",
        ),
    ),
    "devices[1] 2**60": (
        "allocation.granted",
        {"tenant": "t", "allocation_id": "a", "gpus": 2, "devices": ["x", 2**60]},
        {},
        (
            "data.devices[1]",
            "Input should be a valid string (and 1 more: data.devices[1]: "
            f"{LE.format(2**53 - 1)})",
        ),
    ),
    # durations: at most 100 years of seconds
    "warmup 3,155,760,000 s": (
        "policy.terms",
        {"tenant": "t", "warmup_allowance_s": 3_155_760_000},
        {},
        None,
    ),
    "notice 3,155,760,001 s": (
        "policy.decision",
        {"tenant": "t", "decision": "reclaimed", "notice_s": 3_155_760_001},
        {},
        ("data.notice_s", LE.format(3_155_760_000)),
    ),
    # amounts: below 10**7, at most 11 decimal places
    "amount 9999999.99999999999": ("billing.line", line(amount="9999999.99999999999"), {}, None),
    "amount -9999999.99999999999": ("billing.line", line(amount="-9999999.99999999999"), {}, None),
    "amount 0.00000000001": ("billing.line", line(amount="0.00000000001"), {}, None),
    "amount 10000000": (
        "billing.line",
        line(amount="10000000"),
        {},
        (
            "data.amount",
            "10000000 is not below 10^7 in magnitude, the largest amount the engine "
            "computes exactly (split the charge into lines)",
        ),
    ),
    "amount 0.000000000001": (
        "billing.line",
        line(amount="0.000000000001"),
        {},
        ("data.amount", "12 decimal places; the engine computes exactly with at most 11"),
    ),
    "amount 1.00000000000 (scale counts)": (
        "billing.line",
        line(amount="1.000000000000"),
        {},
        ("data.amount", "12 decimal places; the engine computes exactly with at most 11"),
    ),
    "amount of 401 digits": (
        "billing.line",
        line(amount="1" + "0" * 400),
        {},
        (
            "data.amount",
            "1000000000000000000000000000000000000... is not below 10^7 in magnitude, "
            "the largest amount the engine computes exactly (split the charge into lines)",
        ),
    ),
    # a billing line bills at most 2,000,000 GPU-hours
    "line 1,000,000 GPUs for 2 h": (
        "billing.line",
        line(gpus=1_000_000, period_end="2026-01-05T12:00:00Z"),
        {},
        None,
    ),
    "line 1,000,000 GPUs for 2 h and 1 µs": (
        "billing.line",
        line(gpus=1_000_000, period_end="2026-01-05T12:00:00.000001Z"),
        {},
        (
            "data",
            "the line bills more than 2,000,000 GPU-hours, more than "
            "the engine computes money for exactly (split it into lines)",
        ),
    ),
    # times: from 1970 to the ingest clock plus one day, with a zone
    "time 1970-01-01": (
        "job.completed",
        {"tenant": "t", "job_id": "j"},
        {"time": "1970-01-01T00:00:00Z"},
        None,
    ),
    "time 1969-12-31T23:59:59.999999Z": (
        "job.completed",
        {"tenant": "t", "job_id": "j"},
        {"time": "1969-12-31T23:59:59.999999Z"},
        ("time", "1969-12-31T23:59:59.999999Z is before 1970-01-01T00:00:00Z"),
    ),
    "time clock + 1 day": (
        "job.completed",
        {"tenant": "t", "job_id": "j"},
        {"time": "2026-06-02T12:00:00Z"},
        None,
    ),
    "time clock + 1 day, at +02:00": (
        "job.completed",
        {"tenant": "t", "job_id": "j"},
        {"time": "2026-06-02T14:00:00+02:00"},
        None,
    ),
    "time clock + 1 day + 1 µs": (
        "job.completed",
        {"tenant": "t", "job_id": "j"},
        {"time": "2026-06-02T12:00:00.000001Z"},
        (
            "time",
            "2026-06-02T12:00:00.000001Z is after the ingest clock plus one day "
            "(2026-06-02T12:00:00Z)",
        ),
    ),
    "time 9999-12-31 (absurd)": (
        "job.progress",
        {"tenant": "t", "job_id": "j", "step": 1},
        {"time": "9999-12-31T00:00:00Z"},
        (
            "time",
            "9999-12-31T00:00:00Z is after the ingest clock plus one day (2026-06-02T12:00:00Z)",
        ),
    ),
    "time with no zone": (
        "job.completed",
        {"tenant": "t", "job_id": "j"},
        {"time": "2026-01-05T10:00:00"},
        ("time", "a time with no zone: '2026-01-05T10:00:00' (RFC 3339 requires Z or an offset)"),
    ),
    "period_end after clock + 1 day": (
        "billing.line",
        line(period_end="2026-06-03T00:00:00Z"),
        {},
        (
            "data.period_end",
            "2026-06-03T00:00:00Z is after the ingest clock plus one day (2026-06-02T12:00:00Z)",
        ),
    ),
    "period_start before 1970": (
        "billing.line",
        line(gpus=0, period_start="1969-01-01T00:00:00Z"),
        {},
        ("data.period_start", "1969-01-01T00:00:00Z is before 1970-01-01T00:00:00Z"),
    ),
    # a promise may lie ahead of the clock, not before 1970
    "start_by 9999-12-31": (
        "policy.promise",
        {
            "tenant": "t",
            "promise_id": "p",
            "job_id": "j",
            "start_by": "9999-12-31T23:59:59.999999Z",
        },
        {},
        None,
    ),
    "complete_by 1969": (
        "policy.promise",
        {
            "tenant": "t",
            "promise_id": "p",
            "job_id": "j",
            "start_by": "2026-01-05T11:00:00Z",
            "complete_by": "1969-07-20T20:17:00Z",
        },
        {},
        ("data.complete_by", "1969-07-20T20:17:00Z is before 1970-01-01T00:00:00Z"),
    ),
    # a receipt's launch and a fleet change's window happened: within the clock like `time`
    "launched_at clock + 1 day": ("start.receipt", RECEIPT, {}, None),
    "launched_at clock + 1 day + 1 µs": (
        "start.receipt",
        {**RECEIPT, "launched_at": "2026-06-02T12:00:00.000001Z"},
        {},
        (
            "data.launched_at",
            "2026-06-02T12:00:00.000001Z is after the ingest clock "
            "plus one day (2026-06-02T12:00:00Z)",
        ),
    ),
    "decision_seq 2**53 - 1": ("start.receipt", {**RECEIPT, "decision_seq": 2**53 - 1}, {}, None),
    "decision_seq 2**53": (
        "start.receipt",
        {**RECEIPT, "decision_seq": 2**53},
        {},
        ("data.decision_seq", LE.format(2**53 - 1)),
    ),
    "change from 1970 to clock + 1 day": (
        "fleet.change",
        {**CHANGE, "started_at": "1970-01-01T00:00:00Z"},
        {},
        None,
    ),
    "change started before 1970": (
        "fleet.change",
        {**CHANGE, "started_at": "1969-12-31T23:59:59Z"},
        {},
        ("data.started_at", "1969-12-31T23:59:59Z is before 1970-01-01T00:00:00Z"),
    ),
    "change ended after clock + 1 day": (
        "fleet.change",
        {**CHANGE, "ended_at": "2026-06-02T12:00:01Z"},
        {},
        (
            "data.ended_at",
            "2026-06-02T12:00:01Z is after the ingest clock plus one day (2026-06-02T12:00:00Z)",
        ),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bound(name: str) -> None:
    type_, data, envelope, expected = CASES[name]
    assert outcome(type_, data, **envelope) == expected


def test_the_ingest_clock_defaults_to_the_machines() -> None:
    """A time a year from now passes with a clock two years ahead, and not with none."""
    ahead = datetime.now(timezone.utc).replace(microsecond=0)
    later = ahead.replace(year=ahead.year + 1, day=min(ahead.day, 28))
    raw = json.dumps(
        event("job.completed", "c", {"tenant": "t", "job_id": "j"}, time=later.isoformat())
    )
    assert (
        validate_event_json(
            raw, now=ahead.replace(year=ahead.year + 2, day=min(ahead.day, 28))
        ).time
        == later
    )
    with pytest.raises(ValidationError, match="after the ingest clock plus one day"):
        validate_event_json(raw)


def padded(size: int) -> dict[str, Any]:
    """An event whose canonical bytes are exactly `size` long (padding in an unknown field)."""
    base = event("job.completed", "c", {"tenant": "t", "job_id": "j", "pad": ""})
    empty = len(Accepted.of(validate_event(base, now=NOW), ORIGIN).body)
    return event("job.completed", "c", {"tenant": "t", "job_id": "j", "pad": "x" * (size - empty)})


def test_an_event_of_exactly_1_mib_is_accepted_and_one_byte_more_is_not() -> None:
    assert len(Accepted.of(validate_event(padded(1 << 20), now=NOW), ORIGIN).body) == 1_048_576
    with pytest.raises(EventTooLarge) as info:
        Accepted.of(validate_event(padded((1 << 20) + 1), now=NOW), ORIGIN)
    assert (
        info.value.reason
        == "the event is 1,048,577 bytes in canonical form, over the limit of 1,048,576 (1 MiB)"
    )
    record = event_from_object(padded((1 << 20) + 1), ORIGIN, b"raw")
    assert isinstance(record, Rejected) and (record.field, record.reason) == (
        "(record)",
        info.value.reason,
    )


def test_an_amount_of_1e400_from_a_parser_is_quarantined() -> None:
    """A parser (FOCUS) hands over Decimal('1E+400'); it is a finite decimal, but not one the
    engine computes with.
    """
    record = event_from_object(
        event("billing.line", "b", line(amount=Decimal("1e400"))), ORIGIN, b"raw"
    )
    assert isinstance(record, Rejected)
    assert (record.field, record.reason) == (
        "data.amount",
        "1E+400 is not below 10^7 in magnitude, the largest "
        "amount the engine computes exactly (split the charge into lines)",
    )


#: Values far past the bounds, each on its own line of one file, beside two good events.
ABSURD_VALUES = [
    event(
        "allocation.granted",
        "g1",
        {"tenant": "acme", "allocation_id": "a1", "gpus": 8},
        time="2026-01-05T10:00:00Z",
    ),
    event(
        "billing.line",
        "b1",
        {**LINE, "tenant": "acme", "allocation_id": "a1"},
        time="2026-01-05T11:00:00Z",
    ),
    event(
        "billing.line",
        "b2",
        {**LINE, "tenant": "acme", "line_id": "l2", "amount": "1" + "0" * 400},
    ),
    event("allocation.granted", "g2", {"tenant": "acme", "allocation_id": "a2", "gpus": 10**11}),
    event(
        "job.progress",
        "p1",
        {"tenant": "acme", "job_id": "j", "step": 1},
        time="9999-12-31T00:00:00Z",
    ),
    event("job.progress", "p2", {"tenant": "acme", "job_id": "j", "step": 2, "x": 10**400}),
    event("job.submitted", "s1", {"tenant": "acme", "job_id": "j", "priority": 2**64}),
    event("job.completed", "c1", {"tenant": "acme", "job_id": "j"}, time="2026-01-05T10:30:00"),
]
QUARANTINED = [  # (line, field), in file order
    (3, "data.amount"),
    (4, "data.gpus"),
    (5, "time"),
    (6, "data.x"),
    (7, "data.priority"),
    (8, "time"),
]


def test_absurd_values_are_quarantined_and_every_command_still_runs(tmp_path: Path) -> None:
    source = tmp_path / "absurd.jsonl"
    source.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for e in ABSURD_VALUES))
    db = ["--db", f"sqlite:///{tmp_path / 'ledger.db'}"]
    runner = CliRunner()
    ingested = runner.invoke(main, ["ingest", *db, str(source)])
    assert ingested.exit_code == 1, ingested.output
    assert f"{source}: read 8 · appended 2 · duplicate 0 · quarantined 6" in ingested.output
    rows = json.loads(runner.invoke(main, ["quarantine", *db, "--format", "json"]).output)
    assert [(r["line"], r["field"]) for r in rows] == QUARANTINED
    for command in (
        ["reconcile", "--format", "json"],
        ["report", "promises"],
        ["report", "capacity"],
        ["report", "outcomes"],
        ["verify"],
    ):
        result = runner.invoke(main, [*command, *db])
        assert result.exit_code == 0, (command, result.output)
    reconciled = json.loads(runner.invoke(main, ["reconcile", *db, "--format", "json"]).output)
    assert reconciled["tenants"]["acme"]["billed_gpu_seconds"] == 8 * 3600


def test_a_parser_may_hand_over_naive_times_meaning_utc_unless_told_not_to() -> None:
    """sacct-style parsers read local times in their --timezone; a naive time they pass is
    UTC. A caller whose text is RFC 3339 (CloudEvents' data_base64 path) passes False."""
    naive = event("job.completed", "c", {"tenant": "t", "job_id": "j"}, time="2026-01-05T10:00:00")
    accepted = event_from_object(naive, ORIGIN, b"raw")
    assert isinstance(accepted, Accepted) and b'"time":"2026-01-05T10:00:00Z"' in accepted.body
    refused = event_from_object(naive, ORIGIN, b"raw", naive_is_utc=False)
    assert isinstance(refused, Rejected)
    assert (refused.field, refused.reason) == (
        "time",
        "a time with no zone: '2026-01-05T10:00:00' (RFC 3339 requires Z or an offset)",
    )
