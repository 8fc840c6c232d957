-- job_facts: what the jobs did, from the events (reconcile/reports/outcomes.py defines
-- each figure). Makes tenant_horizons, job_attempts, allocation_holdings, job_outcomes,
-- step_gaps and job_allocation_time. {inf}: the engine's +∞ (rules.INF).
CREATE OR REPLACE TEMP TABLE tenant_horizons AS
SELECT * FROM horizons;

CREATE OR REPLACE TEMP TABLE job_attempts AS
WITH starts AS (
    SELECT tenant, job_id, allocation_id, attempt, pod, t AS s, seq,
           lead(t) OVER (PARTITION BY tenant, job_id ORDER BY t, seq) AS next_s
    FROM ev WHERE type = 'job.started'),
ends AS (SELECT tenant, job_id, t, seq, type AS kind, cause FROM ev
         WHERE type IN ('job.completed', 'job.failed', 'job.cancelled')),
ended AS (
    SELECT st.*, en.t AS end_t, en.seq AS end_seq, en.kind, en.cause
    FROM starts st
    LEFT JOIN ends en ON en.tenant = st.tenant AND en.job_id = st.job_id
     AND (en.t > st.s OR (en.t = st.s AND en.seq > st.seq))
    QUALIFY row_number() OVER (PARTITION BY st.seq ORDER BY en.t NULLS LAST, en.seq) = 1)
SELECT d.* EXCLUDE (end_t, end_seq, kind, cause, next_s),
       CASE WHEN d.end_t <= coalesce(d.next_s, {inf}) THEN d.end_t ELSE coalesce(d.next_s, h.h, d.s) END AS e,
       CASE WHEN d.end_t <= coalesce(d.next_s, {inf}) THEN d.end_seq END AS end_seq,
       CASE WHEN d.end_t <= coalesce(d.next_s, {inf}) THEN d.kind END AS kind,
       CASE WHEN d.end_t <= coalesce(d.next_s, {inf}) THEN d.cause END AS cause
FROM ended d LEFT JOIN tenant_horizons h ON h.tenant = d.tenant;

CREATE OR REPLACE TEMP TABLE allocation_holdings AS
WITH first_grant AS (
    SELECT tenant, allocation_id, t AS granted FROM ev WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1)
SELECT gr.tenant, gr.allocation_id, gr.granted, coalesce(min(rel.t), {inf}) AS released
FROM first_grant gr LEFT JOIN ev rel ON rel.type = 'allocation.released' AND rel.tenant = gr.tenant
  AND rel.allocation_id = gr.allocation_id AND rel.t >= gr.granted
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE job_outcomes AS
WITH keys AS (SELECT DISTINCT tenant, job_id FROM ev WHERE job_id IS NOT NULL AND tenant IS NOT NULL
              AND type IN ('job.submitted', 'job.started', 'job.progress', 'job.completed', 'job.failed', 'job.cancelled')),
first_att AS (SELECT * FROM job_attempts QUALIFY row_number() OVER (PARTITION BY tenant, job_id ORDER BY s, seq) = 1),
per_type AS (
    SELECT tenant, job_id,
           min(t) FILTER (WHERE type = 'job.submitted') AS submitted,
           min(t) FILTER (WHERE type = 'job.progress') AS first_progress,
           min(t) FILTER (WHERE type = 'job.completed') AS completed,
           count(DISTINCT result_id) FILTER (WHERE type = 'work.accepted') AS accepted,
           count(DISTINCT result_id) FILTER (WHERE type = 'work.rejected') AS rejected
    FROM ev WHERE job_id IS NOT NULL GROUP BY tenant, job_id),
attempts AS (SELECT tenant, job_id, count(*) AS n FROM job_attempts GROUP BY ALL)
SELECT k.tenant, k.job_id, p.submitted, p.first_progress, p.completed, p.accepted, p.rejected,
       fa.s AS first_start, fa.allocation_id AS first_allocation, g.granted, coalesce(a.n, 0) AS attempts,
       p.first_progress - coalesce(p.submitted, g.granted) AS ttfua,
       CASE WHEN p.completed IS NOT NULL THEN p.completed - fa.s END AS run_time
FROM keys k JOIN per_type p USING (tenant, job_id)
LEFT JOIN first_att fa USING (tenant, job_id)
LEFT JOIN attempts a USING (tenant, job_id)
LEFT JOIN allocation_holdings g ON g.tenant = fa.tenant AND g.allocation_id = fa.allocation_id;

CREATE OR REPLACE TEMP TABLE step_gaps AS
WITH starts AS (SELECT tenant, job_id, t, seq, allocation_id FROM ev WHERE type = 'job.started'),
marks AS (
    SELECT p.tenant, p.job_id, p.t, p.seq, p.step, s.seq AS att, s.allocation_id
    FROM (SELECT tenant, job_id, t, seq, step FROM ev WHERE type = 'job.progress') p
    ASOF LEFT JOIN starts s ON s.tenant = p.tenant AND s.job_id = p.job_id AND p.t >= s.t)
SELECT tenant, job_id, allocation_id, t - lag(t) OVER (PARTITION BY tenant, job_id, att ORDER BY t, seq) AS gap,
       step - lag(step) OVER (PARTITION BY tenant, job_id, att ORDER BY t, seq) AS dstep
FROM marks;

-- each job's attempt time on each allocation, clipped to the allocation's holding
CREATE OR REPLACE TEMP TABLE job_allocation_time AS
SELECT a.tenant, a.job_id, a.allocation_id,
       sum(greatest(least(a.e, coalesce(g.released, {inf}), coalesce(h.h, a.e)) - greatest(a.s, coalesce(g.granted, a.s)), 0))
           AS us
FROM job_attempts a
LEFT JOIN allocation_holdings g ON g.tenant = a.tenant AND g.allocation_id = a.allocation_id
LEFT JOIN tenant_horizons h ON h.tenant = a.tenant
GROUP BY ALL;
