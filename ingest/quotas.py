"""What the quota ingestors share (Kueue ClusterQueues, Slurm QOS; docs/quotas.md): the
mapping of a flavor or GPU type to a placement class, and the revisions of one quota.

A quota source is a snapshot: it says what the limits are now, never since when, and it
shows the same limits on every poll. So one quota (a pool, a tenant, a class) is a chain
of revisions under one source, ids `<pool>:<tenant>:<class>:r1`, `…:r2`, …. Where the
caller passes the option `recorded` (`gpuledger ingest` passes the ledger's look-up), the
chain is walked to its last stored revision: the same limits again are that revision
given again exactly as stored (a duplicate, nothing appended); other limits are the next
revision, in force from the snapshot's time. So 8 → 4 → 8 is three revisions, and a
second ingest of any snapshot appends nothing. Without `recorded` each file stands alone
and every quota is its first revision.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ingest.base import IngestError, event_from_json, event_from_object
from ingest.probes import _capture_time  # one reading of --scrape-time for every snapshot format
from schemas import Origin, Record, format_utc
from schemas.events import QUOTA_CLASS_PATTERN

Recorded = Callable[[str, str, str], "bytes | None"]  # source, id, tenant
_CLASS = re.compile(QUOTA_CLASS_PATTERN)
MAX_REVISIONS = 10_000  # a quota changed more often than this is not a quota: stop walking


def name_map(text: Any, option: str) -> dict[str, str]:
    """`gpu-a40=whole,gpu-a100=whole`: each name and what it maps to (the option named in
    errors).
    """
    if text is None or text == "":
        return {}
    mapping: dict[str, str] = {}
    for pair in str(text).split(","):
        name, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not name or not value:
            raise IngestError(
                f"expected NAME=VALUE pairs separated by commas, found {pair.strip()!r}",
                option=option,
            )
        mapping[name] = value
    return mapping


def class_map(text: Any) -> dict[str, str]:
    """`gpu-a40=whole,a100-mig=mig:3g.40gb`: each flavor (or GPU type) and the class it is
    offered as.
    """
    mapping = name_map(text, "flavor_class")
    for name, value in mapping.items():
        if not _CLASS.fullmatch(value):
            raise IngestError(
                f"{name}={value}: a class is whole, timeslice or mig:<profile> (mig:3g.40gb)",
                option="flavor_class",
            )
    return mapping


def gpu_count(value: Any) -> int | None:
    """A Kubernetes quantity or a sacctmgr figure that is a whole number of GPUs, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and re.fullmatch(r"\+?\d{1,7}", value.strip()):
        return int(value.strip())
    return None


def quota_record(
    source: str,
    data: dict[str, Any],
    time: str,
    origin: Origin,
    raw: bytes,
    recorded: Recorded | None,
) -> Record:
    """The quota's event: its last stored revision again when the limits are the same,
    else the next revision at `time`."""
    key = f"{data['pool']}:{data['tenant']}:{data['placement_class']}"
    data = {k: v for k, v in data.items() if v is not None}
    revision = 1
    if recorded is not None:
        last = _last_revision(source, key, str(data["tenant"]), recorded)
        if last is not None:
            number, stored = last
            if orjson.loads(stored).get("data") == data:
                return event_from_json(stored, origin)
            revision = number + 1
    event = {
        "specversion": "1.0",
        "id": f"{key}:r{revision}",
        "source": source,
        "type": "policy.quota",
        "time": time,
        "data": data,
    }
    return event_from_object(event, origin, raw)


def _last_revision(
    source: str, key: str, tenant: str, recorded: Recorded
) -> tuple[int, bytes] | None:
    last: tuple[int, bytes] | None = None
    for number in range(1, MAX_REVISIONS + 1):
        stored = recorded(source, f"{key}:r{number}", tenant)
        if stored is None:
            return last
        last = (number, stored)
    return last


def recorded_of(options: dict[str, Any]) -> Recorded | None:
    recorded = options.get("recorded")
    return recorded if callable(recorded) else None


def snapshot_time(path: Path, options: dict[str, Any]) -> str:
    """`--scrape-time` (when the snapshot was taken), else the file's modification time."""
    return format_utc(_capture_time(path, options.get("scrape_time")))


__all__ = [
    "Recorded",
    "class_map",
    "name_map",
    "gpu_count",
    "quota_record",
    "recorded_of",
    "snapshot_time",
]
