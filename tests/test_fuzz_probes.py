"""Fuzzing the probe parsers (topo, nvbandwidth, nccl-tests): whatever the bytes after a
valid start, they yield records (accepted or rejected) or raise IngestError, nothing else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.test_fuzz_parsers import SETTINGS, run

OPTIONS = {"tenant": "t", "allocation": "a", "scrape_time": "2026-01-05T10:00:00Z"}
TOPO_HEAD = b"\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\tPXB\t0-31\t0\n"
NVB_HEAD = (
    b"nvbandwidth Version: v0.8\nDevice 0: X\nRunning device_to_device_memcpy_read_ce.\nmemcpy CE "
    b"GPU(row) -> GPU(column) bandwidth (GB/s)\n"
)
NCCL_HEAD = (
    b"# nThread 1 nGpus 2 minBytes 8 maxBytes 16\n#  Rank  0 Group  0 Pid 1 on h device  0 [0] G\n"
    b"#       size         count      type   redop    root     time   algbw   busbw #wrong     "
    b"time   algbw   busbw #wrong\n"
)
fragments = st.sampled_from(
    [
        b"\t",
        b" ",
        b"  ",
        b"\n",
        b"\r\n",
        b"X",
        b" X ",
        b"NV18",
        b"NV0",
        b"PXB",
        b"PIX",
        b"SYS",
        b"NODE",
        b"PXBNODE",
        b"NS",
        b"GPU0",
        b"GPU1",
        b"NIC0",
        b"NIC1",
        b"mlx5_0",
        b"CPU Affinity",
        b"NUMA Affinity",
        b"GPU NUMA ID",
        b"N/A",
        b"0-31",
        b"NIC Legend:",
        b"  NIC0: mlx5_4",
        b"\x1b[4m",
        b"[0m",
        b"Running ",
        b"SUM ",
        b"device_to_device_memcpy_read_ce",
        b"(GB/s)",
        b"(ns)",
        b"GPU(row)",
        b"GPU(column)",
        b" 0 ",
        b" 1 ",
        b"12.35",
        b"-1",
        b"1e400",
        b"NaN",
        b"9" * 40,
        b"nvbandwidth Version: ",
        b"Device 0: ",
        b"Waived:",
        b"# nThread 1 nGpus 1",
        b"#  Rank  1 Group  0 Pid 1 on h device  1",
        b"# Avg bus bandwidth    : ",
        b"float",
        b"sum",
        b"none",
        b"8",
        b"16",
        b"0.00",
        b"all_reduce_perf",
        b"#",
        b"[1,0]<stdout>:",
        b"{",
        b"}",
        b'"nvbandwidth"',
        b'"testcases"',
        b"\xff\xfe",
        b"\x00",
        b"\xe2\x98\x83",
    ]
)
noise = st.lists(st.one_of(fragments, st.binary(max_size=12)), max_size=60).map(b"".join)


@SETTINGS
@given(noise)
def test_topo(data: bytes) -> None:
    run("nvidia-smi-topo", TOPO_HEAD + data, **OPTIONS)


@SETTINGS
@given(noise)
def test_nvbandwidth_text(data: bytes) -> None:
    run("nvbandwidth", NVB_HEAD + data, **OPTIONS)


@SETTINGS
@given(noise)
def test_nvbandwidth_json(data: bytes) -> None:
    run(
        "nvbandwidth",
        b'{"nvbandwidth": {"testcases": [{"name": "x", "status": "Passed", ' + data,
        **OPTIONS,
    )


@SETTINGS
@given(noise)
def test_nccl_tests(data: bytes) -> None:
    run("nccl-tests", NCCL_HEAD + data, **OPTIONS)
