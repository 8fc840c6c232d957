"""start.receipt and fleet.change (docs/events.md, docs/receipts-and-changes.md): what each
requires, what it refuses (and the quarantine row naming file, line and field), that a
re-ingest appends nothing, and that a fleet change names no tenant's data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ingest import extract
from schemas import Accepted, Origin, canonical_event, rejections, validate_event
from tests.conftest import event, run_cli, write_jsonl

RECEIPT: dict[str, Any] = {
    "tenant": "acme",
    "job_id": "receipt-mig-1",
    "allocation_id": "r-a1",
    "placement_class": "mig",
    "profile": "3g.40gb",
    "node": "node-007",
    "driver": "550.54.15",
    "devices": ["MIG-0a1b"],
    "topology_digest": "sha256:" + "ab" * 32,
    "decision_seq": 41,
    "submitted_at": "2026-01-05T09:58:30Z",
    "launched_at": "2026-01-05T10:00:00Z",
}
CHANGE: dict[str, Any] = {
    "change_id": "chg-1",
    "kind": "driver-upgrade",
    "nodes": ["node-001", "node-002"],
    "started_at": "2026-01-05T08:00:00Z",
    "ended_at": "2026-01-05T12:00:00Z",
    "detail": "550.54.15 -> 550.90.07",
}


def error_of(type_: str, data: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        validate_event(event(type_, "e1", data))
    rejected = rejections(info.value, Origin("f", 1), b"raw")
    return rejected.field, rejected.reason


def test_a_receipt_keeps_every_field_as_given() -> None:
    stored = json.loads(canonical_event(validate_event(event("start.receipt", "r1", RECEIPT))))
    assert stored["data"] == RECEIPT


def test_a_change_is_a_fleet_event() -> None:
    change = validate_event(event("fleet.change", "c1", CHANGE))
    assert change.tenant is None
    assert json.loads(canonical_event(change))["data"] == CHANGE
    assert Accepted.of(change, Origin("f", 1)).tenant is None


@pytest.mark.parametrize(
    ("type_", "data", "expected"),
    [
        (
            "start.receipt",
            {**RECEIPT, "placement_class": "shared"},
            ("data.placement_class", "Input should be 'whole', 'mig' or 'timeslice'"),
        ),
        (
            "start.receipt",
            {**RECEIPT, "topology_digest": "ab" * 32},
            (
                "data.topology_digest",
                "String should match pattern '^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$'",
            ),
        ),
        (
            "start.receipt",
            {**RECEIPT, "decision_seq": 0},
            ("data.decision_seq", "Input should be greater than or equal to 1"),
        ),
        (
            "start.receipt",
            {**RECEIPT, "decision_seq": "41"},
            ("data.decision_seq", "Input should be a valid integer"),
        ),
        (
            "start.receipt",
            {**RECEIPT, "launched_at": "2026-01-05T10:00:00"},
            (
                "data.launched_at",
                "a time with no zone: '2026-01-05T10:00:00' (RFC 3339 requires Z or an offset)",
            ),
        ),
        (
            "start.receipt",
            {**RECEIPT, "submitted_at": "2026-01-05T10:00:01Z"},
            ("data", "launched_at is before submitted_at"),
        ),
        (
            "fleet.change",
            {**CHANGE, "kind": "reboot"},
            (
                "data.kind",
                "Input should be 'driver-upgrade', 'mig-reconfigure', 'firmware' or 'drain'",
            ),
        ),
        (
            "fleet.change",
            {**CHANGE, "ended_at": "2026-01-05T07:59:59Z"},
            ("data", "ended_at is before started_at"),
        ),
        (
            "fleet.change",
            {**CHANGE, "nodes": ["node-001", ""]},
            ("data.nodes[1]", "String should have at least 1 character"),
        ),
        (
            "fleet.change",
            {**CHANGE, "tenant": "acme"},
            (
                "data.tenant",
                "a fleet event carries no tenant's data: tenant must be absent or null",
            ),
        ),
        (
            "fleet.change",
            {**CHANGE, "job_id": "j1"},
            (
                "data.job_id",
                "a fleet event carries no tenant's data: job_id must be absent or null",
            ),
        ),
        (
            "fleet.change",
            {**CHANGE, "allocation_id": "a1"},
            (
                "data.allocation_id",
                "a fleet event carries no tenant's data: allocation_id must be absent or null",
            ),
        ),
    ],
)
def test_a_bad_field_is_named(type_: str, data: dict[str, Any], expected: tuple[str, str]) -> None:
    assert error_of(type_, data) == expected


def test_a_change_with_a_null_tenant_is_a_fleet_event_still() -> None:
    assert validate_event(event("fleet.change", "c1", {**CHANGE, "tenant": None})).tenant is None


def test_the_tenant_option_never_gives_a_change_a_tenant(tmp_path: Path) -> None:
    unnamed = {k: v for k, v in RECEIPT.items() if k != "tenant"}
    path = write_jsonl(
        tmp_path / "e.jsonl",
        [event("start.receipt", "r1", unnamed), event("fleet.change", "c1", CHANGE)],
    )
    found = list(extract(path, "cloudevents", tenant="borealis"))
    assert [(r.type, r.tenant) for r in found if isinstance(r, Accepted)] == [
        ("start.receipt", "borealis"),
        ("fleet.change", None),
    ]


def test_ingest_appends_once_and_quarantines_the_bad_lines_by_file_line_and_field(
    tmp_path: Path,
) -> None:
    path = write_jsonl(
        tmp_path / "receipts.jsonl",
        [
            event("start.receipt", "r1", RECEIPT),
            event("fleet.change", "c1", CHANGE, source="change://fleet"),
            event(
                "fleet.change",
                "c2",
                {**CHANGE, "change_id": "chg-2", "tenant": "acme"},
                source="change://fleet",
            ),
            event("start.receipt", "r2", {k: v for k, v in RECEIPT.items() if k != "launched_at"}),
        ],
    )
    db = ["--db", f"sqlite:///{tmp_path / 'l.db'}"]
    first = run_cli("ingest", *db, str(path))
    assert (first[0], first[1].partition(": ")[2]) == (
        1,
        "read 4 · appended 2 · duplicate 0 · quarantined 2\n",
    )
    code, out, _ = run_cli("quarantine", *db, "--format", "json")
    rows = [(r["file"], r["line"], r["field"]) for r in json.loads(out)]
    assert (code, rows) == (0, [(str(path), 3, "data.tenant"), (str(path), 4, "data.launched_at")])
    again = run_cli("ingest", *db, str(path))
    assert again[1].partition(": ")[2] == "read 4 · appended 0 · duplicate 2 · quarantined 2\n"
    code, out, _ = run_cli("export", *db)
    exported = [json.loads(line) for line in out.splitlines()]
    assert [(e["type"], e["tenant"]) for e in exported] == [
        ("start.receipt", "acme"),
        ("fleet.change", None),
    ]
