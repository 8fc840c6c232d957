"""The kueue ingestor: the samples, and every rule of ingest/kueue.py's mapping."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from click.testing import CliRunner

from cli import main
from ingest import extract, ingestor_for
from ingest.kueue import workload_events
from schemas import Accepted, Rejected
from tests.conftest import ROOT

SAMPLES = ROOT / "fixtures" / "samples"
T0, T1, T2 = "2026-01-05T10:00:00Z", "2026-01-05T11:00:00Z", "2026-01-05T12:00:00Z"
UID = "0d6f1c3e-2a4b-4c5d-8e6f-7a8b9c0d1e2f"


def condition(
    type_: str, status: str, reason: str, at: str = T0, message: str = "m"
) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "lastTransitionTime": at,
        "message": message,
        "observedGeneration": 1,
    }


def workload(
    *conditions: dict[str, Any],
    usage: dict[str, Any] | None = None,
    version: str = "v1beta2",
    **status: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "Workload",
        "metadata": {
            "name": "job-train-a1b2c",
            "namespace": "team-a",
            "uid": UID,
            "resourceVersion": "100",
            "labels": {"cost-center": "cc-1"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j"}
            ],
        },
        "spec": {"queueName": "lq-a", "priority": 100, "podSets": [{"name": "main", "count": 1}]},
        "status": {"conditions": list(conditions), **status},
    }
    if usage is not None:
        body["status"]["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 1,
                    "flavors": {"nvidia.com/gpu": "a100"},
                    "resourceUsage": usage,
                }
            ],
        }
    return body


def write(tmp_path: Path, *objects: dict[str, Any], name: str = "wl.json") -> Path:
    path = tmp_path / name
    if name.endswith(".yaml"):
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    else:
        path.write_bytes(
            orjson.dumps(
                {"apiVersion": "v1", "kind": "List", "items": list(objects)},
                option=orjson.OPT_INDENT_2,
            )
        )
    return path


def records(path: Path, **options: str) -> list[Accepted | Rejected]:
    return list(extract(path, "kueue", **options))


def accepted(path: Path, **options: str) -> list[dict[str, Any]]:
    found = records(path, **options)
    assert not [r for r in found if isinstance(r, Rejected)], found
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str | None, str | None]]:
    """(type, decision or reason, condition) of each event, in order."""
    return [
        (e["type"], e["data"].get("decision", e["data"].get("reason")), e["data"].get("condition"))
        for e in events
    ]


def one_pod_set(body: dict[str, Any]) -> dict[str, Any]:
    assignment: dict[str, Any] = body["status"]["admission"]["podSetAssignments"][0]
    return assignment


# --- the decision table, row by row ------------------------------------------------------

ADMITTED = condition("Admitted", "True", "Admitted")
RESERVED = condition("QuotaReserved", "True", "QuotaReserved")

DECISION_TABLE: dict[
    str, tuple[list[dict[str, Any]], list[tuple[str, str | None, str | None]]]
] = {
    "Admitted: decision and grant": (
        [RESERVED, ADMITTED],
        [("policy.decision", "admitted", "Admitted"), ("allocation.granted", None, None)],
    ),
    "QuotaReserved with no Admitted condition (Kueue before v0.5) stands in for Admitted": (
        [RESERVED],
        [("policy.decision", "admitted", "QuotaReserved"), ("allocation.granted", None, None)],
    ),
    "QuotaReserved while admission checks are pending: nothing granted yet": (
        [RESERVED, condition("Admitted", "False", "UnsatisfiedChecks")],
        [],
    ),
    "Evicted Preempted": (
        [condition("Evicted", "True", "Preempted")],
        [
            ("policy.decision", "preempted", "Evicted"),
            ("allocation.released", "Preempted", "Evicted"),
        ],
    ),
    "Evicted InClusterQueue": (
        [condition("Evicted", "True", "InClusterQueue")],
        [
            ("policy.decision", "preempted", "Evicted"),
            ("allocation.released", "InClusterQueue", "Evicted"),
        ],
    ),
    "Evicted InCohortFairSharing": (
        [condition("Evicted", "True", "InCohortFairSharing")],
        [
            ("policy.decision", "preempted", "Evicted"),
            ("allocation.released", "InCohortFairSharing", "Evicted"),
        ],
    ),
    "Evicted InCohortReclamation": (
        [condition("Evicted", "True", "InCohortReclamation")],
        [
            ("policy.decision", "reclaimed", "Evicted"),
            ("allocation.released", "InCohortReclamation", "Evicted"),
        ],
    ),
    "Evicted InCohortReclaimWhileBorrowing": (
        [condition("Evicted", "True", "InCohortReclaimWhileBorrowing")],
        [
            ("policy.decision", "reclaimed", "Evicted"),
            ("allocation.released", "InCohortReclaimWhileBorrowing", "Evicted"),
        ],
    ),
    "Evicted PodsReadyTimeout": (
        [condition("Evicted", "True", "PodsReadyTimeout")],
        [
            ("policy.decision", "evicted", "Evicted"),
            ("allocation.released", "PodsReadyTimeout", "Evicted"),
        ],
    ),
    "Evicted AdmissionCheck": (
        [condition("Evicted", "True", "AdmissionCheck")],
        [
            ("policy.decision", "evicted", "Evicted"),
            ("allocation.released", "AdmissionCheck", "Evicted"),
        ],
    ),
    "Evicted ClusterQueueStopped": (
        [condition("Evicted", "True", "ClusterQueueStopped")],
        [
            ("policy.decision", "evicted", "Evicted"),
            ("allocation.released", "ClusterQueueStopped", "Evicted"),
        ],
    ),
    "Preempted InClusterQueue: no release": (
        [condition("Preempted", "True", "InClusterQueue")],
        [("policy.decision", "preempted", "Preempted")],
    ),
    "Preempted InCohortFairSharing": (
        [condition("Preempted", "True", "InCohortFairSharing")],
        [("policy.decision", "preempted", "Preempted")],
    ),
    "Preempted InCohortReclamation": (
        [condition("Preempted", "True", "InCohortReclamation")],
        [("policy.decision", "reclaimed", "Preempted")],
    ),
    "Preempted InCohortReclaimWhileBorrowing": (
        [condition("Preempted", "True", "InCohortReclaimWhileBorrowing")],
        [("policy.decision", "reclaimed", "Preempted")],
    ),
    "Evicted and Preempted: two decisions, one release": (
        [
            condition("Evicted", "True", "Preempted"),
            condition("Preempted", "True", "InCohortReclamation"),
        ],
        [
            ("policy.decision", "preempted", "Evicted"),
            ("allocation.released", "Preempted", "Evicted"),
            ("policy.decision", "reclaimed", "Preempted"),
        ],
    ),
    "Requeued": (
        [condition("Requeued", "True", "BackoffFinished")],
        [("policy.decision", "queued", "Requeued")],
    ),
    "Finished: a release, no decision": (
        [condition("Finished", "True", "Succeeded")],
        [("allocation.released", "Succeeded", "Finished")],
    ),
    "QuotaReserved False Pending": (
        [condition("QuotaReserved", "False", "Pending")],
        [("policy.decision", "queued", "QuotaReserved")],
    ),
    "False for another reason says nothing": (
        [
            condition("QuotaReserved", "False", "Preempted"),
            condition("Requeued", "False", "PodsReadyTimeout"),
            condition("Admitted", "False", "NoReservation"),
        ],
        [],
    ),
    "Unknown and other condition types say nothing": (
        [
            condition("Admitted", "Unknown", "Pending"),
            condition("PodsReady", "True", "PodsReady"),
            condition("DeactivationTarget", "True", "MaximumExecutionTimeExceeded"),
        ],
        [],
    ),
}


@pytest.mark.parametrize("name", list(DECISION_TABLE), ids=list(DECISION_TABLE))
def test_decision_table(tmp_path: Path, name: str) -> None:
    conditions, expected = DECISION_TABLE[name]
    events = accepted(write(tmp_path, workload(*conditions, usage={"nvidia.com/gpu": "8"})))
    assert summary(events) == expected


DEACTIVATIONS = {
    "Evicted Deactivated (spec.active: false)": "Deactivated",
    "Evicted InactiveWorkload (Kueue before v0.9)": "InactiveWorkload",
    "Evicted DeactivatedDueToMaximumExecutionTimeExceeded (the owner's own limit)": (
        "DeactivatedDueToMaximumExecutionTimeExceeded"
    ),
}


@pytest.mark.parametrize("reason", list(DEACTIVATIONS.values()), ids=list(DEACTIVATIONS))
def test_deactivation_is_the_owners_act_not_an_eviction(reason: str) -> None:
    body = workload(condition("Evicted", "True", reason), usage={"nvidia.com/gpu": "8"})
    body["spec"]["active"] = False
    assert summary(workload_events(body)) == [
        ("policy.decision", "deactivated", "Evicted"),
        ("allocation.released", reason, "Evicted"),
    ]


@pytest.mark.parametrize(
    "reason", ["DeactivatedDueToAdmissionCheck", "DeactivatedDueToRequeuingLimitExceeded"]
)
def test_kueues_own_deactivation_for_a_cause_stays_an_eviction(reason: str) -> None:
    body = workload(condition("Evicted", "True", reason), usage={"nvidia.com/gpu": "8"})
    body["spec"]["active"] = False
    assert summary(workload_events(body)) == [
        ("policy.decision", "evicted", "Evicted"),
        ("allocation.released", reason, "Evicted"),
    ]


def test_an_eviction_at_or_after_finishing_is_no_eviction() -> None:
    after = workload(
        condition("Finished", "True", "Succeeded", at=T1),
        condition("Evicted", "True", "PodsReadyTimeout", at=T1),
    )
    before = workload(
        condition("Evicted", "True", "Preempted", at=T0),
        condition("Finished", "True", "Succeeded", at=T1),
    )
    assert summary(workload_events(after)) == [("allocation.released", "Succeeded", "Finished")]
    assert summary(workload_events(before)) == [
        ("policy.decision", "preempted", "Evicted"),
        ("allocation.released", "Preempted", "Evicted"),
        ("allocation.released", "Succeeded", "Finished"),
    ]


def test_decision_data_and_ids(tmp_path: Path) -> None:
    body = workload(
        RESERVED,
        condition("Admitted", "True", "Admitted", at="2026-01-05T11:00:00+01:00"),
        usage={"cpu": "8", "nvidia.com/gpu": "4"},
    )
    decision, grant = accepted(write(tmp_path, body), cluster="east")
    key = f"team-a/job-train-a1b2c/{UID}:Admitted:True:Admitted:2026-01-05T10:00:00Z"
    assert (decision["id"], grant["id"]) == (key, key + ":granted")
    assert decision["source"] == grant["source"] == "kueue://east"
    assert decision["time"] == grant["time"] == "2026-01-05T10:00:00Z"  # +01:00 taken to UTC
    assert decision["data"] == {
        "tenant": "team-a",
        "decision": "admitted",
        "job_id": "train",
        "allocation_id": "job-train-a1b2c",
        "reason": "Admitted",
        "queue": "lq-a",
        "priority": 100,
        "condition": "Admitted",
    }
    assert grant["data"] == {
        "tenant": "team-a",
        "allocation_id": "job-train-a1b2c",
        "gpus": 4,
        "placement_class": "whole",
        "cluster_queue": "cq",
        "flavors": ["a100"],
        "pod_sets": body["status"]["admission"]["podSetAssignments"],
    }


def test_conditions_we_do_not_use_are_not_read(tmp_path: Path) -> None:
    unused = [
        {"type": "PodsReady", "status": "True", "reason": "PodsReady"},
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "lastTransitionTime": "not yet",
        },
    ]
    events = accepted(write(tmp_path, workload(*unused, ADMITTED)))
    assert summary(events) == [("policy.decision", "admitted", "Admitted")]


def test_default_cluster_job_without_owner_and_no_priority(tmp_path: Path) -> None:
    body = workload(condition("Requeued", "True", "Reactivated"))
    del body["metadata"]["ownerReferences"], body["spec"]["priority"]
    (event,) = accepted(write(tmp_path, body))
    assert event["source"] == "kueue://default"
    assert event["data"]["job_id"] == "job-train-a1b2c" and "priority" not in event["data"]


def test_tenant_field_takes_a_label_and_falls_back_to_the_namespace(tmp_path: Path) -> None:
    labelled = workload(condition("Requeued", "True", "Reactivated"))
    unlabelled = copy.deepcopy(labelled)
    del unlabelled["metadata"]["labels"]
    unlabelled["metadata"]["uid"] = "other"
    events = accepted(write(tmp_path, labelled, unlabelled), tenant_field="cost-center")
    assert [e["data"]["tenant"] for e in events] == ["cc-1", "team-a"]


# --- the grant -----------------------------------------------------------------------------


def test_gpus_are_summed_over_pod_sets(tmp_path: Path) -> None:
    body = workload(ADMITTED, usage={"nvidia.com/gpu": "8"})
    pod_sets = body["status"]["admission"]["podSetAssignments"]
    pod_sets.append(
        {
            "name": "workers",
            "count": 3,
            "resourceUsage": {"nvidia.com/gpu": 6, "cpu": "12"},
            "flavors": {"nvidia.com/gpu": "h100"},
        }
    )
    grant = accepted(write(tmp_path, body))[1]
    assert (grant["data"]["gpus"], grant["data"]["flavors"]) == (14, ["a100", "h100"])


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {"nvidia.com/mig-1g.10gb": "3"},
            {"gpus": 3, "placement_class": "mig", "profile": "1g.10gb"},
        ),
        ({"nvidia.com/gpu.shared": "2"}, {"gpus": 2, "placement_class": "timeslice"}),
        (
            {"nvidia.com/gpu": "1", "nvidia.com/mig-2g.20gb": "2"},
            {"gpus": 3, "placement_class": "whole", "gpus_by_class": {"whole": 1, "mig": 2}},
        ),
        (
            {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-3g.40gb": "1"},
            {"gpus": 2, "placement_class": "mig", "profiles": ["1g.10gb", "3g.40gb"]},
        ),
    ],
    ids=["mig", "timeslice", "whole and mig", "two mig profiles"],
)
def test_placement_classes(
    tmp_path: Path, usage: dict[str, Any], expected: dict[str, Any]
) -> None:
    grant = accepted(write(tmp_path, workload(ADMITTED, usage=usage)))[1]["data"]
    kept = {
        k: grant[k]
        for k in ("gpus", "placement_class", "profile", "profiles", "gpus_by_class")
        if k in grant
    }
    assert kept == expected


def test_admission_without_gpus_gives_the_decision_only(tmp_path: Path) -> None:
    events = accepted(write(tmp_path, workload(ADMITTED, usage={"cpu": "4", "memory": "8Gi"})))
    assert summary(events) == [("policy.decision", "admitted", "Admitted")]
    assert summary(accepted(write(tmp_path, workload(ADMITTED)))) == [
        ("policy.decision", "admitted", "Admitted")
    ]


def with_topology(topology: dict[str, Any]) -> dict[str, Any]:
    body = workload(ADMITTED, usage={"nvidia.com/gpu": "8"})
    one_pod_set(body)["topologyAssignment"] = topology
    return body


@pytest.mark.parametrize(
    ("topology", "node", "nodes"),
    [
        (
            {"levels": ["kubernetes.io/hostname"], "domains": [{"values": ["gpu-7"], "count": 2}]},
            "gpu-7",
            None,
        ),
        (
            {
                "levels": ["cloud.example.com/block", "kubernetes.io/hostname"],
                "domains": [
                    {"values": ["b1", "gpu-7"], "count": 1},
                    {"values": ["b1", "gpu-8"], "count": 1},
                ],
            },
            None,
            ["gpu-7", "gpu-8"],
        ),
        (
            {
                "levels": ["kubernetes.io/hostname"],
                "slices": [
                    {
                        "domainCount": 2,
                        "universalPodCount": 1,
                        "valuesPerLevel": [
                            {"prefix": "gpu-", "suffix": ".dc1", "roots": ["2", "1"]}
                        ],
                    }
                ],
            },
            None,
            ["gpu-1.dc1", "gpu-2.dc1"],
        ),
        (
            {
                "levels": ["kubernetes.io/hostname"],
                "slices": [
                    {
                        "domainCount": 1,
                        "podCounts": [2],
                        "valuesPerLevel": [{"universalValue": "gpu-9"}],
                    }
                ],
            },
            "gpu-9",
            None,
        ),
        (
            {
                "levels": ["kubernetes.io/hostname"],
                "slices": [
                    {
                        "domainCount": 1,
                        "podCounts": {"universal": 2},
                        "valuesPerLevel": [
                            {"individual": {"commonPrefix": "gpu-", "roots": ["3"]}}
                        ],
                    }
                ],
            },
            "gpu-3",
            None,
        ),
        (
            {"levels": ["cloud.example.com/rack"], "domains": [{"values": ["r1"], "count": 2}]},
            None,
            None,
        ),
    ],
    ids=[
        "v1beta1 one node",
        "v1beta1 two nodes",
        "v1beta2 prefix roots suffix",
        "v1beta2 universalValue",
        "v1beta2 individual",
        "no hostname level",
    ],
)
def test_node_from_topology_assignment(
    tmp_path: Path, topology: dict[str, Any], node: str | None, nodes: list[str] | None
) -> None:
    grant = accepted(write(tmp_path, with_topology(topology)))[1]["data"]
    assert (grant.get("node"), grant.get("nodes")) == (node, nodes)


@pytest.mark.parametrize(
    ("quantity", "reason"),
    [
        ("8k", "nvidia.com/gpu = '8k': not a whole number of GPUs"),
        ("1.5", "nvidia.com/gpu = '1.5': not a whole number of GPUs"),
        ("-2", "nvidia.com/gpu = '-2': a negative GPU count"),
        (-2, "nvidia.com/gpu = -2: a negative GPU count"),
        (True, "nvidia.com/gpu = True: not a whole number of GPUs"),
    ],
)
def test_bad_gpu_quantities_are_rejected(tmp_path: Path, quantity: Any, reason: str) -> None:
    (found,) = records(write(tmp_path, workload(ADMITTED, usage={"nvidia.com/gpu": quantity})))
    assert isinstance(found, Rejected)
    assert (found.field, found.reason) == (
        "status.admission.podSetAssignments[0].resourceUsage",
        reason,
    )


def test_a_gpu_quantity_beyond_the_schema_quarantines_the_whole_workload(tmp_path: Path) -> None:
    body = workload(
        ADMITTED,
        condition("Finished", "True", "Succeeded", at=T1),
        usage={"nvidia.com/gpu": str(2**60)},
    )
    (found,) = records(write(tmp_path, body))
    assert isinstance(found, Rejected) and found.field == "data.gpus"


# --- accumulated execution time ------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling", ["accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds"]
)
def test_accumulated_time_rides_on_the_finished_release(tmp_path: Path, spelling: str) -> None:
    body = workload(
        ADMITTED, condition("Finished", "True", "Failed", at=T1), usage={"nvidia.com/gpu": "1"}
    )
    body["status"][spelling] = 900
    events = accepted(write(tmp_path, body))
    assert [e["data"].get("accumulated_past_execution_time_s") for e in events] == [
        None,
        None,
        900,
    ]


def test_accumulated_time_is_not_on_an_eviction_where_it_may_still_change(tmp_path: Path) -> None:
    body = workload(
        condition("Evicted", "True", "Preempted"), accumulatedPastExecutionTimeSeconds=900
    )
    assert all(
        "accumulated_past_execution_time_s" not in e["data"]
        for e in accepted(write(tmp_path, body))
    )


# --- re-reading ------------------------------------------------------------------------------


def ingest(db: str, path: Path) -> str:
    result = CliRunner().invoke(main, ["ingest", "--db", db, "--format", "kueue", str(path)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_later_snapshot_appends_only_its_new_transitions(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    first = workload(RESERVED, ADMITTED, usage={"nvidia.com/gpu": "8"})
    later = copy.deepcopy(first)
    later["metadata"]["resourceVersion"] = "250"
    for c in later["status"]["conditions"]:
        c["message"] = "a message reworded by a later Kueue"
    later["status"]["conditions"].append(condition("Finished", "True", "Succeeded", at=T2))
    later["status"]["accumulatedPastExecutionTimeSeconds"] = 0
    assert ingest(db, write(tmp_path, first, name="a.json")).endswith(
        "appended 2 · duplicate 0 · quarantined 0\n"
    )
    assert ingest(db, write(tmp_path, later, name="b.yaml")).endswith(
        "appended 1 · duplicate 2 · quarantined 0\n"
    )


@pytest.mark.parametrize("sample", ["kueue_workloads.json", "kueue_workloads.yaml"])
def test_reingesting_a_sample_appends_nothing(tmp_path: Path, sample: str) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    first, again = ingest(db, SAMPLES / sample), ingest(db, SAMPLES / sample)
    appended = int(first.split("appended ")[1].split(" ")[0])
    assert appended > 0 and again.endswith(f"appended 0 · duplicate {appended} · quarantined 0\n")


# --- the samples -----------------------------------------------------------------------------


def by_workload(
    events: list[dict[str, Any]],
) -> dict[str, list[tuple[str, str | None, str | None]]]:
    out: dict[str, list[tuple[str, str | None, str | None]]] = {}
    for event in events:
        out.setdefault(event["data"]["allocation_id"], []).extend(summary([event]))
    return out


def test_json_sample(tmp_path: Path) -> None:
    # Read off the sample by hand: six v1beta1 Workloads in a kubectl List.
    dec, grant, rel = "policy.decision", "allocation.granted", "allocation.released"
    assert by_workload(accepted(SAMPLES / "kueue_workloads.json")) == {
        "job-llm-pretrain-7b-5d2c1": [(dec, "admitted", "Admitted"), (grant, None, None)],
        "job-resnet-finetune-mig-9c4e7": [
            (dec, "admitted", "Admitted"),
            (grant, None, None),
            (rel, "Succeeded", "Finished"),
        ],
        "jobset-sweep-lr-3e8a0": [
            (dec, "preempted", "Evicted"),
            (rel, "Preempted", "Evicted"),
            (dec, "reclaimed", "Preempted"),
            (dec, "queued", "Requeued"),
        ],
        "job-tokenizer-eval-1a9f3": [(dec, "queued", "QuotaReserved")],
        "job-rl-rollout-77b2d": [
            (dec, "evicted", "Evicted"),
            (rel, "PodsReadyTimeout", "Evicted"),
        ],
        # pod-embed-server-0-4c1b8: quota reserved, its admission check dws-prov still Pending:
        # nothing granted yet
    }


def test_json_sample_grants(tmp_path: Path) -> None:
    grants = {
        e["data"]["allocation_id"]: e["data"]
        for e in accepted(SAMPLES / "kueue_workloads.json")
        if e["type"] == "allocation.granted"
    }
    assert {
        k: (g["gpus"], g["placement_class"], g.get("profile"), g.get("node"))
        for k, g in grants.items()
    } == {
        "job-llm-pretrain-7b-5d2c1": (8, "whole", None, "gpu-node-07"),
        "job-resnet-finetune-mig-9c4e7": (2, "mig", "1g.10gb", None),
    }
    released = [
        e
        for e in accepted(SAMPLES / "kueue_workloads.json")
        if e["data"].get("condition") == "Finished"
    ]
    assert [e["data"]["accumulated_past_execution_time_s"] for e in released] == [
        1800
    ]  # the v1beta1 spelling


def test_yaml_sample(tmp_path: Path) -> None:
    # Four YAML documents, the third a List of three: seven v1beta2 Workloads in all.
    dec, grant, rel = "policy.decision", "allocation.granted", "allocation.released"
    events = accepted(SAMPLES / "kueue_workloads.yaml")
    assert by_workload(events) == {
        "jobset-llama-sft-workers-6f1e2": [(dec, "admitted", "Admitted"), (grant, None, None)],
        "job-detr-train-2b7c4": [
            (dec, "queued", "QuotaReserved"),
            (dec, "preempted", "Evicted"),
            (rel, "Preempted", "Evicted"),
            (dec, "preempted", "Preempted"),
            (dec, "queued", "Requeued"),
        ],
        "job-risk-montecarlo-8d3f1": [
            (dec, "admitted", "Admitted"),
            (grant, None, None),
            (dec, "preempted", "Evicted"),
            (rel, "Preempted", "Evicted"),
            (dec, "reclaimed", "Preempted"),
        ],
        "job-fraud-embed-4e9a2": [
            (dec, "deactivated", "Evicted"),
            (rel, "Deactivated", "Evicted"),
        ],
        "job-ocr-batch-1f5d6": [
            (dec, "admitted", "Admitted"),
            (grant, None, None),
            (rel, "Failed", "Finished"),
        ],
        "job-asr-distill-5c8b3": [
            (dec, "preempted", "Evicted"),
            (rel, "Preempted", "Evicted"),
            (dec, "preempted", "Preempted"),
        ],
    }
    grants = {e["data"]["allocation_id"]: e["data"] for e in events if e["type"] == grant}
    assert grants["jobset-llama-sft-workers-6f1e2"]["nodes"] == ["gpu-node-11", "gpu-node-12"]
    assert grants["jobset-llama-sft-workers-6f1e2"]["gpus"] == 16
    assert grants["job-risk-montecarlo-8d3f1"]["node"] == "gpu-node-14"
    tenants = {
        e["data"]["allocation_id"]: e["data"]["tenant"]
        for e in accepted(SAMPLES / "kueue_workloads.yaml", tenant_field="cost-center")
    }
    assert (
        tenants["job-risk-montecarlo-8d3f1"] == "cc-5120"
        and tenants["job-ocr-batch-1f5d6"] == "team-vision"
    )


def test_sample_lines_are_each_workloads_first_line() -> None:
    lines = {r.origin.line for r in records(SAMPLES / "kueue_workloads.yaml")}
    text = (SAMPLES / "kueue_workloads.yaml").read_text().splitlines()
    assert all(text[n - 1].lstrip("- ").startswith("apiVersion: kueue.x-k8s.io/") for n in lines)
    assert len(lines) == 6


# --- shapes and errors ----------------------------------------------------------------------


def test_every_json_shape(tmp_path: Path) -> None:
    body = workload(condition("Requeued", "True", "Reactivated"))
    single = orjson.dumps(body)
    shapes = {
        "object": single,
        "array": b"[" + single + b"]",
        "WorkloadList": orjson.dumps(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "items": [body]}
        ),
        "watch stream": single + b"\n" + single.replace(UID.encode(), b"u2") + b"\n",
    }
    for name, data in shapes.items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(data)
        assert len(accepted(path)) == (2 if name == "watch stream" else 1), name


def test_yaml_aliases_and_unquoted_times(tmp_path: Path) -> None:
    path = tmp_path / "wl.yaml"
    text = yaml.safe_dump(workload(condition("Requeued", "True", "Reactivated")), sort_keys=False)
    text = text.replace(
        "lastTransitionTime: '2026-01-05T10:00:00Z'", "lastTransitionTime: 2026-01-05T10:00:00Z"
    )
    text = text.replace("queueName: lq-a", "queueName: &q lq-a").replace("name: main", "name: *q")
    path.write_text(text)
    (event,) = accepted(path)
    assert event["time"] == T0


def test_yaml_directives_comments_and_end_markers(tmp_path: Path) -> None:
    document = yaml.safe_dump(
        workload(condition("Requeued", "True", "Reactivated")), sort_keys=False
    )
    path = tmp_path / "wl.yaml"
    path.write_text(
        "%YAML 1.1\n# two snapshots\n---\n" + document + "...\n---\n" + document.replace(UID, "u2")
    )
    found = records(path)
    assert [(type(r).__name__, r.origin.line) for r in found] == [
        ("Accepted", 4),
        ("Accepted", 4 + len(document.splitlines()) + 2),
    ]


def test_errors_name_the_yaml_line_of_the_field(tmp_path: Path) -> None:
    good = workload(condition("Requeued", "True", "Reactivated"))
    bad = workload(
        condition("Admitted", "True", "Admitted"),
        condition("Finished", "True", "Succeeded", at="2026-13-01T00:00:00Z"),
    )
    path = write(tmp_path, good, bad, name="wl.yaml")
    found = records(path)
    rejected = [r for r in found if isinstance(r, Rejected)]
    (rej,) = rejected
    line = path.read_text().splitlines()[rej.origin.line - 1]
    assert line.strip() == "lastTransitionTime: '2026-13-01T00:00:00Z'"
    assert (rej.field, rej.reason) == (
        "status.conditions[1].lastTransitionTime",
        "not an RFC 3339 time: '2026-13-01T00:00:00Z'",
    )
    assert str(rej).startswith(
        f"{path}:{rej.origin.line}: status.conditions[1].lastTransitionTime: "
    )


def test_errors_name_the_json_line_of_the_object(tmp_path: Path) -> None:
    bad = workload(condition("Requeued", "True", "Reactivated"))
    bad["spec"]["priority"] = "high"
    path = write(tmp_path, workload(), bad)
    (rej,) = [r for r in records(path) if isinstance(r, Rejected)]
    assert (rej.field, rej.reason) == ("spec.priority", "expected an integer, found string 'high'")
    assert path.read_text().splitlines()[rej.origin.line - 1].strip() == "{"
    assert rej.origin.line > 3  # the second item, not the list


def test_objects_that_are_not_workloads_are_rejected(tmp_path: Path) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "n"}}
    other_group = dict(workload(), apiVersion="example.com/v1")
    found = records(write(tmp_path, job, other_group))
    assert [(r.field, r.reason) for r in found if isinstance(r, Rejected)] == [
        ("kind", "not a Kueue Workload: 'Job'"),
        ("apiVersion", "not a Kueue API version: 'example.com/v1'"),
    ]


# --- identify ----------------------------------------------------------------------------


def test_identify_claims_workloads_and_nothing_else() -> None:
    assert ingestor_for(SAMPLES / "kueue_workloads.json").name == "kueue"
    assert ingestor_for(SAMPLES / "kueue_workloads.yaml").name == "kueue"
    assert (
        ingestor_for(SAMPLES / "k8s_events.json").name == "k8s-events"
    )  # names Workloads, but holds Events
    assert ingestor_for(SAMPLES / "events.jsonl").name == "cloudevents"
    assert ingestor_for(SAMPLES / "events_batch.json").name == "cloudevents"


def test_cli_ingest_and_export(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    out = ingest(db, SAMPLES / "kueue_workloads.yaml")
    assert out.endswith("appended 20 · duplicate 0 · quarantined 0\n")
    exported = CliRunner().invoke(main, ["export", "--db", db, "--type", "allocation.granted"])
    assert exported.exit_code == 0
    assert sorted(
        orjson.loads(line)["event"]["data"]["gpus"] for line in exported.stdout.splitlines()
    ) == [2, 4, 16]


def test_workload_list_items_without_kind_take_the_lists(tmp_path: Path) -> None:
    bare = {
        k: v
        for k, v in workload(condition("Requeued", "True", "Reactivated")).items()
        if k not in ("kind", "apiVersion")
    }
    path = tmp_path / "wl.json"
    path.write_text(
        json.dumps(
            {
                "kind": "WorkloadList",
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "metadata": {},
                "items": [bare],
            },
            indent=2,
        )
    )
    (event,) = accepted(path)
    assert event["data"]["decision"] == "queued"


def test_tenant_option_only_for_a_workload_with_no_namespace() -> None:
    named = workload(condition("Requeued", "True", "Reactivated"))
    unnamed = copy.deepcopy(named)
    del unnamed["metadata"]["namespace"]
    assert workload_events(named, default_tenant="acme")[0]["data"]["tenant"] == "team-a"
    assert workload_events(unnamed, default_tenant="acme")[0]["data"]["tenant"] == "acme"
