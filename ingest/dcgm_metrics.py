"""NVIDIA dcgm-exporter scrapes: the Prometheus text exposition format (`# HELP`, `# TYPE`,
samples `name{label="value",...} value [timestamp ms]`), one scrape or several concatenated.

Only `DCGM_FI_DEV_XID_ERRORS` makes events. It is a gauge holding the last XID a GPU
(or MIG instance) raised, and it keeps that value until the driver is reset, the node
rebooted or the exporter restarted (dcgm-exporter issues #190, #500): a repeat of the same
XID cannot be seen in it. So a fault is the gauge of one series (node, `gpu`, `UUID`,
`GPU_I_ID`) taking a value v > 0, and every scrape after that shows the same fault again.
It becomes `health.fault` {node, device, code `xid-<v>`, severity `critical` for the XIDs
in CRITICAL_XIDS, else `warning`}. The node is the `Hostname` label (dcgm-exporter's),
else `hostname` (a common relabelling), else the `node` option. The device is the `gpu`
index (an int; the UUID when there is no `gpu` label); for a MIG instance (`GPU_I_ID`) it
is `<gpu>/<GPU_I_ID>` (`"0/13"`), so the fault touches that instance only: reconcile
matches a fault's device against an allocation's `devices` as text, so an allocation
that lists `"0/13"` is touched, one that lists GPU `"0"` or instance `"0/14"` is not, and
one that lists no devices is touched through its node. The sample's device and error
labels ride along under `labels` (FAULT_LABELS, an allow list; the model also as
`model`): a fault is a fleet event and carries no tenant's data, and any other label
(a pod's, a DRA claim's, a relabelling rule's) may name one. A line that gives a label
twice is refused (Prometheus refuses it too).

Identity: `<node>:<gpu>:<UUID>:<GPU_I_ID>:xid:<v>` (`-` for a missing label) under
source `dcgm-exporter://<node>`, at the time of the first scrape that shows it. A
collector scraping every few minutes shows the same fault in every later file: where the
caller passes the option `recorded` (a function (source, id) → the stored event's bytes,
or None; `gpuledger ingest` passes the ledger's), a fault already recorded is given again
exactly as stored, a duplicate, and nothing is appended. A file that shows the gauge
change to v (from 0 or another XID) after v was already recorded saw a new occurrence
(the gauge was reset in between): its id gets `:<timestamp ms>`. Without `recorded`
each file stands alone: its first sighting of each fault is reported once.

The profiling and utilisation counters (ingest/dcgm_counters.py: SM, tensor and DRAM active,
NVLink bytes, GPU utilisation) make one `device.counters` event per device and instant,
gathered over the lines that hold its metrics and given once the file is read, each from
the line of its first metric. A counter sample needs a time as a fault does (its timestamp,
else `scrape_time`); one with neither is rejected naming its line and field `timestamp`.

Every fault needs a time: its sample's own timestamp, else the `scrape_time` option
(RFC 3339); an XID sample > 0 with neither is an input error naming its line (0 and
blank values say nothing, so dcgm-exporter's usual scrapes without timestamps read). Other metrics
are not
events: their lines are checked for form and otherwise passed over. A scrape pasted with
the shell prompt that made it (`$ curl localhost:9400/metrics`) and `...` where lines were
cut is read as the probe formats read pastes: those lines are passed over
(`ingest.base.pasted_around`), neither read nor quarantined. DCGM's "blank"
sentinels (values near 2^63) mean no value. Source `dcgm-exporter://<node>`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

from ingest.base import (
    UTF8_BOM,
    IngestError,
    event_from_json,
    event_from_object,
    open_source,
    pasted_around,
)
from ingest.dcgm_counters import (
    COUNTERS,
    CounterError,
    DeviceKey,
    Pending,
    canonical_labels,
    canonical_metric,
    counter_value,
    device_key,
    interval_seconds,
    pending_records,
)
from ingest.options import IngestOptions, ScrapeTime, option
from schemas import Accepted, Origin, Record, Rejected, format_utc
from schemas.errors import BadInput

XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
#: DCGM's error counters (totals since the driver loaded): a fault each time one rises,
#: with the code and severity dcgm-stats gives the same errors (ingest/dcgm_stats.py).
ERROR_COUNTERS = {
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc-dbe", "critical"),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie-replay", "warning"),
}
#: XIDs that mean the GPU or its memory cannot be trusted until it is reset or replaced.
CRITICAL_XIDS = frozenset({48, 63, 64, 74, 79, 94, 95, 119, 120})
DCGM_BLANK = 0x7FFFFFFFFFFFFFF0  # DCGM_INT64_BLANK: values from here up are "no value"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|(?=\}))')
_CLOSE = re.compile(r"\s*\}")
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|Inf|inf|NaN|nan)")
_INTEGER = re.compile(r"-?\d{1,18}")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
#: The labels a fleet fault keeps: the device's and the error's, as dcgm-exporter writes
#: them. An allow list: whatever else a scrape carries (the pod's own labels under
#: `--kubernetes-enable-pod-labels`, a DRA claim's namespace and name, a relabelling
#: rule's additions) may name a tenant, and a fault is carried whole in every packet
#: of that node's tenants.
FAULT_LABELS = frozenset(
    {
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "hostname",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "DCGM_FI_DRIVER_VERSION",
        "err_code",
        "err_msg",
    }
)
Recorded = Callable[[str, str], bytes | None]
Series = tuple[str, str, str, str]


class _Bad(BadInput, ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    value_text: str
    timestamp_ms: int | None


class DcgmMetricsOptions(IngestOptions):
    """What dcgm-metrics is told beside its file."""

    format = "dcgm-metrics"

    scrape_time: ScrapeTime = option("The time of samples that carry no timestamp, RFC 3339.")
    node: str | None = option("The node of samples with no Hostname label.")
    fabric_domain: str | None = option("The fabric domain the node belongs to.")
    interval_s: str | None = option(
        "The exporter's collection interval in seconds: a counter sample at t stands for "
        "[t - interval_s, t] (default 30)."
    )


class DcgmMetricsIngestor:
    name = "dcgm-metrics"
    options = DcgmMetricsOptions
    description = "NVIDIA dcgm-exporter metrics: Prometheus text exposition, one scrape or several"
    # its option `recorded` is a function: parsed in the ingesting process (ingest/worker.py)
    reads_ledger = True

    def identify(self, path: Path, head: bytes) -> bool:
        return (
            re.search(
                # a relabelled scrape may give the names in lower case
                rb"(?im)^(?:# (?:HELP|TYPE) )?DCGM_FI_[A-Z0-9_]+[{ ]",
                head.removeprefix(UTF8_BOM),
            )
            is not None
        )

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        try:
            interval_s = interval_seconds(options.get("interval_s"))
        except CounterError as bad:
            raise IngestError(bad.reason, option="interval_s") from None
        state = _FileState(
            _scrape_ms(options.get("scrape_time")), options.get("recorded"), options
        )
        offset = 0
        with open_source(path) as stream:
            for number, raw in enumerate(stream, start=1):
                origin = Origin(str(path), number, offset)
                offset += len(raw)
                record = _line_record(
                    origin, raw.removeprefix(UTF8_BOM) if number == 1 else raw, state
                )
                if record is not None:
                    yield record
        yield from pending_records(state.pending, interval_s, state.options)


def _counter_line(sample: Sample, origin: Origin, raw: bytes, state: _FileState) -> None:
    """Gather one counter line into its device's sample; raises _Bad when it is unreadable."""
    try:
        value = counter_value(sample.name, sample.value_text)
        if value is None:
            return
        key = device_key(sample.labels, state.options.get("node"))
    except CounterError as bad:
        raise _Bad(bad.field, bad.reason) from None
    timestamp_ms = sample.timestamp_ms if sample.timestamp_ms is not None else state.scrape_ms
    if timestamp_ms is None:
        raise _no_time(origin)
    pending = state.pending.setdefault(
        (key, timestamp_ms), Pending(origin, raw, dict(sample.labels))
    )
    try:
        pending.add(sample.name, value, sample.labels)
    except CounterError as bad:
        raise _Bad(bad.field, bad.reason) from None


@dataclass
class _FileState:
    scrape_ms: int | None
    recorded: Recorded | None
    options: dict[str, Any]
    last: dict[Series, int] = field(default_factory=dict)  # each series' last value in this file
    emitted: dict[tuple[str, str], bytes] = field(
        default_factory=dict
    )  # faults this file gave, by key
    pending: dict[tuple[DeviceKey, int], Pending] = field(
        default_factory=dict
    )  # counter samples, by device and instant
    totals: dict[tuple[str, ...], int] = field(default_factory=dict)  # error counters' last

    def known(self, source: str, event_id: str) -> bytes | None:
        """The fault under this key, as this file or the ledger already has it."""
        held = self.emitted.get((source, event_id))
        if held is None and self.recorded is not None:
            held = self.recorded(source, event_id)
        return held


def _scrape_ms(text: str | None) -> int | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise IngestError(f"not an RFC 3339 time: {text!r}", option="scrape_time") from None
    moment = moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _line_record(origin: Origin, raw: bytes, state: _FileState) -> Record | None:
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return Rejected(origin, "(line)", f"not valid UTF-8 at byte {exc.start}", raw)
    if not text or text.startswith("#") or pasted_around(text):
        return None
    try:
        sample = parse_sample(text)
        if sample.name in COUNTERS:
            _counter_line(sample, origin, raw, state)
            return None
        if sample.name in ERROR_COUNTERS:
            return _error_count_record(sample, origin, raw, state)
        if sample.name != XID_METRIC:
            return None
        return _xid_record(sample, origin, raw, state)
    except _Bad as bad:
        return Rejected(origin, bad.field, bad.reason, raw)


def parse_sample(text: str) -> Sample:
    """One sample line of the text format; raises _Bad saying which part is wrong."""
    name = _NAME.match(text)
    if name is None:
        raise _Bad("(line)", f"not a Prometheus sample: {text[:40]!r}")
    labels, end = (
        _labels(text, name.end()) if text[name.end() :].startswith("{") else ({}, name.end())
    )
    rest = text[end:]
    parts = rest.split()
    if not parts or len(parts) > 2 or (rest and not rest[0].isspace()):
        raise _Bad("(line)", "expected a value and an optional timestamp after the metric")
    value_text = parts[0]
    if _NUMBER.fullmatch(value_text) is None:
        raise _Bad("value", f"not a number: {value_text!r}")
    timestamp = None
    if len(parts) == 2:
        if _INTEGER.fullmatch(parts[1]) is None:
            raise _Bad("timestamp", f"not a millisecond timestamp: {parts[1]!r}")
        timestamp = int(parts[1])
    return Sample(
        canonical_metric(name.group()),
        canonical_labels(labels),
        float(value_text),
        value_text,
        timestamp,
    )


def _labels(text: str, start: int) -> tuple[dict[str, str], int]:
    """The label set that opens at text[start] ('{'), and the index just past its '}'."""
    labels: dict[str, str] = {}
    position = start + 1
    while True:
        closing = _CLOSE.match(text, position)
        if closing is not None:
            return labels, closing.end()
        found = _LABEL.match(text, position)
        if found is None:
            raise _Bad(
                "labels",
                f"malformed label set at column {position + 1}: "
                f"{text[position : position + 30]!r}",
            )
        if found.group(1) in labels:  # Prometheus refuses it: no copy may silently win
            raise _Bad("labels", f"the label {found.group(1)!r} is given twice")
        labels[found.group(1)] = re.sub(r'\\[\\"n]', lambda m: _ESCAPES[m.group()], found.group(2))
        position = found.end()


def _xid_record(sample: Sample, origin: Origin, raw: bytes, state: _FileState) -> Record | None:
    xid = _xid_value(sample)
    if xid is None:
        return None
    node, series = _series_of(sample, state)
    previous = state.last.get(series)
    state.last[series] = xid
    if xid == 0 or xid == previous:
        return None
    change = f"from {previous}" if previous is not None else "first value in this file"
    what = {
        "code": f"xid-{xid}",
        "severity": "critical" if xid in CRITICAL_XIDS else "warning",
        "detail": f"{XID_METRIC} = {xid} ({change})",
        "xid": xid,
        "previous_xid": previous,
    }
    return _series_fault(sample, origin, raw, state, (node, series), ("xid", xid), previous, what)


def _series_fault(
    sample: Sample,
    origin: Origin,
    raw: bytes,
    state: _FileState,
    place: tuple[str, Series],
    named: tuple[str, int],
    previous: int | None,
    what: dict[str, Any],
) -> Record:
    """The fault a series' new value makes (`named`: its kind and value, the id's tail).
    As the file's first value, one the ledger already holds is given again as stored (a
    duplicate); the same value after another is a new occurrence, its id taking the time."""
    timestamp_ms = sample.timestamp_ms if sample.timestamp_ms is not None else state.scrape_ms
    if timestamp_ms is None:
        raise _no_time(origin)
    node, series = place
    source = f"dcgm-exporter://{node}"
    key = ":".join(part or "-" for part in (*series, named[0], str(named[1])))
    known = state.known(source, key)
    if known is not None and previous is None:
        return event_from_json(known, origin)  # the series still shows a fault recorded
    event = _health_event(sample, node, timestamp_ms, state.options, what)
    event["source"], event["id"] = source, key
    if known is not None and orjson.loads(known).get("time") != event["time"]:
        event["id"] = f"{key}:{timestamp_ms}"  # back to that value again: a new occurrence
    record = event_from_object(event, origin, raw)
    if isinstance(record, Accepted):
        state.emitted.setdefault((source, event["id"]), record.body)
    return record


def _no_time(origin: Origin) -> IngestError:
    """A sample that needs a time (a fault, a counter) in a scrape without timestamps, and
    no scrape time given: the whole file is refused before anything of it is stored (a
    dcgm-exporter scrape carries no timestamps; the collector knows when it scraped)."""
    return IngestError(
        f"{origin}: timestamp: the sample has no timestamp; give the scrape time (RFC 3339)",
        option="scrape_time",
    )


def _error_count_record(
    sample: Sample, origin: Origin, raw: bytes, state: _FileState
) -> Record | None:
    """A fault when an error counter rises: from its previous value in this file, or, as
    the file's first value, above 0 unless the ledger already holds the fault at that
    total (a poll that sees it again gives a duplicate). A fall is the driver reloaded."""
    total = _whole(sample, "an error count")
    if total is None:
        return None
    node, series = _series_of(sample, state)
    previous = state.totals.get((*series, sample.name))
    state.totals[(*series, sample.name)] = total
    if total == 0 or (previous is not None and total <= previous):
        return None
    code, severity = ERROR_COUNTERS[sample.name]
    change = f"from {previous}" if previous is not None else "first value in this file"
    what = {
        "code": code,
        "severity": severity,
        "detail": f"{sample.name} = {total} ({change})",
        "count": total,
        "previous_count": previous,
    }
    return _series_fault(sample, origin, raw, state, (node, series), (code, total), previous, what)


def _series_of(sample: Sample, state: _FileState) -> tuple[str, Series]:
    """The node and the (node, gpu, UUID, GPU_I_ID) series a fault sample names; raises _Bad
    when it names none."""
    labels = sample.labels
    node = labels.get("Hostname") or labels.get("hostname") or state.options.get("node")
    if not node:
        raise _Bad("Hostname", "no Hostname or hostname label, and no node named for the file")
    gpu, uuid, instance = labels.get("gpu", ""), labels.get("UUID", ""), labels.get("GPU_I_ID", "")
    if gpu and not (gpu.isdigit() and gpu.isascii() and len(gpu) <= 9):
        raise _Bad("gpu", f"not a GPU index: {gpu!r}")
    if not gpu and not uuid:
        raise _Bad("gpu", "no gpu or UUID label to name the device")
    return node, (node, gpu, uuid, instance)


def _whole(sample: Sample, what: str) -> int | None:
    """A whole number ≥ 0 below 2^32, None for DCGM's blank; raises _Bad otherwise."""
    value = sample.value
    if math.isnan(value) or math.isinf(value):
        raise _Bad("value", f"not {what}: {sample.value_text!r}")
    if value >= DCGM_BLANK:
        return None
    if value < 0 or value != int(value) or value >= 2**32:
        raise _Bad("value", f"not {what}: {sample.value_text}")
    return int(value)


def _xid_value(sample: Sample) -> int | None:
    value = sample.value
    if math.isnan(value) or math.isinf(value):
        raise _Bad("value", f"not an XID number: {sample.value_text!r}")
    if value >= DCGM_BLANK:
        return None  # DCGM's blank: no XID value known
    if value < 0:
        raise _Bad("value", f"negative XID {sample.value_text}")
    if value != int(value) or value >= 2**32:
        raise _Bad("value", f"not a whole XID number: {sample.value_text}")
    return int(value)


def _device(labels: dict[str, str]) -> int | str:
    """The GPU index (else its UUID); `<gpu>/<GPU_I_ID>` for a MIG instance."""
    gpu, instance = labels.get("gpu", ""), labels.get("GPU_I_ID", "")
    whole: int | str = int(gpu) if gpu else labels["UUID"]
    return f"{whole}/{instance}" if instance else whole


def _health_event(
    sample: Sample,
    node: str,
    timestamp_ms: int,
    options: dict[str, Any],
    what: dict[str, Any],
) -> dict[str, Any]:
    """A `health.fault` of the sample's device: `what` (code, severity, detail, …), the
    device's place and its allowed labels (FAULT_LABELS)."""
    labels = sample.labels
    try:
        moment = _EPOCH + timedelta(milliseconds=timestamp_ms)
    except OverflowError:
        raise _Bad("timestamp", f"out of range: {timestamp_ms}") from None
    data = {
        "node": node,
        "device": _device(labels),
        "fabric_domain": options.get("fabric_domain"),
        **what,
        "model": labels.get("modelName"),
        "labels": {k: v for k, v in labels.items() if k in FAULT_LABELS},
    }
    return {
        "specversion": "1.0",
        "type": "health.fault",
        "time": format_utc(moment),
        "data": {k: v for k, v in data.items() if v is not None},
    }


__all__ = ["CRITICAL_XIDS", "DcgmMetricsIngestor", "Sample", "parse_sample"]
