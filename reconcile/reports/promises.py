"""`report promises`: what was promised against what happened.

Definitions (docs/reports.md repeats them):
- A **promise** is a `policy.promise` (tenant, promise_id, job_id, start_by, complete_by,
  placement_class, gpus). Should a promise id be given twice by one tenant, the first (by
  time, then ledger order) stands: a later restatement does not hide a miss.
- **Actual start** is the job's first `job.started`; **actual completion** its first
  `job.completed`.
- **Horizon**: the latest event time among the tenant's own events (as in RULES.md).
- Start: `met` when started ≤ start_by; `late` when started > start_by; `not_started`
  when the job never started and start_by < horizon; `pending` otherwise.
- Completion (only when complete_by is given): `met`, `late` (completed > complete_by),
  `not_completed` (never completed and complete_by < horizon), `pending`; else `none`.
- A promise is **missed** when its start is late or not_started, or its completion is
  late or not_completed.
- **Start delay** = actual start − start_by, in seconds, signed (negative: early); p50
  and p95 (nearest rank, reconcile/engine/figures.py) over the promises whose job started.
- **Placement class**: the promise's own field, else that of the allocation of the job's
  first attempt; `mig:<profile>` with the allocation's profile when it has one.
"""

from __future__ import annotations

import shlex
from typing import Any

import duckdb

from reconcile.engine.figures import iso, percentiles_sql, placement_sql, safe_name, seconds

PROMISES = f"""
CREATE OR REPLACE TEMP TABLE rp_promises AS
WITH promise AS (
    SELECT seq, tenant, promise_id, job_id, t AS made, start_by, complete_by, placement_class AS cls, gpus
    FROM ev WHERE type = 'policy.promise'
    QUALIFY row_number() OVER (PARTITION BY tenant, promise_id ORDER BY t, seq) = 1),
first_start AS (
    SELECT tenant, job_id, t AS started, allocation_id FROM ev WHERE type = 'job.started'
    QUALIFY row_number() OVER (PARTITION BY tenant, job_id ORDER BY t, seq) = 1),
completion AS (SELECT tenant, job_id, min(t) AS completed FROM ev WHERE type = 'job.completed' GROUP BY ALL),
grant_ AS (
    SELECT tenant, allocation_id, placement_class AS cls, profile FROM ev WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
joined AS (
    SELECT p.*, s.started, s.allocation_id, c.completed, h.h,
           {placement_sql('coalesce(p.cls, g.cls)', 'CASE WHEN coalesce(p.cls, g.cls) = g.cls THEN g.profile END')}
               AS placement,
           count(*) OVER (PARTITION BY p.promise_id) AS same_id
    FROM promise p
    LEFT JOIN first_start s ON s.tenant = p.tenant AND s.job_id = p.job_id
    LEFT JOIN completion c ON c.tenant = p.tenant AND c.job_id = p.job_id
    LEFT JOIN grant_ g ON g.tenant = p.tenant AND g.allocation_id = s.allocation_id
    LEFT JOIN horizons h ON h.tenant = p.tenant)
SELECT *,
       CASE WHEN started IS NOT NULL AND started <= start_by THEN 'met'
            WHEN started IS NOT NULL THEN 'late'
            WHEN start_by < h THEN 'not_started' ELSE 'pending' END AS start_status,
       CASE WHEN complete_by IS NULL THEN 'none'
            WHEN completed IS NOT NULL AND completed <= complete_by THEN 'met'
            WHEN completed IS NOT NULL THEN 'late'
            WHEN complete_by < h THEN 'not_completed' ELSE 'pending' END AS completion_status,
       started - start_by AS start_delay, completed - complete_by AS completion_delay
FROM joined
"""

COLUMNS = ("seq", "tenant", "promise_id", "job_id", "made", "start_by", "complete_by", "gpus", "started",
           "allocation_id", "completed", "placement", "same_id", "start_status", "completion_status",
           "start_delay", "completion_delay")
MISSED = "(start_status IN ('late', 'not_started') OR completion_status IN ('late', 'not_completed'))"

#: Columns promises, met, missed and pending of a group of `rp_promises` rows.
STATUS_COUNTS = f"""count(*) AS promises,
       count(*) FILTER (WHERE NOT {MISSED} AND start_status <> 'pending' AND completion_status <> 'pending') AS met,
       count(*) FILTER (WHERE {MISSED}) AS missed,
       count(*) FILTER (WHERE NOT {MISSED} AND (start_status = 'pending' OR completion_status = 'pending')) AS pending"""

SUMMARY = f"""
SELECT tenant, placement, {STATUS_COUNTS},
       {percentiles_sql('start_delay', 'delay')}
FROM rp_promises WHERE ($tenant IS NULL OR tenant = $tenant)
GROUP BY tenant, placement ORDER BY tenant, placement
"""


def build(con: duckdb.DuckDBPyConnection) -> None:
    """Make `rp_promises` (one row per promise, with its outcome) from `ev`."""
    con.execute(PROMISES)


def promise_rows(con: duckdb.DuckDBPyConnection, tenant: str | None = None,
                 promise_id: str | None = None) -> list[dict[str, Any]]:
    """Every promise (of `tenant`, or with `promise_id`) in time order, as plain dicts."""
    rows = con.execute(
        f"SELECT {', '.join(COLUMNS)} FROM rp_promises WHERE ($tenant IS NULL OR tenant = $tenant) "
        "AND ($pid IS NULL OR promise_id = $pid) ORDER BY start_by, tenant, promise_id",
        {"tenant": tenant, "pid": promise_id}).fetchall()
    return [_promise(dict(zip(COLUMNS, row))) for row in rows]


def _promise(row: dict[str, Any]) -> dict[str, Any]:
    missed = row["start_status"] in ("late", "not_started") or row["completion_status"] in ("late", "not_completed")
    out = {
        "tenant": row["tenant"], "promise_id": row["promise_id"], "job_id": row["job_id"],
        "placement_class": row["placement"], "gpus": row["gpus"], "promised_at": iso(row["made"]),
        "start_by": iso(row["start_by"]), "started": iso(row["started"]), "start_status": row["start_status"],
        "start_delay_s": seconds(row["start_delay"]),
        "complete_by": iso(row["complete_by"]), "completed": iso(row["completed"]),
        "completion_status": row["completion_status"], "completion_delay_s": seconds(row["completion_delay"]),
        "allocation_id": row["allocation_id"], "missed": missed, "seq": row["seq"],
    }
    if missed:
        out["packet_command"] = packet_command(row["promise_id"], row["tenant"] if row["same_id"] > 1 else None)
    return out


def packet_command(promise_id: str, tenant: str | None = None) -> str:
    """The command that writes this promise's diagnostic packet (`--tenant` only when
    another tenant uses the same promise id)."""
    words = ["gpuledger", "packet", "--promise", promise_id]
    if tenant is not None:
        words += ["--tenant", tenant]
    words += ["--out", f"packets/{safe_name(promise_id)}"]
    return " ".join(shlex.quote(w) for w in words)


def summary_rows(con: duckdb.DuckDBPyConnection, tenant: str | None = None) -> list[dict[str, Any]]:
    """Per tenant and placement class: counts, and p50/p95 start delay in seconds."""
    cursor = con.execute(SUMMARY, {"tenant": tenant})
    names = [d[0] for d in cursor.description]
    out = []
    for row in cursor.fetchall():
        r = dict(zip(names, row))
        out.append({
            "tenant": r["tenant"], "placement_class": r["placement"], "promises": r["promises"],
            "met": r["met"], "missed": r["missed"], "pending": r["pending"], "started": r["delay_n"],
            "start_delay_p50_s": seconds(r["delay_p50"]), "start_delay_p95_s": seconds(r["delay_p95"]),
        })
    return out


def report(con: duckdb.DuckDBPyConnection, tenant: str | None = None) -> dict[str, Any]:
    """The promises report: summary by tenant and class, every promise, every miss."""
    build(con)
    promises = promise_rows(con, tenant)
    return {
        "summary": summary_rows(con, tenant),
        "misses": [p for p in promises if p["missed"]],
        "promises": promises,
    }
