"""Hypothesis strategies for events the schemas accept: every type, every declared field,
and the edge value at each bound (docs/canonical-and-bounds.md) drawn often.

Ids come from small pools (two tenants, three jobs, allocations, invoices) so that the
events of one example refer to each other and the engine has something to join.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from schemas import DATA_MODELS
from schemas.events import MEASURE_DIGITS
from schemas.types import (
    AMOUNT_DECIMAL_PLACES,
    AMOUNT_WHOLE_DIGITS,
    CLOCK_SKEW,
    EARLIEST,
    MAX_DURATION_S,
    MAX_GPUS,
    MAX_LINE_GPU_SECONDS,
    MAX_SAFE_INT,
    format_utc,
)

#: The ingest clock the strategies work to.
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
LATEST = NOW + CLOCK_SKEW
LAST_DEADLINE = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
TENANTS = ("acme", "zeta")
JOBS = ("j1", "j2", "j3")
ALLOCATIONS = ("a1", "a2", "a3")
INVOICES = ("inv-1", "inv-2")

_WIDEST_AMOUNT = 10 ** (AMOUNT_WHOLE_DIGITS + AMOUNT_DECIMAL_PLACES) - 1


def edged(values: st.SearchStrategy[Any], *edges: Any) -> st.SearchStrategy[Any]:
    """`values`, with each edge drawn about as often as all the rest together."""
    return st.one_of(st.sampled_from(edges), values)


def happened(low: datetime = EARLIEST, high: datetime = LATEST) -> st.SearchStrategy[datetime]:
    naive = st.datetimes(min_value=low.replace(tzinfo=None), max_value=high.replace(tzinfo=None))
    return edged(naive.map(lambda d: d.replace(tzinfo=timezone.utc)), low, high)


def deadlines() -> st.SearchStrategy[datetime]:
    return edged(happened(EARLIEST, LAST_DEADLINE), EARLIEST, LAST_DEADLINE, NOW)


def time_text(moment: datetime) -> st.SearchStrategy[str]:
    """The same instant as RFC 3339 text: in UTC, or at an offset."""

    def at_offset(minutes: int) -> str:
        try:
            return moment.astimezone(timezone(timedelta(minutes=minutes))).isoformat()
        except OverflowError:  # 9999-12-31 east of UTC is year 10000: no such text
            return format_utc(moment)

    return st.one_of(st.just(format_utc(moment)), st.integers(-14 * 60, 14 * 60).map(at_offset))


def amounts() -> st.SearchStrategy[str]:
    """Decimal text within the amount bound: up to 11 places, below 10**7."""

    def build(places: int, units: int) -> str:
        return format(Decimal(units).scaleb(-places), "f")

    any_amount = st.integers(0, AMOUNT_DECIMAL_PLACES).flatmap(
        lambda p: st.integers(
            -(10 ** (AMOUNT_WHOLE_DIGITS + p) - 1), 10 ** (AMOUNT_WHOLE_DIGITS + p) - 1
        ).map(lambda u: build(p, u))
    )
    widest = build(AMOUNT_DECIMAL_PLACES, _WIDEST_AMOUNT)
    return edged(any_amount, widest, "-" + widest, "0.00000000001", "0", "9999999")


counts = edged(st.integers(0, MAX_SAFE_INT), 0, MAX_SAFE_INT)
positive_counts = edged(st.integers(1, MAX_SAFE_INT), 1, MAX_SAFE_INT)
safe_ints = edged(st.integers(-MAX_SAFE_INT, MAX_SAFE_INT), -MAX_SAFE_INT, MAX_SAFE_INT, 0)
gpus = edged(st.integers(1, MAX_GPUS), 1, MAX_GPUS)
seconds = edged(st.integers(0, MAX_DURATION_S), 0, MAX_DURATION_S)
names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6)
tenants = st.sampled_from(TENANTS)
jobs = st.sampled_from(JOBS)
allocations = st.sampled_from(ALLOCATIONS)


def optional(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | values


@st.composite
def billing_line(draw: st.DrawFn) -> dict[str, Any]:
    """A line whose GPUs × period stays within MAX_LINE_GPU_SECONDS, at the bound often."""
    count = draw(edged(st.integers(0, MAX_GPUS), 0, 1, MAX_GPUS))
    start = draw(happened())
    longest_us = (MAX_LINE_GPU_SECONDS * 10**6) // max(count, 1)
    room_us = (LATEST - start) // timedelta(microseconds=1)
    length_us = draw(edged(st.integers(0, min(longest_us, room_us)), min(longest_us, room_us), 0))
    line = {
        "tenant": draw(tenants),
        "invoice_id": draw(st.sampled_from(INVOICES)),
        "line_id": draw(names),
        "period_start": start,
        "period_end": start + timedelta(microseconds=length_us),
        "gpus": count,
        "amount": draw(amounts()),
        "currency": draw(st.sampled_from(["USD", "JPY", "KWD", "CLF"])),
        "unit_price": draw(optional(amounts())),
        "category": draw(st.sampled_from(["usage", "credit", "adjustment", "correction"])),
    }
    if count > 0 or draw(st.booleans()):
        line["allocation_id"] = draw(allocations)
    if line["category"] == "correction":
        line["corrects"] = draw(names)
    return line


def _tenant(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"tenant": tenants, **fields})


def _place() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "code": st.sampled_from(["xid-79", "nvlink-down", "node-down"]),
            "node": st.sampled_from(["n1", "n2"]),
            "device": optional(edged(counts, 0, 1)),
            "fabric_domain": optional(st.just("nvl-1")),
            "severity": optional(st.sampled_from(["critical", "warning"])),
        }
    )


_CHECKPOINT = {"job_id": jobs, "checkpoint_id": st.sampled_from(["c1", "c2"]), "step": counts}

#: A measured figure: decimal text within MEASURE_DIGITS either side of the point.
measures = edged(
    st.decimals(min_value=0, max_value=Decimal(10) ** MEASURE_DIGITS - 1, places=6).map(
        lambda d: format(d, "f")
    ),
    "0",
    "0.50",
    "9" * MEASURE_DIGITS + "." + "9" * MEASURE_DIGITS,
    "0." + "0" * 17 + "1",
)
_LINKS = st.sampled_from(["X", "NV18", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC"])


def _topology() -> st.SearchStrategy[dict[str, Any]]:
    gpu = st.fixed_dictionaries(
        {"name": names},
        optional={
            "cpu_affinity": names,
            "numa_affinity": names,
            "gpu_numa_id": names,
            "other_columns": st.dictionaries(names, names, max_size=2),
        },
    )
    nic = st.fixed_dictionaries({"name": names}, optional={"device": names})
    link = st.fixed_dictionaries({"a": names, "b": names, "link": _LINKS})
    return st.fixed_dictionaries(
        {
            "gpus": st.lists(gpu, min_size=1, max_size=3),
            "nics": st.lists(nic, max_size=2),
            "links": st.lists(link, max_size=3),
        }
    )


def _figure() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"name": names, "value": measures, "unit": st.sampled_from(["GB/s", "us", "ns"])},
        optional={
            "size_bytes": counts,
            "count": counts,
            "datatype": names,
            "redop": names,
            "root": safe_ints,
            "placement": st.sampled_from(["out-of-place", "in-place"]),
        },
    )


@st.composite
def _matrix(draw: st.DrawFn) -> dict[str, Any]:
    rows, columns = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    cells = draw(
        st.lists(
            st.lists(st.none() | measures, min_size=columns, max_size=columns),
            min_size=rows,
            max_size=rows,
        )
    )
    return {
        "title": draw(names),
        "unit": "GB/s",
        "rows": [str(i) for i in range(rows)],
        "columns": [str(j) for j in range(columns)],
        "cells": cells,
    }


@st.composite
def _start_receipt(draw: st.DrawFn) -> dict[str, Any]:
    """A receipt launched at or after it was submitted, when it says when that was."""
    launched = draw(happened())
    receipt = {
        "tenant": draw(tenants),
        "job_id": draw(jobs),
        "allocation_id": draw(allocations),
        "placement_class": draw(st.sampled_from(["whole", "mig", "timeslice"])),
        "launched_at": launched,
        "node": draw(optional(st.sampled_from(["n1", "n2"]))),
        "profile": draw(optional(st.just("1g.18gb"))),
        "driver": draw(optional(names)),
        "devices": draw(optional(st.lists(names | safe_ints, max_size=3))),
        "topology_digest": draw(
            optional(st.sampled_from(["sha256:" + "0" * 64, "sha512:" + "f" * 128]))
        ),
        "decision_seq": draw(optional(positive_counts)),
        "outcome": draw(optional(st.sampled_from(["started", "failed"]))),
        "reason": draw(optional(names)),
    }
    if draw(st.booleans()):
        receipt["submitted_at"] = draw(happened(EARLIEST, launched))
    return receipt


@st.composite
def _fleet_change(draw: st.DrawFn) -> dict[str, Any]:
    """A fleet change with its end, when it has one, at or after its start."""
    start = draw(happened())
    change = {
        "change_id": draw(names),
        "kind": draw(st.sampled_from(["driver-upgrade", "mig-reconfigure", "firmware", "drain"])),
        "started_at": start,
        "nodes": draw(optional(st.lists(st.sampled_from(["n1", "n2"]), max_size=2))),
        "detail": draw(optional(names)),
    }
    if draw(st.booleans()):
        change["ended_at"] = draw(happened(start))
    if change["kind"] == "mig-reconfigure":
        geometry = st.lists(
            st.fixed_dictionaries(
                {
                    "device": st.sampled_from(["0", "1"]) | st.integers(2, 3),
                    "profiles": st.lists(
                        st.sampled_from(["1g.18gb", "3g.40gb", "7g.80gb"]), max_size=3
                    ),
                },
                optional={"node": st.sampled_from(["n1", "n2"])},
            ),
            max_size=2,
            unique_by=lambda g: (g.get("node"), str(g["device"])),
        )
        change["geometry_before"], change["geometry_after"] = (
            draw(optional(geometry)),
            draw(optional(geometry)),
        )
    return change


@st.composite
def _policy_quota(draw: st.DrawFn) -> dict[str, Any]:
    """A quota whose lending limit, when it has one, is at most its nominal quota."""
    nominal = draw(edged(st.integers(0, 64), 0, 64))
    return {
        "tenant": draw(tenants),
        "placement_class": draw(
            st.sampled_from(["whole", "timeslice", "mig:3g.40gb", "mig:1g.10gb+me"])
        ),
        "gpus": nominal,
        "borrowing_limit": draw(optional(st.integers(0, 64))),
        "lending_limit": draw(optional(st.integers(0, nominal))),
    }


@st.composite
def _inference_window(draw: st.DrawFn) -> dict[str, Any]:
    """A serving window ending at or after its start, whose accepted, failed and cancelled
    requests add up to at most the requests sent (all of them often)."""
    start = draw(happened())
    requests = draw(counts)
    accepted = draw(edged(st.integers(0, requests), 0, requests))
    failed = draw(optional(edged(st.integers(0, requests - accepted), requests - accepted, 0)))
    room = requests - accepted - (failed or 0)
    cancelled = draw(optional(edged(st.integers(0, room), room, 0)))
    distribution = st.dictionaries(
        st.sampled_from(["mean", "p50", "p90", "p95", "p99", "max"]), measures, min_size=1
    )
    return {
        "tenant": draw(tenants),
        "job_id": draw(jobs),
        "allocation_id": draw(optional(allocations)),
        "window_start": start,
        "window_end": draw(happened(start)),
        "requests": requests,
        "accepted": accepted,
        "failed": failed,
        "cancelled": cancelled,
        "concurrency": draw(optional(positive_counts)),
        "request_rate": draw(optional(st.one_of(st.just("inf"), measures))),
        "request_throughput": draw(optional(measures)),
        "output_throughput": draw(optional(measures)),
        "input_tokens": draw(optional(counts)),
        "output_tokens": draw(optional(counts)),
        "ttft_ms": draw(optional(distribution)),
        "tpot_ms": draw(optional(distribution)),
        "itl_ms": draw(optional(distribution)),
        "latency_ms": draw(optional(distribution)),
        "tool": draw(optional(names)),
    }


#: For each type, a strategy of its `data`: every declared field, optional ones sometimes absent.
DATA: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "device.discovered": st.fixed_dictionaries(
        {"node": st.sampled_from(["n1", "n2"]), "device": names | counts},
        optional={"model": names, "fabric_domain": names, "mig_capable": st.booleans()},
    ),
    "allocation.granted": _tenant(
        allocation_id=allocations,
        gpus=gpus,
        devices=optional(st.lists(names | safe_ints, max_size=3)),
        node=optional(st.sampled_from(["n1", "n2"])),
        placement_class=st.sampled_from(["whole", "mig", "timeslice"]),
        profile=optional(st.just("1g.18gb")),
    ),
    "allocation.released": _tenant(allocation_id=allocations, reason=optional(names)),
    "job.submitted": _tenant(
        job_id=jobs, gpus=optional(gpus), queue=optional(names), priority=optional(safe_ints)
    ),
    "job.started": _tenant(
        job_id=jobs, allocation_id=allocations, attempt=edged(positive_counts, 1, 2)
    ),
    "job.progress": _tenant(job_id=jobs, step=counts, units=optional(counts)),
    "job.completed": _tenant(job_id=jobs),
    "job.failed": _tenant(
        job_id=jobs,
        cause=st.sampled_from(["hardware", "fabric", "application", "preempted", "unknown"]),
        detail=optional(names),
    ),
    "job.cancelled": _tenant(job_id=jobs, by=optional(names)),
    "checkpoint.started": _tenant(**_CHECKPOINT),
    "checkpoint.saved": _tenant(**_CHECKPOINT, bytes=optional(counts), digest=optional(names)),
    "checkpoint.restored": _tenant(**_CHECKPOINT),
    "policy.terms": _tenant(
        warmup_allowance_s=seconds, stall_threshold_s=seconds, reclaim_notice_s=seconds
    ),
    "policy.promise": _tenant(
        promise_id=st.sampled_from(["p1", "p2"]),
        job_id=jobs,
        start_by=deadlines(),
        complete_by=optional(deadlines()),
        placement_class=optional(st.just("whole")),
        gpus=optional(gpus),
    ),
    "policy.decision": _tenant(
        decision=st.sampled_from(
            [
                "queued",
                "admitted",
                "placed",
                "preempted",
                "reclaimed",
                "evicted",
                "borrowed",
                "lent",
                "backfilled",
                "deactivated",
            ]
        ),
        job_id=optional(jobs),
        allocation_id=optional(allocations),
        reason=optional(names),
        notice_s=optional(seconds),
        queue=optional(names),
        priority=optional(safe_ints),
    ),
    "health.fault": _place(),
    "health.cleared": _place(),
    "billing.line": billing_line(),
    "work.accepted": _tenant(job_id=jobs, result_id=names, units=optional(counts)),
    "work.rejected": _tenant(job_id=jobs, result_id=names, units=optional(counts)),
    "placement.observed": _tenant(
        allocation_id=allocations,
        node=st.sampled_from(["n1", "n2"]),
        topology=_topology(),
        tool=st.just("nvidia-smi topo -m"),
        job_id=optional(jobs),
    ),
    "probe.result": _tenant(
        allocation_id=allocations,
        probe=st.sampled_from(["nvbandwidth", "nccl-tests", "network"]),
        test=names,
        figures=st.lists(_figure(), min_size=1, max_size=3),
        matrix=optional(_matrix()),
        gpus=optional(gpus),
        nodes=optional(positive_counts),
        job_id=optional(jobs),
        tool_version=optional(names),
    ),
    "policy.quota": _policy_quota(),
    "start.receipt": _start_receipt(),
    "fleet.change": _fleet_change(),
    "inference.window": _inference_window(),
}

#: JSON values an unknown field may hold: integers within ±(2**53 - 1), or larger ones that
#: RFC 8785 writes as their own digits (a double holds them exactly, below 10**21).
json_values = st.recursive(
    st.none()
    | st.booleans()
    | safe_ints
    | st.sampled_from([2**53, -(2**53), 2**53 + 2, 10**20])
    | st.floats(allow_nan=False, allow_infinity=False)
    | names,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)


def _drop_nones(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


#: Every event type, the default of `events`.
ANY_TYPE = st.sampled_from(sorted(DATA))


@st.composite
def events(
    draw: st.DrawFn, types: st.SearchStrategy[str] = ANY_TYPE, extras: bool = True
) -> dict[str, Any]:
    """One CloudEvent as Python objects (times as text or datetimes), of any type."""
    type_ = draw(types)
    data = _drop_nones(draw(DATA[type_]))
    data = {
        k: draw(time_text(v)) if isinstance(v, datetime) and draw(st.booleans()) else v
        for k, v in data.items()
    }
    if extras:
        declared = DATA_MODELS[type_].model_fields
        unknown = draw(
            st.dictionaries(names.filter(lambda k: k not in declared), json_values, max_size=2)
        )
        data.update(unknown)
    moment = draw(happened())
    return {
        "specversion": "1.0",
        "id": draw(names),
        "source": draw(st.sampled_from(["s://a", "s://b"])),
        "type": type_,
        "time": draw(time_text(moment)),
        "data": data,
    }
