"""`gpuledger ingest --manifest FILE`: every file the manifest lists, with its format and
options, in order; the simulator's manifest and an operator's collection list alike."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli import main
from fixtures.sim import SimConfig, simulate
from tests.conftest import ROOT

SAMPLES = ROOT / "fixtures" / "samples"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def collection(folder: Path, files: list[dict[str, Any]]) -> Path:
    """An operator's collection list: the files its collectors overwrite every few minutes."""
    for name in ("k8s_events.json", "kueue_workloads.json", "dcgm_metrics.prom", "events.jsonl"):
        shutil.copy(SAMPLES / name, folder / name)
    manifest = folder / "collect.json"
    manifest.write_text(json.dumps({"files": files}, indent=2))
    return manifest


COLLECTION: list[dict[str, Any]] = [
    {"path": "k8s_events.json", "format": "k8s-events", "options": {"cluster": "k8s-a"}},
    {"path": "kueue_workloads.json", "options": {"cluster": "k8s-a"}},  # format detected
    {"path": "dcgm_metrics.prom", "format": "dcgm-metrics", "options": {"node": "gpu-node-07"}},
    {"path": "events.jsonl", "format": None},
]


def test_a_collection_is_one_command_and_a_second_run_appends_nothing(tmp_path: Path) -> None:
    manifest = collection(tmp_path, COLLECTION)
    db = f"sqlite:///{tmp_path / 'l.db'}"
    code, out = run("ingest", "--db", db, "--manifest", str(manifest))
    assert code == 0, out
    lines = out.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        str(tmp_path / f["path"]) for f in COLLECTION
    ] + ["total"]
    appended = int(lines[-1].split("appended ")[1].split(" ")[0])
    read = int(lines[-1].split("read ")[1].split(" ")[0])
    assert appended == read > 0
    again = run("ingest", "--db", db, "--manifest", str(manifest))
    assert (
        again[0] == 0
        and again[1].splitlines()[-1]
        == f"total: read {read} · appended 0 · duplicate {read} · quarantined 0"
    )


def test_options_go_to_their_file_and_the_commands_are_defaults(tmp_path: Path) -> None:
    manifest = collection(tmp_path, [COLLECTION[0]])
    db = f"sqlite:///{tmp_path / 'l.db'}"
    assert run("ingest", "--db", db, "--manifest", str(manifest), "--cluster", "ignored")[0] == 0
    code, out = run("export", "--db", db)
    sources = {json.loads(line)["source"] for line in out.splitlines()}
    assert sources == {"k8s://k8s-a"}  # the entry's own option wins over the command's default


def test_the_simulators_manifest_ingests_as_the_demo_does(tmp_path: Path) -> None:
    folder = tmp_path / "sim"
    manifest = simulate(SimConfig(seed=3, gpus=16, days=1, tenants=2), folder)
    code, out = run(
        "ingest",
        "--db",
        f"sqlite:///{tmp_path / 'l.db'}",
        "--manifest",
        str(folder / "manifest.json"),
    )
    assert code == 0, out
    lines = out.splitlines()
    assert [line.split(": ")[0] for line in lines[:-1]] == [
        str(folder / f["path"]) for f in manifest.files
    ]
    assert lines[-1].endswith("quarantined 0")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"format": "kueue"}, "files[0].path: expected a file name"),
        (
            {"path": "a.json", "format": "yaml"},
            "files[0].format: unknown format 'yaml' (known: cloudevents, sacct, focus, "
            "dcgm-stats, dcgm-metrics, kueue, k8s-events, serving-bench, nvidia-smi-topo, "
            "nvbandwidth, nccl-tests, kueue-clusterqueue, sacctmgr-qos, prometheus-range, "
            "dcgmi-diag)",
        ),
        (
            {"path": "a.json", "options": {"clustr": "x"}},
            "files[0].options.clustr: unknown option (known: allocation, "
            "allocation_field, cluster, delimiter, fabric_domain, fields, "
            "flavor_class, gpu_field, interval_s, job, metric, node, qos_tenant, scrape_time, "
            "tenant, tenant_field, timezone, window_start)",
        ),
        (
            {"path": "a.json", "options": {"node": 7}},
            "files[0].options.node: expected a string, found 7",
        ),
        (
            {"path": "a.json", "opts": {}},
            "files[0].opts: unknown field (known: path, format, options, owner)",
        ),
    ],
)
def test_a_bad_entry_is_exit_2_naming_it(
    tmp_path: Path, entry: dict[str, Any], message: str
) -> None:
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"files": [entry]}))
    assert run(
        "ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--manifest", str(manifest)
    ) == (2, f"Error: {manifest}:1: {message}\n")  # the entry's line


def test_a_listed_file_that_is_missing_is_exit_2_before_anything_is_read(tmp_path: Path) -> None:
    manifest = collection(tmp_path, [*COLLECTION, {"path": "gone.json", "format": "cloudevents"}])
    db = f"sqlite:///{tmp_path / 'l.db'}"
    assert run("ingest", "--db", db, "--manifest", str(manifest)) == (
        2,
        f"Error: {manifest}:27: files[4].path: {tmp_path / 'gone.json'}: no such file\n",
    )
    # line 27: json.dumps(indent=2) writes `{`, `"files": [` and entries of 7, 6, 7, 4 lines first
    assert not (
        tmp_path / "l.db"
    ).exists()  # the files before it were not ingested: the store was not even opened


def test_a_wrong_format_in_a_manifest_stops_it_before_anything_is_read(tmp_path: Path) -> None:
    manifest = collection(tmp_path, [*COLLECTION, {"path": "k8s_events.json", "format": "kueue"}])
    db = f"sqlite:///{tmp_path / 'l.db'}"
    code, out = run("ingest", "--db", db, "--manifest", str(manifest))
    assert (code, out) == (
        2,
        f"Error: --format: kueue: {tmp_path / 'k8s_events.json'}: this is not kueue input, "
        "it looks like k8s-events (use k8s-events)\n",
    )
    assert not (tmp_path / "l.db").exists()


def test_manifest_and_files_together_are_a_usage_error(tmp_path: Path) -> None:
    manifest = collection(tmp_path, COLLECTION)
    db = f"sqlite:///{tmp_path / 'l.db'}"
    assert (
        run("ingest", "--db", db, "--manifest", str(manifest), str(SAMPLES / "events.jsonl"))[0]
        == 2
    )
    assert run("ingest", "--db", db, "--manifest", str(manifest), "--format", "kueue")[0] == 2
    assert run("ingest", "--db", db) == (
        2,
        "Error: --manifest: give the files to ingest, or a manifest\n",
    )


def test_a_manifest_that_is_not_json_is_exit_2(tmp_path: Path) -> None:
    manifest = tmp_path / "m.json"
    manifest.write_text('{"files": [\n')
    code, out = run(
        "ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--manifest", str(manifest)
    )
    assert code == 2 and out.startswith(f"Error: {manifest}:") and "not valid JSON" in out
