"""`GET /metrics`: the Prometheus text exposition format (version 0.0.4), operators only.

- `gpuledger_amount{tenant,category,bearer,currency}`: reconciled money, from the
  reconciliation's exact cells (the figures `reconcile` prints, as floats);
- `gpuledger_billed_gpu_seconds{tenant}`;
- `gpuledger_promises{tenant,placement_class,outcome}`: met, missed and pending;
- `gpuledger_entries{type}` and `gpuledger_quarantined_records`: what the ledger holds;
- `gpuledger_ledger_size`: the tree size;
- `gpuledger_collector_events_total{status}`, `gpuledger_collector_requests_total`: what
  `POST /api/v1/events` did since the server started.

Reading a month of a large fleet again on every scrape would be wasteful: the figures
are cached per ledger size and recomputed only when something was appended.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

import reconcile
from ledger import Store, read
from reconcile import reports
from reconcile.serve.access import caller
from reconcile.serve.collect import Counters

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]


@dataclass
class Cache:
    size: int = -1
    text: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


async def endpoint(request: Request) -> Response:
    await run_in_threadpool(caller, request, "operator")
    app = request.app
    text = await run_in_threadpool(ledger_metrics, app.state.store, app.state.metrics_cache)
    return Response(text + collector_metrics(app.state.writer.counters), media_type=CONTENT_TYPE)


def ledger_metrics(store: Store, cache: Cache) -> str:
    with cache.lock:
        size = read.head(store)
        if size != cache.size:
            cache.text, cache.size = _ledger_text(store, size), size
        return cache.text


def _ledger_text(store: Store, size: int) -> str:
    out: list[str] = []
    _family(
        out, "gpuledger_ledger_size", "gauge", "Entries in the ledger (the tree size).", {(): size}
    )
    by_type: dict[Labels, float] = defaultdict(float)
    for (_tenant, type_), n in read.counts_by_type(store).items():
        by_type[(("type", type_),)] += n
    _family(out, "gpuledger_entries", "gauge", "Entries in the ledger by event type.", by_type)
    _family(
        out,
        "gpuledger_quarantined_records",
        "gauge",
        "Records held in quarantine.",
        {(): read.quarantined_count(store)},
    )
    if size:
        _reconciliation(out, store)
        _promises(out, store)
    return "".join(out)


def _reconciliation(out: list[str], store: Store) -> None:
    frame = reconcile.reconcile_store(store).frame().to_pylist()
    amounts: dict[Labels, Decimal] = defaultdict(Decimal)
    seconds: dict[Labels, float] = defaultdict(float)
    for row in frame:
        amounts[
            (
                ("tenant", row["tenant"]),
                ("category", row["category"]),
                ("bearer", row["bearer"]),
                ("currency", row["currency"] or ""),
            )
        ] += Decimal(row["amount"])
        seconds[(("tenant", row["tenant"]),)] += float(row["gpu_seconds"])
    _family(
        out,
        "gpuledger_amount",
        "gauge",
        "Reconciled money by tenant, category, bearer and currency.",
        {k: float(v) for k, v in amounts.items()},
    )
    _family(out, "gpuledger_billed_gpu_seconds", "gauge", "Billed GPU-seconds by tenant.", seconds)


def _promises(out: list[str], store: Store) -> None:
    doc = reports.report(store, "promises")
    counts: dict[Labels, float] = {}
    for row in doc["summary"]:
        for outcome in ("met", "missed", "pending"):
            counts[
                (
                    ("tenant", row["tenant"]),
                    ("placement_class", row["placement_class"]),
                    ("outcome", outcome),
                )
            ] = row[outcome]
    _family(
        out,
        "gpuledger_promises",
        "gauge",
        "Start and completion promises by tenant, placement class and outcome.",
        counts,
    )


def collector_metrics(counters: Counters) -> str:
    out: list[str] = []
    _family(
        out,
        "gpuledger_collector_requests_total",
        "counter",
        "POST /api/v1/events requests answered since the server started.",
        {(): counters.requests},
    )
    _family(
        out,
        "gpuledger_collector_events_total",
        "counter",
        "Events posted since the server started, by what became of them.",
        {(("status", s),): n for s, n in counters.by_status.items()},
    )
    return "".join(out)


def _family(
    out: list[str], name: str, kind: str, help_text: str, samples: Mapping[Labels, float]
) -> None:
    out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
    for labels, value in sorted(samples.items()):
        rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
        out.append(
            f"{name}{{{rendered}}} {_number(value)}\n" if labels else f"{name} {_number(value)}\n"
        )


def _escape(value: str) -> str:
    """A label value as the exposition format quotes it: data never breaks a line."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
