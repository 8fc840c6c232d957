"""Kueue Workload objects (kueue.x-k8s.io v1beta1 or v1beta2), as `kubectl get workloads
-o json|yaml` prints them: one object, a `List`/`WorkloadList`, or a multi-document
YAML stream (reading: ingest/k8sdocs.py).

Identity: allocation_id = `metadata.name`; job_id = `metadata.ownerReferences[0].name`,
else the name; tenant = `metadata.namespace` (or the label named by `tenant_field`, when
the Workload has it; the option `tenant` only for a Workload that names no namespace,
as an object exported without its metadata.namespace does); source = `kueue://<cluster>` (`cluster`
defaults to `default`).

Each condition of `status.conditions` with status "True" is a transition at its
`lastTransitionTime` (UTC), condition → events:

- QuotaReserved → stands in for Admitted only when the Workload has no Admitted condition at all (a
  Kueue before v0.5, or a writer that leaves it out)
- Admitted → `policy.decision` admitted, and `allocation.granted`
- Evicted, reason Deactivated / InactiveWorkload / DeactivatedDueToMaximumExecutionTimeExceeded →
  decision deactivated, `allocation.released`
- Evicted, reason Preempted / InClusterQueue / InCohort… → decision preempted (reclaimed for the
  reclaim reasons), `allocation.released`
- Evicted, any other reason → decision evicted, `allocation.released`
- Evicted at or after Finished → nothing: the workload had finished, Finished releases it
- Preempted → decision reclaimed for InCohortReclamation / InCohortReclaimWhileBorrowing, else
  preempted; no release
- Requeued → decision queued
- Finished → `allocation.released` (reason Succeeded, Failed, …), no decision

Deactivation by the owner (`spec.active: false` set by its user, or by Kueue enforcing
the Workload's own `maximumExecutionTimeSeconds`) is Evicted with reason `Deactivated`
(`InactiveWorkload` before v0.9), or `DeactivatedDueToMaximumExecutionTimeExceeded`: a
decision `deactivated`, never a provider's eviction, so its seconds are never `reclaimed`.
Kueue's other deactivations, `DeactivatedDueTo<cause>` for a rejected admission check or
a requeuing limit reached after pods never became ready, are Kueue's act for a cause
that may be the provider's: they stay evictions (`evicted`), with the reason kept.

QuotaReserved True with Admitted False means admission checks are still pending: the
pods stay suspended, nothing is granted yet. Taking QuotaReserved as the grant there
would grant twice once Admitted turns True, so a later poll would add a second grant. For
the same reason QuotaReserved is no grant when `status.admissionChecks` lists checks: a
Kueue that has them writes Admitted once they pass.

A condition with status "False" and reason `Pending` is a decision `queued`. Other
conditions (PodsReady, DeactivationTarget, …) say nothing we use. A decision's data is
{tenant, decision, job_id, allocation_id, reason (the condition's), queue
(`spec.queueName`), priority (`spec.priority`), condition (its type)}.

A gang: a Workload with two or more pod sets that hold GPUs (a PyTorchJob's Master and
Worker, a JobSet's replicated jobs, a LeaderWorkerSet group's leader and workers, an
MPIJob whose launcher takes GPUs) is one allocation per such pod set, allocation_id
`<name>/<pod set>`, each granted at the admission and started there by a `job.started`
{job_id, allocation_id, attempt 1, workload, pod_set, gang: every member's allocation_id}:
one attempt across all of them (a gang). No other source can name these allocations,
so the admission starts them. Which pod sets hold GPUs is read from `spec.podSets` (GPU
requests or limits of their templates), present in every snapshot, so a release seen
after Kueue cleared the admission releases the same allocations (`:released:<pod set>`);
from the admission's resourceUsage for an object with no spec. One pod set with GPUs, of
any count, is the Workload's one allocation, as below, on all its pods' nodes; its start
is the application's own.

The grant comes from `status.admission.podSetAssignments[]`, summed over pod sets:
`resourceUsage["nvidia.com/gpu"]` counts whole GPUs, `nvidia.com/mig-<profile>` MIG
slices (placement_class `mig`, profile `<profile>`), `nvidia.com/gpu.shared` time-sliced
GPUs (`timeslice`). A quantity must be a whole, non-negative number with no suffix. The
node is the one `kubernetes.io/hostname` value of the pod sets' topologyAssignment
(v1beta1 `domains[].values`, v1beta2 `slices[].valuesPerLevel`); with several, `nodes`
lists them and node is left out. A gang member's grant also has `workload` and `pods`
(its pod set's count). A Workload's status alone (pasted without kind, apiVersion and
metadata) is refused: nothing in it says which Workload it is. Evidence kept: `pod_sets` (the
assignments as given),
`flavors` (the distinct ResourceFlavor names assigned), `cluster_queue`. An admission
with no GPU resource gives the decision and no grant.

Where the contract cannot be met exactly (said here, not hidden):
- Pod sets that mix classes (whole GPUs and MIG, say) give one grant: gpus is the sum of
  all, placement_class the first present of whole, mig, timeslice, and `gpus_by_class`
  keeps the split; several MIG profiles are listed under `profiles` with no `profile`.
- `accumulatedPastExecutionTimeSeconds` (or the v1beta1 spelling
  `accumulatedPastExexcutionTimeSeconds`) is kept as `accumulated_past_execution_time_s`
  on the release of a Finished workload only. Kueue adds to it when quota is released
  after an eviction, which can be after the Evicted condition was written; on any other
  event it could change while the transition stays the same, and a re-read would then be
  a conflict instead of a duplicate.
- A workload both Evicted and Finished yields two releases (one per transition).

Event ids: `<namespace>/<name>/<uid>:<type>:<status>:<reason>:<lastTransitionTime>` (the
time in UTC as `2026-01-05T10:00:00Z`, whatever offset the object wrote), with `:granted`
/ `:released` for the allocation events. They name only what identifies the
transition, and the data holds no message or resourceVersion, so a later snapshot of
the same Workload appends only its new transitions. A Workload is one record: all its
events, or the object in quarantine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from pathlib import Path
from typing import Any

from ingest.base import event_from_object
from ingest.k8sdocs import K8sObject, kinds_in, read_objects
from ingest.k8sfields import (
    FieldPath,
    ObjectError,
    field,
    integer,
    mapping,
    sequence,
    tenant,
    text,
    utc_time,
)
from ingest.options import IngestOptions, option
from schemas import Record, Rejected

API_GROUP = "kueue.x-k8s.io/"
RECLAIM_REASONS = frozenset({"InCohortReclamation", "InCohortReclaimWhileBorrowing"})
#: Evicted reasons of a deactivation by the owner: spec.active set false by its user
#: (InactiveWorkload before
#: v0.9), or by Kueue enforcing the Workload's own spec.maximumExecutionTimeSeconds.
DEACTIVATED_REASONS = frozenset(
    {"Deactivated", "InactiveWorkload", "DeactivatedDueToMaximumExecutionTimeExceeded"}
)
WHOLE_GPU, SHARED_GPU, MIG_PREFIX = "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-"
HOSTNAME_LEVEL = "kubernetes.io/hostname"
ACCUMULATED = ("accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds")
_TRANSITIONS = frozenset(
    {"QuotaReserved", "Admitted", "Evicted", "Preempted", "Requeued", "Finished"}
)
_QUANTITY = re.compile(r"\+?\d+")
_ASSIGNMENTS: FieldPath = ("status", "admission", "podSetAssignments")


class KueueOptions(IngestOptions):
    """What kueue is told beside its file."""

    format = "kueue"

    cluster: str | None = option("The cluster name, part of every event's source.")
    tenant_field: str | None = option(
        "The metadata label to take the tenant from (default: the namespace)."
    )
    tenant: str | None = option("The tenant of an object with no label and no namespace.")


class KueueIngestor:
    name = "kueue"
    options = KueueOptions
    description = "Kueue Workload objects (v1beta1, v1beta2), JSON or YAML"

    def identify(self, path: Path, head: bytes) -> bool:
        kinds = kinds_in(head)
        return (
            API_GROUP.encode() in head
            and bool(kinds & {"Workload", "WorkloadList"})
            and not kinds & {"Event", "EventList"}
            and b'"specversion"' not in head
        )

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        cluster = options.get("cluster") or "default"
        tenancy = (options.get("tenant_field"), options.get("tenant"))
        for item in read_objects(path):
            if isinstance(item, Rejected):
                yield item
            else:
                yield from _workload_records(item, cluster, tenancy)


def _workload_records(
    obj: K8sObject, cluster: str, tenancy: tuple[str | None, str | None]
) -> Iterator[Record]:
    try:
        events = workload_events(obj.body, cluster, *tenancy)
    except ObjectError as exc:
        yield obj.rejected(exc)
        return
    records = [event_from_object(event, obj.origin, obj.raw) for event in events]
    rejected = [r for r in records if isinstance(r, Rejected)]
    yield from (rejected[:1] if rejected else records)  # a Workload is one record


@dataclass
class _Workload:
    body: dict[str, Any]
    source: str
    key: str  # namespace/name/uid
    tenant: str
    name: str
    job_id: str
    queue: str | None
    priority: int | None
    events: list[dict[str, Any]] = dataclass_field(default_factory=list)

    def add(self, kind: str, event_id: str, time: str, data: dict[str, Any]) -> None:
        self.events.append(
            {
                "specversion": "1.0",
                "id": event_id,
                "source": self.source,
                "type": kind,
                "time": time,
                "data": {k: v for k, v in data.items() if v is not None},
            }
        )

    def decide(self, decision: str, event_id: str, time: str, condition: str, reason: str) -> None:
        self.add(
            "policy.decision",
            event_id,
            time,
            {
                "tenant": self.tenant,
                "decision": decision,
                "job_id": self.job_id,
                "allocation_id": self.name,
                "reason": reason or None,
                "queue": self.queue,
                "priority": self.priority,
                "condition": condition,
            },
        )

    def release(self, event_id: str, time: str, reason: str, condition: str, **extra: Any) -> None:
        each: list[tuple[str | None, str]] = [(p, f":{p}") for p in gang_pod_sets(self.body)] or [
            (None, "")
        ]
        for pod_set, suffix in each:
            self.add(
                "allocation.released",
                f"{event_id}:released{suffix}",
                time,
                {
                    "tenant": self.tenant,
                    "allocation_id": self.allocation_id(pod_set),
                    "reason": reason or None,
                    "condition": condition,
                    **extra,
                },
            )

    def allocation_id(self, pod_set: str | None) -> str:
        """The Workload's name; `<name>/<pod set>` for a pod set of a gang."""
        return self.name if pod_set is None else f"{self.name}/{pod_set}"


def workload_events(
    body: dict[str, Any],
    cluster: str = "default",
    tenant_field: str | None = None,
    default_tenant: str | None = None,
) -> list[dict[str, Any]]:
    """The CloudEvents (as dicts) of one Workload object; ObjectError names a bad field."""
    workload = _read_identity(body, cluster, tenant_field, default_tenant)
    conditions = _conditions(body)
    # QuotaReserved is the grant only for a Kueue that writes no Admitted condition at all
    # (before v0.5). A Workload with admission checks and no Admitted condition is waiting
    # on them (a Kueue from v0.5 adds Admitted only once every check is Ready).
    quota_is_grant = not any(c["type"] == "Admitted" for _, c in conditions) and not sequence(
        body, ("status", "admissionChecks")
    )
    finished = _finished_time(body, conditions)
    for index, condition in conditions:
        _condition_events(workload, index, condition, quota_is_grant, finished)
    return workload.events


def _finished_time(
    body: dict[str, Any], conditions: list[tuple[int, dict[str, str]]]
) -> str | None:
    for index, condition in conditions:
        if condition["type"] == "Finished" and condition["status"] == "True":
            return utc_time(body, ("status", "conditions", index, "lastTransitionTime"))
    return None


def _read_identity(
    body: dict[str, Any], cluster: str, tenant_field: str | None, default_tenant: str | None
) -> _Workload:
    if isinstance(body.get("status"), dict) and all(
        body.get(k) is None for k in ("kind", "apiVersion", "metadata")
    ):
        raise ObjectError(
            ("kind",),
            "missing: a Workload's status alone (no kind, apiVersion or metadata) says "
            "nothing of which Workload it is; ingest the object whole, as "
            "`kubectl get workload NAME -o yaml` prints it",
        )
    kind, api = text(body, ("kind",), required=True), text(body, ("apiVersion",), required=True)
    if kind != "Workload":
        raise ObjectError(("kind",), f"not a Kueue Workload: {kind!r}")
    if not (api or "").startswith(API_GROUP):
        raise ObjectError(("apiVersion",), f"not a Kueue API version: {api!r}")
    name, uid = (text(body, ("metadata", f), required=True) or "" for f in ("name", "uid"))
    namespace = text(body, ("metadata", "namespace"), required=default_tenant is None) or ""
    owners = sequence(body, ("metadata", "ownerReferences"))
    owner = text(body, ("metadata", "ownerReferences", 0, "name")) if owners else None
    return _Workload(
        body=body,
        source=f"kueue://{cluster}",
        key=f"{namespace}/{name}/{uid}",
        tenant=tenant(body, ("metadata", "namespace"), tenant_field, default_tenant),
        name=name,
        job_id=owner or name,
        queue=text(body, ("spec", "queueName")),
        priority=integer(body, ("spec", "priority")),
    )


def _conditions(body: dict[str, Any]) -> list[tuple[int, dict[str, str]]]:
    out = []
    for index, _ in enumerate(sequence(body, ("status", "conditions"))):
        path = ("status", "conditions", index)
        mapping(body, path)
        out.append(
            (
                index,
                {
                    "type": text(body, (*path, "type"), required=True) or "",
                    "status": text(body, (*path, "status"), required=True) or "",
                    "reason": text(body, (*path, "reason")) or "",
                },
            )
        )
    return out


def _condition_events(
    wl: _Workload,
    index: int,
    condition: dict[str, str],
    quota_is_grant: bool,
    finished: str | None,
) -> None:
    kind, status, reason = condition["type"], condition["status"], condition["reason"]
    queued = status == "False" and reason == "Pending"
    if not queued and (
        status != "True"
        or kind not in _TRANSITIONS
        or (kind == "QuotaReserved" and not quota_is_grant)
    ):
        return  # says nothing we use: its time is not even read
    path = ("status", "conditions", index, "lastTransitionTime")
    time = utc_time(wl.body, path)
    assert time is not None
    if kind == "Evicted" and finished is not None and _instant(time) >= _instant(finished):
        return  # the workload had finished: no eviction, and Finished is its release
    event_id = f"{wl.key}:{kind}:{status}:{reason}:{time}"
    if queued:
        wl.decide("queued", event_id, time, kind, reason)
    elif kind in ("Admitted", "QuotaReserved"):
        wl.decide("admitted", event_id, time, kind, reason)
        _admit(wl, event_id, time)
    elif kind == "Evicted":
        wl.decide(eviction_decision(reason), event_id, time, kind, reason)
        wl.release(event_id, time, reason, kind)
    elif kind == "Preempted":
        wl.decide(
            "reclaimed" if reason in RECLAIM_REASONS else "preempted", event_id, time, kind, reason
        )
    elif kind == "Requeued":
        wl.decide("queued", event_id, time, kind, reason)
    elif kind == "Finished":
        wl.release(
            event_id, time, reason, kind, accumulated_past_execution_time_s=_accumulated(wl.body)
        )


def _instant(utc_text: str) -> datetime:
    return datetime.fromisoformat(utc_text.replace("Z", "+00:00"))


def eviction_decision(reason: str) -> str:
    """The decision of an Evicted condition's reason (a Workload event's
    `EvictedDueTo<reason>`).
    """
    if reason in DEACTIVATED_REASONS:
        return "deactivated"
    if reason in RECLAIM_REASONS:
        return "reclaimed"
    if reason in ("Preempted", "InClusterQueue") or reason.startswith("InCohort"):
        return "preempted"
    return "evicted"


def _accumulated(body: dict[str, Any]) -> int | None:
    for name in ACCUMULATED:
        value = integer(body, ("status", name))
        if value is not None:
            return value
    return None


# --- the grant -------------------------------------------------------------------------


@dataclass
class _Usage:
    by_class: dict[str, int] = dataclass_field(
        default_factory=lambda: {"whole": 0, "mig": 0, "timeslice": 0}
    )
    profiles: list[str] = dataclass_field(default_factory=list)
    flavors: list[str] = dataclass_field(default_factory=list)
    nodes: list[str] = dataclass_field(default_factory=list)


def _admit(wl: _Workload, event_id: str, time: str) -> None:
    """The grant of an admission: one allocation for the Workload, or, for a gang, one per
    pod set holding GPUs, each started at once as attempt 1 of the Workload's job."""
    assignments = sequence(wl.body, _ASSIGNMENTS)
    gang = gang_pod_sets(wl.body)
    if not gang:
        grant = _grant(wl, None, list(range(len(assignments))))
        if grant is not None:
            wl.add("allocation.granted", f"{event_id}:granted", time, grant)
        return
    names = [
        text(wl.body, (*_ASSIGNMENTS, i, "name"), required=True) for i, _ in enumerate(assignments)
    ]
    grants = [(p, _grant(wl, p, [i for i, n in enumerate(names) if n == p])) for p in gang]
    granted = [(p, g) for p, g in grants if g is not None]
    members = [wl.allocation_id(p) for p, _ in granted]
    for pod_set, grant in granted:
        wl.add("allocation.granted", f"{event_id}:granted:{pod_set}", time, grant)
    for pod_set, _ in granted:
        wl.add(
            "job.started",
            f"{event_id}:started:{pod_set}",
            time,
            {
                "tenant": wl.tenant,
                "job_id": wl.job_id,
                "allocation_id": wl.allocation_id(pod_set),
                "attempt": 1,
                "workload": wl.name,
                "pod_set": pod_set,
                "gang": members,
            },
        )


def gang_pod_sets(body: dict[str, Any]) -> list[str]:
    """The pod sets of a gang: those that hold GPUs, when two or more do; else none.

    Read from `spec.podSets` (their templates' GPU requests or limits), which every
    snapshot of the Workload carries, so that an eviction or finish seen after Kueue
    cleared `status.admission` releases the same allocations its admission granted; from
    the admission's `resourceUsage` for an object exported without a spec."""
    specs = sequence(body, ("spec", "podSets"))
    if specs:
        names = [
            text(body, ("spec", "podSets", i, "name"), required=True) or ""
            for i, _ in enumerate(specs)
            if _template_wants_gpus(body, ("spec", "podSets", i, "template", "spec"))
        ]
    else:
        names = [
            text(body, (*_ASSIGNMENTS, i, "name"), required=True) or ""
            for i, _ in enumerate(sequence(body, _ASSIGNMENTS))
            if any(
                _is_gpu(r) and str(v) not in ("0", "")
                for r, v in mapping(body, (*_ASSIGNMENTS, i, "resourceUsage")).items()
            )
        ]
    return names if len(names) > 1 else []


def _is_gpu(resource: str) -> bool:
    return resource in (WHOLE_GPU, SHARED_GPU) or resource.startswith(MIG_PREFIX)


def _template_wants_gpus(body: dict[str, Any], path: FieldPath) -> bool:
    for kind in ("containers", "initContainers"):
        for index, _ in enumerate(sequence(body, (*path, kind))):
            for side in ("requests", "limits"):
                resources = mapping(body, (*path, kind, index, "resources", side))
                if any(_is_gpu(r) and str(v) not in ("0", "") for r, v in resources.items()):
                    return True
    return False


def _grant(wl: _Workload, pod_set: str | None, indexes: list[int]) -> dict[str, Any] | None:
    """The grant of the pod sets at `indexes` of the admission: all of them for the
    Workload's one allocation, one pod set's for a member of a gang."""
    usage = _Usage()
    assignments = sequence(wl.body, _ASSIGNMENTS)
    for index in indexes:
        _add_pod_set(wl.body, (*_ASSIGNMENTS, index), usage)
    gpus = sum(usage.by_class.values())
    if gpus == 0:
        return None
    placement = next(c for c in ("whole", "mig", "timeslice") if usage.by_class[c])
    mixed = sum(1 for n in usage.by_class.values() if n) > 1
    return {
        "tenant": wl.tenant,
        "allocation_id": wl.allocation_id(pod_set),
        "gpus": gpus,
        "placement_class": placement,
        "profile": usage.profiles[0] if placement == "mig" and len(usage.profiles) == 1 else None,
        "profiles": usage.profiles if len(usage.profiles) > 1 else None,
        "gpus_by_class": {k: v for k, v in usage.by_class.items() if v} if mixed else None,
        "node": usage.nodes[0] if len(usage.nodes) == 1 else None,
        "nodes": usage.nodes if len(usage.nodes) > 1 else None,
        "cluster_queue": text(wl.body, ("status", "admission", "clusterQueue")),
        "flavors": usage.flavors or None,
        "pod_sets": [assignments[i] for i in indexes],
        "workload": wl.name if pod_set is not None else None,
        "pods": integer(wl.body, (*_ASSIGNMENTS, indexes[0], "count"))
        if pod_set is not None and len(indexes) == 1
        else None,
    }


def _add_pod_set(body: dict[str, Any], path: FieldPath, usage: _Usage) -> None:
    mapping(body, path)
    for resource, value in mapping(body, (*path, "resourceUsage")).items():
        count = _gpu_quantity(resource, value, (*path, "resourceUsage"))
        if resource == WHOLE_GPU:
            usage.by_class["whole"] += count
        elif resource == SHARED_GPU:
            usage.by_class["timeslice"] += count
        elif resource.startswith(MIG_PREFIX):
            usage.by_class["mig"] += count
            profile = resource.removeprefix(MIG_PREFIX)
            if count and profile not in usage.profiles:
                usage.profiles.append(profile)
    for flavor in mapping(body, (*path, "flavors")).values():
        if isinstance(flavor, str) and flavor not in usage.flavors:
            usage.flavors.append(flavor)
    for node in _topology_nodes(body, (*path, "topologyAssignment")):
        if node not in usage.nodes:
            usage.nodes.append(node)
    usage.flavors.sort()
    usage.profiles.sort()
    usage.nodes.sort()


def _gpu_quantity(resource: str, value: Any, path: FieldPath) -> int:
    if resource not in (WHOLE_GPU, SHARED_GPU) and not resource.startswith(MIG_PREFIX):
        return 0  # cpu, memory, …: not ours to count
    text_value = (
        str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    )
    if (
        text_value is not None
        and text_value.startswith("-")
        and _QUANTITY.fullmatch(text_value[1:])
    ):
        raise ObjectError(path, f"{resource} = {value!r}: a negative GPU count")
    if text_value is None or not _QUANTITY.fullmatch(text_value):
        raise ObjectError(path, f"{resource} = {value!r}: not a whole number of GPUs")
    return int(text_value)


def _topology_nodes(body: dict[str, Any], path: FieldPath) -> list[str]:
    """The hostnames a TAS topologyAssignment names (v1beta1 domains, v1beta2 slices)."""
    if field(body, path) is None:
        return []
    levels = sequence(body, (*path, "levels"))
    if HOSTNAME_LEVEL not in levels:
        return []
    level = levels.index(HOSTNAME_LEVEL)
    nodes = [
        text(body, (*path, "domains", i, "values", level), required=True) or ""
        for i, _ in enumerate(sequence(body, (*path, "domains")))
    ]
    for i, _ in enumerate(sequence(body, (*path, "slices"))):
        nodes += _slice_values(body, (*path, "slices", i), level)
    return nodes


def _slice_values(body: dict[str, Any], path: FieldPath, level: int) -> list[str]:
    count = integer(body, (*path, "domainCount"))
    values_path = (*path, "valuesPerLevel", level)
    values = mapping(body, values_path)
    individual = mapping(body, (*values_path, "individual"))
    universal = text(body, (*values_path, "universalValue")) or text(
        body, (*values_path, "universal")
    )
    if universal is not None:
        return [universal] * (count or 1)
    roots_path = (*values_path, "individual", "roots") if individual else (*values_path, "roots")
    prefix = (
        values.get("prefix") or individual.get("prefix") or individual.get("commonPrefix") or ""
    )
    suffix = (
        values.get("suffix") or individual.get("suffix") or individual.get("commonSuffix") or ""
    )
    roots = sequence(body, roots_path)
    if (
        not roots
        or not all(isinstance(r, str) for r in roots)
        or not isinstance(prefix, str)
        or not isinstance(suffix, str)
    ):
        raise ObjectError(
            values_path,
            "expected universalValue, or roots (strings) with an optional prefix and suffix",
        )
    return [prefix + root + suffix for root in roots]


__all__ = ["KueueIngestor", "eviction_decision", "workload_events"]
