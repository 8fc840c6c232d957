"""The k8s-events ingestor: the sample, and every rule of ingest/k8s_events.py's mapping."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from click.testing import CliRunner

from cli import main
from ingest import extract
from ingest.k8s_events import k8s_event, kebab
from schemas import Accepted, Rejected
from tests.conftest import ROOT

SAMPLE = ROOT / "fixtures" / "samples" / "k8s_events.json"


def core_event(
    kind: str,
    reason: str,
    message: str = "",
    type_: str = "Normal",
    namespace: str = "team-a",
    name: str = "obj-1",
    uid: str = "ev-1",
    version: str = "10",
    **extra: Any,
) -> dict[str, Any]:
    involved: dict[str, Any] = {"kind": kind, "name": name, "uid": "o-1"}
    if kind != "Node":
        involved["namespace"] = namespace
    if kind == "Workload":
        involved["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.1881e4c6a7b2f001",
            "namespace": "default" if kind == "Node" else namespace,
            "uid": uid,
            "resourceVersion": version,
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": type_,
        "firstTimestamp": "2026-01-05T10:00:00Z",
        "lastTimestamp": "2026-01-05T10:05:00Z",
        "count": 2,
        "eventTime": None,
        "source": {"component": "x"},
        **extra,
    }


def new_event(
    kind: str, reason: str, note: str = "", namespace: str = "team-a", name: str = "obj-1"
) -> dict[str, Any]:
    """events.k8s.io/v1: regarding, note, series, deprecated… fields."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.1881e5085c31f408",
            "namespace": namespace,
            "uid": "ev-2",
            "resourceVersion": "20",
        },
        "regarding": {"kind": kind, "name": name, "namespace": namespace, "uid": "o-2"},
        "reason": reason,
        "note": note,
        "type": "Normal",
        "action": "Scheduling",
        "eventTime": "2026-01-05T10:00:00.250000Z",
        "reportingController": "default-scheduler",
        "reportingInstance": "default-scheduler-node-a",
        "deprecatedFirstTimestamp": "2026-01-05T09:00:00Z",
        "deprecatedLastTimestamp": "2026-01-05T09:30:00Z",
        "deprecatedCount": 3,
    }


def write(tmp_path: Path, *objects: dict[str, Any], name: str = "events.json") -> Path:
    path = tmp_path / name
    if name.endswith(".yaml"):
        path.write_text(
            yaml.safe_dump({"apiVersion": "v1", "kind": "EventList", "items": list(objects)})
        )
    else:
        path.write_bytes(
            orjson.dumps(
                {"apiVersion": "v1", "kind": "List", "items": list(objects)},
                option=orjson.OPT_INDENT_2,
            )
        )
    return path


def records(path: Path, **options: Any) -> list[Accepted | Rejected]:
    return list(extract(path, "k8s-events", **options))


def accepted(path: Path, **options: Any) -> list[dict[str, Any]]:
    found = records(path, **options)
    assert not [r for r in found if isinstance(r, Rejected)], found
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def brief(event: dict[str, Any]) -> tuple[str, ...]:
    data = event["data"]
    if event["type"].startswith("health."):
        return event["type"], data["node"], data["code"], data.get("severity", "")
    return (
        event["type"],
        data["decision"],
        data.get("job_id") or data.get("allocation_id"),
        data["tenant"],
    )


# --- the mapping table, row by row ---------------------------------------------------------

MAPPING: dict[str, tuple[dict[str, Any], tuple[str, ...] | None]] = {
    "Pod Scheduled": (
        core_event("Pod", "Scheduled", "Successfully assigned team-a/obj-1 to gpu-node-4"),
        ("policy.decision", "placed", "obj-1", "team-a"),
    ),
    "Pod Preempted": (
        core_event("Pod", "Preempted", "Preempted by pod 41c0 on node gpu-node-9"),
        ("policy.decision", "preempted", "obj-1", "team-a"),
    ),
    "Pod Preempting": (
        core_event("Pod", "Preempting", "Preempted in order to admit critical pod", "Warning"),
        ("policy.decision", "preempted", "obj-1", "team-a"),
    ),
    "Pod Evicted": (
        core_event("Pod", "Evicted", "The node was low on resource: memory.", "Warning"),
        ("policy.decision", "evicted", "obj-1", "team-a"),
    ),
    "Pod Evicting": (
        core_event("Pod", "Evicting", "Evicting pod", "Warning"),
        ("policy.decision", "evicted", "obj-1", "team-a"),
    ),
    "Pod FailedScheduling": (
        core_event("Pod", "FailedScheduling", "0/3 nodes are available", "Warning"),
        ("policy.decision", "queued", "obj-1", "team-a"),
    ),
    "Workload QuotaReserved": (
        core_event("Workload", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        ("policy.decision", "admitted", "obj-1", "team-a"),
    ),
    "Workload Admitted": (
        core_event("Workload", "Admitted", "Admitted by ClusterQueue cq"),
        ("policy.decision", "admitted", "obj-1", "team-a"),
    ),
    "Workload Pending": (
        core_event("Workload", "Pending", "couldn't assign flavors"),
        ("policy.decision", "queued", "obj-1", "team-a"),
    ),
    "Workload Preempted": (
        core_event(
            "Workload",
            "Preempted",
            "Preempted to accommodate a workload due to prioritization in the ClusterQueue",
        ),
        ("policy.decision", "preempted", "obj-1", "team-a"),
    ),
    "Workload EvictedDueToPreempted": (
        core_event("Workload", "EvictedDueToPreempted", "due to Fair Sharing within the cohort"),
        ("policy.decision", "preempted", "obj-1", "team-a"),
    ),
    "Workload Preempted, reclamation wording": (
        core_event(
            "Workload",
            "Preempted",
            "Preempted to accommodate a workload (UID: u) due to reclamation within the cohort",
        ),
        ("policy.decision", "reclaimed", "obj-1", "team-a"),
    ),
    "Workload Preempted, InCohortReclamation": (
        core_event("Workload", "Preempted", "reason InCohortReclamation"),
        ("policy.decision", "reclaimed", "obj-1", "team-a"),
    ),
    "Workload EvictedDueToPreempted, InCohortReclaimWhileBorrowing": (
        core_event("Workload", "EvictedDueToPreempted", "InCohortReclaimWhileBorrowing"),
        ("policy.decision", "reclaimed", "obj-1", "team-a"),
    ),
    "Workload EvictedDueToPodsReadyTimeout": (
        core_event("Workload", "EvictedDueToPodsReadyTimeout", "Exceeded the PodsReady timeout"),
        ("policy.decision", "evicted", "obj-1", "team-a"),
    ),
    "Workload EvictedDueToDeactivatedDueToAdmissionCheck (Kueue's act)": (
        core_event(
            "Workload",
            "EvictedDueToDeactivatedDueToAdmissionCheck",
            "The workload is deactivated due to Admission check(s): check-1, were rejected",
        ),
        ("policy.decision", "evicted", "obj-1", "team-a"),
    ),
    "Workload Finished: skipped": (
        core_event("Workload", "Finished", "Job finished successfully"),
        None,
    ),
    "Job SuccessfulCreate: skipped": (
        core_event("Job", "SuccessfulCreate", "Created pod: obj-1-x"),
        None,
    ),
    "Job Suspended: skipped": (
        core_event("Job", "Suspended", "Kueue managed job suspended"),
        None,
    ),
    "Pod Pulled: skipped": (core_event("Pod", "Pulled", "Container image already present"), None),
    "Node NodeNotReady": (
        core_event(
            "Node",
            "NodeNotReady",
            "Node gpu-node-2 status is now: NodeNotReady",
            name="gpu-node-2",
        ),
        ("health.fault", "gpu-node-2", "node-down", "critical"),
    ),
    "Node NodeReady": (
        core_event(
            "Node", "NodeReady", "Node gpu-node-2 status is now: NodeReady", name="gpu-node-2"
        ),
        ("health.cleared", "gpu-node-2", "node-down", ""),
    ),
    "Node Rebooted (Warning)": (
        core_event(
            "Node", "Rebooted", "Node gpu-node-2 has been rebooted", "Warning", name="gpu-node-2"
        ),
        ("health.fault", "gpu-node-2", "rebooted", "warning"),
    ),
    "Node NodeHasDiskPressure (Warning)": (
        core_event("Node", "NodeHasDiskPressure", "disk", "Warning", name="gpu-node-2"),
        ("health.fault", "gpu-node-2", "node-has-disk-pressure", "warning"),
    ),
    "Node NodeHasDiskPressure (Normal): skipped": (
        core_event("Node", "NodeHasDiskPressure", "disk", "Normal", name="gpu-node-2"),
        None,
    ),
    "Node NodeHasSufficientMemory: skipped": (
        core_event("Node", "NodeHasSufficientMemory", "mem", name="gpu-node-2"),
        None,
    ),
    "Service event: skipped": (core_event("Service", "EnsuredLoadBalancer", "ok"), None),
}


@pytest.mark.parametrize("name", list(MAPPING), ids=list(MAPPING))
def test_mapping_table(tmp_path: Path, name: str) -> None:
    body, expected = MAPPING[name]
    skipped: Counter[tuple[str, str]] = Counter()
    events = accepted(write(tmp_path, body), skipped=skipped)
    assert [brief(e) for e in events] == ([expected] if expected else [])
    assert sum(skipped.values()) == (0 if expected else 1)


def test_decision_data(tmp_path: Path) -> None:
    body = core_event(
        "Pod",
        "Scheduled",
        "Successfully assigned team-a/obj-1 to gpu-node-4",
        uid="e-9",
        version="77",
    )
    (event,) = accepted(write(tmp_path, body), cluster="west")
    assert (event["id"], event["source"], event["time"]) == (
        "e-9",
        "k8s://west",
        "2026-01-05T10:00:00Z",
    )
    fixed = {k: v for k, v in body.items() if k not in ("count", "lastTimestamp")}
    fixed["metadata"] = {"name": "obj-1.1881e4c6a7b2f001", "namespace": "team-a", "uid": "e-9"}
    assert event["data"] == {
        "tenant": "team-a",
        "decision": "placed",
        "job_id": "obj-1",
        "reason": "Scheduled",
        "node": "gpu-node-4",
        "k8s_event": fixed,
    }
    assert "notice_s" not in event["data"]


@pytest.mark.parametrize(
    "reason",
    [
        "EvictedDueToDeactivated",
        "EvictedDueToInactiveWorkload",
        "EvictedDueToDeactivatedDueToMaximumExecutionTimeExceeded",
    ],
)
def test_a_workload_deactivated_by_its_owner_is_no_eviction(reason: str) -> None:
    event = k8s_event(core_event("Workload", reason, "The workload is deactivated"))
    assert event is not None and event["data"]["decision"] == "deactivated"


def test_scheduled_with_another_message_has_no_node(tmp_path: Path) -> None:
    (event,) = accepted(write(tmp_path, core_event("Pod", "Scheduled", "bound somewhere")))
    assert "node" not in event["data"]


def test_workload_decision_names_the_allocation(tmp_path: Path) -> None:
    (event,) = accepted(write(tmp_path, core_event("Workload", "Admitted", name="job-x-1a2b3")))
    assert event["data"]["allocation_id"] == "job-x-1a2b3" and "job_id" not in event["data"]


def test_node_events_belong_to_the_fleet(tmp_path: Path) -> None:
    body = core_event(
        "Node", "NodeNotReady", "Node gpu-node-2 status is now: NodeNotReady", name="gpu-node-2"
    )
    (found,) = records(write(tmp_path, body))
    assert isinstance(found, Accepted) and found.tenant is None
    assert (
        orjson.loads(found.body)["data"]["detail"] == "Node gpu-node-2 status is now: NodeNotReady"
    )


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("NodeHasDiskPressure", "node-has-disk-pressure"),
        ("Rebooted", "rebooted"),
        ("ContainerGCFailed", "container-gc-failed"),
        ("EvictionThresholdMet", "eviction-threshold-met"),
        ("OOMKilling", "oom-killing"),
        ("SystemOOM", "system-oom"),
    ],
)
def test_kebab_case(reason: str, code: str) -> None:
    assert kebab(reason) == code


# --- time, identity, tenant ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("drop", "expected"),
    [
        ((), "2026-01-05T10:00:00.250000Z"),
        (("eventTime",), "2026-01-05T10:00:00Z"),
        (("eventTime", "firstTimestamp"), "2026-01-05T09:00:00Z"),
        (("eventTime", "firstTimestamp", "deprecatedFirstTimestamp"), "2026-01-05T09:59:59Z"),
        (
            ("eventTime", "firstTimestamp", "deprecatedFirstTimestamp", "creationTimestamp"),
            "2026-01-05T10:05:00Z",
        ),
        (
            (
                "eventTime",
                "firstTimestamp",
                "deprecatedFirstTimestamp",
                "creationTimestamp",
                "lastTimestamp",
            ),
            "2026-01-05T10:10:00.500000Z",
        ),
        (
            (
                "eventTime",
                "firstTimestamp",
                "deprecatedFirstTimestamp",
                "creationTimestamp",
                "lastTimestamp",
                "series",
            ),
            "2026-01-05T09:30:00Z",
        ),
    ],
)
def test_time_precedence(tmp_path: Path, drop: tuple[str, ...], expected: str) -> None:
    # Fixed times first (eventTime, firstTimestamp, deprecatedFirstTimestamp, creationTimestamp),
    # then the moving ones.
    body = core_event(
        "Pod",
        "FailedScheduling",
        eventTime="2026-01-05T10:00:00.250000Z",
        series={"count": 5, "lastObservedTime": "2026-01-05T10:10:00.5Z"},
        deprecatedLastTimestamp="2026-01-05T09:30:00Z",
        deprecatedFirstTimestamp="2026-01-05T09:00:00Z",
    )
    body["metadata"]["creationTimestamp"] = "2026-01-05T09:59:59Z"
    for name in drop:
        (body["metadata"] if name == "creationTimestamp" else body)[name] = (
            None  # kubectl prints absent times as null
        )
    (event,) = accepted(write(tmp_path, body))
    assert event["time"] == expected


def test_the_zero_time_is_unset(tmp_path: Path) -> None:
    # Some writers print metav1.Time's zero value instead of null; it is no time at all.
    body = core_event(
        "Pod",
        "Evicted",
        firstTimestamp="0001-01-01T00:00:00Z",
        lastTimestamp="2026-01-05T10:05:00Z",
    )
    (event,) = accepted(write(tmp_path, body))
    assert event["time"] == "2026-01-05T10:05:00Z"


def test_events_k8s_io_v1(tmp_path: Path) -> None:
    events = accepted(
        write(
            tmp_path,
            new_event("Pod", "FailedScheduling", "0/4 nodes are available"),
            new_event(
                "Workload", "Preempted", "due to reclamation within the cohort", name="wl-2"
            ),
        )
    )
    assert [brief(e) for e in events] == [
        ("policy.decision", "queued", "obj-1", "team-a"),
        ("policy.decision", "reclaimed", "wl-2", "team-a"),
    ]
    assert events[0]["time"] == "2026-01-05T10:00:00.250000Z"


def test_tenant_field_label_and_namespace_fallbacks(tmp_path: Path) -> None:
    labelled = core_event("Pod", "Evicted", uid="a")
    labelled["metadata"]["labels"] = {"cost-center": "cc-9"}
    plain = core_event("Pod", "Evicted", uid="b")
    no_involved_namespace = core_event("Pod", "Evicted", uid="c", namespace="team-c")
    del no_involved_namespace["involvedObject"]["namespace"]
    events = accepted(
        write(tmp_path, labelled, plain, no_involved_namespace), tenant_field="cost-center"
    )
    assert [e["data"]["tenant"] for e in events] == ["cc-9", "team-a", "team-c"]


def test_missing_identity_and_time_are_rejected(tmp_path: Path) -> None:
    no_uid = core_event("Pod", "Evicted")
    del no_uid["metadata"]["uid"]
    no_version = core_event(
        "Pod", "Evicted", uid="ev-2"
    )  # resourceVersion is not part of the identity
    del no_version["metadata"]["resourceVersion"]
    no_time = core_event("Pod", "Evicted", uid="ev-3", firstTimestamp=None, lastTimestamp=None)
    found = records(write(tmp_path, no_uid, no_version, no_time))
    assert [(r.field, r.reason) if isinstance(r, Rejected) else r.id for r in found] == [
        ("metadata.uid", "missing"),
        "ev-2",
        (
            "eventTime",
            "no time: none of eventTime, firstTimestamp, metadata.creationTimestamp, "
            "lastTimestamp, series.lastObservedTime is set",
        ),
    ]


def test_skipped_events_are_counted_not_quarantined(tmp_path: Path) -> None:
    skipped: Counter[tuple[str, str]] = Counter()
    events = accepted(SAMPLE, skipped=skipped)
    assert skipped == Counter(
        {
            ("Job", "Started"): 1,
            ("Job", "SuccessfulCreate"): 1,
            ("Pod", "Pulled"): 1,
            ("Node", "NodeHasDiskPressure"): 1,
        }
    )
    assert len(events) + sum(skipped.values()) == len(orjson.loads(SAMPLE.read_bytes())["items"])


# --- the sample ----------------------------------------------------------------------------


def test_sample() -> None:
    # Read off the sample by hand: 20 core/v1 Events in a kubectl List, 4 of them of no use to us.
    events = accepted(SAMPLE)
    assert [brief(e) for e in events] == [
        ("policy.decision", "admitted", "job-llm-pretrain-7b-5d2c1", "team-nlp"),
        ("policy.decision", "admitted", "job-llm-pretrain-7b-5d2c1", "team-nlp"),
        ("policy.decision", "placed", "llm-pretrain-7b-0-8xk2p", "team-nlp"),
        ("policy.decision", "queued", "job-tokenizer-eval-1a9f3", "team-nlp"),
        ("policy.decision", "queued", "tokenizer-eval-qq7rm", "team-nlp"),
        ("policy.decision", "reclaimed", "jobset-sweep-lr-3e8a0", "team-research"),
        ("policy.decision", "reclaimed", "jobset-sweep-lr-3e8a0", "team-research"),
        ("policy.decision", "evicted", "job-rl-rollout-77b2d", "team-research"),
        ("policy.decision", "preempted", "notebook-gpu-7f9c4", "team-research"),
        ("policy.decision", "preempted", "job-detr-train-2b7c4", "team-vision"),
        ("policy.decision", "evicted", "augment-workers-3-tz9xd", "team-vision"),
        ("policy.decision", "preempted", "embed-server-1", "team-inference"),
        ("health.fault", "gpu-node-09", "node-down", "critical"),
        ("health.fault", "gpu-node-09", "rebooted", "warning"),
        ("health.cleared", "gpu-node-09", "node-down", ""),
        ("health.fault", "gpu-node-03", "eviction-threshold-met", "warning"),
    ]
    placed = events[2]
    assert (
        placed["data"]["node"] == "gpu-node-07" and placed["time"] == "2026-01-05T10:00:02.481235Z"
    )
    assert (
        events[4]["time"] == "2026-01-05T10:05:03.117302Z"
    )  # eventTime, not series.lastObservedTime
    assert events[3]["time"] == "2026-01-05T10:05:01Z"  # firstTimestamp of an Event seen 7 times


def test_sample_as_yaml_gives_the_same_events(tmp_path: Path) -> None:
    items = orjson.loads(SAMPLE.read_bytes())["items"]
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump_all(items))
    assert [brief(e) for e in accepted(path)] == [brief(e) for e in accepted(SAMPLE)]


def test_reingesting_the_sample_appends_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    runner = CliRunner()
    first = runner.invoke(main, ["ingest", "--db", db, "--format", "k8s-events", str(SAMPLE)])
    again = runner.invoke(main, ["ingest", "--db", db, str(SAMPLE)])  # detected
    assert first.stdout.endswith("read 16 · appended 16 · duplicate 0 · quarantined 0\n")
    assert again.stdout.endswith("read 16 · appended 0 · duplicate 16 · quarantined 0\n")


def test_objects_that_are_not_events_are_rejected(tmp_path: Path) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}
    (found,) = records(write(tmp_path, pod))
    assert isinstance(found, Rejected) and (found.field, found.reason) == (
        "kind",
        "not a Kubernetes Event: 'Pod'",
    )


# --- lists as the API writes them: items with no kind or apiVersion ------------------------------


def api_list(*items: dict[str, Any], kind: str = "EventList") -> dict[str, Any]:
    """The API's list form (`kubectl get --raw`, `kubectl cluster-info dump`): the list names
    the kind, the items do not."""
    bare = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]
    return {
        "kind": kind,
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "770"},
        "items": bare,
    }


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_event_list_items_without_kind_are_events(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"dump{suffix}"
    body = api_list(
        core_event("Pod", "Scheduled", "Successfully assigned team-a/obj-1 to n1", uid="a"),
        core_event("Pod", "Pulled", "pulled", uid="b"),
    )
    path.write_text(
        json.dumps(body, indent=4) if suffix == ".json" else yaml.safe_dump(body, sort_keys=False)
    )
    skipped: Counter[tuple[str, str]] = Counter()
    events = accepted(path, skipped=skipped)
    assert [(e["id"], e["data"]["decision"]) for e in events] == [("a", "placed")]
    assert skipped == Counter(
        {("Pod", "Pulled"): 1}
    )  # skipped as the mapping says, not quarantined
    assert (
        events[0]["data"]["k8s_event"]["kind"] == "Event"
        and events[0]["data"]["k8s_event"]["apiVersion"] == "v1"
    )


def test_items_of_a_plain_list_keep_needing_their_own_kind(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text(json.dumps(api_list(core_event("Pod", "Evicted"), kind="List")))
    (found,) = records(path)
    assert isinstance(found, Rejected) and (found.field, found.reason) == ("kind", "missing")


def test_an_items_own_kind_wins_over_the_lists(tmp_path: Path) -> None:
    body = api_list(core_event("Pod", "Evicted"))
    body["items"][0]["kind"] = "Pod"
    path = tmp_path / "list.json"
    path.write_text(json.dumps(body))
    (found,) = records(path)
    assert isinstance(found, Rejected) and found.reason == "not a Kubernetes Event: 'Pod'"


def test_tenant_option_only_where_the_event_names_no_namespace(tmp_path: Path) -> None:
    named = core_event("Pod", "Evicted", uid="a")
    unnamed = core_event("Pod", "Evicted", uid="b")
    del unnamed["involvedObject"]["namespace"], unnamed["metadata"]["namespace"]
    events = accepted(write(tmp_path, named, unnamed), tenant="acme")
    assert [e["data"]["tenant"] for e in events] == ["team-a", "acme"]
    (rejected,) = [r for r in records(write(tmp_path, unnamed)) if isinstance(r, Rejected)]
    assert (rejected.field, rejected.reason) == (
        "metadata.namespace",
        "missing",
    )  # no option: no tenant, no guess
