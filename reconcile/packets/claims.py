"""What a dispute claims, finding by finding: for each cell of an invoice that the customer
does not owe (bearer `provider` or `disputed`), when it happened, on which allocation,
and the ledger entries that decided it (docs/dispute-letter.md).

Read from the pipeline's `claims` stage (reconcile/engine/sql/claims.sql) and the engine's
relations it stands on: the stretches are the sweep of reconcile/engine/classify.py kept with
their times (the cells only keep sums), so a claim's stretches add up to its cell's
GPU-seconds exactly (`ClaimMismatch` otherwise: an explanation that does not match its figure
is a bug).

A claim cites, besides its billing line and the allocation's grant and release, the
entries at the edges of its stretches that RULES.md's rule for its category reads:

    unallocated        the line, the grant and release (or none: nothing was granted)
    double_billed      the earlier lines that own the doubly billed seconds
    reclaimed          the policy.decision(s) that set the bound, the policy.terms in force
    restart_lost       the job.failed, its attempt's job.started, the checkpoint.saved the
                       loss counts from, a critical fault touching the allocation ≤ 300 s before
    restart_recovery   the job.failed, the next attempt's job.started, the job's events at the
                       edges (its first job.progress)
    stalled_fault      the job.progress marks either side of the gap, the critical fault open
                       in it and its health.cleared, the policy.terms in force
    idle_unexplained   the attempt's job.started and end, the marks either side of the first and
                       the last gap between marks in each stretch, the job's progress,
                       checkpoint, start and end events at the edges, the policy.terms in force

A stalled or idle claim whose allocation's devices have `device.counters` samples over its
stretches also carries `device_activity` (RULES.md 14, reconcile/engine/activity.py): what
the GPU did, with the sums it is computed from. The samples are not cited one by one (a
stretch has hundreds); the packet carries them all as fleet evidence of the allocation's
nodes, and verify-packet recomputes the figures from them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from reconcile.engine import Reconciliation
from reconcile.engine.activity import activity_of_sums
from reconcile.engine.figures import iso
from reconcile.engine.pipeline import CLAIM_LABELS, Pipeline
from reconcile.engine.result import gpu_seconds
from reconcile.engine.rules import FAULT_LOOKBACK_US, LABEL_BY_CODE, code, codes_sql
from reconcile.packets.placement_claims import placement_claims
from schemas.errors import CheckFailed
from schemas.money import Money


class ClaimMismatch(CheckFailed, AssertionError):
    """A claim's stretches do not add up to its cell: the explanation disagrees with the figure."""


def _cites_sql() -> str:
    """(owner, label, seq): the entries each claim cites, per the module's table."""
    double_billed, reclaimed, stalled, unexplained = (
        code(name) for name in ("double_billed", "reclaimed", "stalled_fault", "idle_unexplained")
    )
    lost, recovery = code("restart_lost.provider"), code("restart_recovery.provider")
    terms = """SELECT k.owner, k.label, (SELECT max_by(tm.seq, tm.t) FROM terms tm
                   WHERE tm.tenant = k.tenant AND tm.t <= k.first_s) FROM claim_bounds k
                       WHERE k.label IN ({labels})"""
    return f"""
SELECT * FROM (
SELECT owner, label, owner AS seq FROM claim_bounds
UNION ALL  -- the allocation's grant and release (the earliest of each,
           -- as RULES.md §Inputs 3 reads them)
SELECT k.owner, k.label, (SELECT min_by(gr.seq, (gr.t, gr.seq)) FROM ev_rest gr
    WHERE gr.type = 'allocation.granted'
                          AND gr.tenant = k.tenant AND gr.allocation_id = k.aid)
                              FROM claim_bounds k
UNION ALL
SELECT k.owner, k.label, (SELECT min_by(r.seq, (r.t, r.seq)) FROM ev_rest r JOIN allocs a
    ON a.tenant = r.tenant AND a.aid = r.allocation_id
                          WHERE r.type = 'allocation.released' AND r.tenant = k.tenant
                            AND r.allocation_id = k.aid
                            AND r.t >= a.granted) FROM claim_bounds k
UNION ALL  -- double_billed: the lines that own the seconds
SELECT DISTINCT r.owner, r.label, r.other FROM claim_raw_stretches r
    WHERE r.label = {double_billed}
UNION ALL  -- reclaimed: the decisions on the allocation, or on a job with an attempt on it,
           -- up to the bound
SELECT k.owner, k.label, d.seq FROM claim_bounds k JOIN ev_rest d
  ON d.type = 'policy.decision' AND d.decision IN ('preempted', 'reclaimed', 'evicted')
      AND d.tenant = k.tenant
 AND d.t <= k.first_s
 AND (d.allocation_id = k.aid OR d.job_id IN (SELECT job FROM attempts a WHERE a.tenant = k.tenant
     AND a.aid = k.aid))
WHERE k.label = {reclaimed}
UNION ALL {terms.format(labels=f"{reclaimed}, {stalled}, {unexplained}")}
UNION ALL  -- restart_lost: the failures whose loss [lost_from, t_f) meets the claim
SELECT k.owner, k.label, unnest([f.eseq, f.att]) FROM claim_bounds k JOIN failures f
  ON f.tenant = k.tenant AND f.aid = k.aid AND f.provider AND f.lost_from <= k.last_e
      AND f.failed_at >= k.first_s
WHERE k.label = {lost}
UNION ALL
SELECT k.owner, k.label, sv.seq FROM claim_bounds k JOIN failures f
  ON f.tenant = k.tenant AND f.aid = k.aid AND f.provider AND f.lost_from <= k.last_e
      AND f.failed_at >= k.first_s
JOIN ev_rest sv ON sv.type = 'checkpoint.saved' AND sv.tenant = f.tenant AND sv.job_id = f.job
    AND sv.t = f.lost_from
WHERE k.label = {lost}
UNION ALL
SELECT k.owner, k.label, near.seq FROM claim_bounds k JOIN failures f
  ON f.tenant = k.tenant AND f.aid = k.aid AND f.provider AND f.lost_from <= k.last_e
      AND f.failed_at >= k.first_s
JOIN touches near ON near.tenant = f.tenant AND near.aid = f.aid
 AND near.open_t BETWEEN f.failed_at - {FAULT_LOOKBACK_US} AND f.failed_at
WHERE k.label = {lost}
UNION ALL  -- restart_recovery: the failures it recovers from (in the claim, or the last
           -- before it),
           -- and the job's next attempt on the allocation
SELECT owner, label, unnest([eseq, (SELECT min_by(n.sseq, (n.s, n.sseq)) FROM attempts n
                                    WHERE n.tenant = r.tenant AND n.aid = r.aid AND n.job = r.job
                                      AND (n.s > r.failed_at OR (n.s = r.failed_at
                                          AND n.sseq > r.eseq)))])
FROM (SELECT k.owner, k.label, f.tenant, f.aid, f.job, f.failed_at, f.eseq FROM claim_bounds k
        JOIN failures f
        ON f.tenant = k.tenant AND f.aid = k.aid AND f.provider AND f.failed_at <= k.last_e
      WHERE k.label = {recovery}
      QUALIFY f.failed_at >= k.first_s OR f.failed_at = max(f.failed_at) FILTER
          (WHERE f.failed_at <= k.first_s) OVER (PARTITION BY k.owner, k.label)) r
UNION ALL  -- recovery ends at the next attempt's first progress; gaps and idle time at marks,
           -- starts and ends
SELECT st.owner, st.label, e.seq FROM claim_stretches st JOIN ev e
  ON e.tenant = st.tenant AND e.type IN ('job.started', 'job.progress', 'job.completed',
      'job.failed', 'job.cancelled',
                                         'checkpoint.started', 'checkpoint.saved')
 AND e.t IN (st.s, st.e)
 AND e.job_id IN (SELECT job FROM attempts a WHERE a.tenant = st.tenant AND a.aid = st.aid
     AND a.s <= st.e AND a.e >= st.s)
WHERE st.label IN ({recovery}, {unexplained})
UNION ALL  -- stalled_fault and idle_unexplained: the gaps between marks they lie in (long
           -- ones for a stall): the two marks of the first and the last gap of each stretch (a
           -- job that repeats its step all day has thousands of gaps: the ends show it, the
           -- packet holds the rest); for a stall, the critical faults touching the allocation
           -- open in the gap, and their clearing
SELECT gap_ends.owner, gap_ends.label, e.seq FROM (
    SELECT st.owner, st.label, g.tenant, g.job, g.s, g.e,
           row_number() OVER (PARTITION BY st.owner, st.label, st.s ORDER BY g.s, g.e)
               AS from_first,
           row_number() OVER (PARTITION BY st.owner, st.label, st.s ORDER BY g.s DESC, g.e DESC)
               AS from_last
    FROM claim_stretches st JOIN odd_gaps g
      ON g.tenant = st.tenant AND g.aid = st.aid AND (g.long OR st.label = {unexplained})
          AND g.s < st.e AND g.e > st.s
    WHERE st.label IN ({stalled}, {unexplained})) gap_ends
JOIN ev e ON e.type IN ('job.progress', 'job.completed') AND e.tenant = gap_ends.tenant
 AND e.job_id = gap_ends.job
 AND e.t IN (gap_ends.s, gap_ends.e)
WHERE gap_ends.from_first = 1 OR gap_ends.from_last = 1
UNION ALL
SELECT DISTINCT st.owner, st.label, unnest([near.seq, f.close_seq])
FROM claim_stretches st JOIN odd_gaps g ON g.tenant = st.tenant AND g.aid = st.aid AND g.long
    AND g.s < st.e AND g.e > st.s
JOIN touches near ON near.tenant = g.tenant AND near.aid = g.aid AND near.open_t < g.e
    AND near.close_t > g.s
JOIN faults f ON f.seq = near.seq
WHERE st.label = {stalled}
UNION ALL  -- idle_unexplained: the attempts running in it
SELECT st.owner, st.label, unnest([a.sseq, a.eseq]) FROM claim_stretches st JOIN attempts a
  ON a.tenant = st.tenant AND a.aid = st.aid AND a.s < st.e AND a.e > st.s
WHERE st.label = {unexplained}
) WHERE seq IS NOT NULL
"""


def claims(pipe: Pipeline, invoice: str) -> list[dict[str, Any]]:
    """The invoice's claims, in ledger order of their lines then RULES.md's category
    order, each as the packet holds it (docs/dispute-letter.md)."""
    con = pipe.need("claims", invoice=invoice)
    cites: dict[tuple[int, int], set[int]] = defaultdict(set)
    for owner, label, seq in con.execute(_cites_sql()).fetchall():
        cites[(int(owner), int(label))].add(int(seq))
    stretches: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
    for owner, label, s, e, gpus in con.execute(
        "SELECT owner, label, s, e, gpus FROM claim_stretches ORDER BY s, e, gpus"
    ).fetchall():
        stretches[(int(owner), int(label))].append((int(s), int(e), int(gpus)))
    activity = {
        (int(owner), int(label)): activity_of_sums(
            int(samples), int(span_us), int(covered_us), int(sampled_us), sm_us
        )
        for owner, label, samples, covered_us, sampled_us, sm_us, span_us in con.execute(
            "SELECT * FROM claim_activity"
        ).fetchall()
    }
    cells = con.execute(
        f"""
        SELECT m.seq, m.label, l.line_id, l.allocation_id, l.currency, m.minor,
            CAST(m.gpu_us AS BIGINT), CAST(m.cents AS BIGINT)
        FROM money m JOIN lines_ev l ON l.seq = m.seq
        WHERE l.invoice_id = ? AND m.label IN ({codes_sql(CLAIM_LABELS)})
        ORDER BY m.seq""",
        [invoice],
    ).fetchall()
    ordered = sorted(
        cells, key=lambda row: (int(row[0]), int(row[1]))
    )  # label codes follow the category order
    out = []
    for row in ordered:
        key = (int(row[0]), int(row[1]))
        claim = _claim(row, stretches[key], cites[key])
        if key in activity:  # RULES.md 14; absent without counters (older packets unchanged)
            claim["device_activity"] = activity[key]
        out.append(claim)
    return out


def _claim(
    row: tuple[Any, ...], stretches: list[tuple[int, int, int]], cites: set[int]
) -> dict[str, Any]:
    seq, label, line_id, allocation_id, currency, minor, gpu_us, cents = row
    explained = sum((e - s) * g for s, e, g in stretches)
    if explained != gpu_us:
        raise ClaimMismatch(
            f"line seq {seq}, label {label}: stretches give {explained} GPU-µs, the cell {gpu_us}"
        )
    kind = LABEL_BY_CODE[int(label)]
    return {
        "line_id": line_id,
        "allocation_id": allocation_id,
        "category": kind.category,
        "bearer": kind.bearer,
        **finding_figures(int(gpu_us), int(cents), int(minor), currency),
        "stretches": [[iso(s), iso(e), g] for s, e, g in stretches],
        "cites": sorted(cites),
    }


def finding_figures(gpu_us: int, cents: int, minor: int, currency: str | None) -> dict[str, Any]:
    """A finding's figures from its cell (the engine's money table, or a reconciliation's
    `Cell`): its GPU-seconds, amount and currency, as a claim holds them and an answer
    records them (reconcile/packets/answers.py, rule 1)."""
    return {
        "gpu_seconds": gpu_seconds(gpu_us),
        "amount": str(Money.of(cents, minor)),
        "currency": currency,
    }


def reconcile_claims(
    entries: Iterable[dict[str, Any]], invoice: str
) -> tuple[Reconciliation, list[dict[str, Any]]]:
    """The invoice's reconciliation and its claims, from one run of the engine on `entries`."""
    with Pipeline.of_entries(entries) as pipe:
        return pipe.reconciliation(invoice), claims(pipe, invoice)


def reconcile_packet(
    entries: Iterable[dict[str, Any]], invoice: str
) -> tuple[Reconciliation, list[dict[str, Any]], list[dict[str, Any]]]:
    """The invoice's reconciliation, its claims and its placement claims
    (reconcile/packets/placement_claims.py), from one run of the engine on `entries`."""
    with Pipeline.of_entries(entries) as pipe:
        return (
            pipe.reconciliation(invoice),
            claims(pipe, invoice),
            placement_claims(pipe, invoice),
        )
