"""Real files written by others (../shared/realdata: k8s-events, kueue, cloudevents,
dcgm-metrics), ingested as a user would; each checks the facts its README states,
counted by hand from the bytes. Skipped, with the reason, where the folder is absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from cli import main
from ingest import choose, extract
from ingest.k8sdocs import read_objects
from ingest.kueue import workload_events
from schemas import Accepted, Rejected
from tests.conftest import REALDATA

needs = pytest.mark.skipif(
    not REALDATA.is_dir(),
    reason=f"no real data at {REALDATA} (a clone without ../shared/realdata)",
)
pytestmark = needs

DEVOPS2 = REALDATA / "k8s-events" / "devops2_volodymyr_k8s_log_EventList_1_kube-system.json"
INQUISITIVE = (
    REALDATA / "k8s-events" / "inquisitivefrog-kubernetes_cluster-info-dump_EventList.json"
)
KUEUE_1726 = REALDATA / "kueue" / "kueue-issue-1726_workload-list_v1beta1.yaml"
KUEUE_8387 = REALDATA / "kueue" / "kueue-issue-8387_workload_v1beta1.yaml"
CLOUDEVENTS = [
    REALDATA / "cloudevents" / "sdk-java_v1_json_data.json",
    REALDATA / "cloudevents" / "sdk-java_v1_min.json",
]
DCGM_MIG = REALDATA / "dcgm-metrics" / "nvidia-docs_dcgm-exporter_mig_ub20-a100-k8s.prom"


def ingest(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", *args])
    return result.exit_code, result.output


def events(path: Path, **options: Any) -> list[dict[str, Any]]:
    found = list(extract(path, **options))
    assert not [r for r in found if isinstance(r, Rejected)], found
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def test_every_file_is_detected_as_its_folder_says() -> None:
    folders = {
        "k8s-events": "k8s-events",
        "kueue": "kueue",
        "cloudevents": "cloudevents",
        "dcgm-metrics": "dcgm-metrics",
        "dcgm-profiling": "dcgm-metrics",
        "dcgmi-diag": "dcgmi-diag",
    }
    for folder, fmt in folders.items():
        for path in sorted((REALDATA / folder).iterdir()):
            assert choose(path)[0].name == fmt, path


def test_cluster_info_dump_event_list_devops2(tmp_path: Path) -> None:
    # 40 core/v1 Events, no kind on the items; 4 Scheduled become placements, the 36 others
    # (Pulled, Created, Started 8 each, Unhealthy 4, Killing 1, 7 others) are skipped, none
    # quarantined.
    assert ingest(tmp_path, str(DEVOPS2)) == (
        0,
        f"{DEVOPS2}: read 4 · appended 4 · duplicate 0 · quarantined 0\n",
    )
    placed = events(DEVOPS2)
    assert [
        (
            e["data"]["decision"],
            e["data"]["job_id"],
            e["data"]["node"],
            e["data"]["tenant"],
            e["time"],
        )
        for e in placed
    ] == [
        ("placed", "coredns-6f6b679f8f-5m7kq", "minikube", "kube-system", "2024-11-17T10:19:41Z"),
        ("placed", "coredns-6f6b679f8f-rgq7r", "minikube", "kube-system", "2024-11-17T10:19:41Z"),
        ("placed", "kube-proxy-njm2k", "minikube", "kube-system", "2024-11-17T10:19:41Z"),
        ("placed", "storage-provisioner", "minikube", "kube-system", "2024-11-17T10:19:43Z"),
    ]
    assert ingest(tmp_path, str(DEVOPS2)) == (
        0,
        f"{DEVOPS2}: read 4 · appended 0 · duplicate 4 · quarantined 0\n",
    )


def test_cluster_info_dump_event_list_inquisitivefrog(tmp_path: Path) -> None:
    # 2 Warning FailedScheduling Events (count 23 each, first 16:06:21Z, last 17:56:23Z): each
    # queued once,
    # at its first time; a later dump with a higher count would be the same records.
    queued = events(INQUISITIVE)
    assert [
        (e["id"], e["data"]["decision"], e["data"]["job_id"], e["data"]["tenant"], e["time"])
        for e in queued
    ] == [
        (
            "5d09dddf-985c-4483-8d76-ad4cf7caee0e",
            "queued",
            "coredns-5dd5756b68-2zrhr",
            "kube-system",
            "2024-10-25T16:06:21Z",
        ),
        (
            "b5114958-925d-458c-ba21-b74f82e567f9",
            "queued",
            "coredns-5dd5756b68-wcs5x",
            "kube-system",
            "2024-10-25T16:06:21Z",
        ),
    ]
    assert all(
        "count" not in e["data"]["k8s_event"] and "lastTimestamp" not in e["data"]["k8s_event"]
        for e in queued
    )


def test_kueue_workload_list_issue_1726(tmp_path: Path) -> None:
    # kind: List, 1 v1beta1 Workload in pgrunt; QuotaReserved and Admitted True at 10:42:40Z; 2
    # GPUs of flavor gpu-a40.
    decision, grant = events(KUEUE_1726)
    key = (
        "pgrunt/job-ml-job-annotator-gt-webface-gpu-ff6d8/"
        "feb1af8b-abe6-4b35-a6f2-29a808a3416f:Admitted:True:Admitted:2024-02-11T10:42:40Z"
    )
    assert (decision["id"], decision["type"], decision["time"]) == (
        key,
        "policy.decision",
        "2024-02-11T10:42:40Z",
    )
    assert decision["data"] == {
        "tenant": "pgrunt",
        "decision": "admitted",
        "job_id": "job-ml-job-annotator-gt-webface-gpu-ff6d8",
        "allocation_id": "job-ml-job-annotator-gt-webface-gpu-ff6d8",
        "reason": "Admitted",
        "queue": "lq-all-resources",
        "priority": 10,
        "condition": "Admitted",
    }
    assert (
        grant["id"],
        grant["data"]["gpus"],
        grant["data"]["placement_class"],
        grant["data"]["flavors"],
        grant["data"]["cluster_queue"],
    ) == (key + ":granted", 2, "whole", ["default-flavor", "gpu-a40"], "cq-all-resources")
    assert ingest(tmp_path, str(KUEUE_1726)) == (
        0,
        f"{KUEUE_1726}: read 2 · appended 2 · duplicate 0 · quarantined 0\n",
    )


def test_kueue_deactivated_workload_issue_8387_is_no_eviction() -> None:
    # spec.active: false; Evicted True reason Deactivated at 09:35:24Z; Finished True Succeeded at
    # 09:36:25Z;
    # no status.admission (no grant). The owner's own act: deactivated, never evicted.
    (item,) = list(read_objects(KUEUE_8387))
    assert not isinstance(item, Rejected)
    found = workload_events(item.body)
    assert [
        (e["type"], e["data"].get("decision"), e["data"].get("reason"), e["time"]) for e in found
    ] == [
        ("policy.decision", "deactivated", "Deactivated", "2025-12-22T09:35:24Z"),
        ("allocation.released", None, "Deactivated", "2025-12-22T09:35:24Z"),
        ("allocation.released", None, "Succeeded", "2025-12-22T09:36:25Z"),
    ]
    assert {e["data"]["tenant"] for e in found} == {"default"} and found[0]["data"][
        "job_id"
    ] == "job-suspend-test"
    assert found[2]["data"]["accumulated_past_execution_time_s"] == 103  # v1beta1's misspelt field


def test_kueue_deactivated_workload_issue_8387_ingests(tmp_path: Path) -> None:
    assert ingest(tmp_path, str(KUEUE_8387)) == (
        0,
        f"{KUEUE_8387}: read 3 · appended 3 · duplicate 0 · quarantined 0\n",
    )


@pytest.mark.parametrize("path", CLOUDEVENTS, ids=[p.name for p in CLOUDEVENTS])
def test_sdk_java_pretty_printed_event_is_one_record(tmp_path: Path, path: Path) -> None:
    # One pretty-printed CloudEvent of type mock.test: one record, quarantined with that reason.
    (record,) = list(extract(path))
    assert isinstance(record, Rejected)
    assert (record.origin.line, record.field, record.reason) == (
        1,
        "type",
        "unknown event type 'mock.test'",
    )
    assert ingest(tmp_path, str(path)) == (
        1,
        f"{record}\n{path}: read 1 · appended 0 · duplicate 0 · quarantined 1\n",
    )


def test_dcgm_exporter_mig_scrape(tmp_path: Path) -> None:
    # 21 samples, no HELP/TYPE, no timestamps; host ub20-a100-k8s, GPU 0 and MIG instance 13; two
    # XID samples, both 0 (no fault). Profiling counters: GR_ENGINE, PIPE_TENSOR and DRAM
    # active on GPU 0 (0.995630, 0.929260, 0.690789) and on instance 13 (0.995687, 0.930433,
    # 0.800339): one device.counters each, at the scrape's time.
    counters = events(DCGM_MIG, scrape_time="2026-01-05T10:00:00Z")
    assert [
        (e["type"], e["data"]["device"], e["data"]["gr_engine_active"],
         e["data"]["tensor_active"], e["data"]["dram_active"], e["data"]["window_end"])
        for e in counters
    ] == [
        ("device.counters", 0, "0.99563", "0.92926", "0.690789", "2026-01-05T10:00:00Z"),
        ("device.counters", "0/13", "0.995687", "0.930433", "0.800339", "2026-01-05T10:00:00Z"),
    ]  # fmt: skip
    # a scrape without timestamps read with no scrape time: its counters cannot be placed in
    # time, so the file is refused naming the option (line 13, GPU 0's GR_ENGINE_ACTIVE), and
    # nothing is stored
    code, out = ingest(tmp_path, str(DCGM_MIG))
    assert (code, out) == (
        2,
        f"Error: --scrape-time: {DCGM_MIG}:13: timestamp: the sample has no timestamp; give "
        "the scrape time (RFC 3339)\n",
    )


def test_dcgm_exporter_mig_scrape_with_an_xid_names_the_instance(tmp_path: Path) -> None:
    # The same scrape as it would read after XID 31 on the MIG instance (the file's own lines, one
    # value changed).
    text = DCGM_MIG.read_text()
    mig_line = next(
        line
        for line in text.splitlines()
        if line.startswith("DCGM_FI_DEV_XID_ERRORS") and "GPU_I_ID" in line
    )
    raised = tmp_path / "raised.prom"
    raised.write_text(text.replace(mig_line, mig_line[:-1] + "31"))
    (fault,) = [
        e
        for e in events(raised, scrape_time="2026-01-05T10:00:00Z")
        if e["type"] == "health.fault"
    ]
    assert (
        fault["id"],
        fault["data"]["device"],
        fault["data"]["code"],
        fault["data"]["node"],
    ) == (
        "ub20-a100-k8s:0:GPU-34319582-d595-d1c7-d1d2-179bcfa61660:13:xid:31",
        "0/13",
        "xid-31",
        "ub20-a100-k8s",
    )


# --- multipod/: Workload statuses pasted in Kueue issues (issue 33) ----------------------

TAS_3887 = (
    REALDATA / "multipod" / "kueue-issue-3887_workload-status_pytorchjob-master1-worker3_tas.yaml"
)
RAY_6035 = REALDATA / "multipod" / "kueue-issue-6035_workload-status_rayjob-worker900-gpu.yaml"
STATUS_ALONE = (
    "kind: missing: a Workload's status alone (no kind, apiVersion or metadata) says nothing of "
    "which "
    "Workload it is; ingest the object whole, as `kubectl get workload NAME -o yaml` prints it"
)


def _status_of(path: Path) -> dict[str, Any]:
    (item,) = list(read_objects(path))
    assert not isinstance(item, Rejected) and set(item.body) == {"status"}
    status: dict[str, Any] = item.body["status"]
    return status


def _named_workload(
    status: dict[str, Any], owner: str, pod_sets: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """The pasted status inside the object it came from: what `kubectl get workload -o yaml`
    prints.
    """
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": f"{owner}-wl",
            "namespace": "ml",
            "uid": "u-1",
            "ownerReferences": [{"name": owner, "kind": "PyTorchJob"}],
        },
        "status": status,
    }
    if pod_sets is not None:
        body["spec"] = {"podSets": pod_sets}
    return body


@pytest.mark.parametrize("path", [TAS_3887, RAY_6035], ids=["3887", "6035"])
def test_a_pasted_workload_status_alone_is_one_quarantined_record_saying_why(
    tmp_path: Path, path: Path
) -> None:
    # Only `status:` (no apiVersion/kind/metadata): no format claims it, and read as kueue it names
    # no Workload.
    code, output = ingest(tmp_path, str(path))
    assert code == 2 and "no format recognises this file" in output
    (record,) = list(extract(path, "kueue"))
    assert isinstance(record, Rejected) and (
        record.origin.line,
        f"{record.field}: {record.reason}",
    ) == (1, STATUS_ALONE)
    assert ingest(tmp_path, "--format", "kueue", str(path)) == (
        1,
        f"{path}:1: {STATUS_ALONE}\n{path}: read 1 · appended 0 · duplicate 0 · quarantined 1\n",
    )


def test_kueue_3887_pytorchjob_master1_worker3_reads_as_a_gang_of_two_allocations() -> None:
    # Facts: podSetAssignments master count 1, nvidia.com/gpu "8", node kwok-node-10; worker count
    # 3, "24",
    # nodes kwok-node-10, kwok-node-11, kwok-node-8. 32 GPUs, 4 pods, 3 nodes. No conditions: the
    # file
    # alone grants nothing; with the Admitted condition the object would carry (a time chosen
    # here), a gang.
    status = _status_of(TAS_3887)
    assert "conditions" not in status
    per_pod = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
    pod_sets = [
        {"name": "master", "count": 1, "template": {"spec": per_pod}},
        {"name": "worker", "count": 3, "template": {"spec": per_pod}},
    ]
    assert workload_events(_named_workload(status, "pytorch-tas", pod_sets)) == []
    status["conditions"] = [
        {
            "type": "Admitted",
            "status": "True",
            "reason": "Admitted",
            "lastTransitionTime": "2024-12-25T10:00:00Z",
        }
    ]
    events = workload_events(_named_workload(status, "pytorch-tas", pod_sets))
    grants = [e["data"] for e in events if e["type"] == "allocation.granted"]
    assert [
        (g["allocation_id"], g["gpus"], g.get("node"), g.get("nodes"), g["pods"]) for g in grants
    ] == [
        ("pytorch-tas-wl/master", 8, "kwok-node-10", None, 1),
        ("pytorch-tas-wl/worker", 24, None, ["kwok-node-10", "kwok-node-11", "kwok-node-8"], 3),
    ]
    assert sum(g["gpus"] for g in grants) == 32 and sum(g["pods"] for g in grants) == 4
    assert {n for g in grants for n in g.get("nodes") or [g["node"]]} == {
        "kwok-node-10",
        "kwok-node-11",
        "kwok-node-8",
    }
    starts = [e for e in events if e["type"] == "job.started"]
    assert [(s["data"]["job_id"], s["data"]["attempt"], s["time"]) for s in starts] == [
        ("pytorch-tas", 1, "2024-12-25T10:00:00Z"),
        ("pytorch-tas", 1, "2024-12-25T10:00:00Z"),
    ]


def test_kueue_6035_rayjob_never_admitted_grants_nothing_and_its_eviction_is_kept() -> None:
    # Facts: QuotaReserved True 18:39:58Z, admission check Pending, no Admitted condition; Evicted
    # True
    # DeactivatedDueToAdmissionCheck 18:41:13Z; one GPU pod set (ray-worker-a10-2, count 900, "900"
    # GPUs),
    # head and submitter without GPUs; no node names. The 900 GPUs were never granted.
    body = _named_workload(_status_of(RAY_6035), "ray-a10", None)
    events = workload_events(body)
    assert [
        (e["type"], e["data"].get("decision"), e["data"]["allocation_id"], e["time"])
        for e in events
    ] == [
        ("policy.decision", "evicted", "ray-a10-wl", "2025-07-16T18:41:13Z"),
        ("allocation.released", None, "ray-a10-wl", "2025-07-16T18:41:13Z"),
    ]
    assert events[0]["data"]["reason"] == "DeactivatedDueToAdmissionCheck"
