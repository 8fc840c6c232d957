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
"""

from __future__ import annotations

from collections import defaultdict
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
