"""Kubernetes Events: core/v1 `Event` (`involvedObject`, `message`, `count`, `firstTimestamp`,
`lastTimestamp`) and events.k8s.io/v1 `Event` (`regarding`, `note`, `series`,
`deprecated…` fields), as `kubectl get events -o json|yaml` prints them: one object, an
`EventList`/`List`, a run of objects (`-w`), or a YAML stream (reading: ingest/k8sdocs.py).

An Event object is one transition (one reason about one object), updated in place while
it repeats: the API server bumps `count`, `lastTimestamp` or `series`, and
`metadata.resourceVersion`, and client-go's aggregator rewrites the `message` of its
"(combined from similar events): …" Events. A collector polling every few minutes sees
the same Event again and again, so one Event is one record whatever its state: event id
`<metadata.uid>` under source `k8s://<cluster>`, time the first present of the fixed
`eventTime`, `firstTimestamp`, `deprecatedFirstTimestamp`, `metadata.creationTimestamp`
(the moving `lastTimestamp`, `series.lastObservedTime`, `deprecatedLastTimestamp` only
when none is set), in UTC. The Event rides along under data `k8s_event` without the
fields that move (VOLATILE: count, lastTimestamp, series, the deprecated count and last
time, resourceVersion, managedFields, and an aggregated message), so a later poll of it
is a duplicate, never a conflict.

Each item reads involved object, reason → event:

- Pod, Scheduled → `policy.decision` placed, job_id = pod, node from "Successfully assigned
  <ns>/<pod> to <node>"
- Pod, Preempted, Preempting → decision preempted, job_id = pod
- Pod, Evicted, Evicting → decision evicted, job_id = pod
- Pod, FailedScheduling → decision queued, job_id = pod
- Workload (kueue.x-k8s.io), QuotaReserved, Admitted → decision admitted, allocation_id = workload
- Workload, Pending → decision queued
- Workload, Preempted, EvictedDueToPreempted → decision preempted; reclaimed when the message names
  InCohortReclamation, InCohortReclaimWhileBorrowing, or "reclamation within the cohort" (Kueue's
  wording of both)
- Workload, EvictedDueTo<reason> → the decision of an Evicted condition with that reason
  (ingest/kueue.py): EvictedDueToDeactivated → deactivated (the owner's act),
  EvictedDueToPodsReadyTimeout → evicted, …
- Workload, any other reason starting with Evicted → decision evicted
- Node, NodeNotReady → `health.fault` node-down, critical, detail = message
- Node, NodeReady → `health.cleared` node-down
- Node, any other reason, type Warning → `health.fault` code = the reason in kebab case, warning

A decision's tenant is the involved object's namespace (the Event's own namespace when
the involved object leaves it out: the API server requires them equal), or the Event's
label `tenant_field` when it has one, or the option `tenant` when the Event names no
namespace at all; its reason is the Event's reason; `notice_s` is never guessed. Node
events are fleet events (no tenant).

Everything else (Job SuccessfulCreate, Pod Pulled, kubelet NodeHasSufficientMemory, …)
is valid input we have no use for: skipped, neither accepted nor quarantined. Pass a
`collections.Counter` as option `skipped` to count them by (kind, reason).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ingest.base import event_from_object
from ingest.k8sdocs import K8sObject, kinds_in, read_objects
from ingest.k8sfields import ObjectError, field, mapping, tenant, text, utc_time
from ingest.kueue import eviction_decision
from ingest.options import IngestOptions, option
from schemas import Record, Rejected

#: Fixed times first: an Event's identity must not move when the API server updates it.
TIME_FIELDS = (
    ("eventTime",),
    ("firstTimestamp",),
    ("deprecatedFirstTimestamp",),
    ("metadata", "creationTimestamp"),
    ("lastTimestamp",),
    ("series", "lastObservedTime"),
    ("deprecatedLastTimestamp",),
)
VOLATILE = (
    "count",
    "lastTimestamp",
    "series",
    "deprecatedCount",
    "deprecatedLastTimestamp",
    "deprecatedSeries",
)
VOLATILE_METADATA = ("resourceVersion", "managedFields")
# metav1.Time's zero value, which some writers print instead of null: unset
ZERO_TIME = "0001-01-01T00:00:00"
# client-go's prefix of a message it rewrites on each repeat
AGGREGATED = "(combined from similar events): "
POD_DECISIONS = {
    "Scheduled": "placed",
    "Preempted": "preempted",
    "Preempting": "preempted",
    "Evicted": "evicted",
    "Evicting": "evicted",
    "FailedScheduling": "queued",
}
WORKLOAD_DECISIONS = {
    "QuotaReserved": "admitted",
    "Admitted": "admitted",
    "Pending": "queued",
    "Preempted": "preempted",
    "EvictedDueToPreempted": "preempted",
}
_RECLAIM = re.compile(
    r"InCohortReclamation|InCohortReclaimWhileBorrowing|reclamation within the cohort"
)
_ASSIGNED = re.compile(
    r"Successfully assigned (?P<namespace>[^/\s]+)/(?P<pod>\S+) to (?P<node>\S+)"
)
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


class K8sEventsOptions(IngestOptions):
    """What k8s-events is told beside its file."""

    format = "k8s-events"

    cluster: str | None = option("The cluster name, part of every event's source.")
    tenant_field: str | None = option(
        "The metadata label to take the tenant from (default: the namespace)."
    )
    tenant: str | None = option("The tenant of an object with no label and no namespace.")


class K8sEventsIngestor:
    name = "k8s-events"
    options = K8sEventsOptions
    description = "Kubernetes Events (core/v1, events.k8s.io/v1), JSON or YAML"

    def identify(self, path: Path, head: bytes) -> bool:
        return (
            bool(kinds_in(head) & {"Event", "EventList"})
            and b'"specversion"' not in head
            and (b"involvedObject" in head or b"regarding" in head)
        )

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        cluster = options.get("cluster") or "default"
        tenant_field, default_tenant = options.get("tenant_field"), options.get("tenant")
        skipped: Counter[tuple[str, str]] = options.get("skipped", Counter())
        for item in read_objects(path):
            if isinstance(item, Rejected):
                yield item
                continue
            try:
                event = k8s_event(item.body, cluster, tenant_field, default_tenant)
            except ObjectError as exc:
                yield item.rejected(exc)
                continue
            if event is None:
                skipped[_involved_kind_reason(item)] += 1
            else:
                yield event_from_object(event, item.origin, item.raw)


def _involved_kind_reason(item: K8sObject) -> tuple[str, str]:
    kind = field(item.body, ("involvedObject", "kind")) or field(item.body, ("regarding", "kind"))
    return str(kind or ""), str(item.body.get("reason") or "")


def k8s_event(
    body: dict[str, Any],
    cluster: str = "default",
    tenant_field: str | None = None,
    default_tenant: str | None = None,
) -> dict[str, Any] | None:
    """The CloudEvent (as a dict) of one Kubernetes Event, None when it is not one we use."""
    kind = text(body, ("kind",), required=True)
    if kind != "Event":
        raise ObjectError(("kind",), f"not a Kubernetes Event: {kind!r}")
    involved = (
        "regarding" if "regarding" in body and "involvedObject" not in body else "involvedObject"
    )
    mapping(body, (involved,))
    target_kind = text(body, (involved, "kind")) or ""
    reason = text(body, ("reason",)) or ""
    made = _mapped(body, involved, target_kind, reason, (tenant_field, default_tenant))
    if made is None:
        return None
    event_type, data = made
    uid = text(body, ("metadata", "uid"), required=True)
    data["k8s_event"] = fixed_part(body)
    return {
        "specversion": "1.0",
        "id": uid,
        "source": f"k8s://{cluster}",
        "type": event_type,
        "time": _event_time(body),
        "data": {k: v for k, v in data.items() if v is not None},
    }


def fixed_part(body: dict[str, Any]) -> dict[str, Any]:
    """The Event without what the API server changes while the same transition repeats."""
    kept = {k: v for k, v in body.items() if k not in VOLATILE}
    if isinstance(kept.get("metadata"), dict):
        kept["metadata"] = {
            k: v for k, v in kept["metadata"].items() if k not in VOLATILE_METADATA
        }
    for name in ("message", "note"):
        if isinstance(kept.get(name), str) and kept[name].startswith(AGGREGATED):
            del kept[name]
    return kept


Tenancy = tuple[str | None, str | None]  # (tenant_field, the tenant option)


def _mapped(
    body: dict[str, Any], involved: str, kind: str, reason: str, tenancy: Tenancy
) -> tuple[str, dict[str, Any]] | None:
    if kind == "Pod" and reason in POD_DECISIONS:
        data = _decision(body, involved, POD_DECISIONS[reason], reason, tenancy)
        data["job_id"] = text(body, (involved, "name"), required=True)
        if reason == "Scheduled":
            match = _ASSIGNED.search(_message(body))
            data["node"] = match["node"] if match else None
        return "policy.decision", data
    if kind == "Workload" and (
        text(body, (involved, "apiVersion")) or "kueue.x-k8s.io/"
    ).startswith("kueue.x-k8s.io/"):
        decision = _workload_decision(reason, _message(body))
        if decision is None:
            return None
        data = _decision(body, involved, decision, reason, tenancy)
        data["allocation_id"] = text(body, (involved, "name"), required=True)
        return "policy.decision", data
    if kind == "Node":
        return _node_health(body, involved, reason)
    return None


def _workload_decision(reason: str, message: str) -> str | None:
    decision = WORKLOAD_DECISIONS.get(reason)
    if decision is None and reason.startswith("Evicted"):
        decision = (
            eviction_decision(reason.removeprefix("EvictedDueTo"))
            if reason.startswith("EvictedDueTo")
            else "evicted"
        )
    if decision == "preempted" and _RECLAIM.search(message):
        return "reclaimed"
    return decision


def _decision(
    body: dict[str, Any], involved: str, decision: str, reason: str, tenancy: Tenancy
) -> dict[str, Any]:
    namespace_path = (
        (involved, "namespace")
        if text(body, (involved, "namespace"))
        else ("metadata", "namespace")
    )
    return {
        "tenant": tenant(body, namespace_path, *tenancy),
        "decision": decision,
        "reason": reason,
    }


def _node_health(
    body: dict[str, Any], involved: str, reason: str
) -> tuple[str, dict[str, Any]] | None:
    node = text(body, (involved, "name"), required=True)
    if reason == "NodeNotReady":
        return "health.fault", {
            "node": node,
            "code": "node-down",
            "severity": "critical",
            "detail": _message(body) or None,
        }
    if reason == "NodeReady":
        return "health.cleared", {"node": node, "code": "node-down"}
    if text(body, ("type",)) == "Warning" and reason:
        return "health.fault", {
            "node": node,
            "code": kebab(reason),
            "severity": "warning",
            "detail": _message(body) or None,
        }
    return None


def kebab(reason: str) -> str:
    """`NodeHasDiskPressure` → `node-has-disk-pressure`, `ContainerGCFailed` →
    `container-gc-failed`.
    """
    return _WORD.sub("-", reason).lower()


def _message(body: dict[str, Any]) -> str:
    return text(body, ("message",)) or text(body, ("note",)) or ""


def _event_time(body: dict[str, Any]) -> str:
    """The first fixed time set; every time field is checked, so a malformed moving one
    is still an error, not a value quietly passed over."""
    times = [utc_time(body, path, required=False) for path in TIME_FIELDS]
    for moment in times:
        if moment is not None and not moment.startswith(ZERO_TIME):
            return moment
    raise ObjectError(
        ("eventTime",),
        "no time: none of eventTime, firstTimestamp, metadata.creationTimestamp, "
        "lastTimestamp, series.lastObservedTime is set",
    )


__all__ = ["K8sEventsIngestor", "fixed_part", "k8s_event", "kebab"]
