"""The sacct ingestor: the real sample as it is, and the rules of ingest/sacct.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import main
from ingest import extract
from ingest.sacct import gpu_count, parse_elapsed
from schemas import Accepted, Rejected
from tests.conftest import REALDATA

REAL = REALDATA / "slurm" / "sacct.txt"
REAL_FIELDS = (
    "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,Elapsed,"
    "TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,TRESUsageInMax,"
    "TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,MaxVMSizeNode,"
    "MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,Comment"
)

SMALL = """JobID|Account|User|Partition|NodeList|State|Submit|Start|End|Elapsed|AllocTRES
100|physics|ann|gpu|node7|COMPLETED|2026-01-05T09:00:00|2026-01-05T10:00:00|2026-01-05T12:00:00|02:00:00|cpu=8,gres/gpu:a100=4,gres/gpu=4
100.batch||||node7|COMPLETED|2026-01-05T10:00:00|2026-01-05T10:00:00|2026-01-05T12:00:00|02:00:00|cpu=8,gres/gpu=4
101||bob|gpu|node8|NODE_FAIL|2026-01-05T09:00:00|2026-01-05T10:00:00|2026-01-05T10:30:00|30:00.5|gres/gpu=2
102|physics|ann|cpu|None assigned|PENDING|2026-01-05T09:00:00|Unknown|Unknown|00:00:00|
103|physics|ann|gpu|node9|RUNNING|2026-01-05T09:00:00|2026-01-05T11:00:00|Unknown|1-01:00:00|gres/gpu=8
104|physics|ann|gpu|node9|CANCELLED by 4242|2026-01-05T09:00:00|2026-01-05T11:00:00|2026-01-05T11:05:00|00:05:00|gres/gpu=1
"""


def accepted(path: Path, **options: str) -> list[Accepted]:
    found = list(extract(path, "sacct", **options))
    assert not [r for r in found if isinstance(r, Rejected)], found
    return [r for r in found if isinstance(r, Accepted)]


@pytest.mark.parametrize(("text", "seconds"), [("1-23:59:00", 172740), ("15:28:22", 55702), ("23:08.358", 1388.358), ("Unknown", None)])
def test_elapsed_forms(text: str, seconds: float | None) -> None:
    assert parse_elapsed(text) == seconds


def test_typed_gpu_entries_are_never_added() -> None:
    assert gpu_count("billing=8,cpu=8,gres/gpu:v100=1,gres/gpu=1,mem=10G") == 1
    assert gpu_count("cpu=8,mem=10G") is None


def test_rows_map_to_events(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(SMALL)
    events = {(r.id, r.type): r for r in accepted(path, cluster="hb")}
    assert sorted(events) == sorted([
        ("100:job.submitted", "job.submitted"), ("100:allocation.granted", "allocation.granted"),
        ("100:job.started", "job.started"), ("100:job.completed", "job.completed"),
        ("100:allocation.released", "allocation.released"),
        ("101:job.submitted", "job.submitted"), ("101:allocation.granted", "allocation.granted"),
        ("101:job.started", "job.started"), ("101:job.failed", "job.failed"), ("101:allocation.released", "allocation.released"),
        ("102:job.submitted", "job.submitted"),
        ("103:job.submitted", "job.submitted"), ("103:allocation.granted", "allocation.granted"), ("103:job.started", "job.started"),
        ("104:job.submitted", "job.submitted"), ("104:allocation.granted", "allocation.granted"),
        ("104:job.started", "job.started"), ("104:job.cancelled", "job.cancelled"), ("104:allocation.released", "allocation.released"),
    ])
    granted = events[("100:allocation.granted", "allocation.granted")]
    assert b'"gpus":4' in granted.body and granted.tenant == "physics" and granted.source == "slurm://hb"
    assert b'"time":"2026-01-05T10:00:00Z"' in granted.body
    assert b'"cause":"hardware"' in events[("101:job.failed", "job.failed")].body
    assert events[("101:job.failed", "job.failed")].tenant == "bob"  # no Account: the User
    assert b'"by":"4242"' in events[("104:job.cancelled", "job.cancelled")].body
    submitted = events[("100:job.submitted", "job.submitted")].body
    assert b'"steps":[{' in submitted and b'"JobID":"100.batch"' in submitted


def test_bad_rows_are_rejected_with_their_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(SMALL.splitlines()[0] + "\n105|a|b|gpu|n|COMPLETED|yesterday|x|y|00:01|\n106|too|few\n")
    found = list(extract(path, "sacct"))
    assert [(r.origin.line, r.field) for r in found if isinstance(r, Rejected)] == [(2, "Submit"), (3, "(row)")]


def test_reingest_appends_nothing(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(SMALL)
    db = f"sqlite:///{tmp_path / 'l.db'}"
    runner = CliRunner()
    first = runner.invoke(main, ["ingest", "--db", db, "--format", "sacct", str(path)])
    again = runner.invoke(main, ["ingest", "--db", db, "--format", "sacct", str(path)])
    assert first.stdout.endswith("appended 19 · duplicate 0 · quarantined 0\n")
    assert again.stdout.endswith("appended 0 · duplicate 19 · quarantined 0\n")


@pytest.mark.skipif(not REAL.exists(), reason=f"real data not present at {REAL} (it lives beside the project, not in it)")
def test_real_sample_ingests_with_nothing_quarantined(tmp_path: Path) -> None:
    # Hand counts from the file: 100 job rows; 66 COMPLETED; 8 FAILED + 7 TIMEOUT + 1 NODE_FAIL;
    # 8 CANCELLED; 90 with a Start; 9 job rows with gres/gpu, 7 of them ended.
    events = accepted(REAL, fields=REAL_FIELDS, delimiter="☃", cluster="hb")
    counts: dict[str, int] = {}
    for record in events:
        counts[record.type] = counts.get(record.type, 0) + 1
    assert counts == {"job.submitted": 100, "job.started": 90, "job.completed": 66, "job.failed": 16,
                      "job.cancelled": 8, "allocation.granted": 9, "allocation.released": 7}
    result = CliRunner().invoke(main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--format", "sacct",
                                       "--fields", REAL_FIELDS, "--delimiter", "☃", "--cluster", "hb", str(REAL)])
    assert result.exit_code == 0 and "quarantined 0" in result.stdout


def test_a_step_without_its_job_is_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    lines = SMALL.splitlines()
    path.write_text("\n".join([lines[0], lines[2], lines[3]]) + "\n")
    found = list(extract(path, "sacct"))
    assert isinstance(found[0], Rejected)
    assert (found[0].origin.line, found[0].field, found[0].reason) == (2, "JobID", "step 100.batch without its job row 100")
    assert all(isinstance(r, Accepted) for r in found[1:])
