"""The nccl-tests ingestor (ingest/nccl_tests.py): the table in both layouts, in-place and
out-of-place, the average line, several runs in one file, the test's name from the command
line or the table, the quarantine and the real outputs' facts. Expected values are read off
the outputs by hand (and listed in PROBES.md)."""

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

NCCL = REALDATA / "nccl-tests"
ABSENT_REASON = "real data not present at {} (it lives beside the project, not in it)"
OPTIONS = {"tenant": "acme", "allocation": "alloc-9", "scrape_time": "2026-03-01T08:00:00Z"}

HEADER = """# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 \
agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   6899 on node-a device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   6900 on node-a device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   6733 on node-b device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid   6734 on node-b device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       \
in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   \
algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  \
(GB/s)  (GB/s)
"""
# all_reduce over 4 ranks: busbw = algbw x 2(4-1)/4 = algbw x 1.5
RUN = (
    HEADER
    + """           8             2     float     sum      -1    20.00    0.00    0.00      0    \
19.50    0.00    0.00      0
    16777216       4194304     float     sum      -1    200.0   83.89  125.83      0    201.0   \
83.47  125.21    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 62.76
#
"""
)


def write(tmp_path: Path, text: str, name: str = "nccl.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def records(path: Path, **options: Any) -> list[Accepted | Rejected]:
    return list(extract(path, "nccl-tests", **{**OPTIONS, **options}))


def events(path: Path, **options: Any) -> list[dict[str, Any]]:
    found = records(path, **options)
    assert all(isinstance(r, Accepted) for r in found), found
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def busbw(event: dict[str, Any], size: int, half: str = "out-of-place") -> str:
    [value] = [
        f["value"]
        for f in event["data"]["figures"]
        if f["name"] == "busbw" and f.get("size_bytes") == size and f["placement"] == half
    ]
    return str(value)


def average(event: dict[str, Any]) -> str:
    [value] = [f["value"] for f in event["data"]["figures"] if f["name"] == "avg_busbw"]
    return str(value)


def test_a_run_is_one_probe_result_with_every_row_and_half(tmp_path: Path) -> None:
    [event] = events(
        write(tmp_path, "$ mpirun -np 4 ./build/all_reduce_perf -b 8 -e 16M -f 2 -g 1\n" + RUN)
    )
    data = event["data"]
    assert (event["source"], data["probe"], data["test"], data["gpus"], data["nodes"]) == (
        "nccl-tests://alloc-9",
        "nccl-tests",
        "all_reduce_perf",
        4,
        2,
    )
    keys = {
        "size_bytes": 16777216,
        "count": 4194304,
        "datatype": "float",
        "redop": "sum",
        "root": -1,
    }
    assert [f for f in data["figures"] if f.get("size_bytes") == 16777216] == [
        {"name": "time", "value": "200.0", "unit": "us", "placement": "out-of-place", **keys},
        {"name": "algbw", "value": "83.89", "unit": "GB/s", "placement": "out-of-place", **keys},
        {"name": "busbw", "value": "125.83", "unit": "GB/s", "placement": "out-of-place", **keys},
        {"name": "wrong", "value": "0", "unit": "errors", "placement": "out-of-place", **keys},
        {"name": "time", "value": "201.0", "unit": "us", "placement": "in-place", **keys},
        {"name": "algbw", "value": "83.47", "unit": "GB/s", "placement": "in-place", **keys},
        {"name": "busbw", "value": "125.21", "unit": "GB/s", "placement": "in-place", **keys},
    ]  # the in-place #wrong is N/A: no check made, no figure
    assert data["figures"][-1] == {"name": "avg_busbw", "value": "62.76", "unit": "GB/s"}
    assert len(data["figures"]) == 8 + 7 + 1


def test_without_a_command_line_the_table_names_the_collective(tmp_path: Path) -> None:
    # redop sum, root -1 and busbw/algbw = 1.5 = 2(n-1)/n at n = 4: only all_reduce fits.
    assert events(write(tmp_path, RUN))[0]["data"]["test"] == "all_reduce_perf"
    # sum, -1 and a factor of 1: no reducing collective without a root has it.
    [rejected] = records(write(tmp_path, RUN.replace("  125.83  ", "   83.89  ")))
    assert isinstance(rejected, Rejected)
    assert (rejected.origin.line, rejected.field, rejected.reason) == (
        1,
        "test",
        "no command line names the test, and the table fits none (put the command line before the "
        "output)",
    )


def test_several_runs_each_after_its_prompt(tmp_path: Path) -> None:
    text = (
        "user@node-a:~/nccl-tests$ ./build/all_gather_perf -b 8 -e 16M -g 4\n"
        + RUN.replace("sum", "none")
        + "user@node-a:~/nccl-tests$ ./build/reduce_scatter_perf -b 8 -e 16M -g 4\n"
        + RUN
    )
    first, second = events(write(tmp_path, text))
    assert (first["data"]["test"], second["data"]["test"]) == (
        "all_gather_perf",
        "reduce_scatter_perf",
    )
    assert first["id"] != second["id"]


def test_the_old_layout_has_no_root_and_an_error_column(tmp_path: Path) -> None:
    text = (
        "# nThread 1 nGpus 2 minBytes 1 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 "
        "validation: 0\n#   Rank  0 Pid 1 on localhost device  0 [0x00] A100-SXM4-40GB\n#   "
        "Rank  1 Pid 1 on localhost device  1 [0x00] A100-SXM4-40GB\n#       size         "
        "count    type   redop     time   algbw   busbw  error     time   algbw   busbw  "
        "error\nhostname:1:1 [0] NCCL INFO Launch mode Parallel\n           8             2   "
        "float     sum    34.66    0.50    0.50    N/A    34.84    0.40    0.40    N/A\n# Avg "
        "bus bandwidth    : 0.45\n"
    )
    [event] = events(write(tmp_path, "$ ./build/all_reduce_perf -b 1 -e 8 -g 2\n" + text))
    assert (
        event["data"]["test"],
        busbw(event, 8),
        busbw(event, 8, "in-place"),
        average(event),
    ) == ("all_reduce_perf", "0.50", "0.40", "0.45")
    assert "root" not in event["data"]["figures"][0]
    # Without the command line: at 2 ranks all_reduce's factor 2(2-1)/2 is reduce's 1, and no root
    # column tells them apart.
    [rejected] = records(write(tmp_path, text))
    assert isinstance(rejected, Rejected)
    assert rejected.reason == (
        "no command line names the test, and the table fits all_reduce_perf or reduce_perf "
        "(put the command line before the output)"
    )


@pytest.mark.parametrize(
    ("row", "field", "reason"),
    [
        (
            "           8             2     float     sum      -1    20.00    0.00    0.00      "
            "0    19.50    0.00\n",
            "row",
            "11 values, but the header names 13 columns",
        ),
        (
            "           8             2     float     sum      -1    20.00    0.00    -0.5      "
            "0    19.50    0.00    0.00      0\n",
            "out-of-place busbw",
            "not a figure: '-0.5'",
        ),
    ],
)
def test_a_run_with_a_bad_row_goes_to_the_quarantine_whole(
    tmp_path: Path, row: str, field: str, reason: str
) -> None:
    [record] = records(write(tmp_path, HEADER + row + "# Avg bus bandwidth    : 1\n"))
    assert isinstance(record, Rejected)
    assert (record.origin.line, record.field, record.reason) == (12, field, reason)
    assert record.record.startswith(b"# nThread 1 nGpus 1")


def test_options_are_required_and_a_rerun_appends_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, RUN)
    with pytest.raises(IngestError, match="required: nccl-tests output names no tenant") as info:
        list(extract(path, "nccl-tests", allocation="a"))
    assert info.value.option == "tenant"
    with pytest.raises(
        IngestError,
        match=r"required: tenant, allocation \(nccl-tests output names none of them\)$",
    ):
        list(extract(path, "nccl-tests", job="pilot-3"))
    db = f"sqlite:///{tmp_path / 'l.db'}"
    base = [
        "ingest",
        "--db",
        db,
        "--tenant",
        "acme",
        "--allocation",
        "alloc-9",
        "--job",
        "pilot-3",
    ]
    outputs = [CliRunner().invoke(main, base + [str(path)]) for _ in range(2)]
    assert [(r.exit_code, r.stdout.partition(": ")[2]) for r in outputs] == [
        (0, "read 1 · appended 1 · duplicate 0 · quarantined 0\n"),
        (0, "read 1 · appended 0 · duplicate 1 · quarantined 0\n"),
    ]
    exported = [
        orjson.loads(line)
        for line in CliRunner().invoke(main, ["export", "--db", db]).stdout.splitlines()
    ]
    assert [e["event"]["data"]["job_id"] for e in exported] == ["pilot-3"]


def test_identify(tmp_path: Path) -> None:
    path = write(tmp_path, RUN)
    assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes())] == ["nccl-tests"]


def real(name: str) -> list[dict[str, Any]]:
    path = NCCL / name
    if not path.exists():
        pytest.skip(ABSENT_REASON.format(path))
    assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes()[:65536])] == [
        "nccl-tests"
    ]
    return events(path)


def sizes(event: dict[str, Any]) -> list[int]:
    return [
        f["size_bytes"]
        for f in event["data"]["figures"]
        if f["name"] == "busbw" and f["placement"] == "out-of-place"
    ]


def figure(event: dict[str, Any], name: str, size: int, half: str = "out-of-place") -> str:
    [value] = [
        f["value"]
        for f in event["data"]["figures"]
        if f["name"] == name and f.get("size_bytes") == size and f.get("placement") == half
    ]
    return str(value)


def test_real_superbench_a100x8_old_layout() -> None:
    [event] = real("superbenchmark_tests-data_nccl_allreduce_a100x8.log")
    # no command line: redop sum, no root column, busbw/algbw = 235.26/134.44 = 1.75 = 2(8-1)/8
    assert (event["data"]["test"], event["data"]["gpus"], event["data"]["nodes"]) == (
        "all_reduce_perf",
        8,
        1,
    )
    assert len(sizes(event)) == 34 and sizes(event)[:3] == [0, 0, 4]
    g8 = 8589934592
    assert [figure(event, n, g8) for n in ("time", "algbw", "busbw")] == [
        "63896",
        "134.44",
        "235.26",
    ]
    assert figure(event, "busbw", g8, "in-place") == "235.03"
    assert average(event) == "68.4048"


def test_real_two_nodes_sixteen_h100() -> None:
    [event] = real(
        "lessizzmore-create-a3mega-ztan-fork_ztan-NCCL-test-result_h100-2node-16gpu.txt"
    )
    assert (event["data"]["test"], event["data"]["gpus"], event["data"]["nodes"]) == (
        "all_reduce_perf",
        16,
        2,
    )
    assert len(sizes(event)) == 31 and (sizes(event)[0], sizes(event)[-1]) == (8, 8589934592)
    g8 = 8589934592
    assert [figure(event, n, g8) for n in ("time", "algbw", "busbw")] == [
        "47535",
        "180.71",
        "338.82",
    ]
    assert figure(event, "busbw", g8, "in-place") == "337.35"
    assert {f["value"] for f in event["data"]["figures"] if f["name"] == "wrong"} == {"0"}
    assert {f["root"] for f in event["data"]["figures"] if "root" in f} == {-1}
    assert average(event) == "70.742"


def test_real_six_runs_on_two_2080ti() -> None:
    found = real("Anthony-Hoo-github-io_AutoDL-post_2080ti-x2_six-runs.txt")
    assert [e["data"]["test"] for e in found] == [
        "all_reduce_perf",
        "all_gather_perf",
        "broadcast_perf",
        "reduce_perf",
        "reduce_perf",
        "alltoall_perf",
    ]
    assert [len(sizes(e)) for e in found] == [28] * 6
    assert [average(e) for e in found] == [
        "2.05774",
        "1.6651",
        "5.07658",
        "5.23248",
        "202818",
        "2.06935",
    ]
    assert [e["data"]["gpus"] for e in found] == [2, 2, 2, 2, 1, 2]
    all_reduce, one_gpu_reduce, alltoall = found[0], found[4], found[5]
    gib = 1073741824
    assert (busbw(all_reduce, gib), busbw(all_reduce, gib, "in-place")) == ("4.00", "4.00")
    assert busbw(one_gpu_reduce, gib, "in-place") == "5706839.35"
    assert {f["redop"] for f in alltoall["data"]["figures"] if "redop" in f} == {"none"}
    assert sizes(alltoall)[:2] == [0, 0]
    in_place_wrong = [
        f
        for f in alltoall["data"]["figures"]
        if f["name"] == "wrong" and f["placement"] == "in-place"
    ]
    out_of_place_wrong = [
        f
        for f in alltoall["data"]["figures"]
        if f["name"] == "wrong" and f["placement"] == "out-of-place"
    ]
    assert (len(in_place_wrong), len(out_of_place_wrong)) == (
        0,
        28,
    )  # every in-place #wrong of alltoall is N/A


def test_launcher_tags_and_a_markdown_eaten_hash_are_read_through(tmp_path: Path) -> None:
    tagged = "".join(f"[1,0]<stdout>:{line}\n" for line in RUN.splitlines())
    eaten = "".join(
        (line[1:] if line.startswith("#") else line) + "\n" for line in RUN.splitlines()
    )
    for name, text in (("tagged.txt", tagged), ("eaten.txt", eaten)):
        path = write(tmp_path, text, name)
        assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes())] == ["nccl-tests"]
        [event] = events(path)
        assert (
            event["data"]["test"],
            event["data"]["gpus"],
            busbw(event, 16777216),
            average(event),
        ) == ("all_reduce_perf", 4, "125.83", "62.76")


def test_a_concluded_line_names_its_own_run_not_the_next(tmp_path: Path) -> None:
    text = (
        "$ ./build/all_gather_perf -g 4\n"
        + RUN.replace("sum", "none")
        + "# Collective test concluded: all_gather_perf\n"
        + RUN
    )  # the second run has no command line: its table says all_reduce
    first, second = events(write(tmp_path, text))
    assert (first["data"]["test"], second["data"]["test"]) == (
        "all_gather_perf",
        "all_reduce_perf",
    )


def test_scrape_time_sets_the_time_and_a_bad_one_is_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path, RUN)
    assert (
        events(path, scrape_time="2026-03-01T09:30:00+01:00")[0]["time"] == "2026-03-01T08:30:00Z"
    )
    with pytest.raises(IngestError, match=r"^not an RFC 3339 time: 'yesterday'"):
        list(extract(path, "nccl-tests", tenant="acme", allocation="a", scrape_time="yesterday"))


def test_a_pilot_log_with_topo_and_nccl_tests_is_read_once_per_format(tmp_path: Path) -> None:
    topo = (
        "$ nvidia-smi topo -m\n\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\t0-31\t0\nGPU1\tNV4\t X \t0-31\t0\n\n"
    )
    path = write(tmp_path, topo + "$ ./build/all_reduce_perf -g 4\n" + RUN, "pilot.log")
    assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes())] == [
        "nvidia-smi-topo",
        "nccl-tests",
    ]
    db = f"sqlite:///{tmp_path / 'l.db'}"
    base = ["ingest", "--db", db, "--tenant", "acme", "--allocation", "alloc-9"]
    detected = CliRunner().invoke(main, base + [str(path)])
    assert (detected.exit_code, detected.output) == (
        2,
        f"Error: --format: {path}: claimed by several formats (nvidia-smi-topo, nccl-tests); "
        "choose one\n",
    )
    for fmt in ("nvidia-smi-topo", "nccl-tests"):
        result = CliRunner().invoke(main, base + ["--format", fmt, str(path)])
        assert (result.exit_code, result.stdout.partition(": ")[2]) == (
            0,
            "read 1 · appended 1 · duplicate 0 · quarantined 0\n",
        )
    exported = [
        orjson.loads(line)["type"]
        for line in CliRunner().invoke(main, ["export", "--db", db]).stdout.splitlines()
    ]
    assert exported == ["placement.observed", "probe.result"]
