"""The sacct ingestor: successive polls, field names as written, tenants, zones, and the
real files as they are. Expected values are worked out by hand from ingest/sacct.py's rules."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from cli import main
from ingest import extract
from ingest.sacct import gpu_count, parse_elapsed
from schemas import Accepted, Rejected
from tests.conftest import REALDATA

REAL = REALDATA / "slurm" / "sacct.txt"
REAL_FIELDS = (
    "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,"
    "Elapsed,"
    "TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,TRESUsageInMax,"
    "TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,MaxVMSizeNode,"
    "MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,Comment"
)
JOBINFO = REALDATA / "sacct-more" / "slurm-jobinfo_sacct.txt"
# The first 18 as the file's README gives them, in its mixed case; the last 9 are memory,
# disk and TRES usage columns (named here after what their values hold).
JOBINFO_FIELDS = (
    "JobID,JobName,User,Partition,NodeList,NNodes,ncpus,NTasks,State,Submit,start,end,timelimit,"
    "elapsed,TotalCPU,UserCPU,SystemCPU,ReqMem,MaxRSS,TRESUsageInMax,TRESUsageOutMax,"
    "MaxDiskWrite,MaxDiskRead,MaxRSSNode,MaxDiskWriteNode,MaxDiskReadNode,Comment"
)
ISSUE59 = REALDATA / "sacct-more" / "hpc-cost-simulator_issue59_sacct-output.txt"
ISSUE59_FIELDS = (
    "State,JobID,ReqCPUS,ReqMem,ReqNodes,Constraints,Submit,Eligible,Start,Elapsed,Suspended,End,"
    "ExitCode,DerivedExitCode,AllocNodes,NCPUS,MaxDiskRead,MaxDiskWrite,MaxPages,MaxRSS,"
    "MaxVMSize,CPUTime,UserCPU,SystemCPU,TotalCPU,Partition"
)
ABSENT_REASON = "real data not present at {} (it lives beside the project, not in it)"

SMALL = """JobID|Account|User|Partition|NodeList|State|Submit|Start|End|Elapsed|AllocTRES
100|physics|ann|gpu|node7|COMPLETED|2026-01-05T09:00:00|2026-01-05T10:00:00|2026-01-05T12:00:00|\
02:00:00|cpu=8,gres/gpu:a100=4,gres/gpu=4
100.batch||||node7|COMPLETED|2026-01-05T10:00:00|2026-01-05T10:00:00|2026-01-05T12:00:00|02:00:00|\
cpu=8,gres/gpu=4
101||bob|gpu|node8|NODE_FAIL|2026-01-05T09:00:00|2026-01-05T10:00:00|2026-01-05T10:30:00|30:00.5|\
gres/gpu=2
102|physics|ann|cpu|None assigned|PENDING|2026-01-05T09:00:00|Unknown|Unknown|00:00:00|
103|physics|ann|gpu|node9|RUNNING|2026-01-05T09:00:00|2026-01-05T11:00:00|Unknown|1-01:00:00|\
gres/gpu=8
104|physics|ann|gpu|node9|CANCELLED by 4242|2026-01-05T09:00:00|2026-01-05T11:00:00|\
2026-01-05T11:05:00|00:05:00|gres/gpu=1
"""

# Three polls of one cluster, as `sacct -a --parsable2 --format=...` prints them on a host
# whose clock is in Europe/Berlin (CET, UTC+1 in January). Between them 7002 leaves the
# partition list `gpu,debug` for `debug`, its time limit is raised, 7001 is renamed.
POLL_HEAD = (
    "JobID|JobName|Account|User|Partition|NodeList|State|Submit|Start|End|Elapsed|Timelimit|"
    "ReqTRES|AllocTRES|TotalCPU"
)
TRES4 = "billing=8,cpu=8,gres/gpu=4,mem=64G,node=1"
TRES1 = "billing=2,cpu=2,gres/gpu=1,mem=16G,node=1"
POLLS = [
    [
        POLL_HEAD,
        "7001|train|physics|ann|gpu|node7|RUNNING|2026-01-05T09:00:00|2026-01-05T10:00:00|"
        f"Unknown|00:30:00|1-00:00:00|{TRES4}|{TRES4}|00:00:00",
        "7001.batch|batch|physics||gpu|node7|RUNNING|2026-01-05T10:00:00|2026-01-05T10:00:00|"
        f"Unknown|00:30:00||{TRES4}|{TRES4}|00:00:00",
        "7002|eval|physics|ann|gpu,debug|None assigned|PENDING|2026-01-05T10:20:00|Unknown|"
        f"Unknown|00:00:00|02:00:00|{TRES1}||00:00:00",
    ],
    [
        POLL_HEAD,
        "7001|train|physics|ann|gpu|node7|RUNNING|2026-01-05T09:00:00|2026-01-05T10:00:00|"
        f"Unknown|01:00:00|1-00:00:00|{TRES4}|{TRES4}|00:00:00",
        "7001.batch|batch|physics||gpu|node7|RUNNING|2026-01-05T10:00:00|2026-01-05T10:00:00|"
        f"Unknown|01:00:00||{TRES4}|{TRES4}|00:00:00",
        "7001.0|python|physics||gpu|node7|RUNNING|2026-01-05T10:01:00|2026-01-05T10:01:00|"
        f"Unknown|00:59:00||{TRES4}|{TRES4}|00:00:00",
        "7002|eval|physics|ann|debug|node8|RUNNING|2026-01-05T10:20:00|2026-01-05T10:45:00|"
        f"Unknown|00:15:00|04:00:00|{TRES1}|{TRES1}|00:00:00",
    ],
    [
        POLL_HEAD,
        "7001|train-renamed|physics|ann|gpu|node7|COMPLETED|2026-01-05T09:00:00|"
        f"2026-01-05T10:00:00|2026-01-05T12:00:00|02:00:00|1-00:00:00|{TRES4}|{TRES4}|15:51:10",
        "7001.batch|batch|physics||gpu|node7|COMPLETED|2026-01-05T10:00:00|2026-01-05T10:00:00|"
        f"2026-01-05T12:00:00|02:00:00||{TRES4}|{TRES4}|00:01:10",
        "7001.0|python|physics||gpu|node7|COMPLETED|2026-01-05T10:01:00|2026-01-05T10:01:00|"
        f"2026-01-05T11:59:00|01:58:00||{TRES4}|{TRES4}|15:50:00",
        "7002|eval|physics|ann|debug|node8|RUNNING|2026-01-05T10:20:00|2026-01-05T10:45:00|"
        f"Unknown|01:45:00|04:00:00|{TRES1}|{TRES1}|00:00:00",
    ],
]


def accepted(path: Path, **options: str) -> list[Accepted]:
    found = list(extract(path, "sacct", **options))
    assert not [r for r in found if isinstance(r, Rejected)], found
    return [r for r in found if isinstance(r, Accepted)]


def ingest(db: str, path: Path, *options: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["ingest", "--db", db, "--format", "sacct", *options, str(path)]
    )
    return result.exit_code, result.output


def ledger_ids(db: str) -> list[str]:
    out = CliRunner().invoke(main, ["export", "--db", db]).stdout
    return [orjson.loads(line)["id"] for line in out.splitlines()]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1-23:59:00", 172740), ("15:28:22", 55702), ("23:08.358", 1388.358), ("Unknown", None)],
)
def test_elapsed_forms(text: str, seconds: float | None) -> None:
    assert parse_elapsed(text) == seconds


def test_typed_gpu_entries_are_never_added() -> None:
    assert gpu_count("billing=8,cpu=8,gres/gpu:v100=1,gres/gpu=1,mem=10G") == 1
    assert gpu_count("cpu=8,mem=10G") is None


def test_each_poll_appends_only_the_transitions_it_is_the_first_to_show(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    seen: list[list[str]] = []
    for number, poll in enumerate(POLLS, start=1):
        path = tmp_path / f"poll{number}.txt"
        path.write_text("\n".join(poll) + "\n")
        before = set(ledger_ids(db)) if number > 1 else set()
        code, output = ingest(db, path, "--timezone", "Europe/Berlin", "--cluster", "hb")
        assert code == 0, output
        seen.append(sorted(set(ledger_ids(db)) - before))
        assert output.endswith(" · times in Europe/Berlin\n")
    # 10:00 in Berlin in January is 09:00 UTC.
    assert seen == [
        [
            "7001:allocation.granted@2026-01-05T09:00:00Z",
            "7001:job.started@2026-01-05T09:00:00Z",
            "7001:job.submitted@2026-01-05T08:00:00Z",
            "7002:job.submitted@2026-01-05T09:20:00Z",
        ],
        ["7002:allocation.granted@2026-01-05T09:45:00Z", "7002:job.started@2026-01-05T09:45:00Z"],
        [
            "7001:allocation.released@2026-01-05T11:00:00Z",
            "7001:job.completed@2026-01-05T11:00:00Z",
        ],
    ]
    # The counts each poll printed: poll 2 repeats 7001's three and 7002's submission;
    # poll 3 repeats 7001's three and all three of 7002.
    path = tmp_path / "poll3.txt"
    assert ingest(db, path, "--timezone", "Europe/Berlin", "--cluster", "hb")[1].startswith(
        f"{path}: read 8 · appended 0 · duplicate 8 · quarantined 0"
    )


def test_the_end_event_carries_the_final_usage_and_steps_and_submission_what_was_known(
    tmp_path: Path,
) -> None:
    path = tmp_path / "poll3.txt"
    path.write_text("\n".join(POLLS[2]) + "\n")
    events = {r.id: orjson.loads(r.body)["data"] for r in accepted(path, timezone="UTC")}
    done = events["7001:job.completed@2026-01-05T12:00:00Z"]
    assert (done["state"], done["elapsed_s"], done["timelimit_s"], done["sacct"]) == (
        "COMPLETED",
        7200,
        86400,
        {
            "State": "COMPLETED",
            "End": "2026-01-05T12:00:00",
            "Elapsed": "02:00:00",
            "Timelimit": "1-00:00:00",
            "TotalCPU": "15:51:10",
        },
    )
    assert [s["JobID"] for s in done["steps"]] == [
        "7001.batch",
        "7001.0",
    ] and "JobName" not in done["steps"][0]
    submitted = events["7001:job.submitted@2026-01-05T09:00:00Z"]
    assert submitted["gpus"] == 4
    assert submitted["sacct"] == {
        "JobID": "7001",
        "Account": "physics",
        "User": "ann",
        "Submit": "2026-01-05T09:00:00",
        "ReqTRES": TRES4,
    }
    started = events["7002:job.started@2026-01-05T10:45:00Z"]
    assert (started["queue"], started["sacct"]["NodeList"]) == ("debug", "node8")


def test_rows_map_to_events(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(SMALL)
    events = {r.id: r for r in accepted(path, cluster="hb", timezone="UTC")}
    assert sorted(events) == sorted(
        [
            "100:job.submitted@2026-01-05T09:00:00Z",
            "100:allocation.granted@2026-01-05T10:00:00Z",
            "100:job.started@2026-01-05T10:00:00Z",
            "100:job.completed@2026-01-05T12:00:00Z",
            "100:allocation.released@2026-01-05T12:00:00Z",
            "101:job.submitted@2026-01-05T09:00:00Z",
            "101:allocation.granted@2026-01-05T10:00:00Z",
            "101:job.started@2026-01-05T10:00:00Z",
            "101:job.failed@2026-01-05T10:30:00Z",
            "101:allocation.released@2026-01-05T10:30:00Z",
            "102:job.submitted@2026-01-05T09:00:00Z",
            "103:job.submitted@2026-01-05T09:00:00Z",
            "103:allocation.granted@2026-01-05T11:00:00Z",
            "103:job.started@2026-01-05T11:00:00Z",
            "104:job.submitted@2026-01-05T09:00:00Z",
            "104:allocation.granted@2026-01-05T11:00:00Z",
            "104:job.started@2026-01-05T11:00:00Z",
            "104:job.cancelled@2026-01-05T11:05:00Z",
            "104:allocation.released@2026-01-05T11:05:00Z",
        ]
    )
    granted = events["100:allocation.granted@2026-01-05T10:00:00Z"]
    assert (
        b'"gpus":4' in granted.body
        and granted.tenant == "physics"
        and granted.source == "slurm://hb"
    )
    assert b'"cause":"hardware"' in events["101:job.failed@2026-01-05T10:30:00Z"].body
    assert events["101:job.failed@2026-01-05T10:30:00Z"].tenant == "bob"  # no Account: the User
    assert b'"by":"4242"' in events["104:job.cancelled@2026-01-05T11:05:00Z"].body


def test_field_names_are_taken_as_sacct_takes_them(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(
        "100|physics|COMPLETED|2026-01-05T09:00:00|2026-01-05T10:00:00|2026-01-05T12:00:00|"
        "02:00:00|gres/gpu=2\n"
    )
    # Any case, and sacct's own prefix rule: `acc` is Account, `time` Timelimit, `allocT`
    # AllocTRES.
    events = {
        r.type: orjson.loads(r.body)
        for r in accepted(
            path, fields="jobid,acc,state,submit,start,end,elapsed%10,allocT", timezone="UTC"
        )
    }
    assert sorted(events) == [
        "allocation.granted",
        "allocation.released",
        "job.completed",
        "job.started",
        "job.submitted",
    ]
    assert (
        events["job.completed"]["time"] == "2026-01-05T12:00:00Z"
        and events["job.completed"]["data"]["elapsed_s"] == 7200
    )


@pytest.mark.parametrize(
    ("options", "header", "message"),
    [
        (
            ["--fields", "JobID,Account,Strat"],
            "",
            "Error: --fields: unknown sacct field 'Strat' (`sacct --helpformat` lists them)",
        ),
        (
            ["--fields", "JobID,Partition,State,Submit"],
            "",
            "Error: --tenant: no tenant column: the fields have no "
            "Account or User; name the tenant of the whole file",
        ),
        (
            ["--tenant-field", "Acount"],
            "",
            "Error: --tenant-field: unknown sacct field 'Acount' (`sacct --helpformat` lists "
            "them)",
        ),
        (
            ["--tenant", "physics", "--tenant-field", "User"],
            "",
            "Error: --tenant-field: give a fixed tenant or the tenant field to read it from, not "
            "both",
        ),
        (
            ["--fields", "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"],
            "",  # sacct's default fields
            "Error: --fields: the field list has no Submit, Start or End, so no transition has a "
            "time; add them to the fields sacct prints",
        ),
        (
            [],
            "",
            "Error: --fields: {path}:1: header: the first line is a job (100), not a header: for "
            "`sacct --noheader` output give the field list",
        ),
        (
            ["--timezone", "Mars/Olympus"],
            "",
            "Error: --timezone: unknown time zone 'Mars/Olympus' (an IANA name such as "
            "Europe/Berlin or UTC)",
        ),
    ],
)
def test_input_errors_exit_2_naming_the_field(
    tmp_path: Path, options: list[str], header: str, message: str
) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(header + "100|physics|COMPLETED\n")
    code, output = ingest(f"sqlite:///{tmp_path / 'l.db'}", path, *options)
    assert (code, output.strip()) == (2, message.format(path=path))


def test_tenant_names_the_tenant_of_a_file_without_one(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|State|Submit\n100|PENDING|2026-01-05T09:00:00\n")
    [record] = accepted(path, tenant="physics", timezone="UTC")
    assert (record.tenant, record.type) == ("physics", "job.submitted")


def test_the_machine_zone_is_the_default_and_a_repeated_hour_takes_its_first_instant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    path = tmp_path / "sacct.txt"
    # 25 October 2026: Berlin's clocks go back at 03:00 CEST, so 02:30 happens twice; the first is
    # 00:30 UTC.
    path.write_text(
        "JobID|Account|State|Submit\n100|physics|PENDING|2026-10-25T02:30:00\n101|physics|PENDING|"
        "2026-07-01T12:00:00+00:00\n"
    )
    assert [orjson.loads(r.body)["time"] for r in accepted(path)] == [
        "2026-10-25T00:30:00Z",
        "2026-07-01T12:00:00Z",
    ]
    code, output = ingest(f"sqlite:///{tmp_path / 'l.db'}", path)
    assert (code, output.strip().rpartition(" · ")[2]) == (0, "times in Europe/Berlin")


def test_bad_rows_are_rejected_with_their_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(
        SMALL.splitlines()[0] + "\n105|a|b|gpu|n|COMPLETED|yesterday|x|y|00:01|\n106|too|few\n"
    )
    found = list(extract(path, "sacct", timezone="UTC"))
    assert [(r.origin.line, r.field) for r in found if isinstance(r, Rejected)] == [
        (2, "Submit"),
        (3, "(row)"),
    ]


def test_a_row_with_no_tenant_value_is_rejected_saying_which_columns_are_empty(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|Account|User|State|Submit\n100|||PENDING|2026-01-05T09:00:00\n")
    [record] = list(extract(path, "sacct", timezone="UTC"))
    assert isinstance(record, Rejected) and (record.field, record.reason) == (
        "Account",
        "no tenant: Account and User are both empty",
    )


def test_reingest_appends_nothing(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(SMALL)
    db = f"sqlite:///{tmp_path / 'l.db'}"
    first, again = (
        ingest(db, path, "--timezone", "UTC")[1],
        ingest(db, path, "--timezone", "UTC")[1],
    )
    assert first.endswith("appended 19 · duplicate 0 · quarantined 0 · times in UTC\n")
    assert again.endswith("appended 0 · duplicate 19 · quarantined 0 · times in UTC\n")


def test_a_step_without_its_job_is_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    lines = SMALL.splitlines()
    path.write_text("\n".join([lines[0], lines[2], lines[3]]) + "\n")
    found = list(extract(path, "sacct", timezone="UTC"))
    assert isinstance(found[0], Rejected)
    assert (found[0].origin.line, found[0].field, found[0].reason) == (
        2,
        "JobID",
        "step 100.batch without its job row 100",
    )
    assert all(isinstance(r, Accepted) for r in found[1:])


def type_counts(events: list[Accepted]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in events:
        counts[record.type] = counts.get(record.type, 0) + 1
    return counts


@pytest.mark.skipif(not REAL.exists(), reason=ABSENT_REASON.format(REAL))
def test_real_sample_ingests_with_nothing_quarantined(tmp_path: Path) -> None:
    # Hand counts from the file: 100 job rows; 66 COMPLETED; 8 FAILED + 7 TIMEOUT + 1 NODE_FAIL;
    # 8 CANCELLED; 90 with a Start; 9 job rows with gres/gpu, 7 of them ended.
    events = accepted(
        REAL, fields=REAL_FIELDS, delimiter="☃", cluster="hb", timezone="Europe/Amsterdam"
    )
    assert type_counts(events) == {
        "job.submitted": 100,
        "job.started": 90,
        "job.completed": 66,
        "job.failed": 16,
        "job.cancelled": 8,
        "allocation.granted": 9,
        "allocation.released": 7,
    }
    # The first row: job 4034541 submitted 2023-08-31T12:29:47 in Groningen (CEST, UTC+2).
    assert (events[0].id, orjson.loads(events[0].body)["time"]) == (
        "4034541:job.submitted@2023-08-31T10:29:47Z",
        "2023-08-31T10:29:47Z",
    )
    code, output = ingest(
        f"sqlite:///{tmp_path / 'l.db'}",
        REAL,
        "--fields",
        REAL_FIELDS.lower(),
        "--delimiter",
        "☃",
        "--timezone",
        "Europe/Amsterdam",
    )
    assert (
        code == 0
        and "appended 296 · duplicate 0 · quarantined 0 · times in Europe/Amsterdam" in output
    )


@pytest.mark.skipif(not JOBINFO.exists(), reason=ABSENT_REASON.format(JOBINFO))
def test_real_file_with_two_polls_of_17_jobs_appends_each_transition_once(tmp_path: Path) -> None:
    # README facts: 20 distinct jobs, first seen 9 COMPLETED, 7 RUNNING, 3 PENDING, 1 FAILED, 17
    # with
    # a Start; User only; no gres/gpu. The second sightings add nothing new.
    events = accepted(JOBINFO, fields=JOBINFO_FIELDS, delimiter="☃", timezone="UTC")
    unique = {r.id: r for r in events}
    assert type_counts(list(unique.values())) == {
        "job.submitted": 20,
        "job.started": 17,
        "job.completed": 9,
        "job.failed": 1,
    }
    # Of the 48 step rows, 13 follow the first sighting of the 10 ended jobs (counted with awk over
    # the file); the steps of running and pending jobs wait for their end.
    steps = sum(len(orjson.loads(r.body)["data"].get("steps", [])) for r in unique.values())
    assert steps == 13 and {r.tenant for r in unique.values()} <= {f"user{n}" for n in range(100)}
    db = f"sqlite:///{tmp_path / 'l.db'}"
    code, output = ingest(
        db, JOBINFO, "--fields", JOBINFO_FIELDS, "--delimiter", "☃", "--timezone", "UTC"
    )
    assert (
        code == 0
        and f"read {len(events)} · appended 47 · duplicate {len(events) - 47} · quarantined 0"
        in output
    )
    code, output = ingest(
        db, JOBINFO, "--fields", JOBINFO_FIELDS, "--delimiter", "☃", "--timezone", "UTC"
    )
    assert code == 0 and "appended 0" in output


@pytest.mark.skipif(not ISSUE59.exists(), reason=ABSENT_REASON.format(ISSUE59))
def test_real_file_without_tenant_columns_needs_tenant_and_then_ingests(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    code, output = ingest(db, ISSUE59, "--fields", ISSUE59_FIELDS)
    assert (code, output.strip()) == (
        2,
        "Error: --tenant: no tenant column: the fields have no Account or User; "
        "name the tenant of the whole file",
    )
    events = accepted(ISSUE59, fields=ISSUE59_FIELDS, tenant="aws-hpc", timezone="UTC")
    assert [(r.id, r.tenant) for r in events] == [
        ("12:job.submitted@2022-08-19T16:56:03Z", "aws-hpc"),
        ("12:job.started@2022-08-19T16:56:03Z", "aws-hpc"),
        ("12:job.failed@2022-08-19T17:16:35Z", "aws-hpc"),
    ]
    failed = orjson.loads(events[2].body)["data"]
    assert (failed["cause"], failed["state"], failed["elapsed_s"]) == (
        "hardware",
        "NODE_FAIL",
        1232,
    )
    assert [(s["JobID"], s["State"]) for s in failed["steps"]] == [("12.0", "CANCELLED")]


def test_epoch_times_and_the_gres_list_of_older_slurm(tmp_path: Path) -> None:
    # SLURM_TIME_FORMAT=%s prints epoch seconds (zone-free); Slurm before TRES printed AllocGRES
    # `gpu:tesla:2(IDX:0-1)`.
    path = tmp_path / "sacct.txt"
    path.write_text(
        "JobID|Account|State|Submit|Start|End|AllocGRES\n"
        "100|physics|COMPLETED|1767600000|1767603600|1767607200|gpu:tesla:2(IDX:0-1)\n"
    )
    events = {r.type: orjson.loads(r.body) for r in accepted(path, timezone="Asia/Tokyo")}
    # 1767603600 s is 2026-01-05T09:00:00Z.
    assert (
        events["allocation.granted"]["time"],
        events["allocation.granted"]["data"]["gpus"],
    ) == ("2026-01-05T09:00:00Z", 2)
    assert events["job.submitted"]["time"] == "2026-01-05T08:00:00Z"


def test_a_machine_zone_that_names_no_iana_zone_asks_for_timezone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "CET-1CEST")  # a POSIX rule, not an IANA name
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|Account|State|Submit\n100|physics|PENDING|2026-01-05T09:00:00\n")
    code, output = ingest(f"sqlite:///{tmp_path / 'l.db'}", path)
    assert (code, output.strip()) == (
        2,
        "Error: --timezone: $TZ: unknown time zone 'CET-1CEST' (an IANA name such as "
        "Europe/Berlin or UTC); name the zone with this option",
    )
    assert ingest(f"sqlite:///{tmp_path / 'l.db'}", path, "--timezone", "Europe/Paris")[0] == 0


def test_a_requeued_job_is_new_transitions_not_a_conflict(tmp_path: Path) -> None:
    # `sacct -D` lists each run of a requeued job; Slurm resets the Submit time on requeue.
    path = tmp_path / "sacct.txt"
    path.write_text(
        "JobID|Account|User|Partition|NodeList|State|Submit|Start|End|Elapsed|AllocTRES\n7005|"
        "physics|ann|gpu|node7|PREEMPTED|2026-01-05T09:00:00|2026-01-05T09:10:00|"
        "2026-01-05T10:00:00|00:50:00|gres/gpu=8\n7005|physics|ann|gpu|node9|RUNNING|"
        "2026-01-05T10:00:05|2026-01-05T10:30:00|Unknown|00:10:00|gres/gpu=8\n"
    )
    assert [r.id for r in accepted(path, timezone="UTC")] == [
        "7005:job.submitted@2026-01-05T09:00:00Z",
        "7005:allocation.granted@2026-01-05T09:10:00Z",
        "7005:job.started@2026-01-05T09:10:00Z",
        "7005:job.failed@2026-01-05T10:00:00Z",
        "7005:allocation.released@2026-01-05T10:00:00Z",
        "7005:job.submitted@2026-01-05T10:00:05Z",
        "7005:allocation.granted@2026-01-05T10:30:00Z",
        "7005:job.started@2026-01-05T10:30:00Z",
    ]
    code, output = ingest(f"sqlite:///{tmp_path / 'l.db'}", path, "--timezone", "UTC")
    assert code == 0 and "appended 8 · duplicate 0 · quarantined 0" in output


def test_a_header_sacct_printed_is_taken_as_printed_even_with_a_field_this_version_does_not_list(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(
        "JobID|Account|State|Submit|Restarts\n100|physics|PENDING|2026-01-05T09:00:00|0\n"
    )
    [record] = accepted(path, timezone="UTC")
    assert orjson.loads(record.body)["data"]["tenant"] == "physics"


# --- several nodes, any header, the Cluster column (issue 33) ---------------------------

MULTI = """JobID|Account|NodeList|State|Submit|Start|End|AllocTRES
200|physics|gpu-node-[01-02]|RUNNING|2026-01-05T09:00:00|2026-01-05T09:05:00|Unknown|\
gres/gpu=16,node=2
201|physics|gpu-a[01-02,07]|RUNNING|2026-01-05T09:00:00|2026-01-05T09:06:00|Unknown|\
gres/gpu=24,node=3
202|physics|gpu-node-07|RUNNING|2026-01-05T09:00:00|2026-01-05T09:07:00|Unknown|gres/gpu=8,node=1
203|physics|gpu-node-[01-02|RUNNING|2026-01-05T09:00:00|2026-01-05T09:08:00|Unknown|\
gres/gpu=8,node=2
204|physics|n[1-100001]|RUNNING|2026-01-05T09:00:00|2026-01-05T09:09:00|Unknown|gres/gpu=8
205|physics|None assigned|PENDING|2026-01-05T09:00:00|Unknown|Unknown|
"""


def grants(path: Path, **options: str) -> dict[str, dict[str, object]]:
    found = [
        r for r in extract(path, "sacct", timezone="UTC", **options) if isinstance(r, Accepted)
    ]
    return {
        r.id.partition(":")[0]: orjson.loads(r.body)["data"]
        for r in found
        if r.type == "allocation.granted"
    }


def test_a_nodelist_is_expanded_node_for_one_nodes_for_several(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(MULTI)
    granted = grants(path)
    assert (
        granted["200"]["nodes"] == ["gpu-node-01", "gpu-node-02"] and "node" not in granted["200"]
    )
    assert granted["201"]["nodes"] == ["gpu-a01", "gpu-a02", "gpu-a07"]
    assert granted["202"]["node"] == "gpu-node-07" and "nodes" not in granted["202"]
    rejected = [
        (r.origin.line, r.field, r.reason)
        for r in extract(path, "sacct", timezone="UTC")
        if isinstance(r, Rejected)
    ]
    assert rejected == [
        (5, "NodeList", "not a Slurm hostlist: '[' without ']' in 'gpu-node-[01-02'"),
        (6, "NodeList", "not a Slurm hostlist: 'n[1-100001]' names more than 100,000 nodes"),
    ]


def test_a_grown_poll_of_multi_node_jobs_appends_only_what_is_new(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    path = tmp_path / "sacct.txt"
    lines = MULTI.splitlines()
    path.write_text("\n".join(lines[:3]) + "\n")  # jobs 200 and 201, running
    assert ingest(db, path, "--timezone", "UTC")[1].endswith(
        "read 6 · appended 6 · duplicate 0 · quarantined 0 · times in UTC\n"
    )
    # the next poll: 200 has ended on both nodes, 202 started; 200's end adds job.completed and the
    # release
    ended = lines[1].replace("RUNNING", "COMPLETED").replace("Unknown", "2026-01-05T10:00:00")
    path.write_text("\n".join([lines[0], ended, lines[2], lines[3]]) + "\n")
    code, output = ingest(db, path, "--timezone", "UTC")
    assert (code, output.rpartition(": ")[2]) == (
        0,
        "read 11 · appended 5 · duplicate 6 · quarantined 0 · times in UTC\n",
    )


@pytest.mark.parametrize(
    "header",
    [
        # `sacct --format ALL` begins with Account; users' own lists begin with User or State
        "Account|AdminComment|AllocCPUS|AllocNodes|AllocTRES|Cluster|JobID|NodeList|Start|State|"
        "Submit|End|User",
        # --parsable: one more delimiter
        "User|JobID|Account|NodeList|Submit|Start|End|State|AllocTRES|Cluster|",
        "State☃JobID☃Account☃NodeList☃Submit☃Start☃End☃AllocTRES☃Cluster",  # --delimiter=☃
    ],
)
def test_any_header_sacct_prints_is_detected_with_its_delimiter(
    tmp_path: Path, header: str
) -> None:
    delimiter = "☃" if "☃" in header else "|"
    fields = [f for f in header.split(delimiter) if f]
    value = {
        "Account": "physics",
        "User": "ann",
        "JobID": "300",
        "NodeList": "gpu-node-[01-02]",
        "State": "COMPLETED",
        "Submit": "2026-01-05T09:00:00",
        "Start": "2026-01-05T09:05:00",
        "End": "2026-01-05T10:00:00",
        "AllocTRES": "gres/gpu=16",
        "Cluster": "eu-1",
        "AllocCPUS": "64",
        "AllocNodes": "2",
        "AdminComment": "",
    }
    row = delimiter.join(value[f] for f in fields) + (
        delimiter if header.endswith(delimiter) else ""
    )
    path = tmp_path / "sacct.txt"
    path.write_text(header + "\n" + row + "\n")
    found = [
        r for r in extract(path, timezone="UTC") if isinstance(r, Accepted)
    ]  # no format named: detected
    assert [r.id for r in found] == [
        "300:job.submitted@2026-01-05T09:00:00Z",
        "300:allocation.granted@2026-01-05T09:05:00Z",
        "300:job.started@2026-01-05T09:05:00Z",
        "300:job.completed@2026-01-05T10:00:00Z",
        "300:allocation.released@2026-01-05T10:00:00Z",
    ]
    assert {r.source for r in found} == {"slurm://eu-1"}  # the Cluster column, no --cluster given


def test_tables_that_are_not_sacct_headers_are_not_claimed(tmp_path: Path) -> None:
    from ingest.sacct import SacctIngestor

    claims = SacctIngestor().identify
    for first in (
        b"Name|Priority|GraceTime|Preempt",
        b"JOBID|PARTITION|NAME|NODELIST(REASON)",
        b"# JobID|Start",
        b"JobID Start End",
        b"JobID|Account|Foo|Bar|Baz|Qux",
        b"100|physics|COMPLETED",
    ):
        assert not claims(tmp_path / "x", first + b"\n"), first


def test_the_cluster_column_keeps_the_same_job_id_of_two_clusters_apart(tmp_path: Path) -> None:
    # `sacct -M all`: job ids are per cluster, so 400 on eu-1 and 400 on us-2 are two jobs.
    path = tmp_path / "sacct.txt"
    path.write_text(
        "Cluster|JobID|Account|State|Submit|Start|End|AllocTRES|NodeList\neu-1|400|physics|"
        "RUNNING|2026-01-05T09:00:00|2026-01-05T09:05:00|Unknown|gres/gpu=8|gpu-node-01\nus-2|"
        "400|physics|RUNNING|2026-01-05T09:00:00|2026-01-05T09:06:00|Unknown|gres/gpu=8|"
        "gpu-node-01\n"
    )
    found = [r for r in extract(path, timezone="UTC") if isinstance(r, Accepted)]
    assert [(r.source, r.id) for r in found if r.type == "job.submitted"] == [
        ("slurm://eu-1", "400:job.submitted@2026-01-05T09:00:00Z"),
        ("slurm://us-2", "400:job.submitted@2026-01-05T09:00:00Z"),
    ]
    db = f"sqlite:///{tmp_path / 'l.db'}"
    assert ingest(db, path, "--timezone", "UTC")[1].endswith(
        "appended 6 · duplicate 0 · quarantined 0 · times in UTC\n"
    )
    # --cluster still names the cluster of the whole file when given (then the two rows are one job
    # polled twice)
    named = [r for r in extract(path, cluster="hb", timezone="UTC") if isinstance(r, Accepted)]
    assert {r.source for r in named} == {"slurm://hb"}


@pytest.mark.skipif(not ISSUE59.exists(), reason=ABSENT_REASON.format(ISSUE59))
def test_real_rows_under_a_header_that_starts_with_state_are_detected(tmp_path: Path) -> None:
    # The issue-59 rows (`--parsable2`, first field State) as `sacct` prints them without
    # --noheader:
    # the header line is the file's own field list; detection needs no --format and no --fields.
    path = tmp_path / "sacct-output.txt"
    path.write_bytes(ISSUE59_FIELDS.replace(",", "|").encode() + b"\n" + ISSUE59.read_bytes())
    events = [
        r for r in extract(path, tenant="aws-hpc", timezone="UTC") if isinstance(r, Accepted)
    ]
    assert [(r.id, r.source) for r in events] == [
        ("12:job.submitted@2022-08-19T16:56:03Z", "slurm://default"),
        ("12:job.started@2022-08-19T16:56:03Z", "slurm://default"),
        ("12:job.failed@2022-08-19T17:16:35Z", "slurm://default"),
    ]
