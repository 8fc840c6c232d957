"""`report outcomes`: what the GPU time bought, per tenant.

Definitions (docs/reports.md repeats them); percentiles are nearest-rank
(reconcile/engine/figures.py), durations in seconds:
- **attempt**: a `job.started`, running to the job's first `job.completed`, `job.failed`
  or `job.cancelled` after it (same instant: later in ledger order), unless the job
  starts again first: then to that next start; else to the tenant's horizon (its
  latest event time).
- **time to first usable allocation** (per job): the job's first `job.progress` − its
  first `job.submitted`, or − the grant of its first attempt's allocation when no
  submission was recorded. Jobs that never progressed have none.
- **step time**: the gap between consecutive `job.progress` marks of one attempt (marks
  belong to the latest `job.started` of the job at or before them), p50 and p95 per tenant.
- **checkpoint overhead**: `checkpoint` GPU-seconds ÷ billed GPU-seconds of the tenant,
  both from the reconciliation (RULES.md).
- **completed-run time** (per completed job): its first `job.completed` − its first
  `job.started` (restarts included).
- **cost of a run** (per job): for every allocation its attempts ran on, the money of the
  lines naming that allocation (after corrections; credits included; the cells' exact
  shares, `allocation_money`), apportioned to the jobs that ran on the allocation by
  their attempt time on it (attempts clipped to [grant, release or horizon)). Money of
  an allocation on which no job ran, or of lines naming no allocation, is no run's.
- **cost per completed run** = Σ cost of the completed jobs ÷ their number, per currency.
- **cost per accepted result** = all the tenant's billed money (every line after
  corrections: waste included, which is the point) ÷ the number of distinct `result_id`s
  of its `work.accepted` events, per currency.
Amounts are exact until shown, then rounded half-even to the currency's minor unit.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from typing import Any

import duckdb

from reconcile.engine.figures import iso, percentiles_sql, seconds
from reconcile.engine.pipeline import Pipeline
from reconcile.engine.result import Reconciliation, gpu_seconds
from schemas.money import Money

TENANT_FIGURES = f"""
WITH job_figures AS (
    SELECT tenant, count(*) AS jobs, count(completed) AS completed_runs,
           sum(accepted) AS accepted_results,
           {percentiles_sql("ttfua", "ttfua")}, {percentiles_sql("run_time", "run")}
    FROM job_outcomes WHERE ($tenant IS NULL OR tenant = $tenant) GROUP BY tenant),
step_figures AS (SELECT tenant, {percentiles_sql("gap", "step")} FROM step_gaps GROUP BY tenant)
SELECT * FROM job_figures LEFT JOIN step_figures USING (tenant) ORDER BY tenant
"""

JOB_COLUMNS = (
    "tenant",
    "job_id",
    "submitted",
    "first_start",
    "first_allocation",
    "granted",
    "first_progress",
    "completed",
    "attempts",
    "ttfua",
    "run_time",
    "accepted",
    "rejected",
)

#: money of each allocation (from the reconciliation) spread over the jobs that ran on it
APPORTIONED = """
SELECT jt.tenant, jt.job_id, m.currency, m.num, m.den, jt.us,
       sum(jt.us) OVER (PARTITION BY jt.tenant, jt.allocation_id, m.currency) AS total_us
FROM job_allocation_time jt JOIN allocation_money m ON m.tenant = jt.tenant
    AND m.allocation_id = jt.allocation_id
"""


def report(pipe: Pipeline, tenant: str | None = None) -> dict[str, Any]:
    """The outcomes report: per-tenant figures and one row per job (the pipeline's
    `job_facts`: reconcile/engine/sql/job_facts.sql)."""
    con = pipe.need("job_facts")
    costs = job_costs(pipe)
    jobs = _jobs(con, tenant, costs)
    tenants = _tenants(con, pipe.recon, tenant, jobs)
    return {"tenants": tenants, "jobs": jobs}


def job_costs(pipe: Pipeline) -> dict[tuple[str, str], dict[str, Fraction]]:
    """(tenant, job) → currency → exact cost in minor units (see the module docstring)."""
    pipe.need("job_facts")
    con = pipe.need("allocation_money")
    out: dict[tuple[str, str], dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    for tenant, job, currency, num, den, us, total in con.execute(APPORTIONED).fetchall():
        if total:
            out[(tenant, job)][currency or ""] += Fraction(
                int(num) * int(us), int(den) * int(total)
            )
    return out


def allocation_money(recon: Reconciliation) -> dict[tuple[str, str, str | None], Fraction]:
    """(tenant, allocation, currency) → the exact minor units billed on the allocation
    (`Reconciliation.allocation_money`)."""
    return recon.allocation_money()


def _jobs(
    con: duckdb.DuckDBPyConnection,
    tenant: str | None,
    costs: dict[tuple[str, str], dict[str, Fraction]],
) -> list[dict[str, Any]]:
    rows = con.execute(
        f"SELECT {', '.join(JOB_COLUMNS)} FROM job_outcomes WHERE ($tenant IS NULL OR "
        "tenant = $tenant) "
        "ORDER BY tenant, coalesce(submitted, first_start), job_id",
        {"tenant": tenant},
    ).fetchall()
    out = []
    for row in rows:
        r = dict(zip(JOB_COLUMNS, row))
        cost = costs.get((r["tenant"], r["job_id"]), {})
        out.append(
            {
                "tenant": r["tenant"],
                "job_id": r["job_id"],
                "submitted": iso(r["submitted"]),
                "first_start": iso(r["first_start"]),
                "first_allocation": r["first_allocation"],
                "granted": iso(r["granted"]),
                "first_progress": iso(r["first_progress"]),
                "completed": iso(r["completed"]),
                "attempts": r["attempts"],
                "time_to_first_usable_allocation_s": seconds(r["ttfua"]),
                "completed_run_time_s": seconds(r["run_time"]),
                "result": "accepted"
                if r["accepted"]
                else "rejected"
                if r["rejected"]
                else "pending",
                "cost": {c: str(Money.of(v, currency=c)) for c, v in sorted(cost.items())},
                "_cost": cost,
            }
        )
    return out


def _tenants(
    con: duckdb.DuckDBPyConnection,
    recon: Reconciliation,
    tenant: str | None,
    jobs: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    cursor = con.execute(TENANT_FIGURES, {"tenant": tenant})
    names = [d[0] for d in cursor.description]
    tallies = recon.tenants()
    billed = _billed_money(recon)
    out = []
    for row in cursor.fetchall():
        r = dict(zip(names, row))
        name = r["tenant"]
        tally = tallies.get(name)
        ckpt_us = (
            sum(us for (category, _), us in tally.gpu_us.items() if category == "checkpoint")
            if tally
            else 0
        )
        billed_us = tally.billed_us if tally else 0
        completed = [j for j in jobs if j["tenant"] == name and j["completed"] is not None]
        out.append(
            {
                "tenant": name,
                "jobs": r["jobs"],
                "completed_runs": r["completed_runs"],
                "accepted_results": int(r["accepted_results"] or 0),
                "time_to_first_usable_allocation_s": _dist(r, "ttfua"),
                "step_time_s": _dist(r, "step"),
                "completed_run_time_s": _dist(r, "run"),
                "checkpoint_overhead": checkpoint_overhead(ckpt_us, billed_us),
                "cost": cost_figures(
                    completed, billed.get(name, {}), int(r["accepted_results"] or 0)
                ),
            }
        )
    for job in jobs:
        del job["_cost"]
    return out


def _dist(row: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "n": int(row[f"{name}_n"] or 0),
        "p50": seconds(row[f"{name}_p50"]),
        "p95": seconds(row[f"{name}_p95"]),
    }


def _billed_money(recon: Reconciliation) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for cell in recon.cells:
        out[cell.tenant][cell.currency or ""] += cell.cents
    return out


def checkpoint_overhead(checkpoint_us: int, billed_us: int) -> dict[str, Any]:
    """`checkpoint` GPU-seconds, billed GPU-seconds, and their ratio (six places; None when nothing
    was billed)."""
    return {
        "checkpoint_gpu_seconds": gpu_seconds(checkpoint_us),
        "billed_gpu_seconds": gpu_seconds(billed_us),
        "ratio": round(checkpoint_us / billed_us, 6) if billed_us else None,
    }


def cost_figures(
    completed: list[dict[str, Any]], billed: dict[str, int], accepted: int
) -> dict[str, dict[str, Any]]:
    """Per currency: completed runs' cost, cost per completed run, billed total, cost per
    accepted result.
    `completed`: the completed jobs, each with `_cost` (currency -> exact minor units, job_costs);
    `billed`: currency -> minor units billed; `accepted`: the accepted results they are shared
    by."""
    runs: dict[str, Fraction] = defaultdict(Fraction)
    for job in completed:
        for currency, value in job["_cost"].items():
            runs[currency] += value
    out = {}
    for currency in sorted(set(runs) | set(billed)):
        total = Fraction(billed.get(currency, 0))
        per_run = None
        if completed:
            per_run = str(Money.of(runs[currency] / len(completed), currency=currency))
        out[currency] = {
            "completed_runs_cost": str(Money.of(runs[currency], currency=currency)),
            "cost_per_completed_run": per_run,
            "billed": str(Money.of(total, currency=currency)),
            "cost_per_accepted_result": (
                str(Money.of(total / accepted, currency=currency)) if accepted else None
            ),
        }
    return out
