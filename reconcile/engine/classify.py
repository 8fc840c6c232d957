"""Billing lines against the labelled spans: every billed GPU-second gets one label.

Order of work (RULES.md):
1. Lines after corrections; lines of no GPU time (money-only, empty windows) set aside.
2. Each GPU line's window clipped to its allocation's holding H; where clipped windows
   of one allocation overlap, each second is *owned* by the earliest line (ledger
   order) and is `double_billed` on the others. The owned stretches are `pieces`, which
   never overlap on one allocation.
3. A sweep over each allocation's timeline: at every boundary (span ends and piece
   ends) the count of open spans per label; a stretch between two boundaries takes the
   first label open there in priority order, or `idle_reserved` when none is (rules.py), and
   belongs to the piece open there, if any.
4. Stretches inside a piece become the owning line's cells: (line, label, GPU-µs).
"""

from __future__ import annotations

import duckdb

from reconcile.engine.rules import INF, bit_sql, code, winner_sql

#: A GPU line (RULES.md §Inputs 2): it bills GPUs and is no credit; the rest are money-only.
BILLS_GPUS = "l.g_b > 0 AND l.category IS DISTINCT FROM 'credit'"
#: A GPU line with time to classify. One naming no allocation, or none granted, joins no
#: grant: all of its time is `unallocated`. One with an empty window has no time: it gets
#: one empty `unallocated` cell, which takes its whole amount (never the customer's).
GPU_LINE = f"{BILLS_GPUS} AND l.pe > l.ps"

#: A billing line's columns as the engine names them (`lines`, and `gpu_lines`'s source).
LINE_COLUMNS = (
    "seq, tenant, invoice_id, line_id, allocation_id AS aid, ps, pe, gpus AS g_b, "
    "amount, currency, "
    "category"
)

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
CREATE TABLE gpu_lines AS
SELECT l.seq, l.tenant, l.aid, l.g_b, l.pe - l.ps AS w_us,
       a.alloc_key, a.g_a, least(l.g_b, coalesce(a.g_a, 0)) AS gpus,
       CASE WHEN a.aid IS NULL THEN NULL ELSE greatest(l.ps, a.granted) END AS clamped_start,
       CASE WHEN a.aid IS NULL THEN NULL ELSE least(l.pe, a.released) END AS clamped_end
FROM (SELECT {LINE_COLUMNS} FROM lines_ev) l
LEFT JOIN allocs a ON a.tenant = l.tenant AND a.aid = l.aid
WHERE {GPU_LINE};

DELETE FROM gpu_lines WHERE seq IN (SELECT seq FROM replaced);
"""

PIECES = """
-- A clipped window is alone when no earlier one (by start, then seq) ends after its start
-- and the next one starts at or after its end: it is its own piece. Most are; only the
-- rest need the clusters of overlapping windows cut at every boundary.
CREATE TABLE clipped AS
SELECT seq, alloc_key, clamped_start, clamped_end, gpus,
       coalesce(max(clamped_end) OVER (PARTITION BY alloc_key ORDER BY clamped_start, seq
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) <= clamped_start, true)
       AND coalesce(lead(clamped_start) OVER (PARTITION BY alloc_key ORDER BY clamped_start, seq)
           >= clamped_end, true) AS alone
FROM gpu_lines WHERE clamped_end > clamped_start;

CREATE TABLE pieces AS
WITH crowded AS (
    SELECT seq, alloc_key, clamped_start, clamped_end,
           sum(CASE WHEN coalesce(clamped_start >= prev_end, true) THEN 1 ELSE 0 END)
               OVER (PARTITION BY alloc_key ORDER BY clamped_start, seq) AS cluster
    FROM (SELECT *, max(clamped_end) OVER (PARTITION BY alloc_key ORDER BY clamped_start, seq
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
          FROM clipped WHERE NOT alone)),
bounds AS (
    SELECT DISTINCT alloc_key, cluster, clamped_start AS t FROM crowded
    UNION SELECT DISTINCT alloc_key, cluster, clamped_end FROM crowded),
segs AS (
    SELECT alloc_key, cluster, t AS s, lead(t) OVER (PARTITION BY alloc_key, cluster ORDER BY t)
        AS e FROM bounds)
SELECT seq AS owner, alloc_key, clamped_start AS s, clamped_end AS e FROM clipped WHERE alone
UNION ALL
SELECT min(c.seq), seg.alloc_key, seg.s, seg.e
FROM segs seg JOIN crowded c ON c.alloc_key = seg.alloc_key AND c.cluster = seg.cluster
 AND c.clamped_start <= seg.s AND c.clamped_end >= seg.e
WHERE seg.e IS NOT NULL
GROUP BY seg.alloc_key, seg.s, seg.e;
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
    return f"""
CREATE TABLE owned AS
WITH pts AS (
    SELECT alloc_key, s AS t, {bit_sql("label")} AS d, CAST(0 AS BIGINT) AS o FROM merged
    UNION ALL SELECT alloc_key, e, -{bit_sql("label")}, 0 FROM merged WHERE e < {INF}
    UNION ALL SELECT alloc_key, s, 0, owner FROM pieces
    UNION ALL SELECT alloc_key, e, 0, -owner FROM pieces),
running AS (
    SELECT t, lead(t) OVER w AS t_next, sum(d) OVER w AS mask, sum(o) OVER w AS owner
    FROM pts WINDOW w AS (PARTITION BY alloc_key ORDER BY t))
SELECT CAST(owner AS BIGINT) AS owner, sum(t_next - t) AS us, {winner_sql("mask")} AS label
FROM running WHERE t_next > t AND owner <> 0
GROUP BY ALL;
"""


CELLS = f"""
CREATE TABLE cells AS
WITH every_cell AS (
    SELECT o.owner AS seq, o.label, CAST(o.us AS HUGEINT) * gl.gpus AS gpu_us
    FROM owned o JOIN gpu_lines gl ON gl.seq = o.owner
    UNION ALL
    -- double_billed: the clipped window less the pieces it owns; a window alone owns all of it
    SELECT c.seq, {code("double_billed")}, (CAST(c.clamped_end - c.clamped_start AS HUGEINT) -
        coalesce(sum(p.e - p.s), 0)) * c.gpus
    FROM clipped c LEFT JOIN pieces p ON p.owner = c.seq
    WHERE NOT c.alone GROUP BY c.seq, c.clamped_start, c.clamped_end, c.gpus
    UNION ALL
    SELECT gl.seq, {code("unallocated")}, CAST(gl.g_b - gl.gpus AS HUGEINT) * gl.w_us
                      + CAST(gl.gpus AS HUGEINT) * (gl.w_us -
                          greatest(coalesce(gl.clamped_end - gl.clamped_start, 0), 0))
    FROM gpu_lines gl)
-- empty cells are never written, but a line of no GPU-µs keeps one: its whole amount
SELECT * FROM every_cell WHERE gpu_us <> 0
UNION ALL
SELECT l.seq, CASE WHEN coalesce({BILLS_GPUS}, false) THEN {code("unallocated")}
    ELSE {code("money_only")} END, 0
FROM lines l WHERE NOT coalesce({GPU_LINE}, false);
"""


def classify(con: duckdb.DuckDBPyConnection) -> None:
    """Make `lines`, `gpu_lines`, `pieces`, `owned` and `cells` from the spans."""
    con.execute(LINES)
    con.execute(PIECES)
    con.execute(_sweep_sql())
    con.execute(CELLS)
