"""The dcgm-stats ingestor: the rules of ingest/dcgm_stats.py, one test each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from ingest import IngestError, extract, ingestor_for
from schemas import Accepted, Rejected

START, END = "Wed Jan  7 10:00:00 2026", "Wed Jan  7 12:00:00 2026"


def row(label: str, value: str) -> str:
    return f"| {label:<35}| {value:<40}|"


def table(gpu: str = "0", start: str = START, end: str = END, dbe: str = "0", pcie: str = "0",
          xids: tuple[str, ...] = (), count: str | None = None) -> list[str]:
    lines = ["+" + "-" * 78 + "+", f"| {'GPU ID: ' + gpu:<77}|" if gpu != "summary" else f"| {'Summary':<77}|",
             "+====================================+=========================================+",
             "|-----  Execution Stats  ------------+-----------------------------------------|",
             row("Start Time", start), row("End Time", end), row("Total Execution Time (sec)", "7200"),
             "+-----  Performance Stats  ----------+-----------------------------------------+",
             row("SM Utilization (%)", "Avg: 72, Max: 99, Min: 0"),
             "+-----  Event Stats  ----------------+-----------------------------------------+",
             row("Single Bit ECC Errors", "0"), row("Double Bit ECC Errors", dbe), row("PCIe Replay Warnings", pcie),
             row("Critical XID Errors", count if count is not None else str(len(xids)))]
    lines += [row("XID (Hr:Min:Sec since start)" if i == 0 else "", x) for i, x in enumerate(xids)]
    return lines + ["+-----  Overall Health  -------------+-----------------------------------------+",
                    row("Overall Health", "Failure"), "+------------------------------------+-----------------------------------------+", ""]


def header(job: str = "4711") -> list[str]:
    return [f"Successfully retrieved statistics for job: {job}. "]


def ingest(tmp_path: Path, lines: list[str], name: str = "gpu-node-03.txt", **options: str) -> list[dict[str, Any]]:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    found = list(extract(path, "dcgm-stats", **options))
    assert all(isinstance(r, Accepted) for r in found), found
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return [(e["type"], e["id"], e["time"], e["data"]["code"]) for e in events]


def test_each_critical_xid_is_a_fault_cleared_at_the_end_of_the_window(tmp_path: Path) -> None:
    events = ingest(tmp_path, header() + table(gpu="3", xids=("0:12:05", "1:75:30")), node="gpu-node-07")
    assert summary(events) == [
        ("health.fault", "4711:3:xid:2026-01-07T10:12:05Z", "2026-01-07T10:12:05Z", "xid"),
        ("health.cleared", "4711:3:xid:2026-01-07T10:12:05Z:cleared", "2026-01-07T12:00:00Z", "xid"),
        ("health.fault", "4711:3:xid:2026-01-07T11:15:30Z", "2026-01-07T11:15:30Z", "xid"),
        ("health.cleared", "4711:3:xid:2026-01-07T11:15:30Z:cleared", "2026-01-07T12:00:00Z", "xid"),
    ]
    fault = events[0]
    assert (fault["source"], fault["data"]["node"], fault["data"]["device"], fault["data"]["severity"]) == (
        "dcgm://gpu-node-07", "gpu-node-07", 3, "critical")
    assert events[1]["data"]["device"] == 3 and events[1]["data"]["node"] == "gpu-node-07"


def test_offsets_in_total_minutes_and_in_minutes_read_alike(tmp_path: Path) -> None:
    # dcgmi prints total minutes (1:75:30); a corrected printer would print 1:15:30.
    events = ingest(tmp_path, header() + table(xids=("1:75:30",)) + header("4712") + table(xids=("1:15:30",)))
    assert [e["time"] for e in events if e["type"] == "health.fault"] == ["2026-01-07T11:15:30Z"] * 2


def test_a_row_that_names_the_xid_gives_its_code_and_may_give_an_absolute_time(tmp_path: Path) -> None:
    events = ingest(tmp_path, header() + table(xids=("0:12:05 (XID 79)", "Wed Jan  7 11:00:00 2026 xid-48", "2026-01-07T11:30:00Z")))
    faults = [(e["time"], e["data"]["code"]) for e in events if e["type"] == "health.fault"]
    assert faults == [("2026-01-07T10:12:05Z", "xid-79"), ("2026-01-07T11:00:00Z", "xid-48"), ("2026-01-07T11:30:00Z", "xid")]


def test_double_bit_ecc_and_pcie_replays_are_faults_at_the_end_never_cleared(tmp_path: Path) -> None:
    events = ingest(tmp_path, header() + table(dbe="2", pcie="57"))
    assert [(e["type"], e["id"], e["data"]["severity"]) for e in events] == [
        ("health.fault", "4711:0:ecc-dbe:2026-01-07T12:00:00Z", "critical"),
        ("health.fault", "4711:0:pcie-replay:2026-01-07T12:00:00Z", "warning"),
    ]
    assert events[0]["data"]["detail"] == "Double Bit ECC Errors: 2 during the job"


def test_a_job_still_running_places_its_faults_at_the_start_and_clears_nothing(tmp_path: Path) -> None:
    events = ingest(tmp_path, header() + table(end="Still Running", pcie="4", xids=("0:01:00",)))
    assert summary(events) == [
        ("health.fault", "4711:0:xid:2026-01-07T10:01:00Z", "2026-01-07T10:01:00Z", "xid"),
        ("health.fault", "4711:0:pcie-replay:2026-01-07T10:00:00Z", "2026-01-07T10:00:00Z", "pcie-replay"),
    ]
    assert events[0]["data"]["window"] == {"start": "2026-01-07T10:00:00Z"}


def test_evidence_rides_along(tmp_path: Path) -> None:
    [fault] = ingest(tmp_path, header("train-8812") + table(dbe="1", end="Wed Jan  7 10:00:00 2026"))
    data = fault["data"]
    assert data["dcgm_job"] == "train-8812" and data["health"] == "Failure"
    assert data["window"] == {"start": "2026-01-07T10:00:00Z", "end": "2026-01-07T10:00:00Z"}
    assert data["utilisation"] == {"SM Utilization (%)": "Avg: 72, Max: 99, Min: 0"}
    assert data["events"]["Double Bit ECC Errors"] == "1" and "tenant" not in data


def test_node_defaults_to_the_file_stem_and_fabric_domain_is_an_option(tmp_path: Path) -> None:
    [fault] = ingest(tmp_path, header() + table(dbe="1"), name="gpu-node-42.out", fabric_domain="nvl-7")
    assert (fault["source"], fault["data"]["node"], fault["data"]["fabric_domain"]) == ("dcgm://gpu-node-42", "gpu-node-42", "nvl-7")


def test_concatenated_outputs_in_a_job_stdout_keep_their_own_job_ids(tmp_path: Path) -> None:
    noise = ["epoch 3 loss 1.93", "+ srun python train.py", "Successfully stopped recording stats for 4711."]
    lines = noise + header() + table(gpu="0", dbe="1") + table(gpu="1", pcie="3") + noise + header("4712") + table(gpu="0", dbe="1")
    assert [e["id"] for e in ingest(tmp_path, lines)] == [
        "4711:0:ecc-dbe:2026-01-07T12:00:00Z", "4711:1:pcie-replay:2026-01-07T12:00:00Z", "4712:0:ecc-dbe:2026-01-07T12:00:00Z"]


def test_a_job_line_names_the_job_when_there_is_no_header(tmp_path: Path) -> None:
    [fault] = ingest(tmp_path, ["Job ID: 998877"] + table(dbe="1"))
    assert fault["data"]["dcgm_job"] == "998877"


def test_a_summary_table_names_the_node_and_a_count_without_times_is_one_fault(tmp_path: Path) -> None:
    [fault] = ingest(tmp_path, header() + table(gpu="summary", count="3"))  # at End Time: nothing later clears it
    assert fault["id"] == "4711:summary:xid:2026-01-07T12:00:00Z" and "device" not in fault["data"]
    assert fault["data"]["detail"] == "3 critical XID errors; dcgmi listed no times"


def test_two_xids_in_one_second_are_one_fault(tmp_path: Path) -> None:
    events = ingest(tmp_path, header() + table(xids=("0:12:05", "0:12:05")))
    assert [e["type"] for e in events] == ["health.fault", "health.cleared"]


def test_real_variations_of_the_layout(tmp_path: Path) -> None:
    # As NVIDIA's user guide prints it: indented, other dash counts, `*` after labels, day not padded.
    lines = ["    Successfully retrieved statistics for <user-provided-jobid>",
             "    +----------------------------------------------------------------------------+",
             "    | GPU ID: 0                                                                  |",
             "    +==================================+=========================================+",
             "    |------- Execution Stats ----------+-----------------------------------------|",
             "    | Start Time *                     | Tue Nov 3 17:36:43 2015                 |",
             "    | End Time *                       | Tue Nov 3 17:38:33 2015                 |",
             "    +----- Event Stats ----------------+-----------------------------------------+",
             "    | Double Bit ECC Errors            | Not Specified                           |",
             "    | PCIe Replay Warnings             | 9                                       |",
             "    | Critical XID Errors              | 0                                       |",
             "    +----------------------------------+-----------------------------------------+"]
    [fault] = ingest(tmp_path, lines)
    assert fault["id"] == "<user-provided-jobid>:0:pcie-replay:2015-11-03T17:38:33Z"


@pytest.mark.parametrize(("lines", "line", "field", "reason"), [
    (table(dbe="1"), 2, "dcgm_job", "no job id: no 'Successfully retrieved statistics for job' line before this table"),
    (["Successfully retrieved process info for PID: 1234. Process ran on 1 GPUs."] + table(dbe="1"), 3, "dcgm_job",
     "`dcgmi stats --pid` output names a process, not a job: use `dcgmi stats --job ID -v`"),
    (header() + table(gpu="x", dbe="1"), 3, "GPU ID", "not a GPU index: 'x'"),
    (header() + table(start="Has Not Started", end="Still Running", dbe="1"), 13, "End Time",
     "missing, and no Start Time: a fault needs the stats window's time"),
    (header() + table(start="N/A", xids=("0:00:10",)), 16, "Start Time", "missing: the XID offsets count from it"),
    (header() + table(xids=("0:99:10",)), 16, "XID (Hr:Min:Sec since start)", "not an Hr:Min:Sec offset: '0:99:10'"),
])
def test_tables_that_cannot_be_placed_are_rejected_whole(tmp_path: Path, lines: list[str], line: int, field: str, reason: str) -> None:
    path = tmp_path / "stats.txt"
    path.write_text("\n".join(lines) + "\n")
    [record] = list(extract(path, "dcgm-stats"))
    assert isinstance(record, Rejected) and (record.origin.line, record.field, record.reason) == (line, field, reason)
    assert record.record.startswith(b"| GPU ID") or record.record.startswith(b"| Summary")


def test_a_healthy_table_yields_nothing(tmp_path: Path) -> None:
    assert ingest(tmp_path, header() + table()) == []


def test_identify(tmp_path: Path) -> None:
    stats, other = tmp_path / "job.out", tmp_path / "notes.txt"
    stats.write_text("step 10\n" + "\n".join(header() + table()))
    other.write_text("| GPU ID: 0 | a table of something else |\n")
    assert ingestor_for(stats).name == "dcgm-stats"
    with pytest.raises(IngestError, match="no format recognises this file"):
        ingestor_for(other)  # claimed by none: an error, never a guess
