"""Malformed inputs, per format, each with its pinned `line: field: reason`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest import extract
from schemas import Rejected

EV = (
    '{"specversion":"1.0","id":"a","source":"s","type":"allocation.granted",'
    '"time":"2026-01-05T10:00:00Z",'
    '"data":{"tenant":"t","allocation_id":"A","gpus":8}}'
)
BL = (
    '{"specversion":"1.0","id":"b","source":"s","type":"billing.line",'
    '"time":"2026-01-05T10:00:00Z","data":{"tenant":"t",'
    '"invoice_id":"i","line_id":"l","allocation_id":"A","period_start":"2026-01-05T10:00:00Z",'
    '"period_end":"2026-01-05T11:00:00Z","gpus":8,"amount":"x1","currency":"USD"}}'
)
SH = "JobID|Account|User|Partition|NodeList|State|Submit|Start|End|Elapsed|AllocTRES\n"
SR = (
    "100|physics|ann|gpu|node7|COMPLETED|2026-01-05T09:00:00|2026-01-05T10:00:00|"
    "2026-01-05T12:00:00|02:00:00|gres/gpu=4"
)
FH = (
    '"BilledCost","SubAccountId","BillingCurrency","BillingPeriodStart","ChargeCategory",'
    '"ChargePeriodStart","ChargePeriodEnd","PricingQuantity","PricingUnit","ResourceId"\n'
)
FR = (
    '"24.00","acme","USD","2026-01-01 00:00:00","Usage","2026-01-05 10:00:00","2026-01-05 '
    '13:00:00","24","GPU-Hours","A1"'
)
DS = "\n".join(
    [
        "Successfully retrieved statistics for job: 7.",
        "+" + "-" * 78 + "+",
        "| GPU ID: 0 |",
        "|-----  Execution Stats  ---+---|",
        "| Start Time | Wed Jan  7 10:00:00 2026 |",
        "| End Time | Wed Jan  7 12:00:00 2026 |",
        "+-----  Event Stats  ---+---+",
        "| Double Bit ECC Errors | 1 |",
        "| Critical XID Errors | 1 |",
        "| XID (Hr:Min:Sec since start) | 0:12:05 |",
        "+---+---+",
        "",
    ]
)
DM = (
    "# TYPE DCGM_FI_DEV_XID_ERRORS "
    'gauge\nDCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a",Hostname="n7"} 79 1767780000000\n'
)

CASES: dict[str, tuple[str, bytes, tuple[int, str, str]]] = {
    "cloudevents truncated line": (
        "cloudevents",
        EV[:60].encode(),
        (1, "(record)", "Invalid JSON: EOF while parsing a string at line 1 column 60"),
    ),
    "cloudevents bad time": (
        "cloudevents",
        EV.replace("2026-01-05T10:00:00Z", "2026-02-30T10:00:00Z").encode(),
        (
            1,
            "time",
            "Input should be a valid datetime or date, day value is outside expected range",
        ),
    ),
    "cloudevents negative GPUs": (
        "cloudevents",
        EV.replace('"gpus":8', '"gpus":-8').encode(),
        (1, "data.gpus", "Input should be greater than or equal to 1"),
    ),
    "cloudevents non-numeric money": (
        "cloudevents",
        BL.encode(),
        (1, "data.amount", "not a decimal string: 'x1'"),
    ),
    "cloudevents invalid UTF-8": (
        "cloudevents",
        EV.replace('"t"', '"\xff"').encode("latin-1"),
        (1, "(record)", "Invalid JSON: invalid unicode code point at line 1 column 120"),
    ),
    "sacct truncated line": (
        "sacct",
        (SH + SR[:40]).encode(),
        (2, "(row)", "expected 11 fields, found 7"),
    ),
    "sacct wrong column count": (
        "sacct",
        (SH + SR + "|extra|x").encode(),
        (2, "(row)", "expected 11 fields, found 13"),
    ),
    "sacct bad time": (
        "sacct",
        (SH + SR.replace("2026-01-05T09:00:00", "2026-01-05 soon")).encode(),
        (2, "Submit", "not a time: '2026-01-05 soon'"),
    ),
    "sacct negative GPUs": (
        "sacct",
        (SH + SR.replace("gres/gpu=4", "gres/gpu=-4")).encode(),
        (2, "AllocTRES", "negative GPU count -4 in 'gres/gpu=-4'"),
    ),
    "sacct invalid UTF-8": (
        "sacct",
        SH.encode() + SR.replace("ann", "\xff").encode("latin-1"),
        (2, "(row)", "not valid UTF-8 at byte 12"),
    ),
    "focus truncated line": (
        "focus",
        (FH + FR[:30]).encode(),
        (2, "(row)", "expected 10 columns, found 4"),
    ),
    "focus wrong column count": (
        "focus",
        (FH + FR + ',"x"').encode(),
        (2, "(row)", "expected 10 columns, found 11"),
    ),
    "focus bad time": (
        "focus",
        (FH + FR.replace("2026-01-05 10:00:00", "noon")).encode(),
        (2, "ChargePeriodStart", "not a time: 'noon'"),
    ),
    "focus negative GPUs": (
        "focus",
        (FH + FR.replace('"24","GPU', '"-24","GPU')).encode(),
        (2, "PricingQuantity", "not a whole number of GPUs: -8"),
    ),
    "focus non-numeric money": (
        "focus",
        (FH + FR.replace('"24.00"', '"lots"')).encode(),
        (2, "BilledCost", "not a decimal: 'lots'"),
    ),
    "focus invalid UTF-8": (
        "focus",
        FH.encode() + FR.replace("acme", "\xff").encode("latin-1"),
        (2, "(row)", "not valid UTF-8"),
    ),
    "dcgm-stats truncated line": (
        "dcgm-stats",
        DS[: DS.index("| End Time") + 20].encode(),
        (6, "(line)", "truncated table row: no closing '|'"),
    ),
    "dcgm-stats bad time": (
        "dcgm-stats",
        DS.replace("Jan  7 10", "Jan 37 10").encode(),
        (5, "Start Time", "not a time: 'Wed Jan 37 10:00:00 2026'"),
    ),
    "dcgm-stats negative count": (
        "dcgm-stats",
        DS.replace("Errors | 1", "Errors | -1", 1).encode(),
        (8, "Double Bit ECC Errors", "negative count -1"),
    ),
    "dcgm-stats non-numeric count": (
        "dcgm-stats",
        DS.replace("Errors | 1", "Errors | lots", 1).encode(),
        (8, "Double Bit ECC Errors", "not a count: 'lots'"),
    ),
    "dcgm-stats bad XID offset": (
        "dcgm-stats",
        DS.replace("0:12:05", "soon").encode(),
        (10, "XID (Hr:Min:Sec since start)", "not a time: 'soon'"),
    ),
    "dcgm-stats invalid UTF-8": (
        "dcgm-stats",
        DS.replace("Errors | 1", "Errors | \xff", 1).encode("latin-1"),
        (8, "(line)", "not valid UTF-8 at byte 26"),
    ),
    "dcgm-metrics truncated line": (
        "dcgm-metrics",
        DM[: DM.index("Hostname") + 5].encode(),
        (2, "labels", "malformed label set at column 45: 'Hostn'"),
    ),
    "dcgm-metrics bad time": (
        "dcgm-metrics",
        DM.replace("1767780000000", "2026-01-07T10:00").encode(),
        (2, "timestamp", "not a millisecond timestamp: '2026-01-07T10:00'"),
    ),
    "dcgm-metrics negative XID": (
        "dcgm-metrics",
        DM.replace("} 79", "} -79").encode(),
        (2, "value", "negative XID -79"),
    ),
    "dcgm-metrics non-numeric value": (
        "dcgm-metrics",
        DM.replace("} 79", "} lots").encode(),
        (2, "value", "not a number: 'lots'"),
    ),
    "dcgm-metrics invalid UTF-8": (
        "dcgm-metrics",
        DM.replace('"n7"', '"\xff"').encode("latin-1"),
        (2, "(line)", "not valid UTF-8 at byte 54"),
    ),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_malformed_input_is_rejected_with_its_pinned_message(tmp_path: Path, name: str) -> None:
    fmt, data, expected = CASES[name]
    path = tmp_path / "input"
    path.write_bytes(data)
    found = list(extract(path, fmt))
    assert [(r.origin.line, r.field, r.reason) for r in found if isinstance(r, Rejected)] == [
        expected
    ]
    assert all(
        isinstance(r, Rejected) and r.record for r in found
    )  # kept whole for the quarantine
