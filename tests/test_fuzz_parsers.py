"""Fuzzing every parser: whatever the bytes, a parser yields records (accepted or
rejected) or raises the project's own IngestError; nothing else escapes."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import IngestError, extract
from schemas import Accepted, Rejected

SACCT_HEAD = b"JobID|Account|User|Partition|NodeList|State|Submit|Start|End|Elapsed|AllocTRES\n"
FOCUS_HEAD = (b'"BilledCost","BillingAccountId","SubAccountId","BillingCurrency","BillingPeriodStart","ChargeCategory",'
              b'"ChargeClass","ChargePeriodStart","ChargePeriodEnd","PricingQuantity","PricingUnit","ResourceId"\n')
EVENT = b'{"specversion":"1.0","id":"a","source":"s","type":"job.progress","time":"2026-01-05T10:00:00Z","data":{"tenant":"t","job_id":"j","step":1}}'

fragments = st.sampled_from([
    b"|", b",", b'"', b"\n", b"\r\n", b"NULL", b"Unknown", b"None assigned", b"2026-01-05T10:00:00", b"2026-13-45 99:99:99",
    b"gres/gpu=8", b"gres/gpu=-1", b"gres/gpu=x", b"1-23:59:00", b"23:08.358", b"GPU-Hours", b"-3", b"1e400", b"\xff\xfe",
    b"\x00", b"{", b"}", b"[", b"]", b"COMPLETED", b"CANCELLED by 1", b"12.5", b"acme", b"100.batch", b"\xe2\x98\x83",
    b'"specversion"', b'"1.0"', b":", b"null", b"\\", b"\\u0000", b"\\ud800",
])
noise = st.lists(st.one_of(fragments, st.binary(max_size=12)), max_size=40).map(b"".join)


def run(fmt: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input"
        path.write_bytes(data)
        try:
            for record in extract(path, fmt):
                assert isinstance(record, (Accepted, Rejected))
        except IngestError:
            pass


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(noise)
def test_cloudevents_lines(data: bytes) -> None:
    run("cloudevents", EVENT[: len(data) % len(EVENT)] + data)


@SETTINGS
@given(noise)
def test_cloudevents_arrays(data: bytes) -> None:
    run("cloudevents", b"[" + EVENT + b"," + data)


@SETTINGS
@given(noise)
def test_sacct(data: bytes) -> None:
    run("sacct", SACCT_HEAD + data)


@SETTINGS
@given(noise)
def test_focus(data: bytes) -> None:
    run("focus", FOCUS_HEAD + data)


@SETTINGS
@given(noise)
def test_focus_parquet_magic_with_garbage(data: bytes) -> None:
    run("focus", b"PAR1" + data)
