"""Billing lines against the labelled spans: every billed GPU-second gets one label.

Order of work (RULES.md):
1. Lines after corrections; money-only lines set aside.
2. Each GPU line's window clipped to its allocation's holding H; where clipped windows
   of one allocation overlap, each second is *owned* by the earliest line (ledger
   order) and is `double_billed` on the others. The owned stretches are `pieces`, which
   never overlap on one allocation.
3. A sweep over each allocation's timeline: at every boundary (span ends and piece
   ends) the count of open spans per label; a stretch between two boundaries takes the
   smallest label open there (the priority order), or `idle_reserved` when none is.
4. Stretches inside a piece become the owning line's cells: (line, label, GPU-µs).
"""

from __future__ import annotations

import duckdb

from reconcile.intervals import INF, SPAN_LABELS

LINES = f"""
CREATE TABLE lines AS
WITH all_lines AS (
    SELECT seq, tenant, invoice_id, line_id, allocation_id AS aid, ps, pe, gpus AS g_b,
           amount, currency, category, corrects
    FROM ev_rest WHERE type = 'billing.line')
SELECT l.* FROM all_lines l
WHERE NOT EXISTS (SELECT 1 FROM all_lines c WHERE c.tenant = l.tenant AND c.corrects = l.line_id AND c.seq <> l.seq);

CREATE TABLE gline AS
SELECT l.seq, l.tenant, l.aid, l.g_b, l.pe - l.ps AS w_us,
       a.ak, a.g_a, least(l.g_b, coalesce(a.g_a, 0)) AS g,
       CASE WHEN a.aid IS NULL THEN NULL ELSE greatest(l.ps, a.granted) END AS cs,
       CASE WHEN a.aid IS NULL THEN NULL ELSE least(l.pe, a.released) END AS ce
FROM lines l LEFT JOIN allocs a ON a.tenant = l.tenant AND a.aid = l.aid
WHERE l.g_b > 0 AND l.aid IS NOT NULL AND l.category IS DISTINCT FROM 'credit' AND l.pe > l.ps;
"""

PIECES = """
CREATE TABLE clipped AS
SELECT seq, tenant, ak, cs, ce,
       sum(CASE WHEN coalesce(cs >= prev_end, true) THEN 1 ELSE 0 END)
           OVER (PARTITION BY ak ORDER BY cs, seq) AS cluster
FROM (SELECT seq, tenant, ak, cs, ce,
             max(ce) OVER (PARTITION BY ak ORDER BY cs, seq
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
      FROM gline WHERE ce > cs);

CREATE TABLE pieces AS
WITH sized AS (
    SELECT *, count(*) OVER (PARTITION BY ak, cluster) AS n FROM clipped),
bounds AS (
    SELECT DISTINCT tenant, ak, cluster, cs AS t FROM sized WHERE n > 1
    UNION SELECT DISTINCT tenant, ak, cluster, ce FROM sized WHERE n > 1),
segs AS (
    SELECT tenant, ak, cluster, t AS s, lead(t) OVER (PARTITION BY ak, cluster ORDER BY t) AS e FROM bounds)
SELECT seq AS owner, tenant, ak, cs AS s, ce AS e FROM sized WHERE n = 1
UNION ALL
SELECT min(c.seq), g.tenant, g.ak, g.s, g.e
FROM segs g JOIN sized c ON c.ak = g.ak AND c.cluster = g.cluster
 AND c.cs <= g.s AND c.ce >= g.e
WHERE g.e IS NOT NULL
GROUP BY g.tenant, g.ak, g.s, g.e;
"""


def _sweep_sql() -> str:
    # Merged spans of one label never overlap or touch, so at any moment at most one of
    # each label is open: the open labels are a bit mask, kept by one running sum of
    # ±2^label, and the winner is its lowest set bit (the highest priority).
    lowest = " ".join(f"WHEN mask & {1 << code} <> 0 THEN {code}" for code in SPAN_LABELS)
    return f"""
CREATE TABLE stretches AS
WITH pts AS (
    SELECT ak, s AS t, CAST(1 AS BIGINT) << label AS d FROM merged
    UNION ALL SELECT ak, e, -(CAST(1 AS BIGINT) << label) FROM merged WHERE e < {INF}
    UNION ALL SELECT ak, s, 0 FROM pieces
    UNION ALL SELECT ak, e, 0 FROM pieces),
counted AS (SELECT ak, t, sum(d) AS d FROM pts GROUP BY ak, t),
running AS (
    SELECT ak, t, lead(t) OVER w AS t_next, sum(d) OVER w AS mask
    FROM counted WINDOW w AS (PARTITION BY ak ORDER BY t))
SELECT ak, t AS s, t_next AS e, CASE {lowest} ELSE 0 END AS label
FROM running WHERE t_next IS NOT NULL;
"""


CELLS = """
CREATE TABLE owned AS
SELECT p.owner, sum(st.e - st.s) AS us, st.label
FROM stretches st ASOF JOIN pieces p ON p.ak = st.ak AND st.s >= p.s
WHERE st.e <= p.e
GROUP BY p.owner, st.label;

CREATE TABLE cells AS
SELECT o.owner AS seq, o.label, CAST(o.us AS HUGEINT) * g.g AS gpu_us
FROM owned o JOIN gline g ON g.seq = o.owner
UNION ALL
SELECT g.seq, 20, (CAST(greatest(coalesce(g.ce - g.cs, 0), 0) AS HUGEINT)
                   - coalesce((SELECT sum(o.us) FROM owned o WHERE o.owner = g.seq), 0)) * g.g
FROM gline g
UNION ALL
SELECT g.seq, 21, CAST(g.g_b - g.g AS HUGEINT) * g.w_us
                  + CAST(g.g AS HUGEINT) * (g.w_us - greatest(coalesce(g.ce - g.cs, 0), 0))
FROM gline g
UNION ALL
SELECT l.seq, 22, 0
FROM lines l WHERE l.seq NOT IN (SELECT seq FROM gline);

DELETE FROM cells WHERE gpu_us = 0 AND label <> 22;
"""


def classify(con: duckdb.DuckDBPyConnection) -> None:
    """Make `lines`, `gline`, `pieces`, `stretches` and `cells` from the spans."""
    con.execute(LINES)
    con.execute(PIECES)
    con.execute(_sweep_sql())
    con.execute(CELLS)
