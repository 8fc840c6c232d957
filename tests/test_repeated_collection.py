"""Repeated collection: a collector polls every few minutes, and each poll holds the same
objects again, in later states. Ingesting poll 2 after poll 1 must append exactly what
changed (no conflict, exit 0). Each test writes two or three successive snapshots of the
same objects as the tools write them, and checks, by hand, what each poll appends."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import yaml
from click.testing import CliRunner

from cli import main

T0, T1, T2 = "2026-01-05T10:00:00Z", "2026-01-05T10:05:00Z", "2026-01-05T10:10:00Z"


def poll(db: str, path: Path, *args: str) -> tuple[int, str, list[str]]:
    """Ingest one poll: exit code, the counts line, and the (type, id) of what it appended."""
    before = entries(db)
    result = CliRunner().invoke(main, ["ingest", "--db", db, *args, str(path)])
    after = entries(db)
    counts = (
        result.stdout.strip().splitlines()[-1].split(": ", 1)[1]
        if result.stdout
        else result.output
    )
    return result.exit_code, counts, [f"{t} {i}" for t, i in after[len(before) :]]


def entries(db: str) -> list[tuple[str, str]]:
    result = CliRunner().invoke(main, ["export", "--db", db])
    assert result.exit_code == 0, result.output
    return [(row["type"], row["id"]) for row in map(orjson.loads, result.stdout.splitlines())]


def fresh(db: str) -> None:
    assert CliRunner().invoke(main, ["init", "--db", db]).exit_code == 0


# --- Kubernetes Events: EventList as the API and `kubectl cluster-info dump` write it ------------


def k8s_event(
    uid: str,
    pod: str,
    reason: str,
    message: str,
    first: str,
    last: str,
    count: int,
    version: str,
    type_: str = "Normal",
) -> dict[str, Any]:
    """A core/v1 Event as a list item from the API: no kind, no apiVersion."""
    return {
        "metadata": {
            "name": f"{pod}.18{uid}",
            "namespace": "team-a",
            "uid": uid,
            "resourceVersion": version,
            "creationTimestamp": first,
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": "team-a",
            "name": pod,
            "uid": f"pod-{pod}",
            "apiVersion": "v1",
        },
        "reason": reason,
        "message": message,
        "source": {"component": "default-scheduler"},
        "firstTimestamp": first,
        "lastTimestamp": last,
        "count": count,
        "type": type_,
        "eventTime": None,
        "reportingComponent": "default-scheduler",
        "reportingInstance": "",
    }


def event_list(path: Path, *items: dict[str, Any]) -> Path:
    path.write_text(
        json.dumps(
            {
                "kind": "EventList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "900"},
                "items": list(items),
            },
            indent=4,
        )
    )
    return path


def test_kubernetes_events_polled_three_times(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    fresh(db)
    scheduled = k8s_event(
        "a",
        "train-0",
        "Scheduled",
        "Successfully assigned team-a/train-0 to gpu-node-1",
        T0,
        T0,
        1,
        "10",
    )
    pulled = k8s_event(
        "c", "train-0", "Pulled", "Container image already present on machine", T0, T0, 1, "12"
    )
    waiting = k8s_event(
        "b",
        "train-1",
        "FailedScheduling",
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        T0,
        T0,
        1,
        "11",
        "Warning",
    )
    # Poll 2: the FailedScheduling Event repeated (count, lastTimestamp, resourceVersion move);
    # train-1 then scheduled;
    # an aggregated Event whose message client-go rewrites on each repeat.
    waiting_2 = {
        **waiting,
        "count": 4,
        "lastTimestamp": "2026-01-05T10:04:30Z",
        "metadata": {**waiting["metadata"], "resourceVersion": "40"},
    }
    placed = k8s_event(
        "d",
        "train-1",
        "Scheduled",
        "Successfully assigned team-a/train-1 to gpu-node-2",
        "2026-01-05T10:04:40Z",
        "2026-01-05T10:04:40Z",
        1,
        "41",
    )
    combined = k8s_event(
        "f",
        "eval-0",
        "FailedScheduling",
        "(combined from similar events): 0/4 nodes are available: x",
        T0,
        "2026-01-05T10:04:00Z",
        11,
        "42",
        "Warning",
    )
    # Poll 3: all of it again, the aggregated message rewritten, and one new Event (a pod evicted).
    combined_3 = {
        **combined,
        "message": "(combined from similar events): 0/5 nodes are available: y",
        "count": 12,
        "metadata": {**combined["metadata"], "resourceVersion": "60"},
    }
    evicted = k8s_event(
        "e",
        "train-0",
        "Evicted",
        "The node was low on resource: memory.",
        "2026-01-05T10:09:00Z",
        "2026-01-05T10:09:00Z",
        1,
        "61",
        "Warning",
    )
    polls = [
        event_list(tmp_path / "1.json", scheduled, pulled, waiting),
        event_list(tmp_path / "2.json", scheduled, pulled, waiting_2, placed, combined),
        event_list(tmp_path / "3.json", scheduled, pulled, waiting_2, placed, combined_3, evicted),
    ]
    # Pulled is skipped (valid, of no use): never read as a record, never quarantined.
    assert [poll(db, p) for p in polls] == [
        (
            0,
            "read 2 · appended 2 · duplicate 0 · quarantined 0",
            ["policy.decision a", "policy.decision b"],
        ),
        (
            0,
            "read 4 · appended 2 · duplicate 2 · quarantined 0",
            ["policy.decision d", "policy.decision f"],
        ),
        (0, "read 5 · appended 1 · duplicate 4 · quarantined 0", ["policy.decision e"]),
    ]


def test_a_watch_stream_shows_one_event_growing(tmp_path: Path) -> None:
    """`kubectl get events -w -o json` writes each update of an Event as a whole object, one
    after another.
    """
    db = f"sqlite:///{tmp_path / 'l.db'}"
    fresh(db)
    versions = [
        k8s_event(
            "w",
            "train-9",
            "FailedScheduling",
            "0/4 nodes are available",
            T0,
            last,
            count,
            str(100 + count),
            "Warning",
        )
        for count, last in ((1, T0), (2, T1), (3, T2))
    ]
    stream = tmp_path / "watch.json"
    stream.write_text(
        "".join(
            json.dumps({"kind": "Event", "apiVersion": "v1", **v}, indent=4) + "\n"
            for v in versions
        )
    )
    assert poll(db, stream) == (
        0,
        "read 3 · appended 1 · duplicate 2 · quarantined 0",
        ["policy.decision w"],
    )


# --- Kueue: `kubectl get workloads -A -o yaml`, a List whose items carry their kind -------------


def condition(type_: str, status: str, reason: str, at: str, message: str) -> dict[str, Any]:
    return {
        "lastTransitionTime": at,
        "message": message,
        "observedGeneration": 1,
        "reason": reason,
        "status": status,
        "type": type_,
    }


def kueue_workload(
    name: str, uid: str, version: str, conditions: list[dict[str, Any]], gpus: int | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": uid,
            "resourceVersion": version,
            "generation": 1,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name.rsplit("-", 1)[0],
                    "uid": f"job-{uid}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "active": True,
            "queueName": "lq-a",
            "priority": 0,
            "podSets": [{"count": 1, "name": "main"}],
        },
        "status": {"conditions": conditions},
    }
    if gpus is not None:
        body["status"]["admission"] = {
            "clusterQueue": "cq-a",
            "podSetAssignments": [
                {
                    "count": 1,
                    "name": "main",
                    "flavors": {"nvidia.com/gpu": "h100"},
                    "resourceUsage": {"cpu": "8", "nvidia.com/gpu": str(gpus)},
                }
            ],
        }
    return body


def workload_list(path: Path, *items: dict[str, Any]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "items": list(items),
                "kind": "List",
                "metadata": {"resourceVersion": ""},
            },
            sort_keys=False,
        )
    )
    return path


def test_kueue_workloads_polled_three_times(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    fresh(db)
    a, b = "job-train-5d2c1", "job-sweep-3e8a0"
    key_a, key_b = f"team-a/{a}/ua", f"team-a/{b}/ub"
    # Poll 1: a has quota, its admission check still pending; b waits for quota.
    a1 = kueue_workload(
        a,
        "ua",
        "100",
        [
            condition("QuotaReserved", "True", "QuotaReserved", T0, "Quota reserved"),
            condition("Admitted", "False", "UnsatisfiedChecks", T0, "checks pending"),
        ],
        8,
    )
    b1 = kueue_workload(
        b,
        "ub",
        "101",
        [
            condition(
                "QuotaReserved",
                "False",
                "Pending",
                T0,
                "couldn't assign flavors to pod set main: insufficient quota",
            )
        ],
        None,
    )
    # Poll 2: both admitted at T1; messages reworded, resourceVersions bumped.
    a2 = kueue_workload(
        a,
        "ua",
        "140",
        [
            condition("QuotaReserved", "True", "QuotaReserved", T0, "Quota reserved in cq-a"),
            condition("Admitted", "True", "Admitted", T1, "The workload is admitted"),
        ],
        8,
    )
    b2 = kueue_workload(
        b,
        "ub",
        "141",
        [
            condition("QuotaReserved", "True", "QuotaReserved", T1, "Quota reserved"),
            condition("Admitted", "True", "Admitted", T1, "The workload is admitted"),
        ],
        4,
    )
    # Poll 3: a finished; b reclaimed by its cohort (quota released, admission cleared).
    a3 = copy.deepcopy(a2)
    a3["status"]["conditions"].append(
        condition("Finished", "True", "Succeeded", T2, "Job finished successfully")
    )
    a3["metadata"]["resourceVersion"] = "170"
    reclaim = "Preempted to accommodate a workload due to reclamation within the cohort"
    b3 = kueue_workload(
        b,
        "ub",
        "171",
        [
            condition("QuotaReserved", "False", "Preempted", T2, reclaim),
            condition("Admitted", "False", "NoReservation", T2, "no reservation"),
            condition("Evicted", "True", "Preempted", T2, reclaim),
            condition("Preempted", "True", "InCohortReclamation", T2, reclaim),
        ],
        None,
    )
    t1, t2 = T1, T2
    assert [
        poll(db, workload_list(tmp_path / f"{n}.yaml", *items))
        for n, items in enumerate([(a1, b1), (a2, b2), (a3, b3)], start=1)
    ] == [
        (
            0,
            "read 1 · appended 1 · duplicate 0 · quarantined 0",
            [f"policy.decision {key_b}:QuotaReserved:False:Pending:{T0}"],
        ),
        (
            0,
            "read 4 · appended 4 · duplicate 0 · quarantined 0",
            [
                f"policy.decision {key_a}:Admitted:True:Admitted:{t1}",
                f"allocation.granted {key_a}:Admitted:True:Admitted:{t1}:granted",
                f"policy.decision {key_b}:Admitted:True:Admitted:{t1}",
                f"allocation.granted {key_b}:Admitted:True:Admitted:{t1}:granted",
            ],
        ),
        (
            0,
            "read 6 · appended 4 · duplicate 2 · quarantined 0",
            [
                f"allocation.released {key_a}:Finished:True:Succeeded:{t2}:released",
                f"policy.decision {key_b}:Evicted:True:Preempted:{t2}",
                f"allocation.released {key_b}:Evicted:True:Preempted:{t2}:released",
                f"policy.decision {key_b}:Preempted:True:InCohortReclamation:{t2}",
            ],
        ),
    ]


# --- CloudEvents: an exporter's files overlap, in whatever shape it writes -----------------------


def cloud_event(n: int) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": f"p{n}",
        "source": "app://trainer",
        "type": "job.progress",
        "time": f"2026-01-05T10:0{n}:00Z",
        "data": {"tenant": "team-a", "job_id": "train", "step": 100 * n},
    }


def test_cloudevents_polled_three_times(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    fresh(db)
    first, second, third = tmp_path / "1.jsonl", tmp_path / "2.json", tmp_path / "3.json"
    first.write_text("".join(json.dumps(cloud_event(n)) + "\n" for n in (1, 2)))
    second.write_text(
        "".join(json.dumps(cloud_event(n), indent=2) + "\n" for n in (1, 2, 3))
    )  # jq . output
    third.write_text(json.dumps([cloud_event(n) for n in (2, 3, 4)], indent=2))  # a batch
    assert [poll(db, p) for p in (first, second, third)] == [
        (
            0,
            "read 2 · appended 2 · duplicate 0 · quarantined 0",
            ["job.progress p1", "job.progress p2"],
        ),
        (0, "read 3 · appended 1 · duplicate 2 · quarantined 0", ["job.progress p3"]),
        (0, "read 3 · appended 1 · duplicate 2 · quarantined 0", ["job.progress p4"]),
    ]


# --- dcgm-exporter: the same gauges scraped every five minutes, no timestamps --------------------

GPU = (
    'gpu="{g}",UUID="GPU-{g}aa",device="nvidia{g}",modelName="NVIDIA '
    'A100-SXM4-40GB",Hostname="gpu-node-1"'
)
MIG = GPU.format(g=0) + ',GPU_I_PROFILE="1g.5gb",GPU_I_ID="13"'


def scrape(path: Path, xid_gpu0: int, xid_gpu1: int, xid_mig: int) -> Path:
    lines = [
        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
        f"DCGM_FI_DEV_XID_ERRORS{{{GPU.format(g=0)}}} {xid_gpu0}",
        f"DCGM_FI_DEV_XID_ERRORS{{{GPU.format(g=1)}}} {xid_gpu1}",
        f"DCGM_FI_DEV_XID_ERRORS{{{MIG}}} {xid_mig}",
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
        f"DCGM_FI_DEV_GPU_TEMP{{{GPU.format(g=0)}}} 61",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_dcgm_exporter_scraped_three_times(tmp_path: Path, db_url: str) -> None:
    fresh(db_url)
    node = "gpu-node-1"
    polls = [
        (scrape(tmp_path / "1.prom", 0, 0, 0), T0),
        (scrape(tmp_path / "2.prom", 0, 79, 31), T1),
        (scrape(tmp_path / "3.prom", 48, 79, 31), T2),
    ]
    results = [
        poll(db_url, path, "--format", "dcgm-metrics", "--scrape-time", at) for path, at in polls
    ]
    # The gauge keeps the last XID: poll 3 shows GPU 1's 79 and the MIG instance's 31 again, the
    # faults of poll 2.
    assert results == [
        (0, "read 0 · appended 0 · duplicate 0 · quarantined 0", []),
        (
            0,
            "read 2 · appended 2 · duplicate 0 · quarantined 0",
            [
                f"health.fault {node}:1:GPU-1aa:-:xid:79",
                f"health.fault {node}:0:GPU-0aa:13:xid:31",
            ],
        ),
        (
            0,
            "read 3 · appended 1 · duplicate 2 · quarantined 0",
            [f"health.fault {node}:0:GPU-0aa:-:xid:48"],
        ),
    ]
    faults = {
        row["id"]: row["event"]
        for row in map(
            orjson.loads, CliRunner().invoke(main, ["export", "--db", db_url]).stdout.splitlines()
        )
    }
    gpu1, mig = faults[f"{node}:1:GPU-1aa:-:xid:79"], faults[f"{node}:0:GPU-0aa:13:xid:31"]
    assert (gpu1["time"], gpu1["data"]["device"], gpu1["data"]["severity"]) == (
        T1,
        1,
        "critical",
    )  # first seen at T1
    assert (mig["time"], mig["data"]["device"], mig["data"]["severity"]) == (
        T1,
        "0/13",
        "warning",
    )  # the MIG instance only


def test_dcgm_gauge_reset_and_raised_again_is_a_new_fault(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    fresh(db)
    series = "gpu-node-1:1:GPU-1aa:-:xid:79"
    first = scrape(tmp_path / "1.prom", 0, 79, 0)
    # One file of two scrapes (the exporter restarted between them, the gauge read 0, then 79
    # again), with timestamps.
    later = tmp_path / "2.prom"
    later.write_text(
        f"DCGM_FI_DEV_XID_ERRORS{{{GPU.format(g=1)}}} 0 1767607500000\n"
        f"DCGM_FI_DEV_XID_ERRORS{{{GPU.format(g=1)}}} 79 1767607800000\n"
    )
    assert poll(db, first, "--format", "dcgm-metrics", "--scrape-time", T0)[2] == [
        f"health.fault {series}"
    ]
    assert poll(db, later, "--format", "dcgm-metrics") == (
        0,
        "read 1 · appended 1 · duplicate 0 · quarantined 0",
        [f"health.fault {series}:1767607800000"],
    )
    assert (
        poll(db, later, "--format", "dcgm-metrics")[1]
        == "read 1 · appended 0 · duplicate 1 · quarantined 0"
    )
