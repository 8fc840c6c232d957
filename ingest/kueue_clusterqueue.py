"""Kueue ClusterQueues (kueue.x-k8s.io v1beta1 or v1beta2) as `kubectl get clusterqueues
-o yaml|json` prints them, best with their LocalQueues and ResourceFlavors in the same file
(`kubectl get clusterqueues,localqueues,resourceflavors -A -o yaml`): one object, a
`List`/`ClusterQueueList`, or a multi-document YAML stream (reading: ingest/k8sdocs.py).
Each becomes `policy.quota` events (docs/quotas.md).

The quota: every `spec.resourceGroups[].flavors[].resources[]` entry of a GPU resource,
its `nominalQuota`, `borrowingLimit` and `lendingLimit` (whole numbers). The class:
- `nvidia.com/mig-<profile>`: `mig:<profile>`; `nvidia.com/gpu.shared`: `timeslice`;
- `nvidia.com/gpu`: the flavor's class from the option `flavor_class`
  (`gpu-a40=whole,a100-mig=mig:3g.40gb`), else read from the ResourceFlavor's
  `spec.nodeLabels` when the file holds it (`nvidia.com/gpu.product` ending
  `-MIG-<profile>` or `nvidia.com/mig.config` `all-<profile>`: `mig:<profile>`;
  `nvidia.com/gpu.replicas` above 1, `nvidia.com/gpu.sharing-strategy` `time-slicing` or a
  product ending `-SHARED`: `timeslice`), else `whole`.
Flavors of one class add up (gpu-a40 8 and gpu-a100 4, both whole: 12), and each is kept
under `flavors`; a borrowing limit is stated only when every flavor of the class states
one. Other resources (cpu, memory, pods) are not GPUs: passed over.

The tenant: the namespace (or the label `tenant_field`) of each LocalQueue in the file
whose `spec.clusterQueue` names the ClusterQueue; with several, each gets the quota and
`shared_by` lists them all (they draw on it together). With none, the option `tenant`;
with neither the ClusterQueue is quarantined, saying so.

Time: a ClusterQueue whose `metadata.generation` is 1 has had its spec since
`creationTimestamp`, so its first quota is in force from then (or from its LocalQueue's
creation, when that is later and the LocalQueue is at generation 1 too). Otherwise the
spec may have changed since creation: the quota is in force from the snapshot's time,
`scrape_time`, else the file's modification time. Revisions: ingest/quotas.py.

What a user pastes is read as leniently as it can be read exactly: a ClusterQueue with no
`apiVersion` (a paste that lost it) is still a ClusterQueue (no other API has the kind),
but a `spec:` alone, with no kind and no name, is quarantined: which ClusterQueue it is,
so which quota a later snapshot revises, cannot be known. Source `kueue://<cluster>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from pathlib import Path
from typing import Any

from ingest.base import fixed_tenant
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
from ingest.options import CAPTURE, TENANT, FlavorClass, ScrapeTime, TenantOptions, option
from ingest.quotas import Recorded, class_map, gpu_count, quota_record, recorded_of, snapshot_time
from schemas import Record, Rejected

API_GROUP = "kueue.x-k8s.io/"
WHOLE_GPU, SHARED_GPU, MIG_PREFIX = "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-"
_KINDS = frozenset({"ClusterQueue", "LocalQueue", "ResourceFlavor"})
_MIG_PRODUCT = re.compile(r"-MIG-(\d[0-9A-Za-z.+-]*)$")
_MIG_CONFIG = re.compile(r"^all-(\d+g\.\d+gb[0-9A-Za-z.+-]*)$")
_FIRST = "1970-01-01T00:00:00Z"  # a holder given by the tenant option waits for no LocalQueue


class KueueClusterQueueOptions(TenantOptions):
    """What kueue-clusterqueue is told beside its file."""

    format = "kueue-clusterqueue"

    cluster: str | None = option("The cluster name, part of every event's source.")
    tenant_field: str | None = option(
        "The metadata label to take the tenant from (default: the namespace)."
    )
    tenant: str | None = option(TENANT)
    flavor_class: FlavorClass = option(
        "Each ResourceFlavor's placement class, "
        "NAME=CLASS,... (whole, timeslice, mig:<profile>; "
        "default: whole, or what its nodeLabels name)."
    )
    scrape_time: ScrapeTime = option(CAPTURE)


class KueueClusterQueueIngestor:
    name = "kueue-clusterqueue"
    options = KueueClusterQueueOptions
    description = (
        "Kueue ClusterQueues (with their LocalQueues, ResourceFlavors): GPU quotas per flavor"
    )
    reads_ledger = True  # its option `recorded` is a function: parsed in the ingesting process

    def identify(self, path: Path, head: bytes) -> bool:
        kinds = kinds_in(head)
        if kinds & {"Event", "EventList", "Workload", "WorkloadList"} or b'"specversion"' in head:
            return False
        if kinds & {"ClusterQueue", "ClusterQueueList"}:
            return True
        if kinds & _KINDS:  # LocalQueues or ResourceFlavors alone: Kueue's, by their API group
            return API_GROUP.encode() in head
        return (
            not kinds and b"resourceGroups" in head and b"nominalQuota" in head
        )  # a spec pasted alone

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        snapshot = _Snapshot(
            f"kueue://{options.get('cluster') or 'default'}",
            options.get("tenant_field"),
            fixed_tenant(options),
            class_map(options.get("flavor_class")),
            snapshot_time(path, options),
            recorded_of(options),
        )
        queues: list[K8sObject] = []
        for item in read_objects(path):
            if isinstance(item, Rejected):
                yield item
                continue
            rejected = snapshot.take(item, queues)
            if rejected is not None:
                yield rejected
        for queue in queues:
            yield from snapshot.quota_records(queue)


@dataclass
class _Snapshot:
    source: str
    tenant_field: str | None
    default_tenant: str | None
    flavor_classes: dict[str, str]
    time: str
    recorded: Recorded | None
    #: cluster queue → [(tenant, creation time when the LocalQueue is at generation 1)]
    local_queues: dict[str, list[tuple[str, str | None]]] = dataclass_field(default_factory=dict)
    flavor_labels: dict[str, str] = dataclass_field(
        default_factory=dict
    )  # flavor → class its nodeLabels name

    def take(self, obj: K8sObject, queues: list[K8sObject]) -> Rejected | None:
        """Keep a ClusterQueue for later, note a LocalQueue's or a flavor's facts."""
        try:
            kind = _kind(obj.body)
            if kind == "ClusterQueue":
                queues.append(obj)
            elif kind == "LocalQueue":
                self._local_queue(obj.body)
            else:
                self._flavor(obj.body)
        except ObjectError as exc:
            return obj.rejected(exc)
        return None

    def _local_queue(self, body: dict[str, Any]) -> None:
        queue = text(body, ("spec", "clusterQueue"), required=True) or ""
        who = tenant(body, ("metadata", "namespace"), self.tenant_field)
        self.local_queues.setdefault(queue, []).append((who, _since(body)))

    def _flavor(self, body: dict[str, Any]) -> None:
        name = text(body, ("metadata", "name"), required=True) or ""
        labels = mapping(body, ("spec", "nodeLabels"))
        placement = labelled_class({k: v for k, v in labels.items() if isinstance(v, str)})
        if placement is not None:
            self.flavor_labels[name] = placement

    def quota_records(self, obj: K8sObject) -> Iterator[Record]:
        try:
            quotas = self._quotas(obj.body)
        except ObjectError as exc:
            yield obj.rejected(exc)
            return
        records = [
            quota_record(self.source, data, time, obj.origin, obj.raw, self.recorded)
            for data, time in quotas
        ]
        rejected = [r for r in records if isinstance(r, Rejected)]
        yield from (rejected[:1] if rejected else records)  # a ClusterQueue is one record

    def _quotas(self, body: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
        name = text(body, ("metadata", "name"), required=True) or ""
        by_class = self._by_class(body)
        if not by_class:
            return []  # no GPU in it: no quota of ours, whoever holds it
        holders = self._holders(name)
        since = _since(body)
        shared = (
            sorted({who for who, _ in holders}) if len({who for who, _ in holders}) > 1 else None
        )
        out = []
        for who, queue_since in _distinct(holders):
            start = _later(since, queue_since)
            for placement, flavors in by_class.items():
                data = {
                    "tenant": who,
                    "placement_class": placement,
                    **_limits(flavors),
                    "pool": f"clusterqueue/{name}",
                    "cluster_queue": name,
                    "cohort": text(body, ("spec", "cohort")),
                    "flavors": flavors,
                    "shared_by": shared,
                }
                out.append((data, start or self.time))
        return out

    def _holders(self, name: str) -> list[tuple[str, str | None]]:
        holders = self.local_queues.get(name)
        if holders:
            return holders
        if self.default_tenant is not None:
            return [(self.default_tenant, _FIRST)]  # no LocalQueue's creation to wait for
        raise ObjectError(
            ("metadata", "name"),
            f"no LocalQueue in this file points at ClusterQueue {name!r}: whose quota it is "
            "cannot be read (add its LocalQueues to the file, or give the tenant option)",
        )

    def _by_class(self, body: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        by_class: dict[str, list[dict[str, Any]]] = {}
        groups: FieldPath = ("spec", "resourceGroups")
        for g, _ in enumerate(sequence(body, groups)):
            flavors = (*groups, g, "flavors")
            for f, _ in enumerate(sequence(body, flavors)):
                flavor = text(body, (*flavors, f, "name"), required=True) or ""
                resources = (*flavors, f, "resources")
                for r, _ in enumerate(sequence(body, resources)):
                    entry = _gpu_entry(body, (*resources, r), flavor)
                    if entry is not None:
                        placement = self._class(flavor, entry["resource"])
                        by_class.setdefault(placement, []).append(entry)
        return by_class

    def _class(self, flavor: str, resource: str) -> str:
        if resource.startswith(MIG_PREFIX):
            return "mig:" + resource.removeprefix(MIG_PREFIX)
        if resource == SHARED_GPU:
            return "timeslice"
        return self.flavor_classes.get(flavor) or self.flavor_labels.get(flavor) or "whole"


def _kind(body: dict[str, Any]) -> str:
    kind = text(body, ("kind",))
    if kind is None:
        if "spec" in body and "metadata" not in body:
            raise ObjectError(
                ("spec",),
                "a ClusterQueue's spec alone, with no kind and no metadata.name: which "
                "ClusterQueue it is cannot be read; ingest `kubectl get clusterqueue NAME "
                "-o yaml` instead",
            )
        raise ObjectError(("kind",), "missing")
    if kind not in _KINDS:
        raise ObjectError(
            ("kind",), f"not a Kueue ClusterQueue, LocalQueue or ResourceFlavor: {kind!r}"
        )
    api = text(body, ("apiVersion",))
    if api is not None and not api.startswith(API_GROUP):
        raise ObjectError(("apiVersion",), f"not a Kueue API version: {api!r}")
    return kind


def _since(body: dict[str, Any]) -> str | None:
    """When the object's spec was last set, where that can be read: its creation, while
    its generation is 1 (the API adds one on every change of the spec)."""
    if integer(body, ("metadata", "generation")) != 1:
        return None
    return utc_time(body, ("metadata", "creationTimestamp"), required=False)


def _distinct(holders: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """One holder a tenant (two LocalQueues of one namespace: the later creation counts;
    one whose time is unknown makes it unknown)."""
    out: dict[str, str | None] = {}
    for who, since in holders:
        if who not in out:
            out[who] = since
        else:
            known = out[who]
            out[who] = _later(known, since)
    return list(out.items())


def _later(a: str | None, b: str | None) -> str | None:
    """The later of two UTC times, None when either is unknown."""
    if a is None or b is None:
        return None
    return max(a, b, key=lambda t: datetime.fromisoformat(t.replace("Z", "+00:00")))


def _gpu_entry(body: dict[str, Any], path: FieldPath, flavor: str) -> dict[str, Any] | None:
    resource = text(body, (*path, "name"), required=True) or ""
    if resource not in (WHOLE_GPU, SHARED_GPU) and not resource.startswith(MIG_PREFIX):
        return None
    entry: dict[str, Any] = {"flavor": flavor, "resource": resource}
    for key, out in (
        ("nominalQuota", "nominal_quota"),
        ("borrowingLimit", "borrowing_limit"),
        ("lendingLimit", "lending_limit"),
    ):
        value = field(body, (*path, key))
        if value is None:
            if key == "nominalQuota":
                raise ObjectError((*path, key), "missing")
            continue
        count = gpu_count(value)
        if count is None:
            raise ObjectError((*path, key), f"{resource} = {value!r}: not a whole number of GPUs")
        entry[out] = count
    return entry


def _limits(flavors: list[dict[str, Any]]) -> dict[str, int | None]:
    """The class's figures from its flavors': a borrowing limit only where each states one
    (one without is unbounded), a lending limit where any does (one without lends all)."""
    nominal = sum(f["nominal_quota"] for f in flavors)
    borrowing = (
        sum(f["borrowing_limit"] for f in flavors)
        if all("borrowing_limit" in f for f in flavors)
        else None
    )
    lending = (
        sum(f.get("lending_limit", f["nominal_quota"]) for f in flavors)
        if any("lending_limit" in f for f in flavors)
        else None
    )
    return {"gpus": nominal, "borrowing_limit": borrowing, "lending_limit": lending}


def labelled_class(labels: dict[str, str]) -> str | None:
    """The class a ResourceFlavor's nodeLabels name (GPU feature discovery's labels)."""
    product = labels.get("nvidia.com/gpu.product", "")
    mig = _MIG_PRODUCT.search(product) or _MIG_CONFIG.match(
        labels.get("nvidia.com/mig.config", "")
    )
    if mig:
        return "mig:" + mig.group(1)
    replicas = gpu_count(labels.get("nvidia.com/gpu.replicas", ""))
    if (
        (replicas or 0) > 1
        or labels.get("nvidia.com/gpu.sharing-strategy") == "time-slicing"
        or product.endswith("-SHARED")
    ):
        return "timeslice"
    return None


__all__ = ["KueueClusterQueueIngestor", "labelled_class"]
