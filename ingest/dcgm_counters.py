"""DCGM profiling counters as `device.counters` events (docs/events.md), one per device and
sample, from a dcgm-exporter scrape (ingest/dcgm_metrics.py) or a Prometheus range query
(ingest/prometheus_range.py).

dcgm-exporter samples each field once per collection interval (its `-c`, 30 s by default)
and the profiling fields are means over that interval. So a sample at t stands for the
window [t − interval_s, t]. Every metric of one device at one instant makes one event:

    source  dcgm-exporter://<node>
    id      <node>:<gpu>:<UUID>:<GPU_I_ID>:counters:<t in ms>:<fields>
            (`-` for a missing label; <fields> the counters it holds, sorted, joined by `+`)

Both readers give the same sample of the same counters the same identity, so a poll that
sees a sample again (the next scrape file of a collector, an overlapping range query) gives
a duplicate, never a second sample. A range query of fewer counters than the scrape held
makes another event of the same instant: the engine counts a device's instant once
(RULES.md 14). The counters read, by DCGM field:

    DCGM_FI_PROF_SM_ACTIVE           sm_active        ratio in [0, 1]
    DCGM_FI_PROF_PIPE_TENSOR_ACTIVE  tensor_active    ratio in [0, 1]
    DCGM_FI_PROF_DRAM_ACTIVE         dram_active      ratio in [0, 1]
    DCGM_FI_PROF_NVLINK_TX_BYTES     nvlink_tx_bytes  bytes per second
    DCGM_FI_PROF_NVLINK_RX_BYTES     nvlink_rx_bytes  bytes per second
    DCGM_FI_DEV_GPU_UTIL             gpu_util         percent in [0, 100]

A value out of its range, or not a number, rejects its line (file, line, field `value`).
DCGM's blank sentinels (from 2^63 − 16 up) mean no value. The device's pod, namespace and
container labels name a tenant's workload: a fleet event never carries them. Where
dcgm-exporter's Kubernetes mapping names them (`pod` and `namespace` not empty, or their
`exported_` forms), the same sample also makes a tenant event, `job.counters` (a source
that mixes both yields the device's facts and, apart, the tenant's telemetry): tenant the
namespace, job_id the pod, under the same source, id `<the device event's
id>:pod:<namespace>/<pod>`. Where the HPC job mapping names a Slurm job (`hpc_job`), the
tenant is the one of the provider's grant of that job on the sample's node, as the
ledger holds it when the file is read (the option `job_tenant`): id `<the device event's
id>:job:<hpc_job>`. A sample read before its job's grant makes no tenant event; read
again on a later poll, it does (the device event is then a duplicate).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from ingest.base import event_from_object
from schemas import Origin, Record, Rejected, format_utc
from schemas.errors import BadInput

#: DCGM field → (the event's field, the upper bound of its value, decimal places kept).
COUNTERS: dict[str, tuple[str, Decimal | None, int]] = {
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", Decimal(1), 6),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", Decimal(1), 6),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", Decimal(1), 6),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_bytes", None, 3),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_bytes", None, 3),
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", Decimal(100), 6),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active", Decimal(1), 6),
}
#: Label names a scrape configuration may give in another form (a relabelling rule, an
#: older exporter): lower-case `uuid`, and Kubernetes' `pod_name`, `pod_namespace` and
#: `container_name` of before 1.16. Read as dcgm-exporter's own names when those are absent.
LABEL_ALIASES = {
    "uuid": "UUID",
    "pod_name": "pod",
    "pod_namespace": "namespace",
    "container_name": "container",
}
#: dcgm-exporter's default collection interval (`-c 30000`, in ms), in seconds.
DEFAULT_INTERVAL_S = 30
DCGM_BLANK = 0x7FFFFFFFFFFFFFF0
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_MEASURE = Decimal(10) ** 18


class CounterError(BadInput, ValueError):
    """A counter sample that cannot be read: `field` names the part of the record at fault."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def canonical_metric(name: str) -> str:
    """A DCGM field as dcgm-exporter names it (`DCGM_FI_…`): a scrape relabelled to lower
    case (`dcgm_fi_prof_gr_engine_active`) names the same field."""
    return name.upper() if name[:8].upper() == "DCGM_FI_" else name


def canonical_labels(labels: dict[str, str]) -> dict[str, str]:
    """The labels with LABEL_ALIASES read as dcgm-exporter's own names where those are
    absent (both kept when both are given: the alias then stays as it was)."""
    out = dict(labels)
    for alias, name in LABEL_ALIASES.items():
        if alias in out and name not in out:
            out[name] = out.pop(alias)
    return out


def counter_value(metric: str, text: str) -> Decimal | None:
    """The value of a counter sample as a decimal, None for DCGM's blank; raises
    CounterError when it is not a number or out of its range."""
    _, bound, places = COUNTERS[metric]
    try:
        number = float(text)
    except ValueError:
        raise CounterError("value", f"not a number: {text[:40]!r}") from None
    if math.isnan(number) or math.isinf(number):
        raise CounterError("value", f"not a number: {text!r}")
    if number >= DCGM_BLANK:
        return None
    try:
        value = Decimal(text.strip()).quantize(Decimal(10) ** -places)
    except InvalidOperation:
        raise CounterError("value", f"not a number: {text[:40]!r}") from None
    if value < 0 or (bound is not None and value > bound) or value >= _MAX_MEASURE:
        upper = f"[0, {bound}]" if bound is not None else "≥ 0"
        raise CounterError("value", f"{metric} = {text} is outside {upper}")
    return value


def interval_seconds(text: str | None) -> int:
    """The `interval_s` option: whole seconds ≥ 1 (default DEFAULT_INTERVAL_S)."""
    if text is None or text == "":
        return DEFAULT_INTERVAL_S
    if not str(text).isdigit() or not 1 <= int(text) <= 86_400:
        raise CounterError("interval_s", f"not a whole number of seconds in [1, 86400]: {text!r}")
    return int(text)


@dataclass(frozen=True)
class DeviceKey:
    """A device as dcgm-exporter names it: its node, `gpu` index, UUID and MIG instance."""

    node: str
    gpu: str
    uuid: str
    instance: str

    @property
    def device(self) -> int | str:
        whole: int | str = int(self.gpu) if self.gpu else self.uuid
        return f"{whole}/{self.instance}" if self.instance else whole


@dataclass
class Pending:
    """One device's sample at one instant, gathered over the lines that hold its metrics,
    and each workload those lines name on it (a time-sliced GPU's exporter gives one line
    per pod, with the device's value on each)."""

    origin: Origin
    raw: bytes
    labels: dict[str, str]
    values: dict[str, Decimal] = field(default_factory=dict)
    workloads: dict[tuple[str, ...], dict[str, str]] = field(default_factory=dict)

    def add(self, metric: str, value: Decimal, labels: dict[str, str]) -> None:
        """One line's value of `metric` (a COUNTERS name) with its labels; raises
        CounterError when another line gave the same device, instant and metric another
        value: neither may silently win (a pod's own labels could otherwise steer a
        neighbour's figure onto this device)."""
        name = COUNTERS[metric][0]
        held = self.values.setdefault(name, value)
        if held != value:
            raise CounterError(
                "value",
                f"{metric} = {value} conflicts with {held} given for the same device and "
                "instant by an earlier line",
            )
        named = workload(labels)
        if named is not None or "hpc_job" in labels:
            self.workloads.setdefault(named or ("hpc_job", labels["hpc_job"]), labels)


def workload(labels: dict[str, str]) -> tuple[str, str, str] | None:
    """(namespace, pod, container) of the pod the labels name, or None. Behind a Prometheus
    that does not honour the exporter's labels (a ServiceMonitor's default), `namespace`
    and `pod` name the exporter's own pod and the workload's are `exported_…`: those win
    whenever they are given, as one set."""
    if labels.get("exported_pod") or labels.get("exported_namespace"):
        names = (labels.get("exported_namespace"), labels.get("exported_pod"))
        container = labels.get("exported_container", "")
    else:
        names = (labels.get("namespace"), labels.get("pod"))
        container = labels.get("container", "")
    namespace, pod = names
    return (namespace, pod, container) if namespace and pod else None


def device_key(labels: dict[str, str], node_option: str | None) -> DeviceKey:
    """The device a sample's labels name; raises CounterError when they name none."""
    node = labels.get("Hostname") or labels.get("hostname") or node_option
    if not node:
        raise CounterError("Hostname", "no Hostname or hostname label, and no node named")
    gpu, uuid, instance = labels.get("gpu", ""), labels.get("UUID", ""), labels.get("GPU_I_ID", "")
    if gpu and not (gpu.isdigit() and gpu.isascii() and len(gpu) <= 9):
        raise CounterError("gpu", f"not a GPU index: {gpu!r}")
    if not gpu and not uuid:
        raise CounterError("gpu", "no gpu or UUID label to name the device")
    return DeviceKey(node, gpu, uuid, instance)


def counters_event(
    key: DeviceKey,
    timestamp_ms: int,
    pending: Pending,
    interval_s: int,
    fabric_domain: str | None,
) -> dict[str, Any]:
    """The `device.counters` CloudEvent of one device's sample at `timestamp_ms`."""
    try:
        end = _EPOCH + timedelta(milliseconds=timestamp_ms)
    except OverflowError:
        raise CounterError("timestamp", f"out of range: {timestamp_ms}") from None
    start = end - timedelta(seconds=interval_s)
    data: dict[str, Any] = {
        "node": key.node,
        "device": key.device,
        "window_start": format_utc(start),
        "window_end": format_utc(end),
        "samples": 1,
        "uuid": key.uuid or None,
        "model": pending.labels.get("modelName"),
        "fabric_domain": fabric_domain,
    }
    for name, value in sorted(pending.values.items()):
        data[name] = format(value.normalize(), "f") if value else "0"
    parts = (key.node, key.gpu, key.uuid, key.instance)
    return {
        "specversion": "1.0",
        "source": f"dcgm-exporter://{key.node}",
        "id": ":".join(part or "-" for part in parts)
        + f":counters:{timestamp_ms}:{'+'.join(sorted(pending.values))}",
        "type": "device.counters",
        "time": format_utc(end),
        "data": {k: v for k, v in data.items() if v is not None},
    }


def job_counters_event(
    device_event: dict[str, Any], labels: dict[str, str], job_tenant: Any = None
) -> dict[str, Any] | None:
    """The tenant's `job.counters` beside a device's sample, when its labels name the
    workload: a pod (Kubernetes mapping: tenant the namespace), or a Slurm job (the HPC
    mapping's `hpc_job`, whose tenant only the provider's grant of that job names, through
    `job_tenant`). None when they name no tenant."""
    named = workload(labels)
    hpc_job = labels.get("hpc_job")
    data = {
        k: v
        for k, v in device_event["data"].items()
        if k not in ("uuid", "model", "fabric_domain")
    }
    if named is not None:
        namespace, pod, container = named
        data |= {"tenant": namespace, "job_id": pod, "pod": pod}
        if container:
            data["container"] = container
        suffix = f"pod:{namespace}/{pod}"
    elif hpc_job and callable(job_tenant):
        tenant = job_tenant(hpc_job, str(data["node"]), data["window_start"], data["window_end"])
        if tenant is None:
            return None
        data |= {"tenant": tenant, "job_id": hpc_job}
        suffix = f"job:{hpc_job}"
    else:
        return None
    return {
        **device_event,
        "id": f"{device_event['id']}:{suffix}",
        "type": "job.counters",
        "data": data,
    }


def pending_records(
    pending: dict[tuple[DeviceKey, int], Pending], interval_s: int, options: dict[str, Any]
) -> Iterator[Record]:
    """Each gathered sample as its device's event, then the tenant's copy for each workload
    its lines named (or its rejection), in order of first line: both readers' last step."""
    for (key, timestamp_ms), sample in pending.items():
        try:
            event = counters_event(
                key, timestamp_ms, sample, interval_s, options.get("fabric_domain")
            )
        except CounterError as bad:
            yield Rejected(sample.origin, bad.field, bad.reason, sample.raw)
            continue
        yield event_from_object(event, sample.origin, sample.raw)
        for labels in sample.workloads.values():
            job = job_counters_event(event, labels, options.get("job_tenant"))
            if job is not None:
                yield event_from_object(job, sample.origin, sample.raw)


__all__ = [
    "pending_records",
    "COUNTERS",
    "DEFAULT_INTERVAL_S",
    "CounterError",
    "DeviceKey",
    "Pending",
    "counter_value",
    "counters_event",
    "device_key",
    "interval_seconds",
    "job_counters_event",
]
