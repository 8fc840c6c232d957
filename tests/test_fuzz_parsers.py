"""Fuzzing every parser: whatever the bytes, a parser yields records (accepted or
rejected) or raises the project's own IngestError; nothing else escapes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import IngestError, extract
from schemas import Accepted, Rejected
from tests.conftest import FUZZ_EXAMPLES

SACCT_HEAD = b"JobID|Account|User|Partition|NodeList|State|Submit|Start|End|Elapsed|AllocTRES\n"
FOCUS_HEAD = (
    b'"BilledCost","BillingAccountId","SubAccountId","BillingCurrency","BillingPeriodStart",'
    b'"ChargeCategory","ChargeClass","ChargePeriodStart","ChargePeriodEnd","PricingQuantity",'
    b'"PricingUnit","ResourceId"\n'
)
EVENT = (
    b'{"specversion":"1.0","id":"a","source":"s","type":"job.progress",'
    b'"time":"2026-01-05T10:00:00Z","data":{"tenant":"t","job_id":"j","step":1}}'
)
DCGM_STATS_HEAD = (
    b"Successfully retrieved statistics for job: 7.\n| GPU ID: 0 |\n| Start Time | Wed Jan  7 "
    b"10:00:00 2026 |\n| End Time | Wed Jan  7 12:00:00 2026 |\n+-----  Event Stats  ---+---+\n"
)
DCGM_METRICS_HEAD = (
    b"# TYPE DCGM_FI_DEV_XID_ERRORS "
    b'gauge\nDCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a",Hostname="n7"} 79 1767780000000\n'
)
dcgm_fragments = st.sampled_from(
    [
        b"| ",
        b" |",
        b"|",
        b"\n",
        b"+---+",
        b"GPU ID: ",
        b"Summary",
        b"Double Bit ECC Errors",
        b"PCIe Replay Warnings",
        b"Critical XID Errors",
        b"XID (Hr:Min:Sec since start)",
        b"0:12:05",
        b"1:75:30",
        b"99:99:99",
        b"(XID 79)",
        b"-3",
        b"7",
        b"Still Running",
        b"Not Specified",
        b"Wed Jan  7 10:00:00 2026",
        b"2026-13-45T99:99:99",
        b"Start Time",
        b"End Time",
        b"Successfully retrieved statistics for job: ",
        b"Successfully retrieved process info for PID: 1",
        b"DCGM_FI_DEV_XID_ERRORS",
        b"{",
        b"}",
        b'gpu="',
        b'UUID="',
        b'Hostname="',
        b'hostname="',
        b'GPU_I_ID="',
        b'"',
        b",",
        b"=",
        b" ",
        b"\\",
        b"79",
        b"NaN",
        b"+Inf",
        b"-79",
        b"1e400",
        b"9223372036854775794",
        b"1767780000000",
        b"-1",
        b"# HELP ",
        b"\xff\xfe",
        b"\x00",
        b"\xe2\x98\x83",
        b"9" * 30,
    ]
)
dcgm_noise = st.lists(st.one_of(dcgm_fragments, st.binary(max_size=12)), max_size=40).map(b"".join)

fragments = st.sampled_from(
    [
        b"|",
        b",",
        b'"',
        b"\n",
        b"\r\n",
        b"NULL",
        b"Unknown",
        b"None assigned",
        b"2026-01-05T10:00:00",
        b"2026-13-45 99:99:99",
        b"gres/gpu=8",
        b"gres/gpu=-1",
        b"gres/gpu=x",
        b"1-23:59:00",
        b"23:08.358",
        b"GPU-Hours",
        b"-3",
        b"1e400",
        b"\xff\xfe",
        b"\x00",
        b"{",
        b"}",
        b"[",
        b"]",
        b"COMPLETED",
        b"CANCELLED by 1",
        b"12.5",
        b"acme",
        b"100.batch",
        b"\xe2\x98\x83",
        b'"specversion"',
        b'"1.0"',
        b":",
        b"null",
        b"\\",
        b"\\u0000",
        b"\\ud800",
    ]
)
noise = st.lists(st.one_of(fragments, st.binary(max_size=12)), max_size=40).map(b"".join)


def run(fmt: str, data: bytes, **options: str | None) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input"
        path.write_bytes(data)
        try:
            for record in extract(path, fmt, **options):
                assert isinstance(record, (Accepted, Rejected))
        except IngestError:
            pass


SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


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


@SETTINGS
@given(dcgm_noise)
def test_dcgm_stats(data: bytes) -> None:
    run("dcgm-stats", DCGM_STATS_HEAD + data)


@SETTINGS
@given(dcgm_noise, st.booleans())
def test_dcgm_metrics(data: bytes, scraped: bool) -> None:
    run(
        "dcgm-metrics",
        DCGM_METRICS_HEAD + data,
        scrape_time="2026-01-07T10:00:00Z" if scraped else None,
    )


DIAG_HEAD = (
    b"Successfully ran diagnostic for group.\n| Diagnostic | Result |\n"
    b"+===+===+\n|-----  Deployment  ---+---|\n"
)
diag_fragments = st.sampled_from(
    [
        b"| ",
        b" |",
        b"|",
        b"\n",
        b"+---+",
        b"|-----  Hardware  ---+---|",
        b"|-----  Metadata  ---+---|",
        b"DCGM Version",
        b"memory",
        b"Pass",
        b"Fail",
        b"Warn",
        b"Skip",
        b"Not Run",
        b"Pass - All",
        b"Fail - GPUs: 0, 1",
        b"Fail - GPU: 99999999999",
        b"GPU0: ",
        b"CPU1: ",
        b"Error",
        b"Warning: GPU3",
        b"Info",
        b"GPU 3 has ",
        b"Code: (000000000000)",
        b"Error: Diagnostic could not be run",
        b"dcgmi diag -r 2 -i 0,1",
        b"| Diagnostic | Result |",
        b"\xd9\xa3",
        b"\xff\xfe",
        b"\x00",
        b"9" * 30,
    ]
)
diag_noise = st.lists(st.one_of(diag_fragments, st.binary(max_size=12)), max_size=40).map(b"".join)


@SETTINGS
@given(diag_noise)
def test_dcgmi_diag(data: bytes) -> None:
    run("dcgmi-diag", DIAG_HEAD + data, node="n7", scrape_time="2026-01-07T10:00:00Z")


DIAG_JSON_HEAD = b'{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": ['


@SETTINGS
@given(diag_noise)
def test_dcgmi_diag_json(data: bytes) -> None:
    run("dcgmi-diag", DIAG_JSON_HEAD + data, node="n7", scrape_time="2026-01-07T10:00:00Z")


_diag_keys = st.sampled_from(
    [
        "name",
        "results",
        "status",
        "gpu_id",
        "entity_group",
        "entity_id",
        "warnings",
        "warning",
        "test_summary",
        "category",
        "tests",
        "version",
    ]
)
_diag_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2**40),
    st.sampled_from(["Pass", "Fail", "Warn", "Skip", "GPU", "CPU", "0", "GPU 3 x", "", "\x00"]),
)
_diag_json = st.recursive(
    _diag_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_diag_keys, inner, max_size=5)
    ),
    max_leaves=30,
)


@SETTINGS
@given(_diag_json, st.sampled_from(["DCGM Diagnostic", "DCGM GPU Diagnostic"]))
def test_dcgmi_diag_json_structure(tests: object, root: str) -> None:
    document = {root: {"test_categories": [{"category": "Hardware", "tests": tests}]}}
    run("dcgmi-diag", json.dumps(document).encode(), node="n7", scrape_time="2026-01-07T10:00:00Z")
