"""`report capacity`, change windows: starts, queue delay and interruptions before, during
and after each `fleet.change` (docs/envelope.md, "Change windows", repeats this).

- **The change's window** is [started_at, ended_at). A later `fleet.change` with the same
  change_id may close it (the latest ended_at given stands; kind, nodes and started_at are
  the first event's). An open change (no ended_at) runs to the ledger's latest event time
  and has no "after".
- **before** is [started_at − L, started_at) and **after** is [ended_at, ended_at + L),
  where L = ended_at − started_at: windows as long as the change, so counts compare as they
  are. A change of length 0 has three empty windows.
- The figures are fleet-wide (the tenants' experience: a drain moves work onto the other
  nodes), of every tenant, or of `--tenant`'s only:
  - **starts**: `job.started` events (every attempt) and start receipts (`launched_at`)
    in the window, given apart as job_starts and receipt_starts.
  - **queue delay** (s, p50/p95, nearest rank): for every job *submitted* in the window
    (its first `job.submitted`), its first `job.started` − that; for every receipt
    submitted in the window (`submitted_at`), `launched_at` − `submitted_at`. Counted by
    submission, so a start that a change holds back counts against the window it was
    asked for in. Those not started at all are `not_started`; those started at or after
    the window's end are `started_after_window` (for `during`: held past the change,
    listed in `held_past_end`).
  - **interrupted**: distinct jobs with a running attempt (outcomes.py's attempts) that
    failed (`job.failed`, any cause) or met a `policy.decision` `preempted`, `evicted` or
    `reclaimed` (naming the job, its Pod, or its allocation) in the window.
"""

from __future__ import annotations

from typing import Any

import duckdb
from rich.table import Table

from reconcile.engine.figures import iso, percentiles_sql, seconds
from reconcile.engine.pipeline import Pipeline
from reconcile.engine.rules import INF
from schemas.display import DataTable

PHASES = ("before", "during", "after")

WINDOWS = f"""
WITH starts AS (
    SELECT t AS at, 'job' AS what FROM ev_rest WHERE type = 'job.started'
        AND ($tenant IS NULL OR tenant = $tenant)
    UNION ALL
    SELECT launched_at, 'receipt' FROM ev_rest WHERE type = 'start.receipt'
        AND ($tenant IS NULL OR tenant = $tenant)),
waits AS (
    SELECT tenant, job_id, submitted AS asked, first_start AS began FROM job_outcomes
    WHERE submitted IS NOT NULL AND ($tenant IS NULL OR tenant = $tenant)
    UNION ALL
    SELECT tenant, job_id, submitted_at, launched_at FROM ev_rest
    WHERE type = 'start.receipt' AND submitted_at IS NOT NULL
        AND ($tenant IS NULL OR tenant = $tenant)),
interrupts AS (
    SELECT tenant, job_id, e AS at FROM job_attempts WHERE kind = 'job.failed'
    UNION ALL
    SELECT a.tenant, a.job_id, d.t FROM ev_rest d JOIN job_attempts a ON a.tenant = d.tenant
       AND (a.job_id = d.job_id OR a.pod = d.job_id
           OR (d.job_id IS NULL AND a.allocation_id = d.allocation_id))
       AND d.t >= a.s AND d.t < a.e
    WHERE d.type = 'policy.decision' AND d.decision IN ('preempted', 'evicted', 'reclaimed')),
s AS (SELECT p.change_id, p.phase, count(*) FILTER (WHERE s.what = 'job') AS job_starts,
             count(*) FILTER (WHERE s.what = 'receipt') AS receipt_starts
      FROM fleet_change_windows p JOIN starts s ON s.at >= p.lo AND s.at < p.hi GROUP BY ALL),
w AS (SELECT p.change_id, p.phase, count(*) AS submitted,
             count(*) FILTER (WHERE w.began IS NULL) AS not_started,
             count(*) FILTER (WHERE w.began >= p.hi) AS started_after_window,
             {percentiles_sql("w.began - w.asked", "delay")}
      FROM fleet_change_windows p JOIN waits w ON w.asked >= p.lo AND w.asked < p.hi GROUP BY ALL),
i AS (SELECT p.change_id, p.phase, count(DISTINCT (i.tenant, i.job_id)) AS interrupted
      FROM fleet_change_windows p JOIN interrupts i ON i.at >= p.lo AND i.at < p.hi
      WHERE ($tenant IS NULL OR i.tenant = $tenant) GROUP BY ALL)
SELECT p.change_id, p.phase, p.lo, p.hi, coalesce(s.job_starts, 0) AS job_starts,
       coalesce(s.receipt_starts, 0) AS receipt_starts, coalesce(w.submitted, 0) AS submitted,
       coalesce(w.not_started, 0) AS not_started,
           coalesce(w.started_after_window, 0) AS started_after_window,
       w.delay_n, w.delay_p50, w.delay_p95, coalesce(i.interrupted, 0) AS interrupted
FROM fleet_change_windows p
LEFT JOIN s USING (change_id, phase) LEFT JOIN w USING (change_id, phase) LEFT JOIN i
    USING (change_id, phase)
"""

HELD = """
WITH waits AS (
    SELECT tenant, job_id, submitted AS asked, first_start AS began FROM job_outcomes
    WHERE submitted IS NOT NULL AND ($tenant IS NULL OR tenant = $tenant)
    UNION ALL
    SELECT tenant, job_id, submitted_at, launched_at FROM ev_rest
    WHERE type = 'start.receipt' AND submitted_at IS NOT NULL
        AND ($tenant IS NULL OR tenant = $tenant))
SELECT c.change_id, w.tenant, w.job_id, w.asked, w.began
FROM fleet_changes c JOIN waits w ON w.asked >= c.started_at AND w.asked < c.window_end
    AND w.began >= c.window_end
ORDER BY c.change_id, w.asked, w.tenant, w.job_id
"""


def report(
    pipe: Pipeline, tenant: str | None = None, since: int | None = None, until: int | None = None
) -> list[dict[str, Any]]:
    """Each fleet change overlapping [since, until) with its three windows; [] when the ledger
    has none (the pipeline's `fleet_changes`: reconcile/engine/sql/fleet_changes.sql)."""
    count = (
        pipe.need("events")
        .execute("SELECT count(*) FROM ev_rest WHERE type = 'fleet.change'")
        .fetchone()
    )
    if not count or not count[0]:
        return []  # outcomes' facts cost a pass over the ledger: not made for nothing
    bounds = {
        "since": since if since is not None else -INF,
        "until": until if until is not None else INF,
    }
    con = pipe.need("fleet_changes", **bounds)
    windows = _windows(con, tenant)
    held = _held(con, tenant)
    rows = con.execute(
        "SELECT change_id, kind, nodes, started_at, ended_at, window_end FROM fleet_changes "
        "ORDER BY started_at, change_id"
    ).fetchall()
    return [
        {
            "change_id": change_id,
            "kind": kind,
            "nodes": nodes,
            "started_at": iso(started),
            "ended_at": iso(ended),
            "open": ended is None,
            "window_s": seconds(end - started),
            "windows": [
                windows[(change_id, phase)] for phase in PHASES if (change_id, phase) in windows
            ],
            "held_past_end": held.get(change_id, []),
        }
        for change_id, kind, nodes, started, ended, end in rows
    ]


def _windows(
    con: duckdb.DuckDBPyConnection, tenant: str | None
) -> dict[tuple[str, str], dict[str, Any]]:
    cursor = con.execute(WINDOWS, {"tenant": tenant})
    names = [d[0] for d in cursor.description]
    out = {}
    for row in cursor.fetchall():
        r = dict(zip(names, row))
        out[(r["change_id"], r["phase"])] = {
            "phase": r["phase"],
            "from": iso(r["lo"]),
            "to": iso(r["hi"]),
            "starts": r["job_starts"] + r["receipt_starts"],
            "job_starts": r["job_starts"],
            "receipt_starts": r["receipt_starts"],
            "submitted": r["submitted"],
            "queue_delay_s": {
                "n": int(r["delay_n"] or 0),
                "p50": seconds(r["delay_p50"]),
                "p95": seconds(r["delay_p95"]),
            },
            "not_started": r["not_started"],
            "started_after_window": r["started_after_window"],
            "interrupted": r["interrupted"],
        }
    return out


def _held(con: duckdb.DuckDBPyConnection, tenant: str | None) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for change_id, job_tenant, job_id, asked, began in con.execute(
        HELD, {"tenant": tenant}
    ).fetchall():
        out.setdefault(change_id, []).append(
            {
                "tenant": job_tenant,
                "job_id": job_id,
                "submitted": iso(asked),
                "started": iso(began),
            }
        )
    return out


def csv_rows(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per change and window (`reports/capacity_changes.csv`): the change's own
    columns, then the window's, queue delay flattened, `held_past_end` as a count (on the
    `during` row; 0 on the others)."""
    rows = []
    for change in changes:
        base = {
            "change_id": change["change_id"],
            "kind": change["kind"],
            "nodes": " ".join(change["nodes"] or []),
            "started_at": change["started_at"],
            "ended_at": change["ended_at"],
            "open": change["open"],
            "window_s": change["window_s"],
        }
        for w in change["windows"]:
            delay = w["queue_delay_s"]
            rows.append(
                base
                | {k: v for k, v in w.items() if k != "queue_delay_s"}
                | {
                    "queue_delay_n": delay["n"],
                    "queue_delay_p50_s": delay["p50"],
                    "queue_delay_p95_s": delay["p95"],
                    "held_past_end": len(change["held_past_end"]) if w["phase"] == "during" else 0,
                }
            )
    return rows


def table(changes: list[dict[str, Any]]) -> Table:
    """One row per change and window."""
    out = DataTable(
        "change",
        "kind",
        "window",
        "from",
        "to",
        "starts (jobs + receipts)",
        "submitted",
        "queue delay p50/p95 s",
        "started after window",
        "not started",
        "interrupted",
        title="fleet changes: before, during and after (windows as long as the change)",
    )
    for change in changes:
        for w in change["windows"]:
            delay = w["queue_delay_s"]
            out.add_row(
                change["change_id"],
                change["kind"],
                w["phase"],
                w["from"],
                w["to"],
                f"{w['starts']} ({w['job_starts']} + {w['receipt_starts']})",
                str(w["submitted"]),
                f"{_text(delay['p50'])} / {_text(delay['p95'])}",
                str(w["started_after_window"]),
                str(w["not_started"]),
                str(w["interrupted"]),
                style="bold" if w["phase"] == "during" else "",
            )
    return out


def _text(value: Any) -> str:
    return "–" if value is None else str(value)
