"""DCGM counters from dcgm-exporter scrapes and Prometheus range queries (docs/events.md,
`device.counters` and `job.counters`), each expectation written out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from ingest import extract, ingestor_for
from ingest.base import IngestError
from schemas import Accepted, Rejected
from tests.conftest import REALDATA, run_cli

T = 1767780030000  # 2026-01-07T10:00:30Z
H07 = 'gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",Hostname="node-07"'
POD = 'gpu="1",UUID="GPU-b",Hostname="node-07",namespace="acme",pod="train-0",container="main"'


def scrape(tmp_path: Path, lines: list[str], name: str = "scrape.prom") -> Path:
    path = tmp_path / name
    path.write_text("# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n" + "\n".join(lines) + "\n")
    return path


def bodies(path: Path, fmt: str, **options: str) -> list[dict[str, Any]]:
    found = list(extract(path, fmt, **options))
    assert all(isinstance(r, Accepted) for r in found), found
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def test_a_scrape_makes_one_event_per_device_and_instant(tmp_path: Path) -> None:
    path = scrape(
        tmp_path,
        [
            f"DCGM_FI_PROF_SM_ACTIVE{{{H07}}} 0.941250 {T}",
            f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{H07}}} 0.612 {T}",
            f"DCGM_FI_PROF_NVLINK_TX_BYTES{{{H07}}} 9223372036854775794 {T}",  # blank
            f"DCGM_FI_DEV_GPU_UTIL{{{H07}}} 97 {T}",
        ],
    )
    assert bodies(path, "dcgm-metrics") == [
        {
            "specversion": "1.0",
            "source": "dcgm-exporter://node-07",
            "id": f"node-07:0:GPU-a:-:counters:{T}:gpu_util+sm_active+tensor_active",
            "type": "device.counters",
            "time": "2026-01-07T10:00:30Z",
            "data": {
                "device": 0,
                "gpu_util": "97",
                "model": "NVIDIA H100 80GB HBM3",
                "node": "node-07",
                "samples": 1,
                "sm_active": "0.94125",
                "tensor_active": "0.612",
                "uuid": "GPU-a",
                "window_end": "2026-01-07T10:00:30Z",
                "window_start": "2026-01-07T10:00:00Z",  # the default 30 s interval
            },
        }
    ]


def test_pod_labels_make_the_tenants_event_apart(tmp_path: Path) -> None:
    path = scrape(tmp_path, [f"DCGM_FI_PROF_SM_ACTIVE{{{POD}}} 0.5 {T}"])
    device, job = bodies(path, "dcgm-metrics", interval_s="60")
    assert device["type"] == "device.counters"
    assert not {"pod", "namespace", "container", "tenant"} & set(device["data"])
    assert device["data"]["window_start"] == "2026-01-07T09:59:30Z"  # 60 s before
    assert job["type"] == "job.counters"
    assert job["id"] == device["id"] + ":pod:acme/train-0"
    assert {k: job["data"][k] for k in ("tenant", "job_id", "pod", "container", "device")} == {
        "tenant": "acme",
        "job_id": "train-0",
        "pod": "train-0",
        "container": "main",
        "device": 1,
    }


@pytest.mark.parametrize(
    ("line", "field", "reason"),
    [
        (
            f"DCGM_FI_PROF_SM_ACTIVE{{{H07}}} 1.2 {T}",
            "value",
            "DCGM_FI_PROF_SM_ACTIVE = 1.2 is outside [0, 1]",
        ),
        (
            f"DCGM_FI_DEV_GPU_UTIL{{{H07}}} 101 {T}",
            "value",
            "DCGM_FI_DEV_GPU_UTIL = 101 is outside [0, 100]",
        ),
        (
            f"DCGM_FI_PROF_DRAM_ACTIVE{{{H07}}} -0.1 {T}",
            "value",
            "DCGM_FI_PROF_DRAM_ACTIVE = -0.1 is outside [0, 1]",
        ),
        (f"DCGM_FI_PROF_SM_ACTIVE{{{H07}}} NaN {T}", "value", "not a number: 'NaN'"),
        (
            f'DCGM_FI_PROF_SM_ACTIVE{{gpu="0",UUID="GPU-a"}} 0.5 {T}',
            "Hostname",
            "no Hostname or hostname label, and no node named",
        ),
    ],
)
def test_bad_counters_are_rejected_naming_file_line_and_field(
    tmp_path: Path, line: str, field: str, reason: str
) -> None:
    path = scrape(tmp_path, [line])
    [rejected] = list(extract(path, "dcgm-metrics"))
    assert isinstance(rejected, Rejected)
    assert (rejected.origin.file, rejected.origin.line, rejected.field, rejected.reason) == (
        str(path),
        2,
        field,
        reason,
    )


def test_a_counter_without_time_refuses_the_file_naming_the_scrape_time(tmp_path: Path) -> None:
    """As for a fault: a scrape without timestamps read with no scrape time is refused
    whole (the CLI names the option), nothing of it quarantined or stored."""
    path = scrape(tmp_path, [f"DCGM_FI_PROF_SM_ACTIVE{{{H07}}} 0.5"])
    with pytest.raises(IngestError, match=r"scrape.prom:2: timestamp: the sample has no ") as bad:
        list(extract(path, "dcgm-metrics"))
    assert bad.value.option == "scrape_time"


def test_scrape_time_stands_for_missing_timestamps(tmp_path: Path) -> None:
    path = scrape(tmp_path, [f"DCGM_FI_PROF_SM_ACTIVE{{{H07}}} 0.5"])
    [event] = bodies(path, "dcgm-metrics", scrape_time="2026-01-07T11:00:00+01:00")
    assert (event["time"], event["data"]["window_start"]) == (
        "2026-01-07T10:00:00Z",
        "2026-01-07T09:59:30Z",
    )


def range_answer(values: list[list[Any]], **labels: str) -> dict[str, Any]:
    metric = {"__name__": "DCGM_FI_PROF_SM_ACTIVE", "gpu": "0", "UUID": "GPU-a"}
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {**metric, "Hostname": "node-07", **labels}, "values": values}],
        },
    }


def test_a_range_query_gives_the_scrapes_identity(tmp_path: Path) -> None:
    """A sample of the same device, instant and counters is a duplicate, whichever read it."""
    query = tmp_path / "q.json"
    query.write_text(json.dumps(range_answer([[T // 1000, "0.5"], [T // 1000 + 30, "0.25"]])))
    url = f"sqlite:///{tmp_path / 'l.db'}"
    code, out, _ = run_cli("ingest", "--db", url, "--format", "prometheus-range", str(query))
    assert (code, out) == (0, f"{query}: read 2 · appended 2 · duplicate 0 · quarantined 0\n")
    again = scrape(
        tmp_path, [f'DCGM_FI_PROF_SM_ACTIVE{{gpu="0",UUID="GPU-a",Hostname="node-07"}} 0.50 {T}']
    )
    code, out, _ = run_cli("ingest", "--db", url, str(again))
    assert (code, out) == (0, f"{again}: read 1 · appended 0 · duplicate 1 · quarantined 0\n")
    code, out, _ = run_cli("ingest", "--db", url, "--format", "prometheus-range", str(query))
    assert (code, out) == (0, f"{query}: read 2 · appended 0 · duplicate 2 · quarantined 0\n")


def test_a_bad_range_value_names_its_series_line_and_place(tmp_path: Path) -> None:
    query = tmp_path / "q.json"
    answer = range_answer([[T // 1000, "0.5"], [T // 1000 + 30, "2"], ["x", "0.1"]])
    query.write_text(json.dumps(answer, indent=1))
    found = list(extract(query, "prometheus-range"))
    rejected = [(r.origin.line, r.field, r.reason) for r in found if isinstance(r, Rejected)]
    metric_line = next(
        n for n, text in enumerate(query.read_text().splitlines(), 1) if '"metric"' in text
    )
    assert rejected == [
        (
            metric_line,
            "data.result[0].values[1]",
            "DCGM_FI_PROF_SM_ACTIVE = 2 is outside [0, 1]",
        ),
        (
            metric_line,
            "data.result[0].values[2]",
            "expected [seconds, \"value\"], got ['x', '0.1']",
        ),
    ]
    assert sum(isinstance(r, Accepted) for r in found) == 1


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            {"status": "error", "errorType": "bad_data"},
            "status: the query did not succeed ('error')",
        ),
        (
            {"status": "success", "data": {"resultType": "vector", "result": []}},
            "data.resultType: not a range query's matrix ('vector')",
        ),
    ],
)
def test_an_answer_that_is_no_matrix_is_an_input_error(
    tmp_path: Path, answer: dict[str, Any], message: str
) -> None:
    query = tmp_path / "q.json"
    query.write_text(json.dumps(answer))
    with pytest.raises(IngestError) as bad:
        list(extract(query, "prometheus-range"))
    assert str(bad.value) == f"{query}: {message}"


def counters_event(**data: Any) -> dict[str, Any]:
    base = {
        "node": "n1",
        "device": 0,
        "window_start": "2026-01-05T09:59:30Z",
        "window_end": "2026-01-05T10:00:00Z",
        "samples": 1,
    }
    return {
        "specversion": "1.0",
        "id": "c1",
        "source": "dcgm-exporter://n1",
        "type": "device.counters",
        "time": "2026-01-05T10:00:00Z",
        "data": {**base, **data},
    }


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"sm_active": "1.5"}, "is not a share in [0, 1]"),
        ({"gpu_util": "100.5"}, "is not a percentage in [0, 100]"),
        ({"nvlink_tx_bytes": "-1"}, "a measured figure is never negative"),
        ({"window_end": "2026-01-05T09:00:00Z"}, "window_end is before window_start"),
        ({"tenant": "acme"}, "a fleet event carries no tenant's data"),
        ({"pod": "train-0"}, "a fleet event carries no tenant's data"),
        ({"samples": 0}, "greater than or equal to 1"),
    ],
)
def test_the_event_keeps_its_bounds(data: dict[str, Any], says: str) -> None:
    from pydantic import ValidationError

    from schemas import validate_event

    validate_event(counters_event(sm_active="0.94"))
    with pytest.raises(ValidationError) as bad:
        validate_event(counters_event(**data))
    assert says in str(bad.value)


def test_a_tenant_cannot_write_counters_for_itself_or_another(tmp_path: Path) -> None:
    """What a GPU did is the provider's evidence: a tenant's own source may not forge a
    quiet window to back an idle claim, nor a neighbour's. Both go to the quarantine."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    path = scrape(tmp_path, [f"DCGM_FI_PROF_SM_ACTIVE{{{POD}}} 0.001 {T}"])
    code, out, err = run_cli("ingest", "--db", url, "--owner", "tenant:acme", str(path))
    assert "appended 0" in out + err and "quarantined 2" in out + err, out + err
    code, out, err = run_cli("ingest", "--db", url, str(path))  # the provider's exporter
    assert code == 0 and "appended 2" in out + err, out + err


def _grant(tenant: str, allocation_id: str, node: str) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": f"grant-{tenant}-{allocation_id}-{node}",
        "source": "slurm://cluster-a",
        "type": "allocation.granted",
        "time": "2026-01-07T09:00:00Z",
        "data": {"tenant": tenant, "allocation_id": allocation_id, "gpus": 1, "node": node},
    }


def _count(url: str) -> dict[tuple[str | None, str], int]:
    from ledger import Store, read

    store = Store(url)
    try:
        return read.counts_by_type(store)
    finally:
        store.close()


def test_a_slurm_jobs_samples_are_its_tenants_once_its_grant_is_recorded(
    tmp_path: Path, db_url: str
) -> None:
    """dcgm-exporter's HPC mapping names the Slurm job (`hpc_job`), not its account: the
    tenant is the one of the provider's grant of that job on the sample's node. Read before
    the grant, the sample stays the fleet's; the next poll, after it, adds the tenant's
    copy and nothing twice. A job id two tenants' grants name on that node is nobody's."""
    url = db_url  # SQLite and PostgreSQL
    h = 'gpu="0",UUID="GPU-a",Hostname="node-07"'
    path = scrape(
        tmp_path,
        [
            f'DCGM_FI_PROF_SM_ACTIVE{{{h},hpc_job="4242"}} 0.002 {T}',
            f'DCGM_FI_PROF_SM_ACTIVE{{gpu="1",UUID="GPU-b",Hostname="node-07",hpc_job="77"}}'
            f" 0.9 {T}",
        ],
    )
    assert run_cli("ingest", "--db", url, str(path))[0] == 0
    assert _count(url).get(("acme", "job.counters")) is None  # no grant yet: the fleet's only
    grants = tmp_path / "grants.jsonl"
    grants.write_text(
        "".join(
            orjson.dumps(g).decode() + "\n"
            for g in (
                _grant("acme", "4242", "node-07"),
                _grant("acme", "4242", "node-99"),  # the same id elsewhere: not this node
                _grant("acme", "77", "node-07"),
                _grant("globex", "77", "node-07"),  # two tenants name job 77 here: nobody's
            )
        )
    )
    assert run_cli("ingest", "--db", url, str(grants))[0] == 0
    code, out, err = run_cli("ingest", "--db", url, str(path))  # the next poll
    assert code == 0 and "appended 1" in out + err and "duplicate 2" in out + err, out + err
    counts = _count(url)
    assert counts[("acme", "job.counters")] == 1
    assert ("globex", "job.counters") not in counts
    assert counts[(None, "device.counters")] == 2


PROFILING_272 = (
    REALDATA / "dcgm-profiling" / "dcgm-exporter-issue-272_mig-and-pod-relabelled-lowercase.prom"
)


@pytest.mark.skipif(
    not PROFILING_272.is_file(),
    reason=f"no real data at {PROFILING_272} (a clone without ../shared/realdata)",
)
def test_a_relabelled_lower_case_scrape_from_an_exporter_issue(tmp_path: Path) -> None:
    """dcgm-exporter issue 272's metrics as the reporter's scrape gave them: lower-case
    `dcgm_fi_prof_gr_engine_active` and `uuid`, pod labels renamed `pod_name`,
    `pod_namespace`, `container_name`, no Hostname and no timestamps. Hand-counted: 2
    samples; GPU 3 MIG instance 1 (4g.40gb), empty pod, 0.000000; GPU 4, pod d85np-t6mdg of
    namespace ai-1, container -grpc-pod, 0.008246."""
    assert ingestor_for(PROFILING_272).name == "dcgm-metrics"
    records = list(
        extract(
            PROFILING_272,
            "dcgm-metrics",
            node="gpu-host",
            scrape_time="2024-03-14T12:00:00Z",
        )
    )
    assert not [r for r in records if isinstance(r, Rejected)]
    events = [json.loads(r.body) for r in records if isinstance(r, Accepted)]
    devices = [e for e in events if e["type"] == "device.counters"]
    jobs = [e for e in events if e["type"] == "job.counters"]
    assert [(e["data"]["device"], e["data"]["gr_engine_active"]) for e in devices] == [
        ("3/1", "0"),
        (4, "0.008246"),
    ]
    assert [e["data"]["uuid"] for e in devices] == [
        "GPU-af2c63a8-8c8b-21cc-581a-bab6bba89d08",
        "GPU-931446e6-0413-2864-5b76-11227dcda4ae",
    ]
    assert {e["data"]["window_end"] for e in devices} == {"2024-03-14T12:00:00Z"}
    # the pod is the tenant's: only its own event names it; the empty pod names nobody
    [job] = jobs
    assert {k: job["data"][k] for k in ("tenant", "job_id", "container", "device")} == {
        "tenant": "ai-1",
        "job_id": "d85np-t6mdg",
        "container": "-grpc-pod",
        "device": 4,
    }
    fleet = json.dumps(devices)
    assert "ai-1" not in fleet and "d85np" not in fleet and "grpc" not in fleet


# -- attacks through the exporter's labels (found by review, each shut) ---------------------


def test_a_pods_own_labels_cannot_steer_a_neighbours_figure(tmp_path: Path) -> None:
    """With `--kubernetes-enable-pod-labels`, dcgm-exporter appends a pod's own labels after
    the device's: a tenant that labels its pod `UUID=<another GPU>` gives that label twice.
    Prometheus refuses such a line, and so does the reader, naming it; the neighbour's
    sample stands as the exporter wrote it."""
    a = 'gpu="0",UUID="GPU-a",Hostname="n1",namespace="acme",pod="train-0"'
    b = 'gpu="1",UUID="GPU-b",Hostname="n1",namespace="globex",pod="g-0",UUID="GPU-a",gpu="0"'
    path = scrape(
        tmp_path,
        [f"DCGM_FI_PROF_SM_ACTIVE{{{a}}} 0.002 {T}", f"DCGM_FI_PROF_SM_ACTIVE{{{b}}} 0.97 {T}"],
    )
    found = list(extract(path, "dcgm-metrics"))
    [bad] = [r for r in found if isinstance(r, Rejected)]
    assert (bad.origin.line, bad.field, bad.reason) == (
        3,
        "labels",
        "the label 'UUID' is given twice",
    )
    events = [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]
    assert [(e["type"], e["data"]["sm_active"]) for e in events] == [
        ("device.counters", "0.002"),
        ("job.counters", "0.002"),
    ]


def test_two_values_for_one_device_instant_and_metric_conflict(tmp_path: Path) -> None:
    """Two lines that name the same device at the same instant with different values: the
    first stands and the second is refused, never silently written over."""
    path = scrape(
        tmp_path,
        [f"DCGM_FI_PROF_SM_ACTIVE{{{H07}}} 0.1 {T}", f"DCGM_FI_PROF_SM_ACTIVE{{{H07}}} 0.9 {T}"],
    )
    found = list(extract(path, "dcgm-metrics"))
    [bad] = [r for r in found if isinstance(r, Rejected)]
    assert (bad.origin.line, bad.field) == (3, "value")
    assert "conflicts with 0.100000 given for the same device and instant" in bad.reason
    [event] = [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]
    assert event["data"]["sm_active"] == "0.1"


def test_each_pod_on_a_shared_gpu_has_its_own_copy(tmp_path: Path) -> None:
    """A time-sliced GPU's exporter writes one line per pod, each with the device's value:
    one device event, and one tenant event per pod (not the first pod's alone)."""
    dev = 'gpu="0",UUID="GPU-a",Hostname="n1"'
    path = scrape(
        tmp_path,
        [
            f'DCGM_FI_PROF_SM_ACTIVE{{{dev},namespace="globex",pod="g-0"}} 0.9 {T}',
            f'DCGM_FI_PROF_SM_ACTIVE{{{dev},namespace="acme",pod="a-0"}} 0.9 {T}',
        ],
    )
    events = bodies(path, "dcgm-metrics")
    assert [(e["type"], e["data"].get("tenant")) for e in events] == [
        ("device.counters", None),
        ("job.counters", "globex"),
        ("job.counters", "acme"),
    ]


def test_the_exported_labels_name_the_workload_behind_a_service_monitor(tmp_path: Path) -> None:
    """Scraped through a ServiceMonitor that does not honour the exporter's labels,
    `namespace` and `pod` name the exporter's own pod and the workload's become
    `exported_…`: those name the tenant, as one set (container included)."""
    labels = (
        'gpu="0",UUID="GPU-a",Hostname="n1",namespace="gpu-operator",'
        'pod="nvidia-dcgm-exporter-7xk2p",container="exporter",exported_namespace="acme",'
        'exported_pod="train-0",exported_container="main"'
    )
    path = scrape(tmp_path, [f"DCGM_FI_PROF_SM_ACTIVE{{{labels}}} 0.5 {T}"])
    _, job = bodies(path, "dcgm-metrics")
    assert {k: job["data"][k] for k in ("tenant", "job_id", "container")} == {
        "tenant": "acme",
        "job_id": "train-0",
        "container": "main",
    }


def test_a_slurm_job_id_names_its_tenant_only_while_its_grant_held(
    tmp_path: Path, db_url: str
) -> None:
    """A job id reused after its grant ended (or a stale mapping file) names nobody: the
    grant must have held the job on that node over the sample's window."""
    url = db_url  # SQLite and PostgreSQL
    grant = _grant("acme", "4242", "node-07") | {"time": "2026-01-07T08:00:00Z"}
    release = {
        "specversion": "1.0",
        "id": "release-4242",
        "source": "slurm://cluster-a",
        "type": "allocation.released",
        "time": "2026-01-07T09:00:00Z",
        "data": {"tenant": "acme", "allocation_id": "4242"},
    }
    events = tmp_path / "grants.jsonl"
    events.write_text("".join(orjson.dumps(e).decode() + "\n" for e in (grant, release)))
    assert run_cli("ingest", "--db", url, str(events))[0] == 0
    h = 'gpu="0",UUID="GPU-a",Hostname="node-07",hpc_job="4242"'
    at_0830 = 1767774600000  # 2026-01-07T08:30:00Z: held
    path = scrape(
        tmp_path,
        [f"DCGM_FI_PROF_SM_ACTIVE{{{h}}} 0.5 {at_0830}", f"DCGM_FI_PROF_SM_ACTIVE{{{h}}} 0.5 {T}"],
    )
    assert run_cli("ingest", "--db", url, str(path))[0] == 0
    counts = _count(url)
    assert counts[("acme", "job.counters")] == 1  # 08:30 only; 10:00:30 is after the release
    assert counts[(None, "device.counters")] == 2
