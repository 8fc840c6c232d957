"""`report placement`: the placement class sold against the topology observed, and whether
the probes' bus bandwidth predicts the job's step time.

Rules (docs/placement.md gives them with examples):
- **Allocation**: every `allocation.granted` (first grant per tenant and allocation), and
  every allocation a `placement.observed` or `probe.result` names without a grant.
- **Class sold**: the `placement_class` of the first `policy.promise` (by time, then
  ledger order) for a job that started on the allocation, else the allocation's own
  `placement_class` (the schema's default `whole`); `mig:<profile>` with the allocation's
  profile. Terms (`policy.terms`) carry no class.
- **Observed**: the latest `placement.observed` of each node of the allocation.
- **Requirement** of the class: `whole` of two or more GPUs is judged per node, as
  reconcile/RULES.md 13 judges it (so that the report and the dispute's placement claims
  agree): every pair of its GPUs that one capture shows joined by `NV<n>`, and as many
  GPUs seen, over its nodes' captures, as granted; pairs on different nodes are in no
  capture and are not judged, so an allocation across nodes is not a mismatch by itself.
  `whole` of one GPU, `mig` and `timeslice` (a share of one GPU) need one node and no
  link. A promise's class other than the granted one is a mismatch by itself.
- **Status**: `match`, `mismatch` (with the reasons in words), `unobserved` (no capture)
  or `undetermined` (the capture shows more GPUs than granted and the grant's devices do
  not say which are the allocation's; or nothing names the class sold).
- **Billed**: the money of the reconciliation's lines naming the allocation (as outcomes
  take it: after corrections, credits included), exact until shown.
- **Prediction**, per placement class: Spearman's rank correlation between x = the bus
  bandwidth of the allocation's latest nccl-tests `all_reduce_perf` run at its largest
  message size (out-of-place busbw) and y = the nearest-rank p50 of the step times of the
  attempts that ran on the allocation: consecutive `job.progress` marks of one attempt,
  paired as `report outcomes` pairs them, their gap ÷ the steps between them (a job that
  marks every 5th step is compared per step; outcomes' step time is the gap itself).
  Shown for allocations with a busbw reading. One point per allocation with both; ranks
  with ties averaged, computed in fractions; fewer than three points: "not enough data".
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from typing import Any

import duckdb
import pyarrow as pa

from reconcile.engine.figures import nearest_rank_of, placement_sql
from reconcile.engine.intervals import SECOND
from reconcile.engine.pipeline import Pipeline
from schemas.money import Money

#: the busbw reading: nccl-tests' all-reduce, the collective of data-parallel training
PROBE_TEST = "all_reduce_perf"
#: ρ at or below this reads "predicts": more bus bandwidth, shorter steps
PREDICTS_AT = Fraction(-1, 2)
MIN_POINTS = 3
#: Fewer points than this, and a ρ shown is flagged as a small sample (†).
FEW_POINTS = 10
#: places of the correlation as shown (its exact square is given beside it)
SHOWN_PLACES = 6
#: pairs named in the one-line reason before "and N more"
REASON_PAIRS = 3

ALLOCATIONS = f"""
WITH grant_ AS (
    SELECT tenant, allocation_id, gpus, devices, node, fabric_domain,
        coalesce(placement_class, 'whole') AS cls, profile
    FROM ev WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
named AS (
    SELECT DISTINCT tenant, allocation_id FROM ev
    WHERE type IN ('placement.observed', 'probe.result') AND allocation_id IS NOT NULL),
started AS (SELECT tenant, job_id, allocation_id, min(t) AS first_start FROM ev
            WHERE type = 'job.started'
            GROUP BY ALL),
promise AS (
    SELECT s.tenant, s.allocation_id, p.promise_id, p.job_id, p.placement_class AS cls
    FROM ev p JOIN started s ON s.tenant = p.tenant AND s.job_id = p.job_id
    WHERE p.type = 'policy.promise' AND p.placement_class IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY s.tenant, s.allocation_id ORDER BY p.t, p.seq) = 1),
jobs AS (SELECT tenant, allocation_id, list(job_id ORDER BY first_start, job_id) AS jobs
    FROM started GROUP BY ALL),
keys AS (SELECT tenant, allocation_id FROM grant_ UNION SELECT tenant, allocation_id FROM named)
SELECT k.tenant, k.allocation_id, g.gpus, g.devices, g.fabric_domain, g.cls AS granted_class,
       g.profile,
       p.promise_id, p.cls AS promised_class,
       {
    placement_sql(
        "coalesce(p.cls, g.cls)", "CASE WHEN coalesce(p.cls, g.cls) = g.cls THEN g.profile END"
    )
}
           AS sold,
       coalesce(j.jobs, []::VARCHAR[]) AS jobs
FROM keys k
LEFT JOIN grant_ g USING (tenant, allocation_id)
LEFT JOIN promise p USING (tenant, allocation_id)
LEFT JOIN jobs j USING (tenant, allocation_id)
WHERE ($tenant IS NULL OR k.tenant = $tenant)
ORDER BY k.tenant, k.allocation_id
"""
ALLOCATION_COLUMNS = (
    "tenant",
    "allocation_id",
    "gpus",
    "devices",
    "fabric_domain",
    "granted_class",
    "profile",
    "promise_id",
    "promised_class",
    "sold",
    "jobs",
)

#: every capture and probe, oldest first (a later one of the same node or test replaces it)
EVIDENCE = """
SELECT tenant, data->>'allocation_id' AS allocation_id, type, CAST(data AS VARCHAR) FROM evidence
WHERE type IN ('placement.observed', 'probe.result') AND ($tenant IS NULL OR tenant = $tenant)
ORDER BY t, seq
"""


@dataclass
class Evidence:
    """One allocation's captures (latest per node) and its latest all-reduce busbw."""

    captures: dict[str, dict[str, Any]] = field(default_factory=dict)
    busbw: Decimal | None = None
    busbw_size: int | None = None


def report(pipe: Pipeline, tenant: str | None = None) -> dict[str, Any]:
    """The placement report: one row per allocation, a summary per tenant and class, and
    the rank correlation per class."""
    con = pipe.need("job_facts")
    evidence = _evidence(con, tenant)
    billed: dict[tuple[str, str], dict[str, Fraction]] = defaultdict(dict)
    for (owner, allocation_id, currency), value in pipe.recon.allocation_money().items():
        billed[(owner, allocation_id)][currency or ""] = value
    cursor = con.execute(ALLOCATIONS, {"tenant": tenant})
    allocations = [
        _allocation(dict(zip(ALLOCATION_COLUMNS, row)), evidence, billed)
        for row in cursor.fetchall()
    ]
    _step_times(con, allocations)
    return {
        "allocations": allocations,
        "summary": _summary(allocations),
        "prediction": _prediction(allocations),
    }


def _evidence(
    con: duckdb.DuckDBPyConnection, tenant: str | None
) -> dict[tuple[str, str], Evidence]:
    out: dict[tuple[str, str], Evidence] = defaultdict(Evidence)
    for owner, allocation_id, kind, text in con.execute(EVIDENCE, {"tenant": tenant}).fetchall():
        data = json.loads(text)
        found = out[(owner, allocation_id)]
        if kind == "placement.observed":
            found.captures[data["node"]] = data["topology"]
        elif data.get("probe") == "nccl-tests" and data.get("test") == PROBE_TEST:
            found.busbw_size, found.busbw = _largest_busbw(data["figures"]) or (
                found.busbw_size,
                found.busbw,
            )
    return out


#: each step time (a gap between consecutive marks of one attempt ÷ the steps between them)
#: on the allocations that have a bus bandwidth reading
STEP_TIMES = """
SELECT s.tenant, s.allocation_id, s.gap, s.dstep FROM step_gaps s
JOIN pl_probed p ON p.tenant = s.tenant AND p.allocation_id = s.allocation_id
WHERE s.gap IS NOT NULL AND s.dstep > 0
"""


def _step_times(con: duckdb.DuckDBPyConnection, allocations: list[dict[str, Any]]) -> None:
    """The nearest-rank p50 of the step times of every attempt on each allocation with a
    busbw reading, exact (seconds per step as a fraction). Marks that advance no step
    measure none and are left out."""
    probed = [a for a in allocations if a["busbw_gbps"] is not None]
    con.register(
        "pl_probed",
        pa.table(
            {
                "tenant": pa.array([a["tenant"] for a in probed], pa.string()),
                "allocation_id": pa.array([a["allocation_id"] for a in probed], pa.string()),
            }
        ),
    )
    times: dict[tuple[str, str], list[Fraction]] = defaultdict(list)
    for tenant, allocation_id, gap, dstep in con.execute(STEP_TIMES).fetchall():
        times[(tenant, allocation_id)].append(Fraction(int(gap), int(dstep) * SECOND))
    con.unregister("pl_probed")
    for a in allocations:
        found = times.get((a["tenant"], a["allocation_id"]), [])
        p50 = nearest_rank_of(found, 50)
        a["_step_p50"] = p50
        a["step_time_p50_s"] = None if p50 is None else decimal_text(p50)
        a["step_times"] = len(found)


def decimal_text(value: Fraction, places: int = SHOWN_PLACES) -> str:
    """A fraction as decimal text: exact when it ends within `places`, else rounded half-even."""
    with localcontext() as ctx:
        ctx.prec = 60
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        rounded = exact.quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN)
        return format(exact.normalize(), "f") if rounded == exact else str(rounded)


def _largest_busbw(figures: list[dict[str, Any]]) -> tuple[int, Decimal] | None:
    """The out-of-place busbw at the run's largest message size (bandwidth-bound, unlike
    the average over a sweep whose small sizes measure latency)."""
    rows = [
        (f["size_bytes"], Decimal(f["value"]))
        for f in figures
        if f["name"] == "busbw"
        and f.get("placement", "out-of-place") == "out-of-place"
        and "size_bytes" in f
    ]
    return max(rows) if rows else None


# -- one allocation -------------------------------------------------------------------------


def _allocation(
    row: dict[str, Any],
    evidence: dict[tuple[str, str], Evidence],
    billed: dict[tuple[str, str], dict[str, Fraction]],
) -> dict[str, Any]:
    found = evidence.get((row["tenant"], row["allocation_id"]), Evidence())
    status, reasons = verdict(row, found.captures)
    money_of = billed.get((row["tenant"], row["allocation_id"]), {})
    return {
        "tenant": row["tenant"],
        "allocation_id": row["allocation_id"],
        "jobs": list(row["jobs"]),
        "gpus": row["gpus"],
        "placement_class": row["sold"],
        "class_from": "promise"
        if row["promised_class"]
        else "allocation"
        if row["granted_class"]
        else None,
        "promise_id": row["promise_id"],
        "granted_class": row["granted_class"],
        "nodes_observed": sorted(found.captures),
        "links_observed": _links_seen(found.captures, row),
        "status": status,
        "reason": _one_line(reasons),
        "reasons": reasons,
        "billed": {c: str(Money.of(v, currency=c)) for c, v in sorted(money_of.items())},
        "_money": money_of,
        "busbw_gbps": None if found.busbw is None else str(found.busbw),
        "busbw_size_bytes": found.busbw_size,
        "step_time_p50_s": None,
        "step_times": 0,
    }


def verdict(row: dict[str, Any], captures: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """`match`/`mismatch`/`unobserved`/`undetermined` and the reasons in words."""
    sold, granted = row["sold"], row["granted_class"]
    base = sold.split(":")[0]
    reasons: list[str] = []
    if row["promised_class"] and granted and row["promised_class"] != granted:
        reasons.append(
            f"sold {row['promised_class']} (promise {row['promise_id']}), granted {granted}"
        )
    if not captures:
        return ("mismatch" if reasons else "unobserved"), reasons or [
            "no nvidia-smi topo -m capture"
        ]
    if base == "unknown":
        return "undetermined", ["no grant or promise names the class sold"]
    nodes = sorted(captures)
    spread = base != "whole" or row["gpus"] is None or row["gpus"] > 1
    if len(nodes) > 1 and base != "whole":  # whole is judged per node (RULES.md 13)
        reasons.append(
            f"GPUs on {len(nodes)} nodes ({', '.join(nodes)}), class {sold} requires one GPU "
            "on one node"
        )
    chosen = {
        node: _allocation_gpus(topology, row["devices"]) for node, topology in captures.items()
    }
    seen = sum(len(gpus) for gpus in chosen.values())
    if base == "whole" and row["gpus"] is not None:
        if seen < row["gpus"]:
            reasons.append(
                f"capture shows {seen} GPU{'s' * (seen != 1)}, the allocation has {row['gpus']}"
            )
        elif seen > row["gpus"] and not reasons:
            return "undetermined", [
                f"capture shows {seen} GPUs, the allocation has {row['gpus']} and its devices "
                "do not say which are its own"
            ]
    if base == "whole" and spread:
        reasons += [
            f"{link['a']}–{link['b']} over {link['link']}, class requires NVLink"
            for node in nodes
            for link in captures[node]["links"]
            if {link["a"], link["b"]} <= chosen[node] and not link["link"].startswith("NV")
        ]
    if reasons:
        return "mismatch", reasons
    return "match", [_why_match(sold, base, seen)]


def _why_match(sold: str, base: str, seen: int) -> str:
    if base != "whole":
        return f"class {sold}: a share of one GPU on one node, no link required"
    if seen <= 1:
        return "one GPU: no pair to join"
    return f"every pair of its {seen} GPUs over NVLink"


def _allocation_gpus(topology: dict[str, Any], devices: list[str] | None) -> set[str]:
    """The capture's GPUs that are the allocation's: those its grant names (`3` or `GPU3`),
    when every device named is in the capture; else all of the capture's GPUs (a capture
    from inside the allocation sees only its own)."""
    names = {gpu["name"] for gpu in topology["gpus"]}
    wanted = {d if d.startswith("GPU") else f"GPU{d}" for d in devices or []}
    return wanted if wanted and wanted <= names else names


def _links_seen(captures: dict[str, dict[str, Any]], row: dict[str, Any]) -> dict[str, int]:
    """How many GPU pairs of the allocation each link type joins (NICs left out)."""
    counts: dict[str, int] = defaultdict(int)
    for topology in captures.values():
        gpus = _allocation_gpus(topology, row["devices"])
        for link in topology["links"]:
            if {link["a"], link["b"]} <= gpus:
                counts[link["link"]] += 1
    return dict(sorted(counts.items()))


def _one_line(reasons: list[str]) -> str:
    if len(reasons) <= REASON_PAIRS + 1:
        return "; ".join(reasons)
    return "; ".join(reasons[:REASON_PAIRS]) + f"; and {len(reasons) - REASON_PAIRS} more"


# -- per tenant and class ------------------------------------------------------------------


def _summary(allocations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per tenant and class: counts by status, and the money billed on mismatches."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for a in allocations:
        groups[(a["tenant"], a["placement_class"])].append(a)
    out = []
    for (tenant, cls), rows in sorted(groups.items()):
        mismatched: dict[str, Fraction] = defaultdict(Fraction)
        for a in rows:
            if a["status"] == "mismatch":
                for currency, value in a["_money"].items():
                    mismatched[currency] += value
        out.append(
            {
                "tenant": tenant,
                "placement_class": cls,
                "allocations": len(rows),
                **{
                    s: sum(a["status"] == s for a in rows)
                    for s in ("match", "mismatch", "undetermined", "unobserved")
                },
                "billed_on_mismatch": {
                    c: str(Money.of(v, currency=c)) for c, v in sorted(mismatched.items())
                },
            }
        )
    for a in allocations:
        del a["_money"]
    return out


def _prediction(allocations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per class: Spearman's ρ between busbw and step-time p50, one point per allocation."""
    points: dict[str, list[tuple[Decimal, Fraction]]] = defaultdict(list)
    for a in allocations:
        if a["busbw_gbps"] is not None and a["_step_p50"] is not None:
            points[a["placement_class"]].append((Decimal(a["busbw_gbps"]), a["_step_p50"]))
    classes = sorted({a["placement_class"] for a in allocations})
    for a in allocations:
        del a["_step_p50"]
    return [_correlation(cls, points.get(cls, [])) for cls in classes]


def _correlation(cls: str, points: list[tuple[Decimal, Fraction]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "placement_class": cls,
        "n": len(points),
        "spearman": None,
        "spearman_squared": None,
        "predicts": None,
    }
    if len(points) < MIN_POINTS:
        return out | {"reading": "not enough data"}
    rho_squared, sign = spearman([x for x, _ in points], [y for _, y in points])
    if sign == 0 and rho_squared is None:
        return out | {"reading": "undefined: every bus bandwidth or every step time is the same"}
    assert rho_squared is not None
    predicts = sign < 0 and rho_squared >= PREDICTS_AT**2
    return out | {
        "spearman": shown(rho_squared, sign),
        "spearman_squared": str(rho_squared),
        "predicts": predicts,
        "reading": (
            "more bus bandwidth, shorter steps"
            if predicts
            else "bus bandwidth does not predict step time here"
        ),
    }


# -- the arithmetic ----------------------------------------------------------------------


def average_ranks(values: list[Any]) -> list[Fraction]:
    """1-based ranks of `values` ascending, tied values sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks: list[Fraction] = [Fraction(0)] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = Fraction(start + end + 2, 2)
        start = end + 1
    return ranks


def spearman(xs: list[Any], ys: list[Any]) -> tuple[Fraction | None, int]:
    """Spearman's ρ as (ρ², sign of ρ): the Pearson correlation of the average ranks, whose
    square is exactly rational; (None, 0) when either side has no spread."""
    rx, ry = average_ranks(xs), average_ranks(ys)
    mean = Fraction(len(xs) + 1, 2)
    sxy = sum(((a - mean) * (b - mean) for a, b in zip(rx, ry)), Fraction(0))
    sxx = sum(((a - mean) ** 2 for a in rx), Fraction(0))
    syy = sum(((b - mean) ** 2 for b in ry), Fraction(0))
    if sxx == 0 or syy == 0:
        return None, 0
    return sxy * sxy / (sxx * syy), (sxy > 0) - (sxy < 0)


def shown(rho_squared: Fraction, sign: int, places: int = SHOWN_PLACES) -> str:
    """sign × √ρ² rounded half-even to `places`: exact when ρ² is a rational square, else
    from a square root correct to 60 digits (an irrational root is never at a tie)."""
    root_n, root_d = math.isqrt(rho_squared.numerator), math.isqrt(rho_squared.denominator)
    with localcontext() as ctx:
        ctx.prec = 60
        if root_n**2 == rho_squared.numerator and root_d**2 == rho_squared.denominator:
            value = Decimal(root_n) / Decimal(root_d)
        else:
            value = (Decimal(rho_squared.numerator) / Decimal(rho_squared.denominator)).sqrt()
        return str((value * sign).quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN))
