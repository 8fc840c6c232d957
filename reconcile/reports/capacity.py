"""`report capacity`: the four capacities of a window [since, until), and the rates between.

Definitions (docs/reports.md repeats them):
- **devices discovered**: distinct (node, device) of `device.discovered` events with time
  < until (no event retires a device, so one discovered before the window is still
  there; `since` does not apply). Fleet-wide, also under `--tenant`.
- **jobs admitted**: distinct jobs with a `policy.decision` `admitted` in the window; a
  job is (tenant, job_id), where a decision's job_id that is the `pod` of a
  `job.started` (a Pod's scheduler event) means that job; for a decision naming only an
  allocation, the job that first started on it, else the allocation itself.
- **jobs placed**: the same, for decisions `placed`.
- **workloads started**: distinct (tenant, job_id) with a `job.started` in the window.
- **started without admission**: workloads started whose job no `policy.decision` names
  (by job_id, one of its Pods, or an allocation it started on). Slurm writes no
  decisions: its jobs are counted here, not as a shortfall of admissions.
- **devices admitted / placed / started**: distinct discovered devices held, by the
  allocation the step names (as for the class below), by a job admitted / placed /
  started in the window. Which devices a grant holds is the touches rule's reading
  (`rules.holds_sql`): a grant that lists no devices (absent or an empty list) holds its
  node's; a MIG instance `<gpu>/<gi>` listed holds its GPU.
- **admitted, then started**: jobs admitted in the window that also started in it.
- **rates** (each a share in [0, 1], to four places; none when nothing to share): of the
  devices discovered, the share admitted, placed and started (`devices_<step>_share`);
  of the jobs admitted, the share started (`admitted_started_share`). Each compares
  like with like (devices with devices, jobs with the same jobs), so none can go
  negative or past 1, as a difference of job and device counts did.
- **placement class** (whole, mig:<profile>, timeslice, unknown): a device's own
  `placement_class` (and `profile`) when its event has one, completed from the first
  allocation granted on it (its node, and its device when the grant lists devices); a
  job's from the allocation its decision names, else the allocation of its first
  `job.started`, else its promise's class.
- **start receipts** per class (`receipts`): `start_attempts`, every `start.receipt`
  launched in the window; `failed_starts`, those with outcome `failed`; `receipts`, the
  others (deliverable starts), and the devices they name (`devices_receipted`).
- **capacity in time** (`in_time`): GPU-seconds per class and fabric domain in the window
  (and per class, reserved by quotas and unused),
  discovered, allocated, free, faulted and under a change; and per node, its faults, their
  rate per 1,000 GPU-hours and its faulted GPU-seconds (capacity_time.py).
"""

from __future__ import annotations

from typing import Any

import duckdb
from rich.table import Table

from reconcile.engine.figures import iso, placement_sql
from reconcile.engine.pipeline import Pipeline
from reconcile.engine.rules import INF, device_held_sql, holds_sql
from reconcile.reports import capacity_time, fleet_changes
from schemas.display import DataTable

STEPS = ("devices_discovered", "jobs_admitted", "jobs_placed", "workloads_started")
COUNTS = (
    *STEPS,
    "started_without_admission",
    "devices_admitted",
    "devices_placed",
    "devices_started",
    "admitted_started",
)
#: Each rate: (name, numerator, denominator), all counts of COUNTS.
RATES = (
    ("devices_admitted_share", "devices_admitted", "devices_discovered"),
    ("devices_placed_share", "devices_placed", "devices_discovered"),
    ("devices_started_share", "devices_started", "devices_discovered"),
    ("admitted_started_share", "admitted_started", "jobs_admitted"),
)

#: The first grant of each allocation, and each discovered device (before `until`) with its class.
DEVICE_CTES = f"""grant_ AS (
    SELECT tenant, allocation_id, t, seq, node, devices, placement_class AS cls, profile
    FROM ev WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
device AS (
    SELECT node, device, placement_class AS cls, profile FROM ev
    WHERE type = 'device.discovered' AND t < $until
    QUALIFY row_number() OVER (PARTITION BY node, device ORDER BY t, seq) = 1),
device_class AS (
    SELECT d.node, d.device, {
    placement_sql(
        "coalesce(d.cls, g.cls)",
        "coalesce(d.profile, CASE WHEN coalesce(d.cls, g.cls) = g.cls THEN g.profile END)",
    )
}
           AS placement
    FROM device d LEFT JOIN grant_ g
      ON g.node = d.node AND {holds_sql("d.device", "g.devices")}
     AND (d.cls IS NULL OR d.cls = g.cls)
    QUALIFY row_number() OVER (PARTITION BY d.node, d.device ORDER BY g.t NULLS LAST,
        g.seq) = 1)"""

#: (placement, step, n): each count of COUNTS per class, in the window $since, $until.
CAPACITY = f"""
WITH {DEVICE_CTES},
first_start AS (
    SELECT tenant, job_id, allocation_id FROM ev WHERE type = 'job.started'
    QUALIFY row_number() OVER (PARTITION BY tenant, job_id ORDER BY t, seq) = 1),
alloc_job AS (
    SELECT tenant, allocation_id, job_id FROM ev WHERE type = 'job.started'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
promise AS (
    SELECT tenant, job_id, placement_class AS cls FROM ev WHERE type = 'policy.promise'
    QUALIFY row_number() OVER (PARTITION BY tenant, job_id ORDER BY t, seq) = 1),
pod AS (
    SELECT DISTINCT tenant, pod, job_id FROM ev WHERE type = 'job.started' AND pod IS NOT NULL
    QUALIFY count(*) OVER (PARTITION BY tenant, pod) = 1),
decided AS (
    SELECT d.tenant, d.decision, d.t, d.seq, coalesce(pd.job_id, d.job_id, aj.job_id,
           d.allocation_id) AS job,
           coalesce(d.allocation_id, fs.allocation_id) AS allocation_id, pr.cls AS promised
    FROM ev d
    LEFT JOIN pod pd ON pd.tenant = d.tenant AND pd.pod = d.job_id
    LEFT JOIN alloc_job aj ON aj.tenant = d.tenant AND aj.allocation_id = d.allocation_id
    LEFT JOIN first_start fs ON fs.tenant = d.tenant
        AND fs.job_id = coalesce(pd.job_id, d.job_id, aj.job_id)
    LEFT JOIN promise pr ON pr.tenant = d.tenant
        AND pr.job_id = coalesce(pd.job_id, d.job_id, aj.job_id)
    WHERE d.type = 'policy.decision' AND d.decision IN ('admitted', 'placed')
      AND d.t >= $since AND d.t < $until AND ($tenant IS NULL OR d.tenant = $tenant)),
started AS (
    SELECT tenant, 'started' AS decision, t, seq, job_id AS job, allocation_id,
        NULL AS promised FROM ev
    WHERE type = 'job.started' AND t >= $since AND t < $until
        AND ($tenant IS NULL OR tenant = $tenant)),
jobs AS (
    SELECT x.tenant, x.decision, x.job,
           {
    placement_sql("coalesce(g.cls, x.promised)", "CASE WHEN g.cls IS NOT NULL THEN g.profile END")
} AS placement
    FROM (SELECT * FROM decided UNION ALL SELECT * FROM started) x
    LEFT JOIN grant_ g ON g.tenant = x.tenant AND g.allocation_id = x.allocation_id
    QUALIFY row_number() OVER (PARTITION BY x.tenant, x.decision, x.job ORDER BY x.t, x.seq) = 1),
held AS (
    SELECT DISTINCT x.decision, dc.node, dc.device, dc.placement
    FROM (SELECT * FROM decided UNION ALL SELECT * FROM started) x
    JOIN grant_ g ON g.tenant = x.tenant AND g.allocation_id = x.allocation_id
    JOIN device_class dc ON dc.node = g.node AND {holds_sql("dc.device", "g.devices")}),
named AS (
    SELECT d.tenant, coalesce(pd.job_id, d.job_id) AS job FROM ev d
    LEFT JOIN pod pd ON pd.tenant = d.tenant AND pd.pod = d.job_id
    WHERE d.type = 'policy.decision' AND d.job_id IS NOT NULL
    UNION
    SELECT s.tenant, s.job_id FROM ev s
    JOIN ev d ON d.type = 'policy.decision' AND d.tenant = s.tenant
        AND d.allocation_id = s.allocation_id
    WHERE s.type = 'job.started')
SELECT placement, 'devices_discovered' AS step, count(*) AS n FROM device_class GROUP BY placement
UNION ALL
SELECT placement, CASE decision WHEN 'admitted' THEN 'jobs_admitted' WHEN 'placed'
    THEN 'jobs_placed'
                  ELSE 'workloads_started' END, count(*)
FROM jobs GROUP BY ALL
UNION ALL
SELECT placement, 'started_without_admission', count(*) FROM jobs j
WHERE decision = 'started' AND NOT EXISTS (SELECT 1 FROM named n WHERE n.tenant = j.tenant
    AND n.job = j.job)
GROUP BY ALL
UNION ALL
SELECT placement, 'admitted_started', count(*) FROM jobs a
WHERE decision = 'admitted'
  AND EXISTS (SELECT 1 FROM jobs s WHERE s.decision = 'started' AND s.tenant = a.tenant
      AND s.job = a.job)
GROUP BY ALL
UNION ALL
SELECT placement, 'devices_' || decision, count(*) FROM held GROUP BY ALL
"""


RECEIPTS = f"""
WITH {DEVICE_CTES},
attempt AS (
    SELECT tenant, job_id, node, devices,
           {placement_sql("placement_class", "profile")} AS placement,
           coalesce(outcome, 'started') = 'failed' AS failed
    FROM ev WHERE type = 'start.receipt' AND launched_at >= $since AND launched_at < $until
      AND ($tenant IS NULL OR tenant = $tenant)
    QUALIFY row_number() OVER (PARTITION BY tenant, job_id ORDER BY t, seq) = 1),
receipt AS (SELECT * FROM attempt WHERE NOT failed),
receipted AS (
    SELECT DISTINCT dc.node, dc.device, dc.placement FROM receipt r
    JOIN device_class dc ON (r.node IS NULL OR dc.node = r.node)
        AND {device_held_sql("dc.device", "r.devices")})
SELECT placement, 'receipts' AS step, count(*) AS n FROM receipt GROUP BY placement
UNION ALL
SELECT placement, 'start_attempts', count(*) FROM attempt GROUP BY placement
UNION ALL
SELECT placement, 'failed_starts', count(*) FROM attempt WHERE failed GROUP BY placement
UNION ALL
SELECT placement, 'devices_receipted', count(*) FROM receipted GROUP BY placement
"""

#: The receipt columns of a class row (csv_rows), after the counts and rates.
RECEIPT_COUNTS = (
    "receipts",
    "devices_receipted",
    "devices_without_receipt",
    "start_attempts",
    "failed_starts",
)


def report(
    pipe: Pipeline, tenant: str | None = None, since: int | None = None, until: int | None = None
) -> dict[str, Any]:
    """The four capacities of [since, until) (µs; open when None), by placement class; the
    start receipts per class; the windows of each fleet change (fleet_changes.py)."""
    bounds = {
        "tenant": tenant,
        "since": since if since is not None else -INF,
        "until": until if until is not None else INF,
    }
    con = pipe.need("events")
    counts: dict[str, dict[str, int]] = {}
    for placement, step, n in con.execute(CAPACITY, bounds).fetchall():
        counts.setdefault(placement, dict.fromkeys(COUNTS, 0))[step] = int(n)
    total = {step: sum(c[step] for c in counts.values()) for step in COUNTS}
    return {
        "window": {
            "since": iso(since) if since is not None else None,
            "until": iso(until) if until is not None else None,
        },
        "tenant": tenant,
        "classes": [_with_rates({"placement_class": p, **counts[p]}) for p in sorted(counts)],
        "total": _with_rates({"placement_class": "all", **total}),
        "receipts": _receipts(con, bounds, counts),
        "changes": fleet_changes.report(pipe, tenant, since, until),
        "in_time": capacity_time.in_time(pipe, since, until),
    }


def _receipts(
    con: duckdb.DuckDBPyConnection, bounds: dict[str, Any], counts: dict[str, dict[str, int]]
) -> list[dict[str, Any]]:
    """Per class (of the receipt; of the device for devices_receipted): receipts beside the
    devices discovered and the workloads started; the gap is the devices without a receipt."""
    found: dict[str, dict[str, int]] = {}
    zero = {"receipts": 0, "devices_receipted": 0, "start_attempts": 0, "failed_starts": 0}
    for placement, step, n in con.execute(RECEIPTS, bounds).fetchall():
        found.setdefault(placement, dict(zero))[step] = int(n)
    if not found:
        return []
    out = []
    for placement in sorted(set(found) | set(counts)):
        mine = found.get(placement, zero)
        theirs = counts.get(placement, {})
        discovered = theirs.get("devices_discovered", 0)
        out.append(
            {
                "placement_class": placement,
                "devices_discovered": discovered,
                "receipts": mine["receipts"],
                "devices_receipted": mine["devices_receipted"],
                "devices_without_receipt": discovered - mine["devices_receipted"],
                "workloads_started": theirs.get("workloads_started", 0),
                "start_attempts": mine["start_attempts"],
                "failed_starts": mine["failed_starts"],
            }
        )
    return out


def csv_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per placement class and the total; with receipts, their counts last."""
    rows = [*doc["classes"], doc["total"]]
    if not doc.get("receipts"):
        return rows
    by_class = {r["placement_class"]: r for r in doc["receipts"]}
    total = {k: sum(r[k] for r in doc["receipts"]) for k in RECEIPT_COUNTS}
    out = []
    for row in rows:
        receipt = total if row is doc["total"] else by_class.get(row["placement_class"], {})
        out.append(row | {k: receipt.get(k, 0) for k in RECEIPT_COUNTS})
    return out


def extra_tables(doc: dict[str, Any]) -> list[Table]:
    """The receipts table and the change windows table, where the ledger has any."""
    out: list[Table] = []
    if doc.get("receipts"):
        receipts = DataTable(
            "class",
            "devices discovered",
            "receipts",
            "devices receipted",
            "devices without receipt",
            "workloads started",
            "start attempts",
            "failed starts",
            title="start receipts: inventory against deliverable starts",
        )
        for r in doc["receipts"]:
            receipts.add_row(
                r["placement_class"],
                *(
                    str(r[k])
                    for k in (
                        "devices_discovered",
                        "receipts",
                        "devices_receipted",
                        "devices_without_receipt",
                        "workloads_started",
                        "start_attempts",
                        "failed_starts",
                    )
                ),
            )
        out.append(receipts)
    if doc.get("changes"):
        out.append(fleet_changes.table(doc["changes"]))
    if doc.get("in_time"):
        out.append(capacity_time.table(doc["in_time"]))
        if doc["in_time"].get("quota"):
            out.append(capacity_time.quota_table(doc["in_time"]))
        if doc["in_time"].get("nodes"):
            out.append(capacity_time.nodes_table(doc["in_time"]))
    return out


def _with_rates(row: dict[str, Any]) -> dict[str, Any]:
    """Adds each rate of RATES: the share, to four places (None when the denominator is 0)."""
    for name, part, whole in RATES:
        row[name] = round(row[part] / row[whole], 4) if row[whole] else None
    return row
