"""The dcgm-stats ingestor: the rules of ingest/dcgm_stats.py, one test each, successive
polls of one job, MIG instances, and the real files. Expected values worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from cli import main
from ingest import IngestError, extract, ingestor_for
from reconcile.packets.dispute import touches
from schemas import Accepted, Rejected
from tests.conftest import REALDATA

START, END = "Wed Jan  7 10:00:00 2026", "Wed Jan  7 12:00:00 2026"
BERT = REALDATA / "dcgm-stats" / "bert-slurm-job-232_stdout_prolog_epilog.out"
LANCASTER = REALDATA / "dcgm-stats" / "lancaster-hec-docs_gpu06-2265.txt"
ABSENT_REASON = "real data not present at {} (it lives beside the project, not in it)"


def row(label: str, value: str) -> str:
    return f"| {label:<35}| {value:<40}|"


def table(
    gpu: str = "0",
    start: str = START,
    end: str = END,
    dbe: str = "0",
    pcie: str = "0",
    xids: tuple[str, ...] = (),
    count: str | None = None,
) -> list[str]:
    lines = [
        "+" + "-" * 78 + "+",
        f"| {'GPU ID: ' + gpu:<77}|" if gpu != "summary" else f"| {'Summary':<77}|",
        "+====================================+=========================================+",
        "|-----  Execution Stats  ------------+-----------------------------------------|",
        row("Start Time", start),
        row("End Time", end),
        row("Total Execution Time (sec)", "7200"),
        "+-----  Performance Stats  ----------+-----------------------------------------+",
        row("SM Utilization (%)", "Avg: 72, Max: 99, Min: 0"),
        "+-----  Event Stats  ----------------+-----------------------------------------+",
        row("Single Bit ECC Errors", "0"),
        row("Double Bit ECC Errors", dbe),
        row("PCIe Replay Warnings", pcie),
        row("Critical XID Errors", count if count is not None else str(len(xids))),
    ]
    lines += [row("XID (Hr:Min:Sec since start)" if i == 0 else "", x) for i, x in enumerate(xids)]
    return lines + [
        "+-----  Overall Health  -------------+-----------------------------------------+",
        row("Overall Health", "Failure"),
        "+------------------------------------+-----------------------------------------+",
        "",
    ]


def header(job: str = "4711") -> list[str]:
    return [f"Successfully retrieved statistics for job: {job}. "]


def ingest(
    tmp_path: Path, lines: list[str], name: str = "gpu-node-03.txt", **options: str
) -> list[dict[str, Any]]:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    found = list(extract(path, "dcgm-stats", **{"timezone": "UTC", **options}))
    assert all(isinstance(r, Accepted) for r in found), found
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return [(e["type"], e["id"], e["time"], e["data"]["code"]) for e in events]


def test_each_critical_xid_is_a_fault_cleared_at_the_end_of_the_window(tmp_path: Path) -> None:
    events = ingest(
        tmp_path, header() + table(gpu="3", xids=("0:12:05", "1:75:30")), node="gpu-node-07"
    )
    assert summary(events) == [
        ("health.fault", "3:xid:2026-01-07T10:12:05Z", "2026-01-07T10:12:05Z", "xid"),
        (
            "health.cleared",
            "3:xid:2026-01-07T10:12:05Z:cleared@2026-01-07T12:00:00Z",
            "2026-01-07T12:00:00Z",
            "xid",
        ),
        ("health.fault", "3:xid:2026-01-07T11:15:30Z", "2026-01-07T11:15:30Z", "xid"),
        (
            "health.cleared",
            "3:xid:2026-01-07T11:15:30Z:cleared@2026-01-07T12:00:00Z",
            "2026-01-07T12:00:00Z",
            "xid",
        ),
    ]
    assert events[0]["source"] == "dcgm://gpu-node-07"
    assert events[0]["data"] == {
        "node": "gpu-node-07",
        "device": 3,
        "code": "xid",
        "severity": "critical",
        "detail": "critical XID (dcgmi stats)",
    }
    assert events[1]["data"] == {
        "node": "gpu-node-07",
        "device": 3,
        "code": "xid",
        "detail": "the end of the dcgmi stats window",
    }


def test_offsets_in_total_minutes_and_in_minutes_read_alike(tmp_path: Path) -> None:
    # dcgmi prints total minutes (1:75:30); a corrected printer would print 1:15:30.
    events = ingest(
        tmp_path, header() + table(xids=("1:75:30",)) + header("4712") + table(xids=("1:15:30",))
    )
    # The same fault seen in two jobs' stats is one fault: the second is the same event again.
    assert [e["id"] for e in events if e["type"] == "health.fault"] == [
        "0:xid:2026-01-07T11:15:30Z"
    ] * 2


def test_a_row_that_names_the_xid_gives_its_code_and_may_give_an_absolute_time(
    tmp_path: Path,
) -> None:
    events = ingest(
        tmp_path,
        header()
        + table(
            xids=(
                "0:12:05 (XID 79)",
                "Wed Jan  7 11:00:00 2026 xid-48",
                "2026-01-07T11:30:00+01:00",
            )
        ),
    )
    faults = [(e["time"], e["data"]["code"]) for e in events if e["type"] == "health.fault"]
    assert faults == [
        ("2026-01-07T10:12:05Z", "xid-79"),
        ("2026-01-07T11:00:00Z", "xid-48"),
        ("2026-01-07T10:30:00Z", "xid"),
    ]


def test_faults_known_only_by_a_count_are_the_window_opened_at_start_and_cleared_at_end(
    tmp_path: Path,
) -> None:
    events = ingest(tmp_path, header() + table(dbe="2", pcie="57", count="3"))
    assert [(e["type"], e["id"], e["data"].get("severity")) for e in events] == [
        ("health.fault", "0:xid:2026-01-07T10:00:00Z", "critical"),
        ("health.cleared", "0:xid:2026-01-07T10:00:00Z:cleared@2026-01-07T12:00:00Z", None),
        ("health.fault", "0:ecc-dbe:2026-01-07T10:00:00Z", "critical"),
        ("health.cleared", "0:ecc-dbe:2026-01-07T10:00:00Z:cleared@2026-01-07T12:00:00Z", None),
        ("health.fault", "0:pcie-replay:2026-01-07T10:00:00Z", "warning"),
        (
            "health.cleared",
            "0:pcie-replay:2026-01-07T10:00:00Z:cleared@2026-01-07T12:00:00Z",
            None,
        ),
    ]
    assert (
        events[2]["data"]["detail"]
        == "Double Bit ECC Errors within a dcgmi stats window (dcgmi gives no time)"
    )
    assert (
        events[3]["data"]["detail"]
        == "the end of the dcgmi stats window; Double Bit ECC Errors: 2"
    )


def test_a_job_still_running_clears_nothing_yet(tmp_path: Path) -> None:
    events = ingest(tmp_path, header() + table(end="Still Running", pcie="4", xids=("0:01:00",)))
    assert summary(events) == [
        ("health.fault", "0:xid:2026-01-07T10:01:00Z", "2026-01-07T10:01:00Z", "xid"),
        (
            "health.fault",
            "0:pcie-replay:2026-01-07T10:00:00Z",
            "2026-01-07T10:00:00Z",
            "pcie-replay",
        ),
    ]


def test_fleet_faults_carry_no_job_and_the_telemetry_is_the_tenants_own_event(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gpu-node-03.txt"
    path.write_text("\n".join(header("train-8812") + table(dbe="1")) + "\n")
    records = [
        r
        for r in extract(path, "dcgm-stats", timezone="UTC", tenant="physics")
        if isinstance(r, Accepted)
    ]
    fleet = [r for r in records if r.tenant is None]
    assert [r.type for r in fleet] == ["health.fault", "health.cleared"]
    assert not any(b"train-8812" in r.body or b"Avg: 72" in r.body for r in fleet)
    [own] = [r for r in records if r.tenant is not None]
    event = orjson.loads(own.body)
    assert (own.tenant, event["type"], event["id"], event["time"]) == (
        "physics",
        "job.submitted",
        "train-8812:0:stats@2026-01-07T10:00:00Z",
        "2026-01-07T10:00:00Z",
    )
    assert event["data"]["job_id"] == "train-8812"
    assert event["data"]["dcgm_stats"] == {
        "node": "gpu-node-03",
        "gpu": "0",
        "window": {"start": "2026-01-07T10:00:00Z", "end": "2026-01-07T12:00:00Z"},
        "utilisation": {"SM Utilization (%)": "Avg: 72, Max: 99, Min: 0"},
        "events": {
            "Single Bit ECC Errors": "0",
            "Double Bit ECC Errors": "1",
            "PCIe Replay Warnings": "0",
            "Critical XID Errors": "0",
        },
        "health": "Failure",
    }
    assert [
        r.type for r in extract(path, "dcgm-stats", timezone="UTC") if isinstance(r, Accepted)
    ] == ["health.fault", "health.cleared"]


def ledger_ids(db: str) -> set[str]:
    out = CliRunner().invoke(main, ["export", "--db", db]).stdout
    return {orjson.loads(line)["id"] for line in out.splitlines()}


def test_successive_polls_of_one_job_append_only_what_changed(tmp_path: Path) -> None:
    # An operator runs `dcgmi stats -j 4711 -v` while the job runs, and twice after it ended,
    # on a host whose clock is in Europe/Berlin (10:00 CET is 09:00 UTC).
    polls = [
        header() + table(end="Still Running", dbe="1", xids=("0:12:05",)),
        header() + table(dbe="2", xids=("0:12:05", "1:30:00")),
        header() + table(dbe="2", xids=("0:12:05", "1:30:00")),
    ]
    db, appended, outputs = f"sqlite:///{tmp_path / 'l.db'}", [], []
    for number, poll in enumerate(polls, start=1):
        path = tmp_path / f"poll{number}.txt"
        path.write_text("\n".join(poll) + "\n")
        before = ledger_ids(db) if number > 1 else set()
        result = CliRunner().invoke(
            main,
            [
                "ingest",
                "--db",
                db,
                "--format",
                "dcgm-stats",
                "--node",
                "gpu-node-07",
                "--tenant",
                "physics",
                "--timezone",
                "Europe/Berlin",
                str(path),
            ],
        )
        assert result.exit_code == 0, result.output
        appended.append(sorted(ledger_ids(db) - before))
        outputs.append(result.stdout.partition(": ")[2])
    assert appended == [
        ["0:ecc-dbe:2026-01-07T09:00:00Z", "0:xid:2026-01-07T09:12:05Z"],
        [
            "0:ecc-dbe:2026-01-07T09:00:00Z:cleared@2026-01-07T11:00:00Z",
            "0:xid:2026-01-07T09:12:05Z:cleared@2026-01-07T11:00:00Z",
            "0:xid:2026-01-07T10:30:00Z",
            "0:xid:2026-01-07T10:30:00Z:cleared@2026-01-07T11:00:00Z",
            "4711:0:stats@2026-01-07T09:00:00Z",
        ],
        [],
    ]
    assert outputs == [
        "read 2 · appended 2 · duplicate 0 · quarantined 0 · times in Europe/Berlin\n",
        "read 7 · appended 5 · duplicate 2 · quarantined 0 · times in Europe/Berlin\n",
        "read 7 · appended 0 · duplicate 7 · quarantined 0 · times in Europe/Berlin\n",
    ]


def test_a_mig_instance_fault_touches_that_instance_only(tmp_path: Path) -> None:
    lines = (
        header()
        + table(gpu="0/13", xids=("0:12:05",))
        + header("4712")
        + table(gpu="1", xids=("0:20:00 (XID 43, GPU-I:5)",))
    )
    events = ingest(tmp_path, lines, node="gpu-node-07")
    faults = [e["data"] for e in events if e["type"] == "health.fault"]
    assert [(f["device"], f["code"]) for f in faults] == [("0/13", "xid"), ("1/5", "xid-43")]
    on_13 = {
        "tenant": "a",
        "allocation_id": "A",
        "gpus": 1,
        "node": "gpu-node-07",
        "devices": ["0/13"],
        "placement_class": "mig",
    }
    on_14 = {**on_13, "tenant": "b", "allocation_id": "B", "devices": ["0/14"]}
    whole_0 = {
        **on_13,
        "tenant": "c",
        "allocation_id": "C",
        "devices": [0],
        "placement_class": "whole",
    }
    assert [touches(faults[0], grant) for grant in (on_13, on_14, whole_0)] == [True, False, False]


def test_node_defaults_to_the_file_stem_and_fabric_domain_is_an_option(tmp_path: Path) -> None:
    fault, _ = ingest(
        tmp_path, header() + table(dbe="1"), name="gpu-node-42.out", fabric_domain="nvl-7"
    )
    assert (fault["source"], fault["data"]["node"], fault["data"]["fabric_domain"]) == (
        "dcgm://gpu-node-42",
        "gpu-node-42",
        "nvl-7",
    )


def test_concatenated_outputs_in_a_job_stdout_keep_their_own_job_ids(tmp_path: Path) -> None:
    noise = [
        "epoch 3 loss 1.93",
        "+ srun python train.py",
        "Successfully stopped recording stats for 4711.",
    ]
    lines = (
        noise
        + header()
        + table(gpu="0", dbe="1")
        + table(gpu="1", pcie="3")
        + noise
        + header("4712")
        + table(gpu="0", dbe="1")
    )
    jobs = [
        e["data"]["job_id"]
        for e in ingest(tmp_path, lines, tenant="physics")
        if e["type"] == "job.submitted"
    ]
    assert jobs == ["4711", "4711", "4712"]


def test_a_job_line_names_the_job_when_there_is_no_header(tmp_path: Path) -> None:
    events = ingest(tmp_path, ["Job ID: 998877"] + table(), tenant="physics")
    assert [e["data"]["job_id"] for e in events] == ["998877"]


def test_a_summary_table_names_the_node_alone(tmp_path: Path) -> None:
    fault, cleared = ingest(tmp_path, header() + table(gpu="summary", count="3"))
    assert fault["id"] == "summary:xid:2026-01-07T10:00:00Z" and "device" not in fault["data"]
    assert cleared["time"] == "2026-01-07T12:00:00Z" and "device" not in cleared["data"]


def test_two_xids_in_one_second_are_one_fault(tmp_path: Path) -> None:
    events = ingest(tmp_path, header() + table(xids=("0:12:05", "0:12:05")))
    assert [e["type"] for e in events] == ["health.fault", "health.cleared"]


def test_real_variations_of_the_layout(tmp_path: Path) -> None:
    # As NVIDIA's user guide prints it: indented, other dash counts, `*` after labels, day not
    # padded.
    lines = [
        "    Successfully retrieved statistics for <user-provided-jobid>",
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
        "    +----------------------------------+-----------------------------------------+",
    ]
    fault, _ = ingest(tmp_path, lines)
    assert fault["id"] == "0:pcie-replay:2015-11-03T17:36:43Z"


@pytest.mark.parametrize(
    ("lines", "line", "field", "reason"),
    [
        (
            table(dbe="1"),
            2,
            "dcgm_job",
            "no job id: no 'Successfully retrieved statistics for job' line before this table",
        ),
        (
            ["Successfully retrieved process info for PID: 1234. Process ran on 1 GPUs."]
            + table(dbe="1"),
            3,
            "dcgm_job",
            "`dcgmi stats --pid` output names a process, not a job: use `dcgmi stats --job ID -v`",
        ),
        (header() + table(gpu="x", dbe="1"), 3, "GPU ID", "not a GPU index: 'x'"),
        (
            header() + table(start="Has Not Started", end="Still Running", dbe="1"),
            13,
            "Start Time",
            "missing: a fault known by its count alone is placed in the stats window",
        ),
        (
            header() + table(start="N/A", xids=("0:00:10",)),
            16,
            "Start Time",
            "missing: the XID offsets count from it",
        ),
        (
            header() + table(xids=("0:99:10",)),
            16,
            "XID (Hr:Min:Sec since start)",
            "not an Hr:Min:Sec offset: '0:99:10'",
        ),
    ],
)
def test_tables_that_cannot_be_placed_are_rejected_whole(
    tmp_path: Path, lines: list[str], line: int, field: str, reason: str
) -> None:
    path = tmp_path / "stats.txt"
    path.write_text("\n".join(lines) + "\n")
    [record] = list(extract(path, "dcgm-stats", timezone="UTC"))
    assert isinstance(record, Rejected) and (record.origin.line, record.field, record.reason) == (
        line,
        field,
        reason,
    )
    assert record.record.startswith(b"| GPU ID") or record.record.startswith(b"| Summary")


def test_a_healthy_table_yields_nothing_without_tenant(tmp_path: Path) -> None:
    assert ingest(tmp_path, header() + table()) == []


def test_identify(tmp_path: Path) -> None:
    stats, other = tmp_path / "job.out", tmp_path / "notes.txt"
    stats.write_text("step 10\n" + "\n".join(header() + table()))
    other.write_text("| GPU ID: 0 | a table of something else |\n")
    assert ingestor_for(stats).name == "dcgm-stats"
    with pytest.raises(IngestError, match="no format recognises this file"):
        ingestor_for(other)  # claimed by none: an error, never a guess


@pytest.mark.parametrize(
    ("path", "zone", "job", "window"),
    [
        # README: job 232, GPU 0, 2021-12-10 19:40:36 to 19:41:24, every count 0, Healthy (zone not
        # stated: UTC).
        (BERT, "UTC", "232", {"start": "2021-12-10T19:40:36Z", "end": "2021-12-10T19:41:24Z"}),
        # README: job testuser-gpu06-2265_, 2023-07-07 13:47:43 to 13:50:26 at Lancaster (BST,
        # UTC+1), counts 0.
        (
            LANCASTER,
            "Europe/London",
            "testuser-gpu06-2265_",
            {"start": "2023-07-07T12:47:43Z", "end": "2023-07-07T12:50:26Z"},
        ),
    ],
)
def test_real_files_have_no_fault_and_give_their_tenant_one_telemetry_event(
    tmp_path: Path, path: Path, zone: str, job: str, window: dict[str, str]
) -> None:
    if not path.exists():
        pytest.skip(ABSENT_REASON.format(path))
    assert ingestor_for(path).name == "dcgm-stats"
    assert list(extract(path, "dcgm-stats", timezone=zone)) == []
    [record] = list(extract(path, "dcgm-stats", timezone=zone, tenant="hpc-users"))
    assert isinstance(record, Accepted)
    data = orjson.loads(record.body)["data"]
    assert (
        data["job_id"],
        data["dcgm_stats"]["gpu"],
        data["dcgm_stats"]["window"],
        data["dcgm_stats"]["health"],
    ) == (job, "0", window, "Healthy")
    assert set(data["dcgm_stats"]["events"].values()) == {"0"}
    result = CliRunner().invoke(
        main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--timezone", zone, str(path)]
    )
    assert (result.exit_code, result.stdout) == (
        0,
        f"{path}: read 0 · appended 0 · duplicate 0 · quarantined 0 · times in {zone}\n",
    )


def test_the_reconciliation_blames_a_mig_instance_fault_on_that_instance_alone(
    tmp_path: Path,
) -> None:
    # Two tenants on two MIG instances of GPU 0 of one node, each job stalled over [10:04, 10:14).
    # dcgmi saw a critical XID on instance 0/13 at 10:06 (window 10:00-10:20, so cleared at 10:20).
    from ledger import Appender, Store, append_stream
    from reconcile import reconcile_store
    from tests.reconcile_helpers import C, D, P, Scenario, cats, line, records

    s = Scenario()
    for tenant, alloc, device in (("acme", "A1", "0/13"), ("zeta", "Z1", "0/14")):
        s.grant(alloc, gpus=1, at="10:00", node="gpu-node-07", devices=[device], tenant=tenant)
        s.add("job.started", "10:00", {"job_id": f"{alloc}-job", "allocation_id": alloc}, tenant)
        for step, clock in enumerate(("10:02", "10:04", "10:14"), start=1):
            s.add("job.progress", clock, {"job_id": f"{alloc}-job", "step": step}, tenant)
        s.add("job.completed", "10:16", {"job_id": f"{alloc}-job"}, tenant)
        s.release(alloc, at="10:20", tenant=tenant)
        s.line(f"L-{alloc}", alloc, "10:00", "10:20", gpus=1, amount="1.20", tenant=tenant)
    path = tmp_path / "gpu-node-07.txt"
    path.write_text(
        "\n".join(
            header()
            + table(
                gpu="0/13",
                start="Mon Jan  5 10:00:00 2026",
                end="Mon Jan  5 10:20:00 2026",
                xids=("0:06:00",),
            )
        )
        + "\n"
    )
    dcgm = [r for r in extract(path, "dcgm-stats", timezone="UTC") if isinstance(r, Accepted)]
    assert [r.type for r in dcgm] == ["health.fault", "health.cleared"]
    store = Store(f"sqlite:///{tmp_path / 'l.db'}")
    store.init()
    append_stream(Appender(store), [*records(s.events), *dcgm], 5000)
    doc = reconcile_store(store).as_json()
    store.close()
    # startup [10:00, 10:02) 120; productive [10:02, 10:04) + [10:14, 10:16) 240; the gap 600;
    # idle_reserved 240.
    rest = {
        "startup": (120, "0.12", C),
        "productive": (240, "0.24", C),
        "idle_reserved": (240, "0.24", C),
    }
    assert cats(line(doc, "L-A1")) == {**rest, "stalled_fault": (600, "0.60", P)}
    assert cats(line(doc, "L-Z1")) == {**rest, "idle_unexplained": (600, "0.60", D)}
