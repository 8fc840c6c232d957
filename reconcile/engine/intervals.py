"""The intervals of RULES.md, built in DuckDB from the typed events in `ev`.

Each statement makes one table of facts (allocations, attempts, marks, faults, …) or of
labelled spans `(tenant, aid, s, e, label)` on an allocation's timeline. A label is a
category of RULES.md §"Categories" with its bearer (and, for productive time, the job's
acceptance), from the label table of reconcile/engine/rules.py; a smaller label wins
where spans overlap, which is RULES.md's priority order. Which fault touches which
allocation, and when a fault is open, are rules.py's too. Times are integer
microseconds; +∞ is `INF`.
"""

from __future__ import annotations

import duckdb

from reconcile.engine.rules import (
    FAULT_LOOKBACK_US,
    INF,
    SECOND,
    by_acceptance_sql,
    by_bearer_sql,
    code,
    fault_windows_sql,
    nodes_sql,
    touching_sql,
)
from schemas.defaults import DEFAULT_STALL_S, DEFAULT_WARMUP_S

__all__ = [
    "DEFAULT_TERMS",
    "INF",
    "SECOND",
    "build_spans",
]  # INF and SECOND: rules.py's, kept importable here

#: The terms before a tenant's first policy.terms: schemas/events.py's defaults, in µs.
DEFAULT_TERMS = {
    "warmup_us": DEFAULT_WARMUP_S * SECOND,
    "stall_us": DEFAULT_STALL_S * SECOND,
    "notice_us": 0,
}


FACTS = f"""
CREATE TABLE terms AS
SELECT tenant, t, seq,
       coalesce(warmup_allowance_s, {DEFAULT_WARMUP_S}) * {SECOND} AS warmup_us,
       coalesce(stall_threshold_s, {DEFAULT_STALL_S}) * {SECOND} AS stall_us,
       coalesce(reclaim_notice_s, 0) * {SECOND} AS notice_us
FROM ev_rest WHERE type = 'policy.terms'
QUALIFY row_number() OVER (PARTITION BY tenant, t ORDER BY seq DESC) = 1;

CREATE TABLE allocs AS
WITH grants AS (
    SELECT tenant, allocation_id AS aid, t AS granted, gpus AS g_a, node, devices, fabric_domain,
           placement_class, profile, {nodes_sql("nodes", "node")} AS nodes
    FROM ev_rest WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
held AS (
    SELECT g.*, coalesce(min(r.t), {INF}) AS released
    FROM grants g LEFT JOIN ev_rest r
      ON r.type = 'allocation.released' AND r.tenant = g.tenant AND r.allocation_id = g.aid
          AND r.t >= g.granted
    GROUP BY ALL)
-- an integer key: the sweep sorts and joins on it, cheaper than on (tenant, aid)
SELECT *, row_number() OVER (ORDER BY tenant, aid) AS alloc_key FROM held;

-- RULES.md 11: an attempt is cut by its job's next start on its allocation or with a
-- higher number; a sibling's start (another allocation, a number not above) never cuts it.
-- Most next starts cut; only the rest look further.
CREATE TABLE attempts AS
WITH numbered AS (
    SELECT tenant, job_id AS job, allocation_id AS aid, t AS s, seq AS sseq,
        coalesce(attempt, 1) AS n
    FROM ev_rest WHERE type = 'job.started'),
nexts AS (
    SELECT *, lead(s) OVER w AS next_s, lead(sseq) OVER w AS next_sseq,
           lead(aid) OVER w IS NOT DISTINCT FROM aid OR lead(n) OVER w > n
               OR lead(s) OVER w IS NULL AS cut_next
    FROM numbered WINDOW w AS (PARTITION BY tenant, job ORDER BY s, sseq)),
far_cuts AS (
    SELECT a.sseq, min(b.s) AS cut_s, arg_min(b.sseq, (b.s, b.sseq)) AS cut_sseq
    FROM nexts a JOIN numbered b ON b.tenant = a.tenant AND b.job = a.job
     AND (b.s > a.s OR (b.s = a.s AND b.sseq > a.sseq))
         AND (b.aid IS NOT DISTINCT FROM a.aid OR b.n > a.n)
    WHERE NOT a.cut_next GROUP BY a.sseq),
starts AS (
    SELECT nx.tenant, nx.job, nx.aid, nx.s, nx.sseq, nx.n,
           CASE WHEN nx.cut_next THEN nx.next_s ELSE fc.cut_s END AS next_s,
           CASE WHEN nx.cut_next THEN nx.next_sseq ELSE fc.cut_sseq END AS next_sseq
    FROM nexts nx LEFT JOIN far_cuts fc ON fc.sseq = nx.sseq),
ends AS (
    SELECT tenant, job_id AS job, t, seq, type AS kind, cause FROM ev_rest
    WHERE type IN ('job.completed', 'job.failed', 'job.cancelled')),
first_end AS (
    SELECT st.*, en.t AS end_t, en.seq AS end_seq, en.kind AS end_kind, en.cause AS end_cause
    FROM starts st LEFT JOIN ends en
      ON en.tenant = st.tenant AND en.job = st.job
          AND (en.t > st.s OR (en.t = st.s AND en.seq > st.sseq))
    QUALIFY row_number() OVER (PARTITION BY st.sseq ORDER BY en.t NULLS LAST, en.seq) = 1),
ended AS (
    -- an attempt ends at its job's next end event, or where the job starts again,
    -- whichever is first
    SELECT tenant, job, aid, s, sseq, n,
           (end_t IS NOT NULL AND (next_s IS NULL OR end_t < next_s
               OR (end_t = next_s AND end_seq < next_sseq))) AS by_event,
           end_t, end_seq, end_kind, end_cause, next_s
    FROM first_end)
-- numbered only once each start has its one end: a window over the join would see ties
SELECT tenant, job, aid, s, sseq, n,
       CASE WHEN by_event THEN end_t ELSE coalesce(next_s, {INF}) END AS e,
       CASE WHEN by_event THEN end_seq END AS eseq,
       CASE WHEN by_event THEN end_kind END AS kind,
       CASE WHEN by_event THEN end_cause END AS cause,
       row_number() OVER (PARTITION BY tenant, aid ORDER BY s, sseq) = 1 AS first_on_alloc
FROM ended;

CREATE TABLE acceptance AS
SELECT tenant, job_id AS job,
       CASE WHEN bool_or(type = 'work.accepted') THEN 'accepted' ELSE 'rejected' END AS state
FROM ev_rest WHERE type IN ('work.accepted', 'work.rejected') GROUP BY ALL;

CREATE TABLE faults AS {fault_windows_sql("ev_rest", critical_only=True)};

CREATE TABLE touches AS
    {touching_sql("allocs", "faults", "a.tenant, a.aid, f.seq, f.open_t, f.close_t")};

-- RULES.md 11: the gang of attempt n of a job: the allocations it starts on with number n;
-- a fault touches an attempt when it touches an allocation of its gang.
CREATE TABLE gangs AS SELECT DISTINCT tenant, job, n, aid FROM attempts WHERE aid IS NOT NULL;

CREATE TABLE attempt_touches AS
SELECT a.sseq AS att, near.open_t, near.close_t
FROM attempts a JOIN gangs g ON g.tenant = a.tenant AND g.job = a.job AND g.n = a.n
JOIN touches near ON near.tenant = g.tenant AND near.aid = g.aid;

-- Attempts of a job still running when a later one starts (a gang's siblings, a job moved
-- without a number): each (latest, att) pair says att runs on past latest's start, so the
-- marks given to latest (the last start before them) are att's too while it runs.
CREATE TABLE running_on AS
WITH flagged AS (
    SELECT *, lead(s) OVER w AS next_s, lead(sseq) OVER w AS next_sseq
    FROM attempts WINDOW w AS (PARTITION BY tenant, job ORDER BY s, sseq))
SELECT l.sseq AS latest, o.sseq AS att, o.e, o.eseq
FROM flagged o JOIN attempts l ON l.tenant = o.tenant AND l.job = o.job
 AND (l.s > o.s OR (l.s = o.s AND l.sseq > o.sseq))
 AND (o.e > l.s OR (o.e = l.s AND o.eseq > l.sseq))
WHERE o.e > o.next_s OR (o.e = o.next_s AND o.eseq > o.next_sseq);

-- RULES.md 12: a preempted failure inside [t_r, t_r + reclaim_notice_s) of a reclaim of
-- its job or of an allocation of its gang was owed the notice promised.
CREATE TABLE owed AS
WITH reclaims AS (
    SELECT d.tenant, d.t, d.job_id, d.allocation_id, coalesce(tm.notice_us, 0) AS notice_us
    FROM ev_rest d ASOF LEFT JOIN terms tm ON tm.tenant = d.tenant AND d.t >= tm.t
    WHERE d.type = 'policy.decision' AND d.decision IN ('preempted', 'reclaimed', 'evicted'))
SELECT DISTINCT a.sseq AS att, a.tenant, a.job, a.n, a.e AS failed_at
FROM attempts a JOIN reclaims d ON d.tenant = a.tenant AND d.t <= a.e AND a.e < d.t + d.notice_us
WHERE a.kind = 'job.failed' AND a.cause = 'preempted'
  AND (d.job_id = a.job OR EXISTS (SELECT 1 FROM gangs g WHERE g.tenant = a.tenant
      AND g.job = a.job
                                     AND g.n = a.n AND g.aid = d.allocation_id));
"""

GAPS = f"""
-- One pass over each job's events in (time, seq) order: its attempts' starts and ends and
-- its progress, under the integer job key of `jobs` (the load's: sorting on it is cheaper
-- than on text, and progress carries no other). Only
-- lag and lead are needed: a gap is two progress marks next to each other (no start or
-- end between them), an attempt's first progress follows its start, its last mark comes
-- before a start, an end or the stream's end. Of the millions of gaps only the few that
-- may not be productive are kept (a step that did not rise, or longer than the smallest
-- stall threshold of any tenant), with each attempt's first and last marks; those few are
-- then given to their attempt, the one whose start came last before them.
CREATE TABLE job_notes AS
WITH stream AS (
    -- kind is one byte and jid four: every byte of the sort key is sorted 50M times
    SELECT jid, t, seq, CAST(1 AS TINYINT) AS kind, step, units FROM progress WHERE jid IS NOT NULL
    UNION ALL SELECT j.jid, a.s, a.sseq, CAST(0 AS TINYINT), NULL, NULL FROM attempts a JOIN jobs j
        USING (tenant, job)
    UNION ALL SELECT DISTINCT j.jid, a.e, a.eseq,
              CAST(CASE WHEN a.kind = 'job.completed' THEN 2 ELSE 3 END AS TINYINT), NULL, NULL
              FROM attempts a JOIN jobs j USING (tenant, job) WHERE a.eseq IS NOT NULL),
ordered AS (
    SELECT jid, t, seq, kind, lag(t) OVER w AS prev_t, lag(kind) OVER w AS prev_kind,
           lead(kind) OVER w AS next_kind,
           coalesce(kind = 2 OR step > lag(step) OVER w
                    OR (step = lag(step) OVER w AND units > lag(units) OVER w),
                    false) AS rose
    -- (t, seq) is unique in a job's stream; the keys after it change no order, but a lag
    -- of a sort key is cheaper in DuckDB than a lag of a column carried beside the keys
    FROM stream WINDOW w AS (PARTITION BY jid ORDER BY t, seq, kind, step, units))
SELECT jid, t, seq, kind, prev_t, rose,
       prev_kind = 1 AS is_gap, kind = 1 AND prev_kind = 0 AS is_first,
       kind = 2 OR coalesce(next_kind, 0) <> 1 AS is_last
FROM ordered
WHERE kind IN (1, 2)
  AND (prev_kind = 0 OR kind = 2 OR coalesce(next_kind, 0) <> 1
       OR (prev_kind = 1 AND (NOT rose OR t - prev_t > $shortest_stall_us)));

CREATE TABLE mark_notes AS
WITH keyed AS (
    SELECT j.jid, a.sseq AS att, a.e, a.eseq, CAST(a.s AS HUGEINT) * {2**40} + a.sseq AS start_key
    FROM attempts a JOIN jobs j USING (tenant, job))
SELECT att.att, n.prev_t AS s, n.t AS e, n.rose, n.is_gap, n.is_first, n.is_last, n.kind, n.seq
FROM job_notes n ASOF JOIN keyed att ON att.jid = n.jid
    AND CAST(n.t AS HUGEINT) * {2**40} + n.seq >= att.start_key
WHERE (n.kind = 2 AND n.seq = att.eseq)
   OR (n.kind = 1 AND (att.eseq IS NULL OR n.t < att.e OR (n.t = att.e AND n.seq < att.eseq)));

-- RULES.md 11: a mark is also every earlier attempt's that still runs at it (`running_on`)
INSERT INTO mark_notes
SELECT ov.att, m.s, m.e, m.rose, m.is_gap, m.is_first, m.is_last, m.kind, m.seq
FROM mark_notes m JOIN running_on ov ON ov.latest = m.att
WHERE (m.kind = 2 AND m.seq = ov.eseq)
   OR (m.kind = 1 AND (m.e < ov.e OR (m.e = ov.e AND m.seq < ov.eseq)));

CREATE TABLE first_progress AS SELECT att, min(e) AS t FROM mark_notes WHERE is_first GROUP BY att;

-- The gaps that are not productive: no rise, or longer than the threshold in force at their start.
CREATE TABLE odd_gaps AS
SELECT g.att, g.s, g.e, a.tenant, a.aid, a.job,
       g.e - g.s > coalesce(tm.stall_us, {DEFAULT_TERMS["stall_us"]}) AS long
FROM mark_notes g JOIN attempts a ON a.sseq = g.att
ASOF LEFT JOIN terms tm ON tm.tenant = a.tenant AND g.s >= tm.t
WHERE g.is_gap AND (NOT g.rose OR g.e - g.s > coalesce(tm.stall_us, {DEFAULT_TERMS["stall_us"]}));

-- Productive runs: from an attempt's first progress to its last mark, less the odd gaps.
CREATE TABLE productive_runs AS
WITH span AS (
    SELECT att, min(e) FILTER (WHERE is_first) AS first_t, max(e) FILTER (WHERE is_last) AS last_t
    FROM mark_notes GROUP BY att),
cuts AS (
    SELECT att, s, e FROM odd_gaps
    UNION ALL SELECT att, last_t, last_t FROM span WHERE last_t IS NOT NULL),
runs AS (
    SELECT c.att, coalesce(lag(c.e) OVER (PARTITION BY c.att ORDER BY c.s, c.e), sp.first_t)
        AS s, c.s AS e
    FROM cuts c JOIN span sp ON sp.att = c.att)
SELECT r.att, a.tenant, a.aid, a.job, r.s, r.e FROM runs r JOIN attempts a ON a.sseq = r.att
    WHERE r.e > r.s;
"""


SPANS = f"""
CREATE TABLE spans (tenant VARCHAR, aid VARCHAR, s BIGINT, e BIGINT, label INTEGER);

-- 2 reclaimed: from the earliest t_r + reclaim_notice_s on
INSERT INTO spans
WITH targets AS (
    SELECT d.tenant, d.allocation_id AS aid, d.t FROM ev_rest d
    WHERE d.type = 'policy.decision' AND d.decision IN ('preempted', 'reclaimed', 'evicted')
        AND d.allocation_id IS NOT NULL
    UNION ALL
    SELECT d.tenant, j.aid, d.t FROM ev_rest d
      JOIN (SELECT DISTINCT tenant, job, aid FROM attempts) j
      ON j.tenant = d.tenant AND j.job = d.job_id
    WHERE d.type = 'policy.decision' AND d.decision IN ('preempted', 'reclaimed', 'evicted'))
SELECT tenant, aid, min(b), {INF}, {code("reclaimed")}
FROM (SELECT tg.tenant, tg.aid, tg.t + coalesce(tm.notice_us, 0) AS b
      FROM targets tg ASOF LEFT JOIN terms tm ON tm.tenant = tg.tenant AND tg.t >= tm.t
      UNION ALL  -- RULES.md 12: notice owed, on every allocation of the gang from t_f
      SELECT g.tenant, g.aid, o.failed_at FROM owed o
      JOIN gangs g ON g.tenant = o.tenant AND g.job = o.job AND g.n = o.n)
GROUP BY tenant, aid;

-- 3 checkpoint: [started, first saved at or after it), within the job's attempts
INSERT INTO spans
WITH ckpt AS (
    SELECT started.tenant, started.job_id AS job, started.t AS s, min(saved.t) AS e
    FROM ev_rest started JOIN ev_rest saved
      ON saved.type = 'checkpoint.saved' AND saved.tenant = started.tenant
          AND saved.job_id = started.job_id
     AND saved.checkpoint_id = started.checkpoint_id AND saved.t >= started.t
    WHERE started.type = 'checkpoint.started'
    GROUP BY started.tenant, started.job_id, started.seq, started.t)
SELECT a.tenant, a.aid, greatest(c.s, a.s), least(c.e, a.e), {code("checkpoint")}
FROM ckpt c JOIN attempts a ON a.tenant = c.tenant AND a.job = c.job AND c.s < a.e AND c.e > a.s;

-- 4, 5 restart_lost and restart_recovery, by cause
CREATE TABLE failures AS
WITH saves AS (SELECT tenant, job_id AS job, t FROM ev_rest WHERE type = 'checkpoint.saved')
SELECT a.sseq AS att, a.tenant, a.aid, a.job, a.e AS failed_at, a.eseq,
       greatest(a.s, coalesce(sv.t, a.s)) AS lost_from,
       (a.cause IN ('hardware', 'fabric') OR a.sseq IN (SELECT att FROM owed) OR EXISTS (
            SELECT 1 FROM attempt_touches near WHERE near.att = a.sseq
              AND near.open_t BETWEEN a.e - {FAULT_LOOKBACK_US} AND a.e)) AS provider
FROM attempts a ASOF LEFT JOIN saves sv ON sv.tenant = a.tenant AND sv.job = a.job AND a.e > sv.t
WHERE a.kind = 'job.failed';

INSERT INTO spans
SELECT tenant, aid, lost_from, failed_at, {by_bearer_sql("restart_lost", "provider")}
    FROM failures;

INSERT INTO spans
SELECT f.tenant, f.aid, f.failed_at, coalesce(fp.t, n.e),
    {by_bearer_sql("restart_recovery", "f.provider")}
FROM failures f
JOIN attempts n ON n.tenant = f.tenant AND n.aid = f.aid AND n.job = f.job
 AND (n.s > f.failed_at OR (n.s = f.failed_at AND n.sseq > f.eseq))
LEFT JOIN first_progress fp ON fp.att = n.sseq
QUALIFY row_number() OVER (PARTITION BY f.att ORDER BY n.s, n.sseq) = 1;

-- 6 productive: short gaps that end in a rise, by the job's acceptance
INSERT INTO spans
SELECT r.tenant, r.aid, r.s, r.e, {by_acceptance_sql("ac.state")}
FROM productive_runs r LEFT JOIN acceptance ac ON ac.tenant = r.tenant AND ac.job = r.job;

-- 7 stalled_fault: long gaps with a critical fault touching the allocation open in them
INSERT INTO spans
SELECT g.tenant, g.aid, g.s, g.e, {code("stalled_fault")} FROM odd_gaps g
WHERE g.long AND EXISTS (
    SELECT 1 FROM attempt_touches near WHERE near.att = g.att AND near.open_t < g.e
        AND near.close_t > g.s);

-- 8 startup: from grant (first attempt) or start, to the first progress, within the allowance
INSERT INTO spans
WITH origin AS (
    SELECT a.sseq, a.tenant, a.aid, a.e,
           CASE WHEN a.first_on_alloc AND al.granted <= a.s THEN al.granted ELSE a.s END AS s0
    FROM attempts a LEFT JOIN allocs al ON al.tenant = a.tenant AND al.aid = a.aid)
SELECT o.tenant, o.aid, o.s0,
       least(coalesce(fp.t, {INF}), o.s0 + coalesce(tm.warmup_us, {DEFAULT_TERMS["warmup_us"]}),
           o.e), {code("startup")}
FROM origin o LEFT JOIN first_progress fp ON fp.att = o.sseq
ASOF LEFT JOIN terms tm ON tm.tenant = o.tenant AND o.s0 >= tm.t;

-- 10 idle_unexplained: an attempt running, nothing else to say
INSERT INTO spans SELECT tenant, aid, s, e, {code("idle_unexplained")} FROM attempts;

DELETE FROM spans WHERE e <= s;

-- Touching or overlapping spans of one label become one (productive gaps run end to end),
-- so the sweep's cost follows the changes of state, not the number of progress marks.
-- Keyed by the allocation's integer key: spans on an allocation never granted meet no
-- billed piece, so they are left out here.
CREATE TABLE merged AS
WITH flagged AS (
    SELECT a.alloc_key, sp.s, sp.e, sp.label,
           max(sp.e) OVER (PARTITION BY a.alloc_key, sp.label ORDER BY sp.s, sp.e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
    FROM spans sp JOIN allocs a ON a.tenant = sp.tenant AND a.aid = sp.aid),
islands AS (
    SELECT *, sum(CASE WHEN coalesce(s > prev_e, true) THEN 1 ELSE 0 END)
                  OVER (PARTITION BY alloc_key, label ORDER BY s, e) AS island
    FROM flagged)
SELECT alloc_key, min(s) AS s, max(e) AS e, label FROM islands GROUP BY alloc_key, label, island;
"""


def build_spans(con: duckdb.DuckDBPyConnection) -> None:
    """Make the fact tables and the labelled spans from `ev`."""
    con.execute(FACTS)
    con.execute(_gaps_sql(con))
    con.execute(SPANS)


def _gaps_sql(con: duckdb.DuckDBPyConnection) -> str:
    """GAPS with the smallest stall threshold of any tenant's terms written in: a constant
    the filter over every progress mark compares with, not a subquery it joins."""
    default = DEFAULT_TERMS["stall_us"]
    row = con.execute(
        f"SELECT least(coalesce(min(stall_us), {default}), {default}) FROM terms"
    ).fetchone()
    return GAPS.replace("$shortest_stall_us", str(int(row[0] if row else default)))
