"""dcgmi-diag: `dcgmi diag` text (DCGM 2.x/3.x and 4.x) into fleet faults and their clearings.

Expected values are worked by hand from each table and the rules in ingest/dcgmi_diag.py:
a Fail or Warn test yields a fault per failing GPU, an Error row with no test a `diag-error`
fault, a Pass a clearing on each GPU that passed (and, for a test that passed as a whole,
on the node and every GPU the run covered)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from ingest import INGESTORS, IngestError, extract
from schemas import Accepted, Rejected
from tests.conftest import REALDATA, run_cli

DIAG = REALDATA / "dcgmi-diag"
ABSENT_REASON = f"real data not present at {DIAG} (it lives beside the project, not in it)"
needs_realdata = pytest.mark.skipif(not DIAG.is_dir(), reason=ABSENT_REASON)
ALL_PASS = DIAG / "dcgm-issue-124_diag-r2-i0_dcgm-4.4.2_all-pass.txt"
FRAGMENT = DIAG / "stas00-ml-engineering_nvidia-debug_diag-xid64-row-remap-pending_fragment.txt"
SAMPLE = Path(__file__).resolve().parent.parent / "fixtures" / "samples" / "dcgmi_diag.txt"
AT = "2026-01-07T10:00:00Z"
OPTIONS = {"node": "gpu-07", "scrape_time": AT}
BORDER = "+" + "-" * 27 + "+" + "-" * 48 + "+"
HEADER = [
    "Successfully ran diagnostic for group.",
    BORDER,
    "| Diagnostic                | Result                                         |",
    "+" + "=" * 27 + "+" + "=" * 48 + "+",
]


def row(label: str, value: str) -> str:
    """One table row as dcgmi prints it: 27 and 48 columns."""
    return f"| {label:<25} | {value:<46} |"


def bar(name: str, edge: str) -> str:
    left = f"-----  {name}  "
    return f"{edge}{left}{'-' * (27 - len(left))}+{'-' * 48}{edge}"


def table(tmp_path: Path, *rows: str, name: str = "diag.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([*HEADER, *rows, BORDER]) + "\n")
    return path


def records(path: Path, **options: str) -> list[Accepted | Rejected]:
    return list(extract(path, "dcgmi-diag", **(OPTIONS | options)))


def events(path: Path, **options: str) -> list[dict[str, Any]]:
    out = []
    for record in records(path, **options):
        assert isinstance(record, Accepted), str(record)
        out.append(orjson.loads(record.body))
    return out


def faults(found: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (e["data"].get("device"), e["data"]["code"], e["data"]["severity"], e["data"]["detail"])
        for e in found
        if e["type"] == "health.fault"
    ]


def clearings(found: list[dict[str, Any]]) -> set[tuple[Any, str]]:
    return {
        (e["data"].get("device"), e["data"]["code"])
        for e in found
        if e["type"] == "health.cleared"
    }


@needs_realdata
def test_the_all_pass_run_of_dcgm_4_has_no_fault_and_three_passed_tests() -> None:
    found = events(ALL_PASS)
    assert faults(found) == []
    # software, memory, pcie: each `Pass` with `GPU0: Pass` (the run's only GPU, `-i 0`);
    # the Device ID 2237 is a PCI id, never a GPU; a clean run clears diag-error too
    assert clearings(found) == {
        (device, code)
        for code in ("diag-software", "diag-memory", "diag-pcie", "diag-error")
        for device in (None, 0)
    }
    assert {(e["data"]["dcgm_version"], e["data"]["driver_version"]) for e in found} == {
        ("4.4.2", "580.105.08")
    }
    assert {e["source"] for e in found} == {"dcgmi-diag://gpu-07"}
    assert {e["time"] for e in found} == {AT}


@needs_realdata
def test_the_cut_fragment_is_one_fault_on_gpu_3_with_the_wrapped_message_joined() -> None:
    [record] = records(FRAGMENT)
    assert isinstance(record, Accepted)
    assert record.origin.line == 5
    event = orjson.loads(record.body)
    assert event["type"] == "health.fault"
    assert event["data"] == {
        "node": "gpu-07",
        "device": 3,
        "code": "diag-error",
        "severity": "critical",
        "detail": "GPU 3 has uncorrectable memory errors and row remappings are pending",
    }


@needs_realdata
@pytest.mark.parametrize("path", [ALL_PASS, FRAGMENT], ids=["all-pass", "fragment"])
def test_both_real_files_are_claimed_by_dcgmi_diag_alone(path: Path) -> None:
    head = path.read_bytes()[:65536]
    assert [i.name for i in INGESTORS if i.identify(path, head)] == ["dcgmi-diag"]


def test_the_3x_sample_faults_and_clearings() -> None:
    found = events(SAMPLE)
    assert faults(found) == [
        (
            1,
            "diag-page-retirement-row-remap",
            "critical",
            "Page Retirement/Row Remap: Fail; GPU 1 had uncorrectable memory errors and row "
            "remapping failed. Drain the GPU and reset it.",
        ),
        (
            1,
            "diag-memory",
            "critical",
            "GPU Memory: Fail; GPU 1 Error using CUDA API cuMemAlloc: out of memory. Check "
            "DCGM and system logs for errors. Reset GPU.",
        ),
        (
            0,
            "diag-targeted-stress",
            "warning",
            "Targeted Stress: Warn; GPU 0 The clock throttle reason HW_SLOWDOWN was active "
            "for 3 s.",
        ),
        (1, "diag-targeted-stress", "warning", "Targeted Stress: Warn"),
    ]
    # Denylist, NVML Library, PCIe (Pass - All) on the node and GPUs 0, 1 of `-i 0,1`;
    # GPU Memory on GPU 0 only; Skip (Persistence Mode, Diagnostic) clears nothing
    assert clearings(found) == {
        *(
            (d, c)
            for c in ("diag-denylist", "diag-nvml-library", "diag-pcie")
            for d in (None, 0, 1)
        ),
        (0, "diag-memory"),
    }


def test_dcgm_4_warn_prints_the_gpu_as_fail_and_is_read_as_a_warning(tmp_path: Path) -> None:
    message = "Persistence mode for GPU 1 is disabled. Enable persistence mode by running it."
    path = table(
        tmp_path,
        bar("Deployment", "|"),
        row("software", "Warn"),
        row("", "GPU0: Pass"),
        row("", "GPU1: Fail"),
        row("Warning: GPU1", message[:45]),
        row("", message[45:]),
        bar("Hardware", "+"),
        row("memory", "Fail"),
        row("", "GPU0: Fail"),
        row("", "GPU1: Skip"),
        row("Warning: GPU0", "Allocated memory was short."),
        row("Info: GPU0", "Allocated 1000 bytes."),
    )
    found = events(path)
    assert faults(found) == [
        (1, "diag-software", "warning", f"software: Warn; {message}"),
        (0, "diag-memory", "critical", "memory: Fail; Allocated memory was short."),
    ]
    # GPU0 passed software; nothing passed as a whole, so no node clearing and no diag-error
    assert clearings(found) == {(0, "diag-software")}


def test_a_failed_test_naming_no_gpu_is_a_fault_on_the_node(tmp_path: Path) -> None:
    path = table(
        tmp_path,
        bar("Deployment", "|"),
        row("Environment Variables", "Fail"),
        row("Error", "Found CUDA_VISIBLE_DEVICES set in the environment"),
    )
    [event] = events(path)
    assert event["data"]["code"] == "diag-environment-variables"
    assert "device" not in event["data"]
    assert event["id"] == f"-:diag-environment-variables@{AT}"


def test_a_repeated_error_gets_its_own_id(tmp_path: Path) -> None:
    path = table(
        tmp_path,
        bar("Deployment", "|"),
        row("Error", "GPU 2 has pending page retirements"),
        row("Error", "GPU 2 has uncorrectable errors"),
    )
    assert [e["id"] for e in events(path)] == [f"2:diag-error@{AT}", f"2:diag-error@{AT}#2"]


@pytest.mark.parametrize(
    ("rows", "line", "field", "reason"),
    [
        ([row("memory", "Maybe")], 6, "memory", "not a diagnostic result: 'Maybe'"),
        (
            [row("memory", "Pass"), row("", "GPU0 passed")],
            7,
            "memory",
            "not an entity's result (GPU0: Pass): 'GPU0 passed'",
        ),
        (
            [row("memory", "Pass"), "| memory                    | Pass"],
            7,
            "(line)",
            "truncated table row: no closing '|'",
        ),
        ([row("", "GPU0: Pass")], 6, "(result)", "a result with no test before it: 'GPU0: Pass'"),
    ],
)
def test_bad_rows_are_quarantined_naming_line_and_field(
    tmp_path: Path, rows: list[str], line: int, field: str, reason: str
) -> None:
    path = table(tmp_path, bar("Hardware", "+"), *rows)
    [rejected] = [r for r in records(path) if isinstance(r, Rejected)]
    assert (rejected.origin.file, rejected.origin.line, rejected.field, rejected.reason) == (
        str(path),
        line,
        field,
        reason,
    )


def test_a_bad_test_costs_that_test_alone(tmp_path: Path) -> None:
    path = table(
        tmp_path,
        bar("Hardware", "+"),
        row("memory", "Fial"),
        row("", "GPU0: Fail"),
        row("pcie", "Fail"),
        row("", "GPU0: Fail"),
    )
    bad, good = records(path)
    assert isinstance(bad, Rejected) and isinstance(good, Accepted)
    assert (bad.origin.line, bad.field) == (6, "memory")
    assert orjson.loads(good.body)["data"]["code"] == "diag-pcie"


def test_invalid_utf8_is_quarantined(tmp_path: Path) -> None:
    path = table(tmp_path, bar("Hardware", "+"), row("memory", "Fail"), row("", "GPU0: Fail"))
    path.write_bytes(path.read_bytes().replace(b"GPU0: Fail", b"GPU0: F\xffil"))
    [rejected] = records(path)
    assert isinstance(rejected, Rejected)
    assert (rejected.origin.line, rejected.field) == (7, "(line)")
    assert rejected.reason.startswith("not valid UTF-8")


def test_dcgmi_s_own_failure_is_quarantined_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "diag.txt"
    path.write_text("dcgmi diag -r 1\nError: Diagnostic could not be run while DCGM is paused.\n")
    [rejected] = records(path)
    assert isinstance(rejected, Rejected)
    assert (rejected.origin.line, rejected.field) == (2, "(run)")
    assert "Diagnostic could not be run while DCGM is paused." in rejected.reason


def test_a_second_table_in_one_file_is_quarantined(tmp_path: Path) -> None:
    one = [bar("Hardware", "+"), row("memory", "Fail"), row("", "GPU0: Fail")]
    path = tmp_path / "two.txt"
    path.write_text("\n".join([*HEADER, *one, BORDER, *HEADER, *one, BORDER]) + "\n")
    first, second = records(path)
    assert isinstance(first, Accepted) and isinstance(second, Rejected)
    # lines 1-8 the first run; 9 its `Successfully ran`, 10 the border, 11 the second header
    assert (second.origin.line, second.field) == (11, "(run)")


def test_the_node_is_required(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="required: dcgmi-diag output names no node") as raised:
        list(extract(SAMPLE, "dcgmi-diag"))
    assert raised.value.option == "node"


def test_the_time_defaults_to_the_file_s_modification_time(tmp_path: Path) -> None:
    path = table(tmp_path, bar("Hardware", "+"), row("memory", "Fail"), row("", "GPU0: Fail"))
    os.utime(path, (1767780000, 1767780000))  # 2026-01-07T10:00:00Z
    [event] = events(path, scrape_time="")
    assert event["time"] == AT


def test_ingesting_twice_appends_nothing_the_second_time(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    args = ["ingest", "--db", db, "--set", "node=gpu-07", "--set", f"scrape_time={AT}"]
    code, out, _ = run_cli(*args, str(SAMPLE))
    assert code == 0, out
    assert "appended 14 · duplicate 0 · quarantined 0" in out
    code, out, _ = run_cli(*args, str(SAMPLE))
    assert code == 0, out
    assert "appended 0 · duplicate 14 · quarantined 0" in out


def test_a_paste_that_ends_mid_row_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    message = "GPU 0 Thermal violations totaling 13.3 seconds were seen."
    path = tmp_path / "cut.txt"
    cut = row("", message[45:]).rstrip("|").rstrip()  # `|    | seen.`: no closing bar
    rows = [bar("Hardware", "+"), row("memory", "Fail - GPU: 0"), row("Warning", message[:45])]
    path.write_text("\n".join([*HEADER[1:], *rows, cut]) + "\n\n")
    [event] = events(path)
    assert (event["data"]["device"], event["data"]["detail"]) == (0, f"memory: Fail; {message}")


def test_a_3x_deployment_error_naming_several_gpus_faults_each(tmp_path: Path) -> None:
    message = "Persistence mode for GPU 2 is disabled.,Persistence mode for GPU 5 is disabled."
    path = table(
        tmp_path,
        bar("Deployment", "|"),
        row("Persistence Mode", "Fail"),
        *(row("Error" if i == 0 else "", message[i : i + 45]) for i in range(0, 90, 45)),
    )
    detail = f"Persistence Mode: Fail; {message}"
    assert faults(events(path)) == [
        (2, "diag-persistence-mode", "critical", detail),
        (5, "diag-persistence-mode", "critical", detail),
    ]


def test_a_test_in_the_quarantine_keeps_the_run_from_clearing_diag_error(tmp_path: Path) -> None:
    path = table(tmp_path, bar("Hardware", "+"), row("memory", "Fial"), row("pcie", "Pass"))
    found = records(path)
    assert isinstance(found[0], Rejected)
    cleared = {(e["data"].get("device"), e["data"]["code"]) for e in map(_body, found[1:])}
    assert cleared == {(None, "diag-pcie")}  # no GPU named anywhere: the node alone


def _body(record: Accepted | Rejected) -> dict[str, Any]:
    assert isinstance(record, Accepted), str(record)
    parsed: dict[str, Any] = orjson.loads(record.body)
    return parsed


def test_a_gpu_that_skipped_is_not_cleared(tmp_path: Path) -> None:
    path = table(
        tmp_path,
        bar("Hardware", "+"),
        row("GPU Memory", "Pass - GPU: 0"),
        row("", "Skip - GPU: 3"),
    )
    # a clean run: diag-error is cleared on the node and GPU 0, not on GPU 3
    assert clearings(events(path)) == {(0, "diag-memory"), (None, "diag-error"), (0, "diag-error")}


def test_json_of_dcgm_3(tmp_path: Path) -> None:
    # 3.x -j: Deployment results carry `gpu_id` only with an error, under the key `warnings`
    document = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [
                        {"name": "Denylist", "results": [{"status": "Pass"}]},
                        {
                            "name": "Page Retirement/Row Remap",
                            "results": [
                                {
                                    "gpu_id": 3,
                                    "status": "Fail",
                                    "warnings": [{"warnings": "GPU 3 has pending remaps"}],
                                }
                            ],
                        },
                    ],
                },
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "GPU Memory",
                            "results": [
                                {"gpu_id": "0", "status": "Pass"},
                                {"gpu_id": "3", "status": "Skip"},
                            ],
                        }
                    ],
                },
            ],
            "version": "3.3.8",
        }
    }
    path = tmp_path / "diag.json"
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes())] == ["dcgmi-diag"]
    found = events(path)
    assert faults(found) == [
        (
            3,
            "diag-page-retirement-row-remap",
            "critical",
            "Page Retirement/Row Remap: Fail; GPU 3 has pending remaps",
        )
    ]
    # Denylist passed as a whole: the node and GPUs 0, 3 (named by the run's results);
    # GPU Memory on GPU 0 only (GPU 3 skipped)
    assert clearings(found) == {
        (None, "diag-denylist"),
        (0, "diag-denylist"),
        (3, "diag-denylist"),
        (0, "diag-memory"),
    }
    assert {e["data"]["dcgm_version"] for e in found} == {"3.3.8"}


def test_json_of_dcgm_4(tmp_path: Path) -> None:
    # 4.x -j: results by entity; the summary repeats every warning of the test
    warning = {"warning": "GPU 0 memory fault", "error_id": 1}
    document = {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "memory",
                            "results": [
                                {
                                    "entity_group": "GPU",
                                    "entity_group_id": 1,
                                    "entity_id": 0,
                                    "status": "Fail",
                                    "warnings": [warning],
                                },
                                {
                                    "entity_group": "GPU",
                                    "entity_group_id": 1,
                                    "entity_id": 1,
                                    "status": "Pass",
                                },
                            ],
                            "test_summary": {"status": "Fail", "warnings": [warning]},
                        }
                    ],
                }
            ]
        },
        "metadata": {"version": "4.4.2", "Driver Version Detected": "580.105.08"},
    }
    path = tmp_path / "diag.json"
    path.write_bytes(orjson.dumps(document))
    found = events(path)
    assert faults(found) == [(0, "diag-memory", "critical", "memory: Fail; GPU 0 memory fault")]
    assert clearings(found) == {(1, "diag-memory")}
    assert {(e["data"]["dcgm_version"], e["data"]["driver_version"]) for e in found} == {
        ("4.4.2", "580.105.08")
    }


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        (b'{"DCGM Diagnostic": {"test_categories": [', "(json)", "not valid JSON"),
        (b'{"DCGM Diagnostic": {}}', "DCGM Diagnostic.test_categories", "expected a list"),
        (
            b'{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "pcie", '
            b'"results": [{"entity_id": 0, "status": "Maybe"}]}]}]}}',
            "DCGM Diagnostic.test_categories[0].tests[0].results[0].status",
            "not a diagnostic result: 'Maybe'",
        ),
    ],
)
def test_bad_json_is_quarantined_naming_the_field(
    tmp_path: Path, body: bytes, field: str, reason: str
) -> None:
    path = tmp_path / "diag.json"
    path.write_bytes(body)
    [rejected] = records(path)
    assert isinstance(rejected, Rejected)
    assert rejected.field == field
    assert rejected.reason.startswith(reason)


@pytest.mark.skipif(not (REALDATA / "dcgm-stats").is_dir(), reason=ABSENT_REASON)
def test_a_job_log_with_a_diag_prolog_and_dcgmi_stats_is_left_to_dcgm_stats() -> None:
    # Slurm job 232's stdout: a 2.x `dcgmi diag -r 1` table in its prolog, then its stats
    path = REALDATA / "dcgm-stats" / "bert-slurm-job-232_stdout_prolog_epilog.out"
    head = path.read_bytes()[:65536]
    assert b"Successfully ran diagnostic for group." in head
    assert [i.name for i in INGESTORS if i.identify(path, head)] == ["dcgm-stats"]


def test_a_renamed_test_keeps_its_code_across_dcgm_versions(tmp_path: Path) -> None:
    # 2.x Blacklist is 3.x Denylist; 3.x GPU Memory is 4.x memory
    path = table(
        tmp_path,
        bar("Deployment", "|"),
        row("Blacklist", "Fail"),
        row("Error", "GPU 2 is on the denylist"),
        bar("Hardware", "+"),
        row("GPU Memory", "Fail - GPU: 2"),
    )
    assert [(d, c) for d, c, _, _ in faults(events(path))] == [
        (2, "diag-denylist"),
        (2, "diag-memory"),
    ]
