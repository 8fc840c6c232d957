"""Capacity in time (`report capacity`'s `in_time`): GPU-seconds per placement class and
fabric domain over a period, from the pipeline's `device_timeline` (reconcile/RULES.md
"Causes of a missed start" defines the device states).

- **period**: [since, until); since defaults to the first discovery, until to the latest
  event time of the ledger.
- **discovered**: per device, |[discovered_at, ∞) ∩ period|, summed (from
  `timeline_devices`, not from the states).
- **allocated**, **free**, **faulted**, **under_change**: per device, the seconds of the
  period in each state (a device under a change is counted there, faulted or held or not;
  then faulted; then allocated). They add up to discovered, per class and domain.
- **quota** (per class; quotas name no fabric domain): `reserved_gpu_s`, Σ over tenants of
  the quota in force (`policy.quota`, its pools summed, as the causes of misses read it)
  × seconds of the period; `used_gpu_s`, Σ min(the tenant's GPUs granted in the class,
  its quota) × seconds; `unused_gpu_s`, reserved − used: held for a tenant that did not
  use it. For one tenant, its own quotas only.
- **nodes** (faults per node): per node with a discovered device or a fault, `faults`, the
  fleet `health.fault` events naming the node with a time in the period (`critical`: those
  of severity critical); `gpu_hours`, the node's discovered GPU-seconds of the period ÷
  3,600; `faults_per_1000_gpu_hours`, faults × 1,000 ÷ gpu_hours (two places, half-even;
  none without GPU time); `faulted_gpu_s`, its devices' seconds in state `faulted` (an open
  critical fault, as above). A fault naming only a device or a fabric domain names no node
  and is not counted here.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import duckdb
from rich.table import Table

from reconcile.engine.causes import QUOTAS
from reconcile.engine.figures import iso, seconds
from reconcile.engine.pipeline import Pipeline
from reconcile.engine.timeline import GRANTS
from schemas.display import DataTable

STATES = ("allocated", "free", "faulted", "under_change")

BOUNDS = """
SELECT coalesce($since, (SELECT min(discovered_at) FROM timeline_devices)),
       coalesce($until, greatest((SELECT max(t) FROM ev_rest), (SELECT max(h) FROM horizons)))
"""

IN_TIME = """
WITH discovered AS (
    SELECT placement_class, coalesce(fabric_domain, '') AS fabric_domain,
           sum(greatest($hi - greatest(discovered_at, $lo), 0)) AS us
    FROM timeline_devices GROUP BY ALL),
states AS (
    SELECT placement_class, coalesce(fabric_domain, '') AS fabric_domain, state,
           sum(greatest(least(state_until, $hi) - greatest(state_from, $lo), 0)) AS us
    FROM device_timeline GROUP BY ALL)
SELECT d.placement_class, d.fabric_domain, CAST(d.us AS BIGINT), s.state, CAST(s.us AS BIGINT)
FROM discovered d LEFT JOIN states s USING (placement_class, fabric_domain)
ORDER BY d.placement_class, d.fabric_domain, s.state
"""


NODE_FAULTS = """
WITH gpu AS (
    SELECT node, sum(greatest($hi - greatest(discovered_at, $lo), 0)) AS us
    FROM timeline_devices GROUP BY node),
faulted AS (
    SELECT node, sum(greatest(least(state_until, $hi) - greatest(state_from, $lo), 0)) AS us
    FROM device_timeline WHERE state = 'faulted' GROUP BY node),
fault AS (
    SELECT node, count(*) AS n, count(*) FILTER (WHERE severity = 'critical') AS critical
    FROM ev_rest WHERE type = 'health.fault' AND tenant IS NULL AND node IS NOT NULL
      AND t >= $lo AND t < $hi
    GROUP BY node)
SELECT node, coalesce(f.n, 0), coalesce(f.critical, 0), CAST(coalesce(g.us, 0) AS BIGINT),
       CAST(coalesce(d.us, 0) AS BIGINT)
FROM gpu g FULL JOIN fault f USING (node) LEFT JOIN faulted d USING (node)
ORDER BY node
"""


def node_faults(con: duckdb.DuckDBPyConnection, lo: int, hi: int) -> list[dict[str, Any]]:
    """Per node: its faults in [lo, hi), its GPU-hours, their rate and its faulted time."""
    out = []
    for node, faults, critical, gpu_us, faulted_us in con.execute(
        NODE_FAULTS, {"lo": lo, "hi": hi}
    ).fetchall():
        gpu_hours = Decimal(int(gpu_us)) / Decimal(3_600_000_000)
        rate = (
            str(
                (Decimal(int(faults)) * 1000 / gpu_hours).quantize(
                    Decimal("0.01"), ROUND_HALF_EVEN
                )
            )
            if gpu_hours
            else None
        )
        out.append(
            {
                "node": node,
                "faults": int(faults),
                "critical": int(critical),
                "gpu_hours": str(gpu_hours.quantize(Decimal("0.01"), ROUND_HALF_EVEN)),
                "faults_per_1000_gpu_hours": rate,
                "faulted_gpu_s": seconds(int(faulted_us)),
            }
        )
    return out


def in_time(pipe: Pipeline, since: int | None, until: int | None) -> dict[str, Any] | None:
    """GPU-seconds per class and fabric domain in the period (None without devices)."""
    con = pipe.need("device_timeline")
    lo, hi = con.execute(BOUNDS, {"since": since, "until": until}).fetchone() or (None, None)
    if lo is None or hi is None:
        return None
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    rows = con.execute(IN_TIME, {"lo": lo, "hi": hi}).fetchall()
    for cls, domain, discovered, state, us in rows:
        row = groups.setdefault(
            (cls, domain),
            {
                "placement_class": cls,
                "fabric_domain": domain or None,
                "discovered_gpu_s": seconds(int(discovered)),
                **{f"{s}_gpu_s": 0 for s in STATES},
            },
        )
        if state is not None:
            row[f"{state}_gpu_s"] = seconds(int(us))
    return {
        "since": iso(lo),
        "until": iso(hi),
        "groups": list(groups.values()),
        "quota": quota_use(con, lo, hi),
        "nodes": node_faults(con, lo, hi),
    }


def quota_use(con: duckdb.DuckDBPyConnection, lo: int, hi: int) -> list[dict[str, Any]]:
    """Per class: GPU-seconds of [lo, hi) reserved by quotas, used, and unused (above)."""
    pools: dict[tuple[str, str], dict[str, list[tuple[int, int]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for tenant, placement, pool, t, gpus in con.execute(QUOTAS).fetchall():
        pools[(tenant, placement)][pool].append((int(t), int(gpus)))
    if not pools:
        return []
    grants: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
    for g in con.execute(GRANTS).fetchall():  # tenant, aid, t, released, …, gpus, placement
        if (g[0], g[8]) in pools:
            grants[(g[0], g[8])].append((int(g[2]), int(g[3]), int(g[7] or 0)))
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, by_pool in pools.items():
        mine = grants.get(key, [])
        cuts = {lo, hi, *(t for p in by_pool.values() for t, _ in p)}
        cuts.update(x for start, end, _ in mine for x in (start, end))
        points = sorted(x for x in cuts if lo <= x <= hi)
        for x, y in zip(points, points[1:]):
            inforce = [max((q for q in p if q[0] <= x), default=None) for p in by_pool.values()]
            if all(q is None for q in inforce):
                continue
            quota = sum(q[1] for q in inforce if q is not None)
            held = sum(n for start, end, n in mine if start <= x < end)
            totals[key[1]][0] += quota * (y - x)
            totals[key[1]][1] += min(held, quota) * (y - x)
    return [
        {
            "placement_class": cls,
            "reserved_gpu_s": seconds(reserved),
            "used_gpu_s": seconds(used),
            "unused_gpu_s": seconds(reserved - used),
        }
        for cls, (reserved, used) in sorted(totals.items())
    ]


def table(doc: dict[str, Any]) -> Table:
    out = DataTable(
        "class",
        "fabric domain",
        "discovered GPU-h",
        "allocated",
        "free",
        "faulted",
        "under change",
        title=f"capacity in time [{doc['since']}, {doc['until']}): GPU-hours",
    )
    for g in doc["groups"]:
        out.add_row(
            g["placement_class"],
            g["fabric_domain"] or "–",
            *(f"{g[k] / 3600:.1f}" for k in ("discovered_gpu_s", *(f"{s}_gpu_s" for s in STATES))),
        )
    return out


def nodes_table(doc: dict[str, Any]) -> Table:
    out = DataTable(
        "node",
        "faults",
        "critical",
        "GPU-h",
        "faults per 1,000 GPU-h",
        "faulted GPU-h",
        title=f"faults per node [{doc['since']}, {doc['until']})",
    )
    for n in doc.get("nodes", []):
        out.add_row(
            n["node"],
            str(n["faults"]),
            str(n["critical"]),
            n["gpu_hours"],
            n["faults_per_1000_gpu_hours"] or "–",
            f"{n['faulted_gpu_s'] / 3600:.2f}",
        )
    return out


def quota_table(doc: dict[str, Any]) -> Table:
    out = DataTable(
        "class",
        "reserved by quota GPU-h",
        "used",
        "unused",
        title=f"quotas in time [{doc['since']}, {doc['until']}): GPU-hours",
    )
    for q in doc.get("quota", []):
        out.add_row(
            q["placement_class"],
            *(f"{q[k] / 3600:.1f}" for k in ("reserved_gpu_s", "used_gpu_s", "unused_gpu_s")),
        )
    return out
