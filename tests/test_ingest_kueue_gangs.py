"""Multi-pod Kueue Workloads read as a gang (ingest/kueue.py, docs/ingest-kubernetes-cloudevents.md
§3): one allocation per pod set that holds GPUs, all started at the admission as attempt 1.
Expected events are worked out by hand from those rules."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner

from cli import main
from ingest.kueue import gang_pod_sets, workload_events
from tests.test_ingest_kueue import UID, accepted, condition, write

ADMITTED_AT, FINISHED_AT = "2026-01-05T10:00:00Z", "2026-01-05T12:00:00Z"
KEY = f"team-a/pytorchjob-llama-5d2c1/{UID}"


def template(gpus: int) -> dict[str, Any]:
    resources = {
        "requests": {"cpu": "8", "nvidia.com/gpu": str(gpus)},
        "limits": {"nvidia.com/gpu": str(gpus)},
    }
    return {
        "spec": {
            "containers": [
                {"name": "main", "image": "trainer:1", "resources": resources if gpus else {}}
            ]
        }
    }


def assignment(name: str, count: int, gpus: int, nodes: list[str] | None = None) -> dict[str, Any]:
    usage = {"cpu": str(8 * count)} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    out: dict[str, Any] = {
        "name": name,
        "count": count,
        "flavors": {"nvidia.com/gpu": "h100"},
        "resourceUsage": usage,
    }
    if nodes:  # v1beta1 TAS: one domain per node, one pod each
        out["topologyAssignment"] = {
            "levels": ["kubernetes.io/hostname"],
            "domains": [{"count": 1, "values": [n]} for n in nodes],
        }
    return out


def pytorchjob(*conditions: dict[str, Any], admitted: bool = True) -> dict[str, Any]:
    """A PyTorchJob's Workload: Master 1 pod and Worker 3 pods, 8 GPUs each (as in kueue issue
    #3887).
    """
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": "pytorchjob-llama-5d2c1",
            "namespace": "team-a",
            "uid": UID,
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama"}
            ],
        },
        "spec": {
            "queueName": "lq-a",
            "podSets": [
                {"name": "master", "count": 1, "template": template(8)},
                {"name": "worker", "count": 3, "template": template(8)},
            ],
        },
        "status": {"conditions": list(conditions)},
    }
    if admitted:
        body["status"]["admission"] = {
            "clusterQueue": "tas-cq",
            "podSetAssignments": [
                assignment("master", 1, 8, ["kwok-node-10"]),
                assignment("worker", 3, 24, ["kwok-node-10", "kwok-node-11", "kwok-node-8"]),
            ],
        }
    return body


ADMITTED = condition("Admitted", "True", "Admitted", ADMITTED_AT)
RESERVED = condition("QuotaReserved", "True", "QuotaReserved", ADMITTED_AT)
FINISHED = condition("Finished", "True", "Succeeded", FINISHED_AT)


def test_an_admitted_pytorchjob_is_one_allocation_per_pod_set_started_as_one_attempt() -> None:
    events = workload_events(pytorchjob(RESERVED, ADMITTED))
    admitted = f"{KEY}:Admitted:True:Admitted:{ADMITTED_AT}"
    assert [(e["type"], e["id"]) for e in events] == [
        ("policy.decision", admitted),
        ("allocation.granted", f"{admitted}:granted:master"),
        ("allocation.granted", f"{admitted}:granted:worker"),
        ("job.started", f"{admitted}:started:master"),
        ("job.started", f"{admitted}:started:worker"),
    ]
    master, worker = (e["data"] for e in events[1:3])
    assert (master["allocation_id"], master["gpus"], master["node"], master["pods"]) == (
        "pytorchjob-llama-5d2c1/master",
        8,
        "kwok-node-10",
        1,
    )
    assert (worker["allocation_id"], worker["gpus"], worker["nodes"], worker["pods"]) == (
        "pytorchjob-llama-5d2c1/worker",
        24,
        ["kwok-node-10", "kwok-node-11", "kwok-node-8"],
        3,
    )
    assert "node" not in worker and {master["workload"], worker["workload"]} == {
        "pytorchjob-llama-5d2c1"
    }
    members = ["pytorchjob-llama-5d2c1/master", "pytorchjob-llama-5d2c1/worker"]
    for start, member in zip(events[3:], members, strict=True):
        # one job (the owner), one attempt number, one instant: the admission's
        assert start["time"] == ADMITTED_AT
        assert start["data"] == {
            "tenant": "team-a",
            "job_id": "llama",
            "allocation_id": member,
            "attempt": 1,
            "workload": "pytorchjob-llama-5d2c1",
            "pod_set": member.rpartition("/")[2],
            "gang": members,
        }


def test_a_finished_gang_releases_each_allocation_whether_or_not_its_admission_is_shown() -> None:
    with_admission = workload_events(pytorchjob(ADMITTED, FINISHED))[-2:]
    cleared = workload_events(pytorchjob(ADMITTED, FINISHED, admitted=False))
    finished = f"{KEY}:Finished:True:Succeeded:{FINISHED_AT}"
    assert [(e["type"], e["id"], e["data"]["allocation_id"]) for e in with_admission] == [
        ("allocation.released", f"{finished}:released:master", "pytorchjob-llama-5d2c1/master"),
        ("allocation.released", f"{finished}:released:worker", "pytorchjob-llama-5d2c1/worker"),
    ]
    assert cleared[-2:] == with_admission  # the same events, so a later poll is duplicates


def test_polls_of_a_gang_append_only_what_is_new(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    polls = [
        pytorchjob(RESERVED, ADMITTED),
        pytorchjob(RESERVED, ADMITTED, FINISHED),
        pytorchjob(RESERVED, ADMITTED, FINISHED, admitted=False),
    ]
    outputs = []
    for number, body in enumerate(polls):
        path = write(tmp_path, body, name=f"poll{number}.yaml")
        result = CliRunner().invoke(main, ["ingest", "--db", db, "--format", "kueue", str(path)])
        outputs.append((result.exit_code, result.output.partition(": ")[2]))
    # poll 0: decision, 2 grants, 2 starts. Poll 1 adds the 2 releases. Poll 2 no longer shows the
    # admission
    # (so no grant or start to compare), and its releases are the same: duplicates.
    assert outputs == [
        (0, "read 5 · appended 5 · duplicate 0 · quarantined 0\n"),
        (0, "read 7 · appended 2 · duplicate 5 · quarantined 0\n"),
        (0, "read 3 · appended 0 · duplicate 3 · quarantined 0\n"),
    ]


def test_one_pod_set_with_gpus_is_one_allocation_on_its_nodes_and_no_start() -> None:
    # An MPIJob: a launcher with no GPUs and 2 workers of 8: one allocation, the Workload's name,
    # as before.
    body = pytorchjob(ADMITTED)
    body["spec"]["podSets"] = [
        {"name": "launcher", "count": 1, "template": template(0)},
        {"name": "worker", "count": 2, "template": template(8)},
    ]
    body["status"]["admission"]["podSetAssignments"] = [
        assignment("launcher", 1, 0),
        assignment("worker", 2, 16, ["gpu-node-11", "gpu-node-12"]),
    ]
    assert gang_pod_sets(body) == []
    decision, grant = workload_events(body)
    assert (
        grant["type"],
        grant["data"]["allocation_id"],
        grant["data"]["gpus"],
        grant["data"]["nodes"],
    ) == ("allocation.granted", "pytorchjob-llama-5d2c1", 16, ["gpu-node-11", "gpu-node-12"])
    assert "workload" not in grant["data"] and "pods" not in grant["data"]


def test_a_leaderworkerset_group_without_topology_is_a_gang_with_no_nodes() -> None:
    body = pytorchjob(ADMITTED)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": "vllm-70b",
        }
    ]
    body["spec"]["podSets"] = [
        {"name": "leader", "count": 1, "template": template(8)},
        {"name": "workers", "count": 1, "template": template(8)},
    ]
    body["status"]["admission"]["podSetAssignments"] = [
        assignment("leader", 1, 8),
        assignment("workers", 1, 8),
    ]
    starts = [e["data"] for e in workload_events(body) if e["type"] == "job.started"]
    assert [(s["job_id"], s["allocation_id"], s["attempt"]) for s in starts] == [
        ("vllm-70b", "pytorchjob-llama-5d2c1/leader", 1),
        ("vllm-70b", "pytorchjob-llama-5d2c1/workers", 1),
    ]
    grants = [e["data"] for e in workload_events(body) if e["type"] == "allocation.granted"]
    assert all("node" not in g and "nodes" not in g for g in grants)


def test_without_a_spec_the_admission_says_which_pod_sets_hold_gpus() -> None:
    body = pytorchjob(ADMITTED)
    del body["spec"]["podSets"]
    assert gang_pod_sets(body) == ["master", "worker"]
    body["status"]["admission"]["podSetAssignments"][0] = assignment("master", 1, 0)
    assert gang_pod_sets(body) == []


def test_quota_reserved_waiting_on_admission_checks_is_no_grant() -> None:
    # Kueue from v0.5 writes Admitted only once every admission check is Ready: until then, no
    # grant.
    waiting = pytorchjob(RESERVED)
    waiting["status"]["admissionChecks"] = [
        {"name": "capacity", "state": "Pending", "lastTransitionTime": ADMITTED_AT, "message": ""}
    ]
    assert workload_events(waiting) == []
    # a Kueue before v0.5 writes no Admitted condition and has no checks: QuotaReserved is the
    # grant
    old = pytorchjob(RESERVED)
    assert [e["type"] for e in workload_events(old)] == [
        "policy.decision",
        "allocation.granted",
        "allocation.granted",
        "job.started",
        "job.started",
    ]


def test_a_status_alone_is_quarantined_saying_what_is_missing(tmp_path: Path) -> None:
    body = {"status": copy.deepcopy(pytorchjob(ADMITTED)["status"])}
    path = tmp_path / "status.yaml"
    path.write_text(orjson.dumps(body).decode())
    result = CliRunner().invoke(
        main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--format", "kueue", str(path)]
    )
    assert result.exit_code == 1
    assert result.stderr == (
        f"{path}:1: kind: missing: a Workload's status alone (no kind, apiVersion or metadata) "
        "says nothing of which Workload it is; ingest the object whole, as "
        "`kubectl get workload NAME -o yaml` prints it\n"
    )
    assert accepted(write(tmp_path, pytorchjob(ADMITTED)))[0]["type"] == "policy.decision"
