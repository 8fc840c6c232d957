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
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from reconcile.engine.figures import iso, seconds
from reconcile.engine.pipeline import Pipeline
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
    return {"since": iso(lo), "until": iso(hi), "groups": list(groups.values())}


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
