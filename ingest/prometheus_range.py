"""A Prometheus range query's answer (`GET /api/v1/query_range`) over dcgm-exporter's series:

    {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "DCGM_FI_PROF_SM_ACTIVE", "gpu": "0", "UUID": "GPU-…",
                    "Hostname": "node-07", "modelName": "NVIDIA H100 80GB HBM3"},
         "values": [[1767780000, "0.94"], [1767780030, "0.95"]]}]}}

Each value of a counter series of ingest/dcgm_counters.py is one sample of its device at
that instant (seconds since the epoch, as Prometheus gives them): the samples of one device
and instant across series make one `device.counters` event, with the same identity as the
scrape that held it (so a range query over samples already scraped gives duplicates). The
metric is the series' `__name__`, else the `metric` option (a query such as
`avg_over_time(DCGM_FI_PROF_SM_ACTIVE[1m])` drops the name); series of other metrics are
passed over. The node is the `Hostname` label, else `hostname`, else the `node` option.

A value that cannot be read is rejected naming the file, the line its series opens on and
the field (`data.result[i].values[j]`); an answer whose status is not `success` or whose
result is not a matrix is an input error. The pod, namespace and container labels name a
tenant's workload: the fleet event never carries them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ingest.base import UTF8_BOM, IngestError, open_source
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
from ingest.options import IngestOptions, option
from schemas import Origin, Record, Rejected

_SERIES = re.compile(rb'(?<!\\)"metric"\s*:')
_MAX_BYTES = 256 << 20


class PrometheusRangeOptions(IngestOptions):
    """What prometheus-range is told beside its file."""

    format = "prometheus-range"

    metric: str | None = option("The DCGM field of series that carry no __name__ label.")
    node: str | None = option("The node of series with no Hostname label.")
    fabric_domain: str | None = option("The fabric domain the nodes belong to.")
    interval_s: str | None = option(
        "The exporter's collection interval in seconds: a sample at t stands for "
        "[t - interval_s, t] (default 30)."
    )


class PrometheusRangeIngestor:
    name = "prometheus-range"
    options = PrometheusRangeOptions
    reads_ledger = True  # its option `job_tenant` is a function: parsed in the ingesting process
    description = "Prometheus /api/v1/query_range JSON over dcgm-exporter's DCGM counters"

    def identify(self, path: Path, head: bytes) -> bool:
        text = head.removeprefix(UTF8_BOM).lstrip()
        return (
            text.startswith(b"{")
            and b'"resultType"' in text
            and re.search(rb'(?i)"(?:__name__"\s*:\s*")?DCGM_FI_', text) is not None
        )

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        try:
            interval_s = interval_seconds(options.get("interval_s"))
        except CounterError as bad:
            raise IngestError(bad.reason, option="interval_s") from None
        with open_source(path) as stream:
            raw = stream.read(_MAX_BYTES + 1).removeprefix(UTF8_BOM)
        if len(raw) > _MAX_BYTES:
            raise IngestError(f"{path}: over {_MAX_BYTES >> 20} MiB: split the range query")
        series = _matrix(path, raw)
        lines = _series_lines(raw)
        pending: dict[tuple[DeviceKey, int], Pending] = {}
        for index, item in enumerate(series):
            line = lines[index] if index < len(lines) else 1
            origin = Origin(str(path), line, 0)
            yield from _series(item, index, origin, options, pending)
        yield from pending_records(pending, interval_s, options)


def _matrix(path: Path, raw: bytes) -> list[Any]:
    try:
        answer = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise IngestError(f"{path}: not JSON: {exc}") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        status = answer.get("status") if isinstance(answer, dict) else None
        raise IngestError(f"{path}: status: the query did not succeed ({status!r})")
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise IngestError(f"{path}: data.resultType: not a range query's matrix ({kind!r})")
    result = data.get("result")
    if not isinstance(result, list):
        raise IngestError(f"{path}: data.result: not a list")
    return result


def _series_lines(raw: bytes) -> list[int]:
    """The line each series' `"metric"` opens on, in file order."""
    return [raw.count(b"\n", 0, found.start()) + 1 for found in _SERIES.finditer(raw)]


def _series(
    item: Any,
    index: int,
    origin: Origin,
    options: dict[str, Any],
    pending: dict[tuple[DeviceKey, int], Pending],
) -> Iterator[Record]:
    where = f"data.result[{index}]"
    raw = orjson.dumps(item)[:4096]
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        yield Rejected(origin, f"{where}.metric", "a series needs its metric labels", raw)
        return
    labels = canonical_labels({str(k): str(v) for k, v in item["metric"].items()})
    metric = canonical_metric(str(labels.get("__name__") or options.get("metric") or ""))
    if metric not in COUNTERS:
        return
    try:
        key = device_key(labels, options.get("node"))
    except CounterError as bad:
        yield Rejected(origin, f"{where}.metric.{bad.field}", bad.reason, raw)
        return
    values = item.get("values")
    if not isinstance(values, list):
        yield Rejected(origin, f"{where}.values", "a range query's series needs values", raw)
        return
    for number, pair in enumerate(values):
        try:
            timestamp_ms, value = _point(metric, pair)
        except CounterError as bad:
            yield Rejected(origin, f"{where}.values[{number}]", bad.reason, orjson.dumps(pair))
            continue
        if value is not None:
            sample = pending.setdefault((key, timestamp_ms), Pending(origin, raw, labels))
            try:
                sample.add(metric, value, labels)
            except CounterError as bad:
                yield Rejected(origin, f"{where}.values[{number}]", bad.reason, raw)


def _point(metric: str, pair: Any) -> tuple[int, Any]:
    if (
        not isinstance(pair, list)
        or len(pair) != 2
        or not isinstance(pair[0], (int, float))
        or isinstance(pair[0], bool)
        or not isinstance(pair[1], str)
    ):
        raise CounterError("values", f'expected [seconds, "value"], got {str(pair)[:60]}')
    if not 0 <= pair[0] < 2**33:
        raise CounterError("values", f"timestamp out of range: {pair[0]}")
    return round(pair[0] * 1000), counter_value(metric, pair[1])


__all__ = ["PrometheusRangeIngestor"]
