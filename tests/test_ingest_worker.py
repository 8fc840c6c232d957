"""extract_parallel: a child process parses, and the records are the ones extract() makes,
in the same order, with the same origins; whole-file errors and early stops behave."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ingest import IngestError, extract
from ingest.worker import extract_parallel
from schemas import Accepted
from tests.conftest import progress, write_jsonl


@pytest.fixture(autouse=True)
def any_size(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file goes to a child here, however small, but in the test of that rule."""
    if request.node.name != "test_small_files_stay_in_this_process":
        monkeypatch.setattr("ingest.worker.MIN_BYTES", 0)


def test_the_same_records_in_the_same_order(tmp_path: Path) -> None:
    events = [progress(i, tenant=f"t{i % 4}") for i in range(5000)]
    events[17]["data"]["step"] = "seventeen"  # a rejection rides along in its place
    path = write_jsonl(tmp_path / "e.jsonl", events)
    with path.open("ab") as out:
        out.write(b"{not json\n")
    assert list(extract_parallel(path)) == list(extract(path))


def test_options_reach_the_child(tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(
        "1☃physics☃ann☃gpu☃node7☃COMPLETED☃2026-01-05T09:00:00☃2026-01-05T10:00:00☃"
        "2026-01-05T12:00:00☃02:00:00☃gres/gpu=4☃\n"
    )
    options = {
        "fields": "JobID,Account,User,Partition,NodeList,State,Submit,Start,End,Elapsed,AllocTRES",
        "delimiter": "☃",
        "cluster": "hb",
    }
    found = list(extract_parallel(path, "sacct", **options))
    assert found == list(extract(path, "sacct", **options)) and len(found) == 5


def test_a_whole_file_error_comes_back_as_itself(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 64)
    with pytest.raises(IngestError, match="not a readable Parquet file") as raised:
        list(extract_parallel(path, "focus"))
    with pytest.raises(IngestError) as directly:
        list(extract(path, "focus"))
    assert str(raised.value) == str(directly.value)


def parsing_children() -> list[int]:
    """Child processes of this one running ingest.worker (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if parent == os.getpid() and b"ingest.worker" in command:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads child processes from /proc"
)
def test_stopping_early_stops_the_child(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", [progress(i) for i in range(50_000)])
    records = extract_parallel(path)
    assert next(records).origin.line == 1
    assert len(parsing_children()) == 1
    records.close()  # type: ignore[attr-defined]  # a generator: close() ends the child
    assert parsing_children() == []


def test_small_files_stay_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_child(*_: object, **__: object) -> None:
        raise AssertionError("a child process was started for a small file")

    monkeypatch.setattr("ingest.worker.subprocess.Popen", no_child)
    path = write_jsonl(tmp_path / "e.jsonl", [progress(1)])
    assert list(extract_parallel(path)) == list(extract(path))


def test_a_function_option_stays_in_this_process(tmp_path: Path) -> None:
    # cloudevents does not read `recorded`: the child parses, without it.
    path = write_jsonl(tmp_path / "e.jsonl", [progress(i) for i in range(3)])
    assert list(extract_parallel(path, recorded=lambda source, event_id: None)) == list(
        extract(path)
    )
    # dcgm-metrics reads it: parsed here, where the function is, which gives the fault as stored.
    scrape = tmp_path / "scrape.prom"
    scrape.write_text(
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-b",Hostname="n7"} 79 1767607800000\n'
    )
    stored = (
        b'{"data":{"code":"xid-79","device":1,"node":"n7","severity":"critical"},'
        b'"id":"n7:1:GPU-b:-:xid:79","source":"dcgm-exporter://n7","specversion":"1.0",'
        b'"time":"2026-01-05T09:00:00Z","type":"health.fault"}'
    )
    asked: list[tuple[str, str]] = []

    def recorded(source: str, event_id: str) -> bytes | None:
        asked.append((source, event_id))
        return stored

    (record,) = list(extract_parallel(scrape, "dcgm-metrics", recorded=recorded))
    assert asked == [("dcgm-exporter://n7", "n7:1:GPU-b:-:xid:79")]
    assert isinstance(record, Accepted) and record.body == stored
