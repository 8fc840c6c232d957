"""Billing lines against the labelled spans: every billed GPU-second gets one label.

Order of work (RULES.md):
1. Lines after corrections; money-only lines set aside.
2. Each GPU line's window clipped to its allocation's holding H; where clipped windows
   of one allocation overlap, each second is *owned* by the earliest line (ledger
   order) and is `double_billed` on the others. The owned stretches are `pieces`, which
   never overlap on one allocation.
3. A sweep over each allocation's timeline: at every boundary (span ends and piece
   ends) the count of open spans per label; a stretch between two boundaries takes the
   smallest label open there (the priority order), or `idle_reserved` when none is, and
   belongs to the piece open there, if any.
4. Stretches inside a piece become the owning line's cells: (line, label, GPU-µs).
"""

from __future__ import annotations

import duckdb

from reconcile.engine.intervals import INF, SPAN_LABELS

#: A line that bills GPU time (the rest are money-only): GPUs, an allocation, a window, no credit.
GPU_LINE = "l.g_b > 0 AND l.aid IS NOT NULL AND l.category IS DISTINCT FROM 'credit' AND l.pe > l.ps"

#: A billing line's columns as the engine names them (`lines`, and `gline`'s source).
LINE_COLUMNS = ("seq, tenant, invoice_id, line_id, allocation_id AS aid, ps, pe, gpus AS g_b, amount, currency, "
                "category")

LINES = f"""
-- A line another line `corrects` is replaced. The few replaced lines are a table, and
-- `lines` a view of the rest, so the millions of lines are never copied.
CREATE TABLE replaced AS
SELECT DISTINCT l.seq FROM lines_ev l
JOIN (SELECT tenant, corrects AS line_id, seq FROM lines_ev WHERE corrects IS NOT NULL) c
  ON c.tenant = l.tenant AND c.line_id = l.line_id AND c.seq <> l.seq;

CREATE VIEW lines AS
SELECT {LINE_COLUMNS} FROM lines_ev WHERE seq NOT IN (SELECT seq FROM replaced);

-- Built from every line, the replaced ones deleted after: a view's row estimate would
-- lead DuckDB to hash the millions of lines rather than the allocations.
CREATE TABLE gline AS
SELECT l.seq, l.tenant, l.aid, l.g_b, l.pe - l.ps AS w_us,
       a.ak, a.g_a, least(l.g_b, coalesce(a.g_a, 0)) AS g,
       CASE WHEN a.aid IS NULL THEN NULL ELSE greatest(l.ps, a.granted) END AS cs,
       CASE WHEN a.aid IS NULL THEN NULL ELSE least(l.pe, a.released) END AS ce
FROM (SELECT {LINE_COLUMNS} FROM lines_ev) l
LEFT JOIN allocs a ON a.tenant = l.tenant AND a.aid = l.aid
WHERE {GPU_LINE};

DELETE FROM gline WHERE seq IN (SELECT seq FROM replaced);
"""

PIECES = """
-- A clipped window is alone when no earlier one (by start, then seq) ends after its start
-- and the next one starts at or after its end: it is its own piece. Most are; only the
-- rest need the clusters of overlapping windows cut at every boundary.
CREATE TABLE clipped AS
SELECT seq, ak, cs, ce, g,
       coalesce(max(ce) OVER (PARTITION BY ak ORDER BY cs, seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) <= cs, true)
       AND coalesce(lead(cs) OVER (PARTITION BY ak ORDER BY cs, seq) >= ce, true) AS alone
FROM gline WHERE ce > cs;

CREATE TABLE pieces AS
WITH crowded AS (
    SELECT seq, ak, cs, ce,
           sum(CASE WHEN coalesce(cs >= prev_end, true) THEN 1 ELSE 0 END)
               OVER (PARTITION BY ak ORDER BY cs, seq) AS cluster
    FROM (SELECT *, max(ce) OVER (PARTITION BY ak ORDER BY cs, seq
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
          FROM clipped WHERE NOT alone)),
bounds AS (
    SELECT DISTINCT ak, cluster, cs AS t FROM crowded
    UNION SELECT DISTINCT ak, cluster, ce FROM crowded),
segs AS (
    SELECT ak, cluster, t AS s, lead(t) OVER (PARTITION BY ak, cluster ORDER BY t) AS e FROM bounds)
SELECT seq AS owner, ak, cs AS s, ce AS e FROM clipped WHERE alone
UNION ALL
SELECT min(c.seq), g.ak, g.s, g.e
FROM segs g JOIN crowded c ON c.ak = g.ak AND c.cluster = g.cluster
 AND c.cs <= g.s AND c.ce >= g.e
WHERE g.e IS NOT NULL
GROUP BY g.ak, g.s, g.e;
"""


def _sweep_sql() -> str:
    # Merged spans of one label never overlap or touch, so at any moment at most one of
    # each label is open: the open labels are a bit mask, kept by one running sum of
    # ±2^label, and the winner is its lowest set bit (the highest priority). Pieces never
    # overlap on one allocation either, so a second running sum of ±owner is the line
    # that owns the moment (0: none), and a stretch's line comes out of the same pass.
    # Points at one moment are peers in the window's default RANGE frame, so each of them
    # already sees the sums after all of them; only the last has a later t_next, and the
    # others are stretches of length 0, dropped (cheaper than grouping the points first).
    lowest = " ".join(f"WHEN mask & {1 << code} <> 0 THEN {code}" for code in SPAN_LABELS)
    return f"""
CREATE TABLE owned AS
WITH pts AS (
    SELECT ak, s AS t, CAST(1 AS BIGINT) << label AS d, CAST(0 AS BIGINT) AS o FROM merged
    UNION ALL SELECT ak, e, -(CAST(1 AS BIGINT) << label), 0 FROM merged WHERE e < {INF}
    UNION ALL SELECT ak, s, 0, owner FROM pieces
    UNION ALL SELECT ak, e, 0, -owner FROM pieces),
running AS (
    SELECT t, lead(t) OVER w AS t_next, sum(d) OVER w AS mask, sum(o) OVER w AS owner
    FROM pts WINDOW w AS (PARTITION BY ak ORDER BY t))
SELECT CAST(owner AS BIGINT) AS owner, sum(t_next - t) AS us, CASE {lowest} ELSE 0 END AS label
FROM running WHERE t_next > t AND owner <> 0
GROUP BY ALL;
"""


CELLS = f"""
CREATE TABLE cells AS
WITH every_cell AS (
    SELECT o.owner AS seq, o.label, CAST(o.us AS HUGEINT) * g.g AS gpu_us
    FROM owned o JOIN gline g ON g.seq = o.owner
    UNION ALL
    -- double_billed: the clipped window less the pieces it owns; a window alone owns all of it
    SELECT c.seq, 20, (CAST(c.ce - c.cs AS HUGEINT) - coalesce(sum(p.e - p.s), 0)) * c.g
    FROM clipped c LEFT JOIN pieces p ON p.owner = c.seq
    WHERE NOT c.alone GROUP BY c.seq, c.cs, c.ce, c.g
    UNION ALL
    SELECT g.seq, 21, CAST(g.g_b - g.g AS HUGEINT) * g.w_us
                      + CAST(g.g AS HUGEINT) * (g.w_us - greatest(coalesce(g.ce - g.cs, 0), 0))
    FROM gline g
    UNION ALL
    SELECT l.seq, 22, 0 FROM lines l WHERE NOT coalesce({GPU_LINE}, false))
-- empty cells are never written (a money-only line keeps its one empty cell)
SELECT * FROM every_cell WHERE gpu_us <> 0 OR label = 22;
"""


def classify(con: duckdb.DuckDBPyConnection) -> None:
    """Make `lines`, `gline`, `pieces`, `owned` and `cells` from the spans."""
    con.execute(LINES)
    con.execute(PIECES)
    con.execute(_sweep_sql())
    con.execute(CELLS)
