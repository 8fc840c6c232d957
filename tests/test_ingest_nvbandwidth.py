"""The nvbandwidth ingestor (ingest/nvbandwidth.py): testcases, matrices, SUM lines,
several runs in one file, the -j JSON, the quarantine and the real outputs' facts.
Expected values are read off the outputs by hand (and listed in PROBES.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from cli import main
from ingest import INGESTORS, IngestError, extract
from schemas import Accepted, Rejected
from tests.conftest import REALDATA

NVB = REALDATA / "nvbandwidth"
ABSENT_REASON = "real data not present at {} (it lives beside the project, not in it)"
OPTIONS = {"tenant": "acme", "allocation": "alloc-9", "scrape_time": "2026-03-01T08:00:00Z"}

RUN = """nvbandwidth Version: v0.8
Built from Git version: 66746a3

CUDA Runtime Version: 12040
Driver Version: 550.54.15

node-3
Device 0: NVIDIA H100 80GB HBM3 (00000000:19:00)
Device 1: NVIDIA H100 80GB HBM3 (00000000:3b:00)

Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0       N/A    389.40
 1    390.05       N/A

SUM device_to_device_memcpy_read_ce 779.45

Waived:
Running host_to_device_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0     55.10     54.90

SUM host_to_device_memcpy_ce 110.00

NOTE: The reported results may not reflect the full capabilities of the platform.
"""


def write(tmp_path: Path, text: str, name: str = "nvb.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def records(path: Path, **options: Any) -> list[Accepted | Rejected]:
    return list(extract(path, "nvbandwidth", **{**OPTIONS, **options}))


def events(path: Path, **options: Any) -> list[dict[str, Any]]:
    found = records(path, **options)
    assert all(isinstance(r, Accepted) for r in found), found
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def figures(event: dict[str, Any]) -> dict[str, str]:
    return {f["name"]: f"{f['value']} {f['unit']}" for f in event["data"]["figures"]}


def test_each_testcase_is_one_probe_result_with_its_matrix_and_figures(tmp_path: Path) -> None:
    d2d, h2d = events(write(tmp_path, RUN))
    assert (d2d["type"], d2d["source"], d2d["time"]) == (
        "probe.result",
        "nvbandwidth://alloc-9",
        "2026-03-01T08:00:00Z",
    )
    assert d2d["data"] == {
        "tenant": "acme",
        "allocation_id": "alloc-9",
        "probe": "nvbandwidth",
        "test": "device_to_device_memcpy_read_ce",
        "figures": [
            {"name": "sum", "value": "779.45", "unit": "GB/s"},
            {"name": "min", "value": "389.40", "unit": "GB/s"},
            {"name": "max", "value": "390.05", "unit": "GB/s"},
        ],
        "matrix": {
            "title": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
            "unit": "GB/s",
            "rows": ["0", "1"],
            "columns": ["0", "1"],
            "cells": [[None, "389.40"], ["390.05", None]],
        },
        "gpus": 2,
        "nodes": 1,
        "tool_version": "v0.8",
    }
    assert (h2d["data"]["test"], figures(h2d)) == (
        "host_to_device_memcpy_ce",
        {"sum": "110.00 GB/s", "min": "54.90 GB/s", "max": "55.10 GB/s"},
    )


def test_the_old_zero_diagonal_is_not_a_measurement(tmp_path: Path) -> None:
    text = RUN.replace("       N/A    389.40", "      0.00    389.40").replace(
        "    390.05       N/A", "    390.05      0.00"
    )
    assert figures(events(write(tmp_path, text))[0]) == {
        "sum": "779.45 GB/s",
        "min": "389.40 GB/s",
        "max": "390.05 GB/s",
    }


def test_reading_again_appends_nothing_and_runs_differ_by_their_figures(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    path = write(
        tmp_path, RUN + RUN.replace("779.45", "779.46")
    )  # two runs; the second's SUM differs
    base = [
        "ingest",
        "--db",
        db,
        "--tenant",
        "acme",
        "--allocation",
        "alloc-9",
        "--scrape-time",
        "2026-03-01T08:00:00Z",
    ]
    outputs = [CliRunner().invoke(main, base + [str(path)]) for _ in range(2)]
    assert [(r.exit_code, r.stdout.partition(": ")[2]) for r in outputs] == [
        (
            0,
            "read 4 · appended 3 · duplicate 1 · quarantined 0\n",
        ),  # the host testcase is the same in both runs
        (0, "read 4 · appended 0 · duplicate 4 · quarantined 0\n"),
    ]


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [
        (
            RUN.replace(" 1    390.05       N/A", " 1    390.05"),
            15,
            "row 1",
            "1 cells, but the header names 2 columns",
        ),
        (RUN.replace("    389.40", "    38x.40"), 14, "row 0", "not a figure: '38x.40'"),
        (
            RUN.replace(
                "SUM device_to_device_memcpy_read_ce", "SUM device_to_device_memcpy_write_ce"
            ),
            17,
            "SUM",
            "names device_to_device_memcpy_write_ce, but the testcase running is "
            "device_to_device_memcpy_read_ce",
        ),
    ],
)
def test_a_testcase_that_cannot_be_read_goes_to_the_quarantine_whole(
    tmp_path: Path, text: str, line: int, field: str, reason: str
) -> None:
    first, second = records(write(tmp_path, text))
    assert isinstance(first, Rejected) and isinstance(second, Accepted)
    assert (first.origin.line, first.field, first.reason) == (line, field, reason)
    assert first.record.startswith(b"Running device_to_device_memcpy_read_ce.\n")


def test_tenant_and_allocation_are_required(tmp_path: Path) -> None:
    path = write(tmp_path, RUN)
    with pytest.raises(
        IngestError, match="required: nvbandwidth output names no allocation"
    ) as info:
        list(extract(path, "nvbandwidth", tenant="acme"))
    assert info.value.option == "allocation"
    result = CliRunner().invoke(
        main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--allocation", "a", str(path)]
    )
    assert (result.exit_code, result.output) == (
        2,
        f"Error: --set tenant: {path}: required: nvbandwidth output names no tenant\n",
    )
    # both missing: both named in one error, so one try tells what to add
    result = CliRunner().invoke(
        main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", str(path)]
    )
    assert (result.exit_code, result.output) == (
        2,
        f"Error: {path}: required: tenant, allocation (nvbandwidth output names none of them)\n",
    )


JSON = """{
\t"nvbandwidth" :\x20
\t{
\t\t"GPU Device list" : [ "0: NVIDIA H100 (00000000:19:00): (node-3)", "1: NVIDIA H100 \
(00000000:3b:00): (node-3)" ],
\t\t"testcases" :\x20
\t\t[
\t\t\t{ "name" : "host_to_device_memcpy_ce", "status" : "Passed", "sum" : 110.00000000000001,
\t\t\t  "bandwidth_description" : "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
\t\t\t  "bandwidth_matrix" : [ [ "55.1", "54.900000000000006" ] ] },
\t\t\t{ "name" : "device_to_device_memcpy_read_ce", "status" : "Waived" }
\t\t],
\t\t"version" : "v0.8"
\t}
}
"""


def test_json_output_keeps_the_digits_written_and_passes_over_waived_testcases(
    tmp_path: Path,
) -> None:
    [event] = events(write(tmp_path, JSON, "nvb.json"))
    assert (event["data"]["test"], event["data"]["gpus"], event["data"]["tool_version"]) == (
        "host_to_device_memcpy_ce",
        2,
        "v0.8",
    )
    assert figures(event) == {
        "sum": "110.00000000000001 GB/s",
        "min": "54.900000000000006 GB/s",
        "max": "55.1 GB/s",
    }
    assert event["data"]["matrix"]["cells"] == [["55.1", "54.900000000000006"]]


def test_identify(tmp_path: Path) -> None:
    for text, name in ((RUN, "a.txt"), (JSON, "b.json"), (RUN[RUN.index("Running") :], "c.txt")):
        path = write(tmp_path, text, name)
        assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes())] == [
            "nvbandwidth"
        ]


def real(name: str) -> list[dict[str, Any]]:
    path = NVB / name
    if not path.exists():
        pytest.skip(ABSENT_REASON.format(path))
    assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes()[:65536])] == [
        "nvbandwidth"
    ]
    return events(path)


def test_real_t4_d2d_two_testcases() -> None:
    ce, sm = real("sadcup-nvbandwidth_results_benchmark_d2d_t4x4.txt")
    assert [(e["data"]["test"], figures(e)["sum"]) for e in (ce, sm)] == [
        ("device_to_device_memcpy_read_ce", "121.93 GB/s"),
        ("device_to_device_memcpy_read_sm", "121.14 GB/s"),
    ]
    cells = ce["data"]["matrix"]["cells"]
    assert (cells[0][2], cells[3][0], [cells[i][i] for i in range(4)]) == (
        "9.99",
        "9.97",
        [None] * 4,
    )
    assert (ce["data"]["gpus"], ce["data"]["tool_version"]) == (4, "v0.8")


def test_real_t4_three_runs_in_one_file() -> None:
    found = real("sadcup-nvbandwidth_results_benchmark_t4x4_three-runs.txt")
    sums = {e["data"]["test"]: figures(e)["sum"] for e in found}
    assert len(found) == 10
    assert [
        sums[t]
        for t in (
            "host_to_device_memcpy_ce",
            "device_to_host_memcpy_ce",
            "host_to_device_bidirectional_memcpy_ce",
            "device_to_device_memcpy_read_ce",
        )
    ] == ["49.32 GB/s", "52.58 GB/s", "46.04 GB/s", "121.93 GB/s"]
    host = found[0]["data"]["matrix"]
    assert (host["rows"], host["columns"]) == (["0"], ["0", "1", "2", "3"])


def test_real_t4_json() -> None:
    found = real("sadcup-nvbandwidth_results_benchmark_t4x4.json")
    sums = {e["data"]["test"]: figures(e)["sum"] for e in found}
    assert len(found) == 4 and {e["data"]["gpus"] for e in found} == {4}
    assert (sums["host_to_device_memcpy_ce"], sums["host_to_device_bidirectional_memcpy_ce"]) == (
        "49.320728004000003 GB/s",
        "44.558465592000005 GB/s",
    )
    assert found[0]["data"]["matrix"]["cells"][0][0] == "12.3527"


def test_real_a6000_sum_is_the_sum_line_not_the_cells_added() -> None:
    [event] = real("nvbandwidth-issue-50_a6000x6_d2d-read-ce.txt")
    assert (
        event["data"]["test"] == "device_to_device_memcpy_read_ce"
    )  # named by its SUM line alone
    assert figures(event) == {
        "sum": "715.53 GB/s",
        "min": "21.80 GB/s",
        "max": "26.35 GB/s",
    }  # the cells add to 715.56
    assert [event["data"]["matrix"]["cells"][i][i] for i in range(6)] == [None] * 6


def test_real_gh200_fixture_latency_in_ns_and_odd_shapes() -> None:
    found = real("superbenchmark_tests-data_nvbandwidth_results_gh200-fixture.log")
    by_test = {e["data"]["test"]: e for e in found}
    assert len(found) == 15
    h2d = by_test["host_to_device_memcpy_ce"]["data"]["matrix"]
    assert (
        len(h2d["rows"]),
        len(h2d["columns"]),
        figures(by_test["host_to_device_memcpy_ce"])["sum"],
    ) == (2, 3, "1985.60 GB/s")
    assert figures(by_test["device_to_host_memcpy_ce"])["sum"] == "607.26 GB/s"
    assert figures(by_test["host_device_latency_sm"])["sum"] == "772.58 ns"
    assert figures(by_test["host_to_device_memcpy_sm"])["sum"] == "372.33 GB/s"
    assert by_test["host_device_latency_sm"]["data"]["tool_version"] == "v0.6"


def test_real_readme_example_without_sum_gives_its_least_and_greatest_cell() -> None:
    [event] = real("NVIDIA-nvbandwidth_README_example_d2d-write-ce_8gpu.txt")
    assert figures(event) == {
        "min": "274.89 GB/s",
        "max": "276.76 GB/s",
    }  # row 6 col 0; row 4 col 3
    matrix = event["data"]["matrix"]
    # the block as stored ends after row 6: 7 rows of 8 columns
    assert (len(matrix["rows"]), len(matrix["columns"]), matrix["cells"][0][0]) == (7, 8, "0.00")


def test_a_matrix_titled_by_its_columns_alone(tmp_path: Path) -> None:
    text = (
        "Running device_local_copy.\nmemcpy local GPU(column) bandwidth (GB/s)\n           "
        "0         1\n 0   1480.20   1479.95\n\nSUM device_local_copy 2960.15\n"
    )
    [event] = events(write(tmp_path, text))
    assert (event["data"]["test"], figures(event)) == (
        "device_local_copy",
        {"sum": "2960.15 GB/s", "min": "1479.95 GB/s", "max": "1480.20 GB/s"},
    )


def test_a_multinode_testcase_does_not_claim_one_node(tmp_path: Path) -> None:
    text = RUN.replace(
        "device_to_device_memcpy_read_ce", "multinode_device_to_device_memcpy_read_ce"
    )
    first, second = events(write(tmp_path, text))
    assert ("nodes" in first["data"], second["data"]["nodes"]) == (False, 1)


def test_launcher_tags_are_read_through(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "".join(f"[1,0]<stdout>:{line}\n" for line in RUN[RUN.index("Running") :].splitlines()),
    )
    assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes())] == ["nvbandwidth"]
    assert [figures(e)["sum"] for e in events(path)] == ["779.45 GB/s", "110.00 GB/s"]


def test_a_json_testcase_with_its_sum_alone_and_one_with_nothing(tmp_path: Path) -> None:
    text = (
        '{"nvbandwidth": {"testcases": ['
        '{"name": "host_device_latency_sm", "status": "Passed", "sum": 772.58,'
        ' "bandwidth_description": "memory latency SM CPU(row) <-> GPU(column) (ns)"},'
        '{"name": "host_to_device_memcpy_ce", "status": "Passed"}]}}\n'
    )
    first, second = records(write(tmp_path, text, "nvb.json"))
    assert isinstance(first, Accepted) and isinstance(second, Rejected)
    event = orjson.loads(first.body)
    assert (figures(event), "matrix" in event["data"]) == ({"sum": "772.58 ns"}, False)
    assert (second.field, second.reason) == (
        "nvbandwidth.testcases[1].bandwidth_description",
        "expected the matrix's title (it gives the unit)",
    )
