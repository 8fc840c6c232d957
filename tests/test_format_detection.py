"""Format detection and the wrong format: a usage error (exit 2, one line naming the file
and the likely format), never a guess, never "read 0, exit 0", never a quarantine."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import main
from ingest import INGESTORS, IngestError, choose
from tests.conftest import ROOT

SAMPLES = ROOT / "fixtures" / "samples"
# Each sample, the one format whose identify claims it.
SAMPLE_FORMATS = {
    "events.jsonl": "cloudevents",
    "events_batch.json": "cloudevents",
    "sacct.txt": "sacct",
    "focus.csv": "focus",
    "dcgm_stats.txt": "dcgm-stats",
    "dcgm_metrics.prom": "dcgm-metrics",
    "prometheus_query_range.json": "prometheus-range",
    "kueue_workloads.json": "kueue",
    "kueue_workloads.yaml": "kueue",
    "k8s_events.json": "k8s-events",
    "kueue_clusterqueues.yaml": "kueue-clusterqueue",
    "sacctmgr_qos.txt": "sacctmgr-qos",
    "dcgmi_diag.txt": "dcgmi-diag",
}


def ingest(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("sample", list(SAMPLE_FORMATS))
def test_each_sample_is_claimed_by_exactly_its_format(sample: str) -> None:
    head = (SAMPLES / sample).read_bytes()[:65536]
    assert [i.name for i in INGESTORS if i.identify(SAMPLES / sample, head)] == [
        SAMPLE_FORMATS[sample]
    ]


@pytest.mark.parametrize(
    ("sample", "chosen"),
    [
        ("k8s_events.json", "kueue"),
        ("kueue_workloads.yaml", "k8s-events"),
        ("events.jsonl", "k8s-events"),
        ("dcgm_metrics.prom", "sacct"),
        ("focus.csv", "dcgm-metrics"),
        ("sacct.txt", "dcgm-stats"),
    ],
)
def test_the_wrong_format_is_exit_2_naming_the_likely_one(
    tmp_path: Path, sample: str, chosen: str
) -> None:
    code, out = ingest(tmp_path, "--format", chosen, str(SAMPLES / sample))
    likely = SAMPLE_FORMATS[sample]
    assert (code, out) == (
        2,
        f"Error: --format: {chosen}: {SAMPLES / sample}: this is not {chosen} input, "
        f"it looks like {likely} (use {likely})\n",
    )
    assert "appended" not in out
    # refused before the store is opened: nothing read, nothing quarantined
    assert not (tmp_path / "l.db").exists()


def test_a_file_no_format_claims_is_exit_2_when_detecting(tmp_path: Path) -> None:
    headerless = (
        tmp_path / "sacct-noheader.txt"
    )  # `sacct --parsable2 --noheader`: no header to recognise it by
    headerless.write_text("4242|train|alice|gpu|node-1|1|8|1|COMPLETED|2026-01-05T09:00:00\n")
    code, out = ingest(tmp_path, str(headerless))
    assert code == 2
    assert out == (
        f"Error: --format: {headerless}: no format recognises this file; choose one "
        "(cloudevents, sacct, focus, dcgm-stats, dcgm-metrics, kueue, k8s-events, serving-bench, "
        "nvidia-smi-topo, nvbandwidth, nccl-tests, kueue-clusterqueue, sacctmgr-qos, "
        "prometheus-range, dcgmi-diag)\n"
    )


def test_a_chosen_format_that_finds_no_record_is_exit_2(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("nothing here is a dcgmi stats table\n")
    code, out = ingest(tmp_path, "--format", "dcgm-stats", str(notes))
    assert (code, out) == (
        2,
        f"Error: --format: dcgm-stats: {notes}: no dcgm-stats record in this non-empty file; is "
        "it another format? (cloudevents, sacct, focus, dcgm-stats, dcgm-metrics, kueue, "
        "k8s-events, serving-bench, nvidia-smi-topo, nvbandwidth, nccl-tests, "
        "kueue-clusterqueue, sacctmgr-qos, prometheus-range, dcgmi-diag)\n",
    )


def test_a_blank_file_is_zero_records_not_an_error(tmp_path: Path) -> None:
    blank = tmp_path / "poll.json"
    blank.write_text("\n")
    assert ingest(tmp_path, str(blank)) == (
        0,
        f"{blank}: read 0 · appended 0 · duplicate 0 · quarantined 0\n",
    )
    assert ingest(tmp_path, "--format", "kueue", str(blank))[0] == 0


def test_a_file_of_a_format_with_nothing_of_use_is_not_an_error(tmp_path: Path) -> None:
    # An EventList of Normal pod events only: claimed by k8s-events, every Event skipped.
    events = tmp_path / "events.json"
    events.write_text(
        '{"kind":"EventList","apiVersion":"v1","items":[{"metadata":{"uid":"u","namespace":"a"},'
        '"involvedObject":{"kind":"Pod","name":"p","namespace":"a"},"reason":"Pulled",'
        '"type":"Normal","firstTimestamp":"2026-01-05T10:00:00Z"}]}'
    )
    assert ingest(tmp_path, str(events)) == (
        0,
        f"{events}: read 0 · appended 0 · duplicate 0 · quarantined 0\n",
    )


def test_two_claims_are_an_error_not_a_guess(tmp_path: Path) -> None:
    both = (
        tmp_path / "job-232.out"
    )  # a job's log holding a dcgmi stats report and a dcgm-exporter scrape
    both.write_bytes(
        (SAMPLES / "dcgm_stats.txt").read_bytes() + (SAMPLES / "dcgm_metrics.prom").read_bytes()
    )
    claims = [i.name for i in INGESTORS if i.identify(both, both.read_bytes())]
    if len(claims) < 2:
        pytest.fail(f"the fixture must be claimed twice, it is claimed by {claims}")
    with pytest.raises(
        IngestError, match="claimed by several formats \\(dcgm-stats, dcgm-metrics\\); choose one"
    ) as raised:
        choose(both)
    assert raised.value.option == "format"
