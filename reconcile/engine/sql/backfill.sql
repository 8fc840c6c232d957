-- Makes job_estimates (each ended job with a requested time limit: its queue, the limit and
-- the time it ran) and jobs_ahead (for each missed start, the jobs submitted after its job
-- that started before it, on its placement class): reports/promises.py `estimates`, `ahead`.
CREATE OR REPLACE TEMP TABLE job_estimates AS
WITH ended AS (
    SELECT tenant, job_id, arg_min(timelimit_s, (t, seq)) AS timelimit_s,
           arg_min(elapsed_s, (t, seq)) AS elapsed_s, min(t) AS ended
    FROM ev WHERE type IN ('job.completed', 'job.failed', 'job.cancelled') AND job_id IS NOT NULL
      AND timelimit_s IS NOT NULL
    GROUP BY ALL),
started AS (
    SELECT tenant, job_id, min(t) AS started, arg_min(queue, (t, seq)) AS queue FROM ev
    WHERE type = 'job.started' AND job_id IS NOT NULL GROUP BY ALL),
submitted AS (
    SELECT tenant, job_id, arg_min(queue, (t, seq)) AS queue FROM ev
    WHERE type = 'job.submitted' AND job_id IS NOT NULL GROUP BY ALL)
SELECT e.tenant, e.job_id, coalesce(s.queue, q.queue, '') AS queue, e.timelimit_s,
       coalesce(e.elapsed_s,
                CAST(greatest(e.ended - s.started, 0) // 1000000 AS BIGINT)) AS elapsed_s
FROM ended e LEFT JOIN started s USING (tenant, job_id)
LEFT JOIN submitted q USING (tenant, job_id)
WHERE e.timelimit_s > 0;

CREATE OR REPLACE TEMP TABLE jobs_ahead AS
WITH submitted AS (
    SELECT tenant, job_id, min(t) AS submitted FROM ev
    WHERE type = 'job.submitted' AND job_id IS NOT NULL GROUP BY ALL),
grant_ AS (
    SELECT tenant, allocation_id, {grant_placement} AS placement FROM ev
    WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
started AS (
    SELECT st.tenant, st.job_id, min(st.t) AS started,
           arg_min(coalesce(g.placement, 'unknown'), (st.t, st.seq)) AS placement
    FROM ev st LEFT JOIN grant_ g ON g.tenant = st.tenant AND g.allocation_id = st.allocation_id
    WHERE st.type = 'job.started' AND st.job_id IS NOT NULL GROUP BY ALL),
backfilled AS (
    SELECT DISTINCT tenant, job_id FROM ev
    WHERE type = 'policy.decision' AND decision = 'backfilled' AND job_id IS NOT NULL),
missed AS (
    SELECT o.tenant, o.promise_id, o.job_id, s.submitted, coalesce(o.started, o.h) AS until_,
           CASE WHEN o.placement = 'unknown' THEN 'whole' ELSE o.placement END AS placement
    FROM promise_outcomes o JOIN submitted s USING (tenant, job_id)
    WHERE o.start_status IN ('late', 'not_started'))
SELECT m.tenant, m.promise_id, k.tenant AS ahead_tenant, k.job_id AS ahead_job_id,
       ks.submitted AS ahead_submitted, k.started AS ahead_started,
       b.job_id IS NOT NULL AS backfilled
FROM missed m
JOIN started k ON k.started < m.until_ AND NOT (k.tenant = m.tenant AND k.job_id = m.job_id)
 AND (CASE WHEN k.placement = 'unknown' THEN 'whole' ELSE k.placement END = m.placement
      OR (k.placement LIKE 'mig%' AND m.placement LIKE 'mig%'))
JOIN submitted ks ON ks.tenant = k.tenant AND ks.job_id = k.job_id AND ks.submitted > m.submitted
LEFT JOIN backfilled b ON b.tenant = k.tenant AND b.job_id = k.job_id
ORDER BY m.tenant, m.promise_id, k.started, k.tenant, k.job_id
