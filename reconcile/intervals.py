"""The intervals of RULES.md, built in DuckDB from the typed events in `ev`.

Each statement makes one table of facts (allocations, attempts, marks, faults, …) or of
labelled spans `(tenant, aid, s, e, label)` on an allocation's timeline. A label is a
category of RULES.md §"Categories" with its bearer (and, for productive time, the job's
acceptance); a smaller label wins where spans overlap, which is RULES.md's priority
order. Times are integer microseconds; +∞ is `INF`.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

INF = 2**62
SECOND = 1_000_000
DEFAULT_TERMS = {"warmup_us": 600 * SECOND, "stall_us": 300 * SECOND, "notice_us": 0}
FAULT_LOOKBACK_US = 300 * SECOND  # a fault this close before a failure makes it the provider's


@dataclass(frozen=True)
class Label:
    code: int
    category: str
    bearer: str
    acceptance: str | None = None


#: Span labels in priority order (RULES.md 2–10), then the labels given per line.
LABELS: tuple[Label, ...] = (
    Label(0, "idle_reserved", "customer"),
    Label(1, "reclaimed", "provider"),
    Label(2, "checkpoint", "customer"),
    Label(3, "restart_lost", "provider"),
    Label(4, "restart_lost", "customer"),
    Label(5, "restart_recovery", "provider"),
    Label(6, "restart_recovery", "customer"),
    Label(7, "productive", "customer", "accepted"),
    Label(8, "productive", "customer", "rejected"),
    Label(9, "productive", "customer", "pending"),
    Label(10, "stalled_fault", "provider"),
    Label(11, "startup", "customer"),
    Label(12, "idle_unexplained", "disputed"),
    Label(20, "double_billed", "provider"),
    Label(21, "unallocated", "provider"),
    Label(22, "money_only", "customer"),
)
SPAN_LABELS = tuple(label.code for label in LABELS if 1 <= label.code <= 12)
LABEL_BY_CODE = {label.code: label for label in LABELS}
CATEGORY_ORDER = tuple(dict.fromkeys(label.category for label in sorted(LABELS, key=lambda l: l.code if l.code else 13)))


FACTS = f"""
CREATE TABLE terms AS
SELECT tenant, t, seq,
       coalesce(warmup_allowance_s, 600) * {SECOND} AS warmup_us,
       coalesce(stall_threshold_s, 300) * {SECOND} AS stall_us,
       coalesce(reclaim_notice_s, 0) * {SECOND} AS notice_us
FROM ev WHERE type = 'policy.terms'
QUALIFY row_number() OVER (PARTITION BY tenant, t ORDER BY seq DESC) = 1;

CREATE TABLE allocs AS
WITH grants AS (
    SELECT tenant, allocation_id AS aid, t AS granted, gpus AS g_a, node, devices, fabric_domain,
           placement_class, profile
    FROM ev WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1)
SELECT g.*, coalesce(min(r.t), {INF}) AS released
FROM grants g LEFT JOIN ev r
  ON r.type = 'allocation.released' AND r.tenant = g.tenant AND r.allocation_id = g.aid AND r.t >= g.granted
GROUP BY ALL;

CREATE TABLE attempts AS
WITH starts AS (
    SELECT tenant, job_id AS job, allocation_id AS aid, t AS s, seq AS sseq FROM ev WHERE type = 'job.started'),
ends AS (
    SELECT tenant, job_id AS job, t, seq, type AS kind, cause FROM ev
    WHERE type IN ('job.completed', 'job.failed', 'job.cancelled'))
SELECT st.*, coalesce(en.t, {INF}) AS e, en.seq AS eseq, en.kind, en.cause,
       row_number() OVER (PARTITION BY st.tenant, st.aid ORDER BY st.s, st.sseq) = 1 AS first_on_alloc
FROM starts st LEFT JOIN ends en
  ON en.tenant = st.tenant AND en.job = st.job AND (en.t > st.s OR (en.t = st.s AND en.seq > st.sseq))
QUALIFY row_number() OVER (PARTITION BY st.sseq ORDER BY en.t NULLS LAST, en.seq) = 1;

CREATE TABLE marks AS
SELECT a.sseq AS att, p.t, p.seq, p.step, p.units, false AS completed
FROM (SELECT tenant, job_id AS job, t, seq, step, units FROM ev WHERE type = 'job.progress') p
ASOF JOIN attempts a ON p.tenant = a.tenant AND p.job = a.job AND p.t >= a.s
WHERE p.t <= a.e
UNION ALL
SELECT sseq, e, eseq, NULL, NULL, true FROM attempts WHERE kind = 'job.completed';

CREATE TABLE first_progress AS
SELECT att, min(t) AS t FROM marks WHERE NOT completed GROUP BY att;

CREATE TABLE acceptance AS
SELECT tenant, job_id AS job,
       CASE WHEN bool_or(type = 'work.accepted') THEN 'accepted' ELSE 'rejected' END AS state
FROM ev WHERE type IN ('work.accepted', 'work.rejected') GROUP BY ALL;

CREATE TABLE faults AS
SELECT f.seq, f.node, f.device, f.fabric_domain, f.code, f.t AS open_t, coalesce(min(c.t), {INF}) AS close_t
FROM ev f LEFT JOIN ev c
  ON c.type = 'health.cleared' AND c.code = f.code
 AND c.node IS NOT DISTINCT FROM f.node AND c.device IS NOT DISTINCT FROM f.device
 AND c.fabric_domain IS NOT DISTINCT FROM f.fabric_domain
 AND (c.t > f.t OR (c.t = f.t AND c.seq > f.seq))
WHERE f.type = 'health.fault' AND f.severity = 'critical'
GROUP BY ALL;

CREATE TABLE touch AS
SELECT a.tenant, a.aid, f.seq, f.open_t, f.close_t FROM allocs a JOIN faults f ON f.fabric_domain = a.fabric_domain
UNION
SELECT a.tenant, a.aid, f.seq, f.open_t, f.close_t FROM allocs a JOIN faults f ON f.node = a.node
WHERE f.device IS NULL OR a.devices IS NULL OR list_contains(a.devices, f.device)
UNION
SELECT a.tenant, a.aid, f.seq, f.open_t, f.close_t FROM allocs a, faults f
WHERE f.node IS NULL AND f.device IS NOT NULL AND list_contains(a.devices, f.device);
"""

GAPS = f"""
CREATE TABLE gaps AS
WITH lagged AS (
    SELECT att, t AS e, completed, step, units,
           lag(t) OVER w AS s, lag(step) OVER w AS prev_step, lag(units) OVER w AS prev_units
    FROM marks WINDOW w AS (PARTITION BY att ORDER BY t, seq))
SELECT g.att, g.s, g.e, a.tenant, a.aid, a.job,
       (g.completed OR g.step > g.prev_step OR (g.step = g.prev_step AND g.units > g.prev_units)) AS rose,
       coalesce(tm.stall_us, {DEFAULT_TERMS['stall_us']}) AS stall_us
FROM lagged g JOIN attempts a ON a.sseq = g.att
ASOF LEFT JOIN terms tm ON tm.tenant = a.tenant AND g.s >= tm.t
WHERE g.s IS NOT NULL;
"""

SPANS = f"""
CREATE TABLE spans (tenant VARCHAR, aid VARCHAR, s BIGINT, e BIGINT, label INTEGER);

-- 2 reclaimed: from the earliest t_r + reclaim_notice_s on
INSERT INTO spans
WITH targets AS (
    SELECT d.tenant, d.allocation_id AS aid, d.t FROM ev d
    WHERE d.type = 'policy.decision' AND d.decision IN ('preempted', 'reclaimed', 'evicted') AND d.allocation_id IS NOT NULL
    UNION ALL
    SELECT d.tenant, j.aid, d.t FROM ev d JOIN (SELECT DISTINCT tenant, job, aid FROM attempts) j
      ON j.tenant = d.tenant AND j.job = d.job_id
    WHERE d.type = 'policy.decision' AND d.decision IN ('preempted', 'reclaimed', 'evicted'))
SELECT x.tenant, x.aid, min(x.t + coalesce(tm.notice_us, 0)), {INF}, 1
FROM targets x ASOF LEFT JOIN terms tm ON tm.tenant = x.tenant AND x.t >= tm.t
GROUP BY x.tenant, x.aid;

-- 3 checkpoint: [started, first saved at or after it), within the job's attempts
INSERT INTO spans
WITH ckpt AS (
    SELECT cs.tenant, cs.job_id AS job, cs.t AS s, min(sv.t) AS e
    FROM ev cs JOIN ev sv
      ON sv.type = 'checkpoint.saved' AND sv.tenant = cs.tenant AND sv.job_id = cs.job_id
     AND sv.checkpoint_id = cs.checkpoint_id AND sv.t >= cs.t
    WHERE cs.type = 'checkpoint.started'
    GROUP BY cs.tenant, cs.job_id, cs.seq, cs.t)
SELECT a.tenant, a.aid, greatest(c.s, a.s), least(c.e, a.e), 2
FROM ckpt c JOIN attempts a ON a.tenant = c.tenant AND a.job = c.job AND c.s < a.e AND c.e > a.s;

-- 4, 5 restart_lost and restart_recovery, by cause
CREATE TABLE failures AS
WITH saves AS (SELECT tenant, job_id AS job, t FROM ev WHERE type = 'checkpoint.saved')
SELECT a.sseq AS att, a.tenant, a.aid, a.job, a.e AS tf, greatest(a.s, coalesce(sv.t, a.s)) AS lost_from,
       (a.cause IN ('hardware', 'fabric') OR EXISTS (
            SELECT 1 FROM touch x WHERE x.tenant = a.tenant AND x.aid = a.aid
              AND x.open_t BETWEEN a.e - {FAULT_LOOKBACK_US} AND a.e)) AS provider
FROM attempts a ASOF LEFT JOIN saves sv ON sv.tenant = a.tenant AND sv.job = a.job AND a.e > sv.t
WHERE a.kind = 'job.failed';

INSERT INTO spans
SELECT tenant, aid, lost_from, tf, CASE WHEN provider THEN 3 ELSE 4 END FROM failures;

INSERT INTO spans
SELECT f.tenant, f.aid, f.tf, coalesce(fp.t, n.e), CASE WHEN f.provider THEN 5 ELSE 6 END
FROM failures f
JOIN attempts n ON n.tenant = f.tenant AND n.aid = f.aid AND n.job = f.job AND n.s >= f.tf
LEFT JOIN first_progress fp ON fp.att = n.sseq
QUALIFY row_number() OVER (PARTITION BY f.att ORDER BY n.s, n.sseq) = 1;

-- 6 productive: short gaps that end in a rise, by the job's acceptance
INSERT INTO spans
SELECT g.tenant, g.aid, g.s, g.e,
       CASE coalesce(ac.state, 'pending') WHEN 'accepted' THEN 7 WHEN 'rejected' THEN 8 ELSE 9 END
FROM gaps g LEFT JOIN acceptance ac ON ac.tenant = g.tenant AND ac.job = g.job
WHERE g.e - g.s <= g.stall_us AND g.rose;

-- 7 stalled_fault: long gaps with a critical fault touching the allocation open in them
INSERT INTO spans
SELECT g.tenant, g.aid, g.s, g.e, 10 FROM gaps g
WHERE g.e - g.s > g.stall_us AND EXISTS (
    SELECT 1 FROM touch x WHERE x.tenant = g.tenant AND x.aid = g.aid AND x.open_t < g.e AND x.close_t > g.s);

-- 8 startup: from grant (first attempt) or start, to the first progress, within the allowance
INSERT INTO spans
WITH origin AS (
    SELECT a.sseq, a.tenant, a.aid, a.e,
           CASE WHEN a.first_on_alloc AND al.granted <= a.s THEN al.granted ELSE a.s END AS s0
    FROM attempts a LEFT JOIN allocs al ON al.tenant = a.tenant AND al.aid = a.aid)
SELECT o.tenant, o.aid, o.s0,
       least(coalesce(fp.t, {INF}), o.s0 + coalesce(tm.warmup_us, {DEFAULT_TERMS['warmup_us']}), o.e), 11
FROM origin o LEFT JOIN first_progress fp ON fp.att = o.sseq
ASOF LEFT JOIN terms tm ON tm.tenant = o.tenant AND o.s0 >= tm.t;

-- 10 idle_unexplained: an attempt running, nothing else to say
INSERT INTO spans SELECT tenant, aid, s, e, 12 FROM attempts;

DELETE FROM spans WHERE e <= s;

-- Touching or overlapping spans of one label become one (productive gaps run end to end),
-- so the sweep's cost follows the changes of state, not the number of progress marks.
CREATE TABLE merged AS
WITH flagged AS (
    SELECT *, max(e) OVER (PARTITION BY tenant, aid, label ORDER BY s, e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
    FROM spans),
islands AS (
    SELECT *, sum(CASE WHEN coalesce(s > prev_e, true) THEN 1 ELSE 0 END)
                  OVER (PARTITION BY tenant, aid, label ORDER BY s, e) AS island
    FROM flagged)
SELECT tenant, aid, min(s) AS s, max(e) AS e, label FROM islands GROUP BY tenant, aid, label, island;
"""


def build_spans(con: duckdb.DuckDBPyConnection) -> None:
    """Make the fact tables and the labelled spans from `ev`."""
    con.execute(FACTS)
    con.execute(GAPS)
    con.execute(SPANS)
