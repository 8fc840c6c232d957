"""Why a start promise was missed (reconcile/RULES.md, "Causes of a missed start").

Stage `miss_causes` makes `miss_causes`: one row per promise whose start was missed
(`late` or `not_started`), with its wait, the seconds of each cause, the cause with the
most seconds and its bearer, and the figures at the start of that cause's longest stretch
(the diagnostic packet's why-sentence).

The wait is [min(submitted, start_by), started), until the tenant's horizon when the job
never started. Seconds before the submission are `late_submission`; every later second
gets the first cause of CAUSES that applies. Each test is piecewise constant between
the fleet's and the job's events, so each stretch between two of them is judged once at
its start: the cost grows with the events, never with the seconds waited.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from reconcile.engine.figures import placement_sql
from reconcile.engine.rules import INF
from reconcile.engine.timeline import GRANTS

#: (cause, bearer) in the order a second is given the first that applies (ties: this order).
CAUSES: tuple[tuple[str, str], ...] = (
    ("late_submission", "customer"),
    ("held_by_tenant", "customer"),
    ("start_failure", "provider"),
    ("fleet_change", "provider"),
    ("fault", "provider"),
    ("quota", "customer"),
    ("capacity", "provider"),
    ("fragmentation", "provider"),
    ("scheduler", "provider"),
)
BEARER = dict(CAUSES)
ORDER = [name for name, _ in CAUSES]

MISSES = """
SELECT o.tenant, o.promise_id, o.job_id, o.start_by, o.started, o.h, o.placement,
       coalesce(o.gpus, s.gpus, 1) AS gpus, s.submitted
FROM promise_outcomes o
LEFT JOIN (SELECT tenant, job_id, min(t) AS submitted, arg_min(gpus, (t, seq)) AS gpus FROM ev
           WHERE type = 'job.submitted' GROUP BY ALL) s USING (tenant, job_id)
WHERE o.start_status IN ('late', 'not_started')
ORDER BY o.start_by, o.tenant, o.promise_id
"""

JOB_EVENTS = """
SELECT tenant, job_id, type, decision, outcome, coalesce(launched_at, t) AS t, allocation_id
FROM ev
WHERE type IN ('policy.decision', 'start.receipt', 'job.started') AND job_id IS NOT NULL
ORDER BY t, seq
"""

QUOTAS = f"""
SELECT tenant, {placement_sql("placement_class", "NULL")} AS placement, coalesce(pool, '') AS pool,
       t, gpus FROM ev WHERE type = 'policy.quota' ORDER BY t, seq
"""

COLUMNS = (
    "tenant",
    "promise_id",
    "job_id",
    "placement_class",
    "gpus",
    "wait_from",
    "wait_until",
    "cause",
    "cause_bearer",
    "cause_seconds",
    "cause_at",
    "class_devices",
    "free",
    "held",
    "held_by_others",
    "faulted",
    "under_change",
    "tenant_held",
    "quota",
)


@dataclass(frozen=True)
class Slot:
    """One device at one instant: where it is, its class and why it is not free."""

    node: str
    domain: str | None
    cls: str
    held_by: tuple[str, str] | None  # (tenant, allocation)
    faulted: bool
    changing: bool


def family(cls: str) -> Callable[[str], bool]:
    """The classes counted for `capacity`: every MIG profile for a MIG class (a free instance
    of another profile is there, in the wrong shape), the class itself otherwise."""
    if cls.startswith("mig"):
        return lambda c: c.startswith("mig")
    if cls == "unknown":
        return lambda c: c in ("whole", "unknown")
    return lambda c: c == cls


def fits(cls: str, gpus: int, free: list[Slot], node_size: dict[str, int]) -> bool:
    """The shape rule: `whole`: g on one node, or whole nodes of one fabric domain when g is
    more than a node holds; `mig:<profile>`: g free instances of that profile; else g free."""
    if cls.startswith("mig"):
        return sum(1 for s in free if s.cls == cls) >= gpus
    if cls not in ("whole", "unknown"):
        return len(free) >= gpus
    per_node: dict[str, int] = defaultdict(int)
    for s in free:
        per_node[s.node] += 1
    if gpus <= max(node_size.values(), default=0):
        return any(n >= gpus for n in per_node.values())
    domain_of = {s.node: s.domain for s in free}
    per_domain: dict[str | None, int] = defaultdict(int)
    for node, n in per_node.items():
        if n == node_size.get(node):
            per_domain[domain_of[node]] += n
    return any(n >= gpus for d, n in per_domain.items() if d is not None)


class Fleet:
    """The device timeline, read once, asked about one instant at a time (each device's
    intervals found by bisection; only the devices of the classes asked about)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        rows = con.execute(
            "SELECT node, device, placement_class, fabric_domain, state_from, state_until, "
            "held_by_tenant, held_by_allocation, fault_code IS NOT NULL, change_id IS NOT NULL "
            "FROM device_timeline ORDER BY node, device, state_from"
        ).fetchall()
        #: class -> device -> (interval starts, slots), in time order
        self.by_class: dict[str, dict[tuple[str, str], tuple[list[int], list[tuple[int, Slot]]]]]
        self.by_class = defaultdict(dict)
        self.cuts: dict[str, set[int]] = defaultdict(set)
        for node, device, cls, domain, lo, hi, tenant, aid, faulted, changing in rows:
            starts, spans = self.by_class[cls].setdefault((node, device), ([], []))
            held = (tenant, aid) if aid is not None else None
            starts.append(lo)
            spans.append((hi, Slot(node, domain, cls, held, faulted, changing)))
            self.cuts[cls].update(x for x in (lo, hi) if x < INF)

    def classes(self, keep: Callable[[str], bool]) -> list[str]:
        return [cls for cls in self.by_class if keep(cls)]

    def slots(self, t: int, classes: list[str]) -> list[Slot]:
        out = []
        for cls in classes:
            for starts, spans in self.by_class[cls].values():
                i = bisect_right(starts, t) - 1
                if i >= 0 and t < spans[i][0]:
                    out.append(spans[i][1])
        return out


def _judge(
    t: int,
    miss: dict[str, Any],
    fleet: Fleet,
    job: list[tuple[int, str, Any]],
    own: set[str],
    quota: int | None,
    tenant_held: int,
) -> tuple[str, dict[str, Any]]:
    """The cause of the second at t, and the figures it was judged on."""
    cls, gpus, tenant = miss["placement"], int(miss["gpus"]), miss["tenant"]
    slots = fleet.slots(t, fleet.classes(family(cls)))
    node_size: dict[str, int] = defaultdict(int)
    for s in slots:
        if s.cls == cls or not cls.startswith("mig"):
            node_size[s.node] += 1

    def taken(s: Slot) -> bool:
        return s.held_by is not None and s.held_by[1] not in own

    free = [s for s in slots if not taken(s) and not s.faulted and not s.changing]
    mine = [s for s in slots if s.cls == cls or not cls.startswith("mig")]
    figures = {
        "cause_at": t,
        "class_devices": len(mine),
        "free": sum(1 for s in mine if not taken(s) and not s.faulted and not s.changing),
        "held": sum(1 for s in mine if taken(s)),
        "held_by_others": sum(
            1 for s in mine if taken(s) and s.held_by and s.held_by[0] != tenant
        ),
        "faulted": sum(1 for s in mine if s.faulted),
        "under_change": sum(1 for s in mine if s.changing),
        "tenant_held": tenant_held,
        "quota": quota,
    }
    last = None
    admitted = failed = False
    for when, kind, value in job:
        if when > t:
            break
        if kind == "decision":
            last = value
            admitted = admitted or value in ("admitted", "placed")
        elif kind == "failed" and admitted:
            failed = True
    fit = fits(cls, gpus, free, node_size)
    if last == "deactivated":
        cause = "held_by_tenant"
    elif admitted and (failed or miss["started"] is None):
        cause = "start_failure"
    elif not fit and fits(
        cls, gpus, free + [s for s in slots if s.changing and not taken(s)], node_size
    ):
        cause = "fleet_change"
    elif not fit and fits(
        cls,
        gpus,
        free + [s for s in slots if s.faulted and not s.changing and not taken(s)],
        node_size,
    ):
        cause = "fault"
    elif quota is not None and tenant_held + gpus > quota:
        cause = "quota"
    elif len(free) < gpus:
        cause = "capacity"
    elif not fit:
        cause = "fragmentation"
    else:
        cause = "scheduler"
    return cause, figures


def miss_causes(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every missed start promise with its cause (the module docstring)."""
    names = (
        "tenant",
        "promise_id",
        "job_id",
        "start_by",
        "started",
        "h",
        "placement",
        "gpus",
        "submitted",
    )
    misses = [dict(zip(names, r)) for r in con.execute(MISSES).fetchall()]
    if not misses:
        return []
    fleet = Fleet(con)
    events: dict[tuple[str, str], list[tuple[int, str, Any]]] = defaultdict(list)
    own: dict[tuple[str, str], set[str]] = defaultdict(set)
    for tenant, job_id, type_, decision, outcome, t, aid in con.execute(JOB_EVENTS).fetchall():
        if type_ == "policy.decision":
            events[(tenant, job_id)].append((t, "decision", decision))
        elif type_ == "start.receipt" and outcome == "failed":
            events[(tenant, job_id)].append((t, "failed", None))
        elif type_ == "job.started" and aid is not None:
            own[(tenant, job_id)].add(aid)
    quotas: dict[tuple[str, str], dict[str, list[tuple[int, int]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for tenant, placement, pool, t, gpus in con.execute(QUOTAS).fetchall():
        quotas[(tenant, placement)][pool].append((t, int(gpus)))
    grants = con.execute(GRANTS).fetchall()  # tenant, aid, t, released, …, gpus, placement, …
    out = []
    for miss in misses:
        key = (miss["tenant"], miss["job_id"])
        if miss["placement"] == "unknown":
            miss["placement"] = "whole"
        start = (
            miss["start_by"]
            if miss["submitted"] is None
            else min(miss["submitted"], miss["start_by"])
        )
        end = miss["started"] if miss["started"] is not None else max(miss["h"] or start, start)
        submitted = start if miss["submitted"] is None else miss["submitted"]
        mine = [
            g
            for g in grants
            if g[0] == miss["tenant"] and g[8] == miss["placement"] and g[1] not in own[key]
        ]
        pools = quotas.get((miss["tenant"], miss["placement"]))
        cuts = {
            submitted,
            end,
            *(t for t, _, _ in events[key]),
            *(x for g in mine for x in (g[2], g[3])),
            *(t for p in (pools or {}).values() for t, _ in p),
        }
        for c in fleet.classes(family(miss["placement"])):
            cuts.update(fleet.cuts[c])
        points = sorted(x for x in cuts if submitted <= x < end)
        seconds: dict[str, int] = defaultdict(int)
        if submitted > start:
            seconds["late_submission"] = min(submitted, end) - start
        longest: dict[str, tuple[int, dict[str, Any]]] = {}
        for i, lo in enumerate(points):
            hi = points[i + 1] if i + 1 < len(points) else end
            quota = None
            if pools:
                inforce = [max((x for x in p if x[0] <= lo), default=None) for p in pools.values()]
                if any(q is not None for q in inforce):
                    quota = sum(q[1] for q in inforce if q is not None)
            held = sum(int(g[7] or 0) for g in mine if g[2] <= lo < g[3])
            cause, figures = _judge(lo, miss, fleet, events[key], own[key], quota, held)
            seconds[cause] += hi - lo
            if cause not in longest or hi - lo > longest[cause][0]:
                longest[cause] = (hi - lo, figures)
        if not seconds:
            continue
        top = max(ORDER, key=lambda c: (seconds.get(c, 0), -ORDER.index(c)))
        figures = longest.get(top, (0, {}))[1]
        out.append(
            {
                "tenant": miss["tenant"],
                "promise_id": miss["promise_id"],
                "job_id": miss["job_id"],
                "placement_class": miss["placement"],
                "gpus": int(miss["gpus"]),
                "wait_from": start,
                "wait_until": end,
                "cause": top,
                "cause_bearer": BEARER[top],
                "cause_seconds": json.dumps({c: seconds[c] for c in ORDER if seconds.get(c)}),
                **{k: figures.get(k) for k in COLUMNS[10:]},
            }
        )
    return out


_TYPES = {
    "gpus": pa.int64(),
    "wait_from": pa.int64(),
    "wait_until": pa.int64(),
    "cause_at": pa.int64(),
    **{k: pa.int64() for k in COLUMNS[11:]},
}


def build_miss_causes(con: duckdb.DuckDBPyConnection) -> None:
    """Makes `miss_causes` (one row per missed start; `cause_seconds` is JSON of µs per cause)."""
    rows = miss_causes(con)
    page = pa.table(
        {c: pa.array([r[c] for r in rows], _TYPES.get(c, pa.string())) for c in COLUMNS}
    )
    con.register("miss_causes_page", page)
    con.execute("CREATE OR REPLACE TEMP TABLE miss_causes AS SELECT * FROM miss_causes_page")
    con.unregister("miss_causes_page")
