"""The diagnostic packet's queries over `ev` (reconcile/packets/diagnostic.py says what each
section holds). Parameters: $tenant, $job, $pid, and the window $w0, $w1 (µs).

They read the pipeline's `packet_scope` stage (reconcile/engine/sql/packet_scope.sql):
`packet_pods` (the job's Pods, from its `job.started`), `packet_allocations` (each
allocation the job started on or was decided onto, with its first grant and the first
release at or after it) and `packet_window` (w0, w1); ATTEMPTS reads `job_attempts`
(the `job_facts` stage).
"""

from __future__ import annotations

from reconcile.engine.figures import percentiles_sql
from reconcile.engine.pipeline import ABOUT_JOB
from reconcile.engine.rules import INF, fault_windows_sql, touching_sql

DECISIONS = f"""
SELECT seq, t, decision, job_id, allocation_id, reason, queue, notice_s FROM ev
WHERE type = 'policy.decision' AND tenant = $tenant AND {ABOUT_JOB}
ORDER BY t, seq
"""

ALLOCATIONS = """
SELECT aid AS allocation_id, granted, grant_seq, released, release_seq, release_reason, gpus,
       node, devices,
       fabric_domain, placement_class, profile
FROM packet_allocations ORDER BY granted NULLS LAST, aid
"""

DEVICES = """
SELECT node, device, model, fabric_domain, seq FROM ev
WHERE type = 'device.discovered' AND node IN (SELECT node FROM packet_allocations)
QUALIFY row_number() OVER (PARTITION BY node, device ORDER BY t, seq) = 1
ORDER BY node, device
"""

# A fault's window and which allocations it touches are the engine's rules (rules.py); a
# fault is listed when it touches one of the job's allocations and is open at some moment
# of the window.
FAULTS = f"""
WITH opened AS (
    SELECT seq, open_t AS opened, node, device, fabric_domain, code, severity,
           CASE WHEN close_t < {INF} THEN close_t END AS cleared, close_seq AS cleared_seq
    FROM ({fault_windows_sql("ev", critical_only=False)})),
touching AS ({touching_sql("packet_allocations", "opened", "f.seq, a.aid")})
SELECT o.*, list(DISTINCT t.aid ORDER BY t.aid) AS touches
FROM opened o JOIN touching t ON t.seq = o.seq
WHERE o.opened < $w1 AND coalesce(o.cleared, {INF}) > $w0
GROUP BY ALL ORDER BY o.opened, o.seq
"""

ATTEMPTS = """
SELECT seq, attempt, allocation_id, pod, s AS started, CASE WHEN kind IS NOT NULL
       THEN e END AS ended, end_seq,
       CASE kind WHEN 'job.completed' THEN 'completed' WHEN 'job.failed' THEN 'failed'
                 WHEN 'job.cancelled' THEN 'cancelled' ELSE 'running' END AS outcome, cause
FROM job_attempts WHERE tenant = $tenant AND job_id = $job ORDER BY s, seq
"""

PROGRESS = f"""
WITH starts AS (SELECT seq AS att, t FROM ev WHERE type = 'job.started' AND tenant = $tenant
    AND job_id = $job),
marks AS (
    SELECT p.t, p.seq, p.step, p.units, s.att
    FROM (SELECT t, seq, step, units FROM ev WHERE type = 'job.progress' AND tenant = $tenant
        AND job_id = $job) p
    ASOF LEFT JOIN starts s ON p.t >= s.t),
gaps AS (SELECT *, t - lag(t) OVER (PARTITION BY att ORDER BY t, seq) AS gap FROM marks)
SELECT att AS attempt_seq, count(*) AS marks, min(t) AS first, max(t) AS last,
       min(step) AS first_step,
       max(step) AS last_step, max(units) AS units, {percentiles_sql("gap", "step_time")},
       max(gap) AS longest_gap, max_by(t, gap) AS longest_gap_end
FROM gaps GROUP BY att ORDER BY first
"""

HISTOGRAM = """
SELECT (t - $w0) * $bins // ($w1 - $w0) AS bin, count(*) FROM ev
WHERE type = 'job.progress' AND tenant = $tenant AND job_id = $job AND t BETWEEN $w0 AND $w1
    GROUP BY ALL
"""

CHECKPOINTS = """
WITH started AS (
    SELECT checkpoint_id, step, t, seq FROM ev WHERE type = 'checkpoint.started'
        AND tenant = $tenant AND job_id = $job),
saved AS (
    SELECT checkpoint_id, step, t, seq FROM ev WHERE type = 'checkpoint.saved' AND tenant = $tenant
        AND job_id = $job),
paired AS (
    SELECT s.checkpoint_id, s.step, s.t AS started, s.seq AS started_seq, v.t AS saved,
        v.seq AS saved_seq
    FROM started s LEFT JOIN saved v ON v.checkpoint_id = s.checkpoint_id AND v.t >= s.t
    QUALIFY row_number() OVER (PARTITION BY s.seq ORDER BY v.t NULLS LAST, v.seq) = 1)
SELECT * FROM paired
UNION ALL
SELECT v.checkpoint_id, v.step, NULL, NULL, v.t, v.seq FROM saved v
WHERE v.seq NOT IN (SELECT saved_seq FROM paired WHERE saved_seq IS NOT NULL)
ORDER BY coalesce(started, saved), checkpoint_id
"""

RESTORES = """
SELECT checkpoint_id, step, t, seq FROM ev
WHERE type = 'checkpoint.restored' AND tenant = $tenant AND job_id = $job ORDER BY t, seq
"""

BILLING = """
SELECT l.seq, l.invoice_id, l.line_id, l.allocation_id, l.ps AS period_start,
       l.pe AS period_end, l.gpus,
       l.amount, l.currency, l.category, l.corrects,
       EXISTS (SELECT 1 FROM ev c WHERE c.type = 'billing.line' AND c.tenant = l.tenant
               AND c.corrects = l.line_id AND c.seq <> l.seq) AS replaced
FROM ev l
WHERE l.type = 'billing.line' AND l.tenant = $tenant
    AND l.allocation_id IN (SELECT aid FROM packet_allocations)
ORDER BY l.ps, l.seq
"""

SUBMITTED = """
SELECT t, seq FROM ev WHERE type = 'job.submitted' AND tenant = $tenant AND job_id = $job
    ORDER BY t, seq LIMIT 1
"""
