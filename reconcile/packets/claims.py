"""What a dispute claims, finding by finding: for each cell of an invoice that the customer
does not owe (bearer `provider` or `disputed`), when it happened, on which allocation,
and the ledger entries that decided it (docs/dispute-letter.md).

Run on the engine's connection right after `reconcile.run`, from the same tables: the
stretches are the sweep of reconcile/engine/classify.py kept with their times (the cells only
keep sums), so a claim's stretches add up to its cell's GPU-seconds exactly
(`ClaimMismatch` otherwise: an explanation that does not match its figure is a bug).

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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import duckdb

from reconcile.engine import Reconciliation, engine, run
from reconcile.engine.figures import iso
from reconcile.engine.intervals import FAULT_LOOKBACK_US, INF, LABEL_BY_CODE, SPAN_LABELS
from reconcile.engine.money import format_minor
from reconcile.engine.result import gpu_seconds
from reconcile.engine.snapshot import entry_pages, load_pages

#: Labels a customer disputes: provider-borne (the provider should not have charged) and disputed.
CLAIM_LABELS = tuple(code for code, label in LABEL_BY_CODE.items() if label.bearer in ("provider", "disputed"))
SWEEP_CLAIMS = tuple(code for code in CLAIM_LABELS if code in SPAN_LABELS)


class ClaimMismatch(AssertionError):
    """A claim's stretches do not add up to its cell: the explanation disagrees with the figure."""


def _stretch_sql() -> str:
    # The sweep of classify.py over the invoice's allocations only, each stretch kept with
    # its [s, e) and merged with the next when they touch (same line and label).
    lowest = " ".join(f"WHEN mask & {1 << code} <> 0 THEN {code}" for code in SPAN_LABELS)
    return f"""
CREATE OR REPLACE TEMP TABLE claim_raw AS
WITH aks AS (SELECT DISTINCT ak FROM claim_lines),
pts AS (
    SELECT m.ak, m.s AS t, CAST(1 AS BIGINT) << m.label AS d, CAST(0 AS BIGINT) AS o FROM merged m SEMI JOIN aks USING (ak)
    UNION ALL SELECT m.ak, m.e, -(CAST(1 AS BIGINT) << m.label), 0 FROM merged m SEMI JOIN aks USING (ak) WHERE m.e < {INF}
    UNION ALL SELECT p.ak, p.s, 0, p.owner FROM pieces p SEMI JOIN aks USING (ak)
    UNION ALL SELECT p.ak, p.e, 0, -p.owner FROM pieces p SEMI JOIN aks USING (ak)),
running AS (
    SELECT t, lead(t) OVER w AS t_next, sum(d) OVER w AS mask, sum(o) OVER w AS owner
    FROM pts WINDOW w AS (PARTITION BY ak ORDER BY t)),
swept AS (
    SELECT CAST(owner AS BIGINT) AS owner, CASE {lowest} ELSE 0 END AS label, t AS s, t_next AS e
    FROM running WHERE t_next > t AND owner <> 0)
SELECT w.owner, w.label, w.s, w.e, c.g AS gpus, NULL::BIGINT AS other
FROM swept w JOIN claim_lines c ON c.seq = w.owner
WHERE w.label IN ({", ".join(map(str, SWEEP_CLAIMS))})
UNION ALL
-- double_billed: the parts of the clipped window that earlier lines' pieces own
SELECT c.seq, 20, greatest(p.s, c.cs), least(p.e, c.ce), c.g, p.owner
FROM claim_lines c JOIN pieces p ON p.ak = c.ak AND p.owner <> c.seq AND p.s < c.ce AND p.e > c.cs
UNION ALL
-- unallocated: GPUs billed beyond the grant over the whole window …
SELECT seq, 21, ps, pe, g_b - g, NULL FROM claim_lines WHERE g_b > g
UNION ALL
-- … and the granted GPUs outside the holding: the whole window when the two never meet
SELECT seq, 21, ps, pe, g, NULL FROM claim_lines WHERE g > 0 AND (cs IS NULL OR ce <= cs)
UNION ALL SELECT seq, 21, ps, least(pe, cs), g, NULL FROM claim_lines WHERE g > 0 AND ce > cs AND cs > ps
UNION ALL SELECT seq, 21, greatest(ps, ce), pe, g, NULL FROM claim_lines WHERE g > 0 AND ce > cs AND ce < pe;

CREATE OR REPLACE TEMP TABLE claim_stretch AS
WITH flagged AS (
    SELECT *, coalesce(s > lag(e) OVER (PARTITION BY owner, label, gpus ORDER BY s, e), true) AS fresh FROM claim_raw
    WHERE e > s),
islands AS (SELECT *, sum(CASE WHEN fresh THEN 1 ELSE 0 END) OVER (PARTITION BY owner, label, gpus ORDER BY s, e) AS island
            FROM flagged)
SELECT i.owner, i.label, min(i.s) AS s, max(i.e) AS e, i.gpus, c.tenant, c.aid
FROM islands i JOIN claim_lines c ON c.seq = i.owner
GROUP BY i.owner, i.label, i.gpus, i.island, c.tenant, c.aid;
"""


def _cites_sql() -> str:
    """(owner, label, seq): the entries each claim cites, per the module's table."""
    terms = """SELECT k.owner, k.label, (SELECT max_by(tm.seq, tm.t) FROM terms tm
                   WHERE tm.tenant = k.tenant AND tm.t <= k.first_s) FROM claim k WHERE k.label IN ({labels})"""
    return f"""
CREATE OR REPLACE TEMP TABLE claim AS
SELECT owner, label, tenant, aid, min(s) AS first_s, max(e) AS last_e FROM claim_stretch GROUP BY ALL;

SELECT * FROM (
SELECT owner, label, owner AS seq FROM claim
UNION ALL  -- the allocation's grant and release (the earliest of each, as RULES.md §Inputs 3 reads them)
SELECT k.owner, k.label, (SELECT min_by(g.seq, (g.t, g.seq)) FROM ev_rest g WHERE g.type = 'allocation.granted'
                          AND g.tenant = k.tenant AND g.allocation_id = k.aid) FROM claim k
UNION ALL
SELECT k.owner, k.label, (SELECT min_by(r.seq, (r.t, r.seq)) FROM ev_rest r JOIN allocs a ON a.tenant = r.tenant AND a.aid = r.allocation_id
                          WHERE r.type = 'allocation.released' AND r.tenant = k.tenant AND r.allocation_id = k.aid
                            AND r.t >= a.granted) FROM claim k
UNION ALL  -- double_billed: the lines that own the seconds
SELECT DISTINCT r.owner, r.label, r.other FROM claim_raw r WHERE r.label = 20
UNION ALL  -- reclaimed: the decisions on the allocation, or on a job with an attempt on it, up to the bound
SELECT k.owner, k.label, d.seq FROM claim k JOIN ev_rest d
  ON d.type = 'policy.decision' AND d.decision IN ('preempted', 'reclaimed', 'evicted') AND d.tenant = k.tenant
 AND d.t <= k.first_s
 AND (d.allocation_id = k.aid OR d.job_id IN (SELECT job FROM attempts a WHERE a.tenant = k.tenant AND a.aid = k.aid))
WHERE k.label = 1
UNION ALL {terms.format(labels="1, 10, 12")}
UNION ALL  -- restart_lost: the failures whose loss [lost_from, t_f) meets the claim
SELECT k.owner, k.label, unnest([f.eseq, f.att]) FROM claim k JOIN failures f
  ON f.tenant = k.tenant AND f.aid = k.aid AND f.provider AND f.lost_from <= k.last_e AND f.tf >= k.first_s
WHERE k.label = 3
UNION ALL
SELECT k.owner, k.label, sv.seq FROM claim k JOIN failures f
  ON f.tenant = k.tenant AND f.aid = k.aid AND f.provider AND f.lost_from <= k.last_e AND f.tf >= k.first_s
JOIN ev_rest sv ON sv.type = 'checkpoint.saved' AND sv.tenant = f.tenant AND sv.job_id = f.job AND sv.t = f.lost_from
WHERE k.label = 3
UNION ALL
SELECT k.owner, k.label, x.seq FROM claim k JOIN failures f
  ON f.tenant = k.tenant AND f.aid = k.aid AND f.provider AND f.lost_from <= k.last_e AND f.tf >= k.first_s
JOIN touch x ON x.tenant = f.tenant AND x.aid = f.aid AND x.open_t BETWEEN f.tf - {FAULT_LOOKBACK_US} AND f.tf
WHERE k.label = 3
UNION ALL  -- restart_recovery: the failures it recovers from (in the claim, or the last before it),
           -- and the job's next attempt on the allocation
SELECT owner, label, unnest([eseq, (SELECT min_by(n.sseq, (n.s, n.sseq)) FROM attempts n
                                    WHERE n.tenant = r.tenant AND n.aid = r.aid AND n.job = r.job
                                      AND (n.s > r.tf OR (n.s = r.tf AND n.sseq > r.eseq)))])
FROM (SELECT k.owner, k.label, f.tenant, f.aid, f.job, f.tf, f.eseq FROM claim k JOIN failures f
        ON f.tenant = k.tenant AND f.aid = k.aid AND f.provider AND f.tf <= k.last_e
      WHERE k.label = 5
      QUALIFY f.tf >= k.first_s OR f.tf = max(f.tf) FILTER (WHERE f.tf <= k.first_s) OVER (PARTITION BY k.owner, k.label)) r
UNION ALL  -- recovery ends at the next attempt's first progress; gaps and idle time at marks, starts and ends
SELECT st.owner, st.label, e.seq FROM claim_stretch st JOIN ev e
  ON e.tenant = st.tenant AND e.type IN ('job.started', 'job.progress', 'job.completed', 'job.failed', 'job.cancelled',
                                         'checkpoint.started', 'checkpoint.saved')
 AND e.t IN (st.s, st.e)
 AND e.job_id IN (SELECT job FROM attempts a WHERE a.tenant = st.tenant AND a.aid = st.aid AND a.s <= st.e AND a.e >= st.s)
WHERE st.label IN (5, 12)
UNION ALL  -- stalled_fault and idle_unexplained: the gaps between marks they lie in (long ones for a
           -- stall): the two marks of the first and the last gap of each stretch (a job that repeats
           -- its step all day has thousands of gaps: the ends show it, the packet holds the rest);
           -- for a stall, the critical faults touching the allocation open in the gap, and their clearing
SELECT x.owner, x.label, e.seq FROM (
    SELECT st.owner, st.label, g.tenant, g.job, g.s, g.e,
           row_number() OVER (PARTITION BY st.owner, st.label, st.s ORDER BY g.s, g.e) AS from_first,
           row_number() OVER (PARTITION BY st.owner, st.label, st.s ORDER BY g.s DESC, g.e DESC) AS from_last
    FROM claim_stretch st JOIN odd_gaps g
      ON g.tenant = st.tenant AND g.aid = st.aid AND (g.long OR st.label = 12) AND g.s < st.e AND g.e > st.s
    WHERE st.label IN (10, 12)) x
JOIN ev e ON e.type IN ('job.progress', 'job.completed') AND e.tenant = x.tenant AND e.job_id = x.job AND e.t IN (x.s, x.e)
WHERE x.from_first = 1 OR x.from_last = 1
UNION ALL
SELECT DISTINCT st.owner, st.label, unnest([x.seq, (
    SELECT min_by(c.seq, (c.t, c.seq)) FROM ev_rest c JOIN faults f ON f.seq = x.seq
    WHERE c.type = 'health.cleared' AND c.code = f.code AND c.t = f.close_t AND c.node IS NOT DISTINCT FROM f.node
      AND c.device IS NOT DISTINCT FROM f.device AND c.fabric_domain IS NOT DISTINCT FROM f.fabric_domain)])
FROM claim_stretch st JOIN odd_gaps g ON g.tenant = st.tenant AND g.aid = st.aid AND g.long AND g.s < st.e AND g.e > st.s
JOIN touch x ON x.tenant = g.tenant AND x.aid = g.aid AND x.open_t < g.e AND x.close_t > g.s
WHERE st.label = 10
UNION ALL  -- idle_unexplained: the attempts running in it
SELECT st.owner, st.label, unnest([a.sseq, a.eseq]) FROM claim_stretch st JOIN attempts a
  ON a.tenant = st.tenant AND a.aid = st.aid AND a.s < st.e AND a.e > st.s
WHERE st.label = 12
) WHERE seq IS NOT NULL
"""


def claims(con: duckdb.DuckDBPyConnection, invoice: str) -> list[dict[str, Any]]:
    """The invoice's claims, in ledger order of their lines then RULES.md's category
    order, each as the packet holds it (docs/dispute-letter.md)."""
    con.execute("""CREATE OR REPLACE TEMP TABLE claim_lines AS
                   SELECT g.seq, g.tenant, g.aid, g.ak, g.g, g.g_b, g.cs, g.ce, l.ps, l.pe
                   FROM gline g JOIN lines_ev l ON l.seq = g.seq WHERE l.invoice_id = ?""", [invoice])
    con.execute(_stretch_sql())
    cites: dict[tuple[int, int], set[int]] = defaultdict(set)
    for owner, label, seq in con.execute(_cites_sql()).fetchall():
        cites[(int(owner), int(label))].add(int(seq))
    stretches: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
    for owner, label, s, e, gpus in con.execute("SELECT owner, label, s, e, gpus FROM claim_stretch ORDER BY s, e, gpus").fetchall():
        stretches[(int(owner), int(label))].append((int(s), int(e), int(gpus)))
    cells = con.execute(f"""
        SELECT m.seq, m.label, l.line_id, l.allocation_id, l.currency, m.minor, CAST(m.gpu_us AS BIGINT), CAST(m.cents AS BIGINT)
        FROM money m JOIN lines_ev l ON l.seq = m.seq
        WHERE l.invoice_id = ? AND m.label IN ({", ".join(map(str, CLAIM_LABELS))})
        ORDER BY m.seq""", [invoice]).fetchall()
    ordered = sorted(cells, key=lambda row: (int(row[0]), _ORDER.index(int(row[1]))))
    return [_claim(row, stretches[(int(row[0]), int(row[1]))], cites[(int(row[0]), int(row[1]))]) for row in ordered]


_ORDER = (21, 20, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 12, 22)  # RULES.md's category order (money.py's ranks)


def _claim(row: tuple[Any, ...], stretches: list[tuple[int, int, int]], cites: set[int]) -> dict[str, Any]:
    seq, label, line_id, allocation_id, currency, minor, gpu_us, cents = row
    explained = sum((e - s) * g for s, e, g in stretches)
    if explained != gpu_us:
        raise ClaimMismatch(f"line seq {seq}, label {label}: stretches give {explained} GPU-µs, the cell {gpu_us}")
    kind = LABEL_BY_CODE[int(label)]
    return {"line_id": line_id, "allocation_id": allocation_id, "category": kind.category, "bearer": kind.bearer,
            "gpu_seconds": gpu_seconds(int(gpu_us)),
            "amount": format_minor(int(cents), int(minor)), "currency": currency,
            "stretches": [[iso(s), iso(e), g] for s, e, g in stretches], "cites": sorted(cites)}


def reconcile_claims(entries: Iterable[dict[str, Any]], invoice: str) -> tuple[Reconciliation, list[dict[str, Any]]]:
    """The invoice's reconciliation and its claims, from one run of the engine on `entries`."""
    with engine(0) as con:
        load_pages(con, entry_pages(entries))
        return run(con, invoice), claims(con, invoice)
