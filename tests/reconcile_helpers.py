"""A small scenario builder for the reconciliation tests.

A `Scenario` collects CloudEvents dicts, written in clock times on 2026-01-05 ("10:05"),
so that each test's expected GPU-seconds can be worked out by hand from
reconcile/RULES.md. `run` appends the events to a fresh store and reconciles it;
`cats` turns a line's or tenant's category map into compact tuples to compare with
hand-worked literals.

The engine is imported inside `run`, not at module level: until it exists, each test
fails on its own instead of the whole suite failing to collect.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger import Appender, Store, append_stream
from schemas import Accepted, Origin, validate_event

DAY = "2026-01-05"
P, C, D = "provider", "customer", "disputed"

#: (gpu_seconds, amount, bearer), or for a restart category with both bearers
#: (gpu_seconds, amount, "mixed", {bearer: (gpu_seconds, amount)}).
Entry = tuple[Any, ...]


def when(clock: str) -> str:
    """'10:05' -> '2026-01-05T10:05:00Z'; 'HH:MM:SS' keeps its seconds; a full time passes."""
    if "T" in clock:
        return clock
    if clock.count(":") == 1:
        clock += ":00"
    return f"{DAY}T{clock}Z"


@dataclass
class Scenario:
    """Events of one tenant by default (`tenant=` on any call names another)."""

    tenant: str = "acme"
    currency: str = "USD"
    events: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self, type_: str, clock: str, data: dict[str, Any], tenant: str | None = None
    ) -> dict[str, Any]:
        if type_ not in ("health.fault", "health.cleared", "device.discovered", "device.counters"):
            data = {"tenant": tenant or self.tenant, **data}
        event = {
            "specversion": "1.0",
            "id": f"{type_}-{len(self.events) + 1}",
            "source": "test://scenario",
            "type": type_,
            "time": when(clock),
            "data": data,
        }
        self.events.append(event)
        return event

    # allocations -------------------------------------------------------------------
    def grant(
        self,
        alloc: str,
        *,
        gpus: int,
        at: str,
        node: str | None = "n1",
        devices: list[Any] | None = None,
        fabric_domain: str | None = None,
        tenant: str | None = None,
    ) -> None:
        data: dict[str, Any] = {"allocation_id": alloc, "gpus": gpus}
        data.update(
            {
                k: v
                for k, v in (
                    ("node", node),
                    ("devices", devices),
                    ("fabric_domain", fabric_domain),
                )
                if v is not None
            }
        )
        self.add("allocation.granted", at, data, tenant)

    def release(self, alloc: str, *, at: str, tenant: str | None = None) -> None:
        self.add("allocation.released", at, {"allocation_id": alloc}, tenant)

    # jobs ----------------------------------------------------------------------------
    def start(
        self, job: str, alloc: str, *, at: str, attempt: int = 1, tenant: str | None = None
    ) -> None:
        self.add(
            "job.started", at, {"job_id": job, "allocation_id": alloc, "attempt": attempt}, tenant
        )

    def progress(
        self, job: str, *, step: int, at: str, units: int | None = None, tenant: str | None = None
    ) -> None:
        data: dict[str, Any] = {"job_id": job, "step": step}
        if units is not None:
            data["units"] = units
        self.add("job.progress", at, data, tenant)

    def steps(self, job: str, *clocks: str, first_step: int = 1) -> None:
        """One progress event at each clock time, steps rising by one."""
        for step, clock in enumerate(clocks, first_step):
            self.progress(job, step=step, at=clock)

    def complete(self, job: str, *, at: str) -> None:
        self.add("job.completed", at, {"job_id": job})

    def fail(self, job: str, *, at: str, cause: str = "application") -> None:
        self.add("job.failed", at, {"job_id": job, "cause": cause})

    def cancel(self, job: str, *, at: str) -> None:
        self.add("job.cancelled", at, {"job_id": job, "by": "user"})

    def checkpoint(
        self, job: str, ckpt: str, *, step: int, started: str, saved: str | None
    ) -> None:
        self.add(
            "checkpoint.started", started, {"job_id": job, "checkpoint_id": ckpt, "step": step}
        )
        if saved is not None:
            self.add(
                "checkpoint.saved", saved, {"job_id": job, "checkpoint_id": ckpt, "step": step}
            )

    def restored(self, job: str, ckpt: str, *, step: int, at: str) -> None:
        self.add("checkpoint.restored", at, {"job_id": job, "checkpoint_id": ckpt, "step": step})

    def result(self, job: str, verdict: str, *, at: str) -> None:
        """verdict: 'accepted' or 'rejected'."""
        self.add(f"work.{verdict}", at, {"job_id": job, "result_id": f"{job}-r{len(self.events)}"})

    # policy and health -----------------------------------------------------------------
    def terms(self, *, at: str, warmup: int = 600, stall: int = 300, notice: int = 0) -> None:
        self.add(
            "policy.terms",
            at,
            {"warmup_allowance_s": warmup, "stall_threshold_s": stall, "reclaim_notice_s": notice},
        )

    def decision(
        self, decision: str, *, at: str, alloc: str | None = None, job: str | None = None
    ) -> None:
        data: dict[str, Any] = {"decision": decision}
        data.update(
            {k: v for k, v in (("allocation_id", alloc), ("job_id", job)) if v is not None}
        )
        self.add("policy.decision", at, data)

    def fault(
        self, *, at: str, code: str = "xid-79", severity: str = "critical", **place: Any
    ) -> None:
        self.add("health.fault", at, {"code": code, "severity": severity, **place})

    def cleared(self, *, at: str, code: str = "xid-79", **place: Any) -> None:
        self.add("health.cleared", at, {"code": code, **place})

    # billing -------------------------------------------------------------------------
    def line(
        self,
        line_id: str,
        alloc: str | None,
        start: str,
        end: str,
        *,
        gpus: int,
        amount: str,
        invoice: str = "INV-1",
        category: str = "usage",
        corrects: str | None = None,
        at: str | None = None,
        tenant: str | None = None,
        currency: str | None = None,
    ) -> None:
        """A billing line; its event time (the tenant's horizon may depend on it) is
        `at`, else the end of its period."""
        data: dict[str, Any] = {
            "invoice_id": invoice,
            "line_id": line_id,
            "period_start": when(start),
            "period_end": when(end),
            "gpus": gpus,
            "amount": amount,
            "currency": currency or self.currency,
            "category": category,
        }
        if alloc is not None:
            data["allocation_id"] = alloc
        if corrects is not None:
            data["corrects"] = corrects
        self.add("billing.line", at or end, data, tenant)


def records(events: list[dict[str, Any]]) -> list[Accepted]:
    return [Accepted.of(validate_event(e), Origin("scenario", i)) for i, e in enumerate(events, 1)]


def ingest(store: Store, events: list[dict[str, Any]]) -> None:
    report = append_stream(Appender(store), records(events), 5000)
    assert report.appended == len(events), report


def run(
    url: str, events: list[dict[str, Any]], tenant: str | None = None, invoice: str | None = None
) -> dict[str, Any]:
    """Append `events` in list order to a new store at `url` and reconcile it."""
    from reconcile import reconcile_store

    store = Store(url)
    store.init()
    try:
        ingest(store, events)
        doc: dict[str, Any] = reconcile_store(store, tenant=tenant, invoice=invoice).as_json()
        return doc
    finally:
        store.close()


def reconcile(
    tmp_path: Path, s: Scenario | list[dict[str, Any]], **filters: str
) -> dict[str, Any]:
    """Append the scenario to a fresh SQLite store under tmp_path and reconcile it."""
    events = s.events if isinstance(s, Scenario) else s
    n = len(list(tmp_path.glob("*.db")))
    return run(f"sqlite:///{tmp_path / f'ledger{n}.db'}", events, **filters)


def shuffled(events: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The same events in a random ledger order, billing lines kept in their relative order
    (double_billed follows ledger order by definition)."""
    order = list(events)
    random.Random(seed).shuffle(order)
    lines = iter([e for e in events if e["type"] == "billing.line"])
    return [next(lines) if e["type"] == "billing.line" else e for e in order]


def entry(value: dict[str, Any]) -> Entry:
    if value.get("bearer") == "mixed":
        split = {b: (v["gpu_seconds"], v["amount"]) for b, v in value["by_bearer"].items()}
        return (value["gpu_seconds"], value["amount"], "mixed", split)
    return (value["gpu_seconds"], value["amount"], value["bearer"])


def cats(node: dict[str, Any]) -> dict[str, Entry]:
    """A line's or tenant's categories as tuples; categories with no time and no money
    (which the engine may list or leave out) are left out."""
    return {
        name: entry(v)
        for name, v in node["categories"].items()
        if v["gpu_seconds"] or name == "money_only"
    }


def line(doc: dict[str, Any], line_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [ln for ln in doc["lines"] if ln["line_id"] == line_id]
    assert len(found) == 1, f"line {line_id}: {len(found)} in the output"
    return found[0]


def line_ids(doc: dict[str, Any], tenant: str = "acme") -> list[str]:
    return [ln["line_id"] for ln in doc["lines"] if ln["tenant"] == tenant]


def tenant(doc: dict[str, Any], name: str = "acme") -> dict[str, Any]:
    node: dict[str, Any] = doc["tenants"][name]
    return node


def stall_base() -> Scenario:
    """1 GPU, a job whose progress stops for 600 s, [10:04, 10:14), with no fault."""
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00", node="n1", devices=[0, 1], fabric_domain="fd-a")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:02", "10:04", "10:14")  # the gap [10:04, 10:14) is 600 s > 300
    s.complete("j1", at="10:16")
    s.release("A1", at="10:20")
    s.line("L1", "A1", "10:00", "10:20", gpus=1, amount="1.20")
    return s
