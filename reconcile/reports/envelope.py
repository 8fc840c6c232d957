"""`report envelope`: the observed envelope of each provider (source) and placement class.

A buyer compares providers on what they delivered, not on a price per GPU-hour: p95
start and completion against what was promised, restarts, checkpoint overhead, cost per
completed run and per accepted result. Every figure reuses the computation of
reconcile/reports/promises.py (promise outcomes) or outcomes.py (jobs, attempts, costs,
checkpoint overhead), grouped here by (source, placement class). docs/envelope.md and the
README repeat these definitions; percentiles are nearest-rank (reconcile/engine/figures.py).

- **A job's source** (the provider): the CloudEvents `source` of the grant of its first
  attempt's allocation (the scheduler that placed it), else of its first `job.started`,
  else of its first event of any type naming it (a submission, a promise); cut to the
  URI's scheme and authority, so per-node or per-job paths (`gpu-binding://k8s-a/node-002`,
  `slurm://alpha/jobs`) group as the system and cluster that wrote them (`gpu-binding://k8s-a`,
  `slurm://alpha`). A tenant's own application log is never the provider where a grant exists.
- **A job's placement class**: that of its first promise (promises.py: the promise's own
  class, else its first attempt's allocation's), else its first attempt's allocation's
  (`whole`, `mig:<profile>`, `timeslice`), else `unknown`.
- **An allocation's group**: the group of the first job started on it; an allocation on
  which no job started, its `allocation.granted`'s source and class. Billed money and
  GPU-seconds follow the allocation the line names; a line naming no allocation (a credit
  on the invoice) is in no group: it is shown as `unassigned`.
- **jobs**: jobs with a `job.*` event or a promise; **started**, **completed** among them.
- **start wait** (s, p50/p95): first `job.started` − `job.submitted`, jobs with both.
- **completed-run time** (s, p50/p95): outcomes.py's (first completion − first start).
- **promises** (only where the group has any): counts met, missed, pending (promises.py);
  start and completion delay (actual − promised, signed); and, side by side, the promised
  and the observed time from the promise (`policy.promise` event time) to start
  (`start_by` against the job's first start) and to completion (`complete_by` against its
  first completion), p50/p95 each: promised over the promises that give the bound,
  observed over those whose job started (completed).
- **restarts**: Σ (attempts − 1) over the started jobs (every `job.started` after the
  first: a failure followed by a new attempt); **jobs restarted**: jobs with more than one
  attempt; **restart rate**: restarts ÷ started jobs (four places).
- **checkpoint overhead**: `checkpoint` GPU-seconds ÷ billed GPU-seconds of the group's
  allocations, both from the reconciliation (outcomes.checkpoint_overhead).
- **misses by cause** (`miss_causes`): the group's missed starts counted by their cause
  (reconcile/RULES.md, promises.py's `cause`), judged on the whole fleet even for one tenant.
- **cost per completed run**: outcomes.py's apportioned cost of the group's completed jobs
  ÷ their number; **cost per accepted result**: the money billed on the group's
  allocations (waste included) ÷ the distinct accepted results of its jobs; per currency,
  exact until shown, then rounded half-even (outcomes.cost_figures).
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from typing import Any

import duckdb
from rich.table import Table
from rich.text import Text

from reconcile.engine.causes import ORDER as CAUSE_ORDER
from reconcile.engine.figures import percentiles_sql, seconds
from reconcile.engine.pipeline import Pipeline
from reconcile.engine.result import Reconciliation
from reconcile.reports import outcomes, promises
from reconcile.reports.numbers import money, percent, rate
from schemas.display import DataTable, data_text
from schemas.money import Money

#: `--by` choices, each with the columns of the group key.
GROUPINGS: dict[str, tuple[str, ...]] = {
    "both": ("source", "placement_class"),
    "source": ("source",),
    "placement_class": ("placement_class",),
}
_COLUMN = {"source": "source", "placement_class": "placement"}

JOB_FIGURES = """
SELECT {keys}, count(*) AS jobs, count(j.first_start) AS started, count(j.completed) AS completed,
       coalesce(sum(greatest(j.attempts - 1, 0)), 0) AS restarts,
           count(*) FILTER (WHERE j.attempts > 1) AS jobs_restarted,
       coalesce(sum(j.accepted), 0) AS accepted_results,
       {wait}, {run}
FROM job_groups e LEFT JOIN job_outcomes j USING (tenant, job_id)
WHERE ($tenant IS NULL OR e.tenant = $tenant)
GROUP BY ALL
"""

PROMISE_FIGURES = """
SELECT {keys}, {counts}, {figures}
FROM promise_outcomes p JOIN job_groups e USING (tenant, job_id)
WHERE ($tenant IS NULL OR e.tenant = $tenant)
GROUP BY ALL
"""

#: Each promise figure: its name and the SQL of its value in µs (promise_outcomes columns).
PROMISE_DURATIONS = (
    ("start_delay_s", "p.start_delay"),
    ("completion_delay_s", "p.completion_delay"),
    ("promised_start_s", "p.start_by - p.made"),
    ("observed_start_s", "p.started - p.made"),
    ("promised_completion_s", "p.complete_by - p.made"),
    ("observed_completion_s", "p.completed - p.made"),
)


def report(pipe: Pipeline, tenant: str | None = None, by: str = "both") -> dict[str, Any]:
    """The envelope, one row per group of `by` (GROUPINGS), ordered by the group key (the
    pipeline's `envelope_groups`: reconcile/engine/sql/envelope_groups.sql)."""
    keys = GROUPINGS[by]
    con = pipe.need("envelope_groups")
    recon = pipe.recon
    groups = _job_figures(con, keys, tenant)
    for key, figures in _promise_figures(con, keys, tenant).items():
        groups.setdefault(key, _empty(keys, key))["promises"] = figures
    for key, causes in miss_causes(pipe, keys, tenant).items():
        groups.setdefault(key, _empty(keys, key))["miss_causes"] = causes
    unassigned = _add_money(pipe, recon, keys, tenant, groups)
    for group in groups.values():
        group.setdefault("miss_causes", {})
    return {
        "by": list(keys),
        "tenant": tenant,
        "groups": [groups[k] for k in sorted(groups)],
        "unassigned": {
            c: str(Money.of(Fraction(v), currency=c)) for c, v in sorted(unassigned.items())
        },
    }


MISS_CAUSES = """
SELECT {keys}, m.cause, count(*) AS misses
FROM miss_causes m JOIN job_groups e USING (tenant, job_id)
WHERE ($tenant IS NULL OR m.tenant = $tenant)
GROUP BY ALL
"""


def miss_causes(
    pipe: Pipeline, keys: tuple[str, ...], tenant: str | None
) -> dict[tuple[str, ...], dict[str, int]]:
    """Per group: its missed starts by cause (reconcile/RULES.md's order), judged on the
    whole fleet."""
    pipe.need("miss_causes")
    con = pipe.need("envelope_groups")
    found: dict[tuple[str, ...], dict[str, int]] = defaultdict(dict)
    for r in _rows(con, MISS_CAUSES.format(keys=_key_sql(keys)), tenant):
        found[tuple(r[k] for k in keys)][r["cause"]] = int(r["misses"])
    return {
        key: {c: causes[c] for c in CAUSE_ORDER if c in causes} for key, causes in found.items()
    }


def _key_sql(keys: tuple[str, ...]) -> str:
    return ", ".join(f"e.{_COLUMN[k]} AS {k}" for k in keys)


def _empty(keys: tuple[str, ...], key: tuple[str, ...]) -> dict[str, Any]:
    """A group with no job (an allocation no job ran on): its money only."""
    none = {"n": 0, "p50": None, "p95": None}
    return {
        **dict(zip(keys, key)),
        "jobs": 0,
        "started": 0,
        "completed": 0,
        "start_wait_s": none,
        "completed_run_time_s": none,
        "promises": None,
        "restarts": 0,
        "jobs_restarted": 0,
        "restart_rate": None,
        "accepted_results": 0,
    }


def _dist(row: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "n": int(row[f"{name}_n"] or 0),
        "p50": seconds(row[f"{name}_p50"]),
        "p95": seconds(row[f"{name}_p95"]),
    }


def _rows(con: duckdb.DuckDBPyConnection, sql: str, tenant: str | None) -> list[dict[str, Any]]:
    cursor = con.execute(sql, {"tenant": tenant})
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _job_figures(
    con: duckdb.DuckDBPyConnection, keys: tuple[str, ...], tenant: str | None
) -> dict[tuple[str, ...], dict[str, Any]]:
    sql = JOB_FIGURES.format(
        keys=_key_sql(keys),
        wait=percentiles_sql("j.first_start - j.submitted", "wait"),
        run=percentiles_sql("j.run_time", "run"),
    )
    out = {}
    for r in _rows(con, sql, tenant):
        key = tuple(r[k] for k in keys)
        started, restarts = int(r["started"]), int(r["restarts"])
        out[key] = {
            **dict(zip(keys, key)),
            "jobs": int(r["jobs"]),
            "started": started,
            "completed": int(r["completed"]),
            "start_wait_s": _dist(r, "wait"),
            "completed_run_time_s": _dist(r, "run"),
            "promises": None,
            "restarts": restarts,
            "jobs_restarted": int(r["jobs_restarted"]),
            "restart_rate": round(restarts / started, 4) if started else None,
            "accepted_results": int(r["accepted_results"]),
        }
    return out


def _promise_figures(
    con: duckdb.DuckDBPyConnection, keys: tuple[str, ...], tenant: str | None
) -> dict[tuple[str, ...], dict[str, Any]]:
    figures = ", ".join(percentiles_sql(expr, name[:-2]) for name, expr in PROMISE_DURATIONS)
    sql = PROMISE_FIGURES.format(
        keys=_key_sql(keys), counts=promises.STATUS_COUNTS, figures=figures
    )
    out = {}
    for r in _rows(con, sql, tenant):
        out[tuple(r[k] for k in keys)] = {
            "promises": int(r["promises"]),
            "met": int(r["met"]),
            "missed": int(r["missed"]),
            "pending": int(r["pending"]),
            **{name: _dist(r, name[:-2]) for name, _ in PROMISE_DURATIONS},
        }
    return out


def _group_of_allocation(
    con: duckdb.DuckDBPyConnection, keys: tuple[str, ...]
) -> dict[tuple[str, str], tuple[str, ...]]:
    columns = ", ".join(_COLUMN[k] for k in keys)
    rows = con.execute(
        f"SELECT tenant, allocation_id, {columns} FROM allocation_groups"
    ).fetchall()
    return {(r[0], r[1]): tuple(r[2:]) for r in rows}


def _group_of_job(
    con: duckdb.DuckDBPyConnection, keys: tuple[str, ...]
) -> dict[tuple[str, str], tuple[str, ...]]:
    columns = ", ".join(_COLUMN[k] for k in keys)
    rows = con.execute(f"SELECT tenant, job_id, {columns} FROM job_groups").fetchall()
    return {(r[0], r[1]): tuple(r[2:]) for r in rows}


def _add_money(
    pipe: Pipeline,
    recon: Reconciliation,
    keys: tuple[str, ...],
    tenant: str | None,
    groups: dict[tuple[str, ...], dict[str, Any]],
) -> dict[str, int]:
    """Checkpoint overhead and costs of each group (from the reconciliation's cells and
    outcomes.job_costs); returns the money of lines in no group, per currency."""
    of_allocation = _group_of_allocation(pipe.need("envelope_groups"), keys)
    checkpoint_us: dict[tuple[str, ...], int] = defaultdict(int)
    billed_us: dict[tuple[str, ...], int] = defaultdict(int)
    billed: dict[tuple[str, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    unassigned: dict[str, int] = defaultdict(int)
    for cell in recon.cells:
        if tenant is not None and cell.tenant != tenant:
            continue
        key = (
            of_allocation.get((cell.tenant, cell.allocation_id))
            if cell.allocation_id is not None
            else None
        )
        if key is None:
            unassigned[cell.currency or ""] += cell.cents
            continue
        billed[key][cell.currency or ""] += cell.cents
        billed_us[key] += cell.gpu_us
        if cell.category == "checkpoint":
            checkpoint_us[key] += cell.gpu_us
    completed = _completed_costs(pipe, keys, tenant)
    for key in set(billed) | set(completed):
        groups.setdefault(key, _empty(keys, key))
    for key, group in groups.items():
        group["checkpoint_overhead"] = outcomes.checkpoint_overhead(
            checkpoint_us[key], billed_us[key]
        )
        group["cost"] = outcomes.cost_figures(
            completed.get(key, []), billed.get(key, {}), group["accepted_results"]
        )
    return unassigned


def _completed_costs(
    pipe: Pipeline, keys: tuple[str, ...], tenant: str | None
) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """Each group's completed jobs, each with its exact cost (`_cost`, outcomes.job_costs)."""
    con = pipe.need("envelope_groups")
    of_job = _group_of_job(con, keys)
    costs = outcomes.job_costs(pipe)
    rows = con.execute(
        "SELECT tenant, job_id FROM job_outcomes WHERE completed IS NOT NULL "
        "AND ($tenant IS NULL OR tenant = $tenant)",
        {"tenant": tenant},
    ).fetchall()
    out: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for job_tenant, job_id in rows:
        out[of_job[(job_tenant, job_id)]].append({"_cost": costs.get((job_tenant, job_id), {})})
    return out


# -- CSV and terminal rows ------------------------------------------------------------------

DISTRIBUTIONS = ("start_wait_s", "completed_run_time_s")
PROMISE_COUNTS = ("promises", "met", "missed", "pending")
COST_FIGURES = (
    "completed_runs_cost",
    "cost_per_completed_run",
    "billed",
    "cost_per_accepted_result",
)


def csv_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per group and currency of its money (a group with no money: one row, no
    currency); distributions flattened as `<figure>_n`, `_p50`, `_p95`; promise figures
    prefixed `promise_` and empty where the group has no promise."""
    rows = []
    for group in doc["groups"]:
        base = {k: group[k] for k in doc["by"]}
        base |= {k: group[k] for k in ("jobs", "started", "completed")}
        for name in DISTRIBUTIONS:
            base |= _flat(name, group[name])
        made = group["promises"] or {}
        base |= {f"promise_{k}": made.get(k) for k in PROMISE_COUNTS}
        base |= {f"missed_{c}": group.get("miss_causes", {}).get(c, 0) for c in CAUSE_ORDER}
        for name, _ in PROMISE_DURATIONS:
            base |= _flat(f"promise_{name}", made.get(name) or {})
        base |= {
            k: group[k] for k in ("restarts", "jobs_restarted", "restart_rate", "accepted_results")
        }
        base |= {
            f"checkpoint_{k}" if k == "ratio" else k: v
            for k, v in group["checkpoint_overhead"].items()
        }
        for currency, figures in (group["cost"] or {"": dict.fromkeys(COST_FIGURES)}).items():
            rows.append(base | {"currency": currency} | {k: figures[k] for k in COST_FIGURES})
    return rows


def _flat(name: str, dist: dict[str, Any]) -> dict[str, Any]:
    return {f"{name}_{part}": dist.get(part) for part in ("n", "p50", "p95")}


def tables(doc: dict[str, Any]) -> list[Table | Text]:
    """One row per group: observed figures, with the promised beside them as `promised →
    observed`."""
    table = DataTable(
        *[k.replace("_", " ") for k in doc["by"]],
        "jobs started/completed",
        "start wait p95 s",
        "start p95 s promised → observed",
        "completion p95 s promised → observed",
        "missed of decided",
        "misses by cause",
        "restarts/started",
        "checkpoint overhead",
        "cost / completed run",
        "cost / accepted result",
        title="envelope: observed against promised, per "
        + " and ".join(k.replace("_", " ") for k in doc["by"]),
    )
    for g in doc["groups"]:
        made = g["promises"]
        ratio = g["checkpoint_overhead"]["ratio"]
        costs = g["cost"].items()
        table.add_row(
            *(g[k] for k in doc["by"]),
            f"{g['jobs']} {g['started']}/{g['completed']}",
            _text(g["start_wait_s"]["p95"]),
            _side_by_side(made, "start"),
            _side_by_side(made, "completion"),
            "–" if made is None else missed_text(made),
            ", ".join(f"{c} {n}" for c, n in g.get("miss_causes", {}).items()) or "–",
            "–"
            if g["restart_rate"] is None
            else f"{rate(g['restart_rate'])} ({g['restarts']}/{g['started']})",
            percent(ratio),
            " ".join(f"{money(c['cost_per_completed_run'])} {cur}" for cur, c in costs) or "–",
            " ".join(f"{money(c['cost_per_accepted_result'])} {cur}" for cur, c in costs) or "–",
        )
    parts: list[Table | Text] = [table]
    if doc["unassigned"]:
        parts.append(
            data_text(
                "in no group (lines naming no allocation): "
                + ", ".join(f"{v} {c}" for c, v in doc["unassigned"].items())
            )
        )
    return parts


def miss_ratio(made: dict[str, Any]) -> Fraction | None:
    """Missed over promises decided (met or missed; pending ones are not yet either)."""
    decided = made["met"] + made["missed"]
    return Fraction(made["missed"], decided) if decided else None


def missed_text(made: dict[str, Any]) -> str:
    """The miss rate as people read it, with its counts: "25.00 % (1 of 4)"."""
    return f"{percent(miss_ratio(made))} ({made['missed']} of {made['met'] + made['missed']})"


def _side_by_side(made: dict[str, Any] | None, what: str) -> str:
    if made is None:
        return "–"
    return (
        f"{_text(made[f'promised_{what}_s']['p95'])} → {_text(made[f'observed_{what}_s']['p95'])}"
    )


def _text(value: Any) -> str:
    return "–" if value is None else str(value)
