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
- **Cause** (a missed start only): `cause`, `cause_seconds` (seconds of each cause in the
  wait) and `cause_bearer`, by the rule (reconcile/RULES.md "Causes of a missed
  start"; the pipeline's `miss_causes`, reconcile/engine/causes.py). `causes` groups the
  misses by cause: per cause, the misses it is the cause of and its seconds over all misses.
- **Ahead** (a missed start only): the jobs of its placement class (any MIG profile for a
  MIG class; `unknown` is `whole`) submitted after its job and started before it (before
  the horizon when it never started): how many, how many of them a `policy.decision`
  `backfilled` names, and the miss's `scheduler` seconds when there is any (0 otherwise).
  An operator sees each one's tenant and job id; a tenant sees only its own, the other
  tenants' counted in `others`.
- **Estimates** per queue (the pipeline's `backfill` stage: reconcile/engine/sql/backfill.sql):
  the ended jobs with a requested time limit (`timelimit_s`, sacct's Timelimit) and their
  run time (`elapsed_s`, else end − first start): `requested_s`, `elapsed_s`, their ratio
  `used_share`, and the jobs whose estimate was `optimistic` (ran its whole limit),
  `pessimistic` (ran less than half of it) or `accurate` (the rest).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from reconcile.engine.causes import BEARER, ORDER
from reconcile.engine.figures import iso, percentiles_sql, safe_name, seconds
from reconcile.engine.pipeline import Pipeline

COLUMNS = (
    "seq",
    "tenant",
    "promise_id",
    "job_id",
    "made",
    "start_by",
    "complete_by",
    "gpus",
    "started",
    "allocation_id",
    "completed",
    "placement",
    "same_id",
    "start_status",
    "completion_status",
    "start_delay",
    "completion_delay",
)
MISSED = (
    "(start_status IN ('late', 'not_started') OR completion_status IN ('late', 'not_completed'))"
)

#: Columns promises, met, missed and pending of a group of `promise_outcomes` rows.
STATUS_COUNTS = f"""count(*) AS promises,
       count(*) FILTER (WHERE NOT {MISSED} AND start_status <> 'pending'
           AND completion_status <> 'pending') AS met,
       count(*) FILTER (WHERE {MISSED}) AS missed,
       count(*) FILTER (WHERE NOT {MISSED} AND (start_status = 'pending'
           OR completion_status = 'pending')) AS pending"""

SUMMARY = f"""
SELECT tenant, placement, {STATUS_COUNTS},
       {percentiles_sql("start_delay", "delay")}
FROM promise_outcomes WHERE ($tenant IS NULL OR tenant = $tenant)
GROUP BY tenant, placement ORDER BY tenant, placement
"""


def promise_rows(
    pipe: Pipeline, tenant: str | None = None, promise_id: str | None = None, causes: bool = True
) -> list[dict[str, Any]]:
    """Every promise (of `tenant`, or with `promise_id`) in time order, as plain dicts
    (the pipeline's `promise_outcomes`: reconcile/engine/sql/promise_outcomes.sql); with
    `causes`, a missed start's cause from the pipeline's `miss_causes`."""
    rows = (
        pipe.need("promise_outcomes")
        .execute(
            f"SELECT {', '.join(COLUMNS)} FROM promise_outcomes WHERE ($tenant IS NULL OR "
            "tenant = $tenant) "
            "AND ($pid IS NULL OR promise_id = $pid) ORDER BY start_by, tenant, promise_id",
            {"tenant": tenant, "pid": promise_id},
        )
        .fetchall()
    )
    # Built on the whole fleet (causes need every tenant's grants): for one tenant, whether
    # another tenant uses the same promise id is not the tenant's to learn.
    out = [
        _promise(dict(zip(COLUMNS, row)) | ({"same_id": 1} if tenant is not None else {}))
        for row in rows
    ]
    if causes and any(p["start_status"] in ("late", "not_started") for p in out):
        by_promise = miss_causes(pipe)
        for p in out:
            found = by_promise.get((p["tenant"], p["promise_id"]))
            if found is not None:
                p.update(found)
    return out


def miss_causes(pipe: Pipeline) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (tenant, promise_id) of a missed start: cause, cause_seconds (per cause, in
    seconds) and cause_bearer (the pipeline's `miss_causes`)."""
    rows = (
        pipe.need("miss_causes")
        .execute("SELECT tenant, promise_id, cause, cause_seconds, cause_bearer FROM miss_causes")
        .fetchall()
    )
    return {
        (tenant, pid): {
            "cause": cause,
            "cause_seconds": {k: seconds(v) for k, v in json.loads(spent).items()},
            "cause_bearer": bearer,
        }
        for tenant, pid, cause, spent, bearer in rows
    }


def miss_detail(pipe: Pipeline, tenant: str, promise_id: str) -> dict[str, Any] | None:
    """The `miss_causes` row of one missed start: its cause fields (as in the report) and
    the figures at the start of its cause's longest stretch (`class_devices`, `free`,
    `held`, `held_by_others`, `faulted`, `under_change`, `tenant_held`, `quota`), with
    `wait_s`, the seconds of its wait."""
    cursor = pipe.need("miss_causes").execute(
        "SELECT * FROM miss_causes WHERE tenant = $tenant AND promise_id = $pid",
        {"tenant": tenant, "pid": promise_id},
    )
    names = [d[0] for d in cursor.description]
    row = cursor.fetchone()
    if row is None:
        return None
    found = dict(zip(names, row))
    spent = {k: seconds(v) for k, v in json.loads(found.pop("cause_seconds")).items()}
    return found | {
        "cause_seconds": spent,
        "wait_s": seconds(found["wait_until"] - found["wait_from"]),
    }


def cause_rows(misses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The misses grouped by cause (reconcile/RULES.md's order): how many misses each is the cause
    of, and its seconds summed over every miss's wait."""
    out = []
    for cause in ORDER:
        mine = [m for m in misses if m.get("cause") == cause]
        spent = sum(m.get("cause_seconds", {}).get(cause, 0) for m in misses)
        if mine or spent:
            out.append(
                {
                    "cause": cause,
                    "cause_bearer": BEARER[cause],
                    "misses": len(mine),
                    "seconds": spent,
                }
            )
    return out


def _promise(row: dict[str, Any]) -> dict[str, Any]:
    missed = row["start_status"] in ("late", "not_started") or row["completion_status"] in (
        "late",
        "not_completed",
    )
    out = {
        "tenant": row["tenant"],
        "promise_id": row["promise_id"],
        "job_id": row["job_id"],
        "placement_class": row["placement"],
        "gpus": row["gpus"],
        "promised_at": iso(row["made"]),
        "start_by": iso(row["start_by"]),
        "started": iso(row["started"]),
        "start_status": row["start_status"],
        "start_delay_s": seconds(row["start_delay"]),
        "complete_by": iso(row["complete_by"]),
        "completed": iso(row["completed"]),
        "completion_status": row["completion_status"],
        "completion_delay_s": seconds(row["completion_delay"]),
        "allocation_id": row["allocation_id"],
        "missed": missed,
        "seq": row["seq"],
    }
    if missed:
        out["packet_command"] = packet_command(
            row["promise_id"], row["tenant"] if row["same_id"] > 1 else None
        )
    return out


def packet_command(promise_id: str, tenant: str | None = None) -> str:
    """The command that writes this promise's diagnostic packet (`--tenant` only when
    another tenant uses the same promise id)."""
    words = ["gpuledger", "packet", "--promise", promise_id]
    if tenant is not None:
        words += ["--tenant", tenant]
    words += ["--out", f"packets/{safe_name(promise_id)}"]
    return " ".join(shlex.quote(w) for w in words)


def summary_rows(pipe: Pipeline, tenant: str | None = None) -> list[dict[str, Any]]:
    """Per tenant and placement class: counts, and p50/p95 start delay in seconds."""
    cursor = pipe.need("promise_outcomes").execute(SUMMARY, {"tenant": tenant})
    names = [d[0] for d in cursor.description]
    out = []
    for row in cursor.fetchall():
        r = dict(zip(names, row))
        out.append(
            {
                "tenant": r["tenant"],
                "placement_class": r["placement"],
                "promises": r["promises"],
                "met": r["met"],
                "missed": r["missed"],
                "pending": r["pending"],
                "started": r["delay_n"],
                "start_delay_p50_s": seconds(r["delay_p50"]),
                "start_delay_p95_s": seconds(r["delay_p95"]),
            }
        )
    return out


ESTIMATES = """
SELECT queue, count(*) AS jobs, sum(timelimit_s) AS requested_s, sum(elapsed_s) AS elapsed_s,
       count(*) FILTER (WHERE elapsed_s >= timelimit_s) AS optimistic,
       count(*) FILTER (WHERE 2 * elapsed_s < timelimit_s) AS pessimistic
FROM job_estimates WHERE ($tenant IS NULL OR tenant = $tenant)
GROUP BY queue ORDER BY queue
"""

AHEAD = """
SELECT tenant, promise_id, ahead_tenant, ahead_job_id, ahead_submitted, ahead_started, backfilled
FROM jobs_ahead WHERE ($tenant IS NULL OR tenant = $tenant)
"""


def estimate_rows(pipe: Pipeline, tenant: str | None = None) -> list[dict[str, Any]]:
    """Per queue (of the tenant's jobs, or all): the time limits asked for against the time
    the jobs ran. `optimistic`: jobs that ran their whole limit (elapsed ≥ limit: the
    estimate was too short); `pessimistic`: jobs that ran less than half of it; `used_share`:
    elapsed ÷ requested, to four places."""
    cursor = pipe.need("backfill").execute(ESTIMATES, {"tenant": tenant})
    names = [d[0] for d in cursor.description]
    out = []
    for row in cursor.fetchall():
        r = dict(zip(names, row))
        requested, elapsed = int(r["requested_s"]), int(r["elapsed_s"])
        out.append(
            {
                "queue": r["queue"],
                "jobs": int(r["jobs"]),
                "requested_s": requested,
                "elapsed_s": elapsed,
                "used_share": round(elapsed / requested, 4) if requested else None,
                "optimistic": int(r["optimistic"]),
                "pessimistic": int(r["pessimistic"]),
                "accurate": int(r["jobs"]) - int(r["optimistic"]) - int(r["pessimistic"]),
            }
        )
    return out


def ahead_of(pipe: Pipeline, misses: list[dict[str, Any]], tenant: str | None = None) -> None:
    """Sets `ahead` on each missed start: the jobs of its class submitted after its job and
    started before it (backfilled or not), with its `scheduler` seconds. For one tenant
    (`tenant`), another tenant's job is counted in `others`, never named."""
    found: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for row in pipe.need("backfill").execute(AHEAD, {"tenant": tenant}).fetchall():
        found.setdefault((row[0], row[1]), []).append(row[2:])
    for m in misses:
        if m["start_status"] not in ("late", "not_started"):
            continue
        jobs = found.get((m["tenant"], m["promise_id"]), [])
        seen = [j for j in jobs if tenant is None or j[0] == tenant]
        m["ahead"] = {
            "jobs": len(jobs),
            "backfilled": sum(1 for j in jobs if j[4]),
            "seen": [
                {
                    "tenant": who,
                    "job_id": job_id,
                    "submitted": iso(submitted),
                    "started": iso(started),
                    "backfilled": bool(backfilled),
                }
                for who, job_id, submitted, started, backfilled in seen
            ],
            "others": len(jobs) - len(seen),
            "scheduler_s": m.get("cause_seconds", {}).get("scheduler", 0) if jobs else 0,
        }


def report(pipe: Pipeline, tenant: str | None = None) -> dict[str, Any]:
    """The promises report: summary by tenant and class, every promise, every miss, the
    misses by cause, the jobs ahead of each missed start, and the estimates per queue."""
    promises = promise_rows(pipe, tenant)
    misses = [p for p in promises if p["missed"]]
    ahead_of(pipe, misses, tenant)
    return {
        "summary": summary_rows(pipe, tenant),
        "misses": misses,
        "promises": promises,
        "causes": cause_rows(misses),
        "estimates": estimate_rows(pipe, tenant),
    }
