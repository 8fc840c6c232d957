-- promise_outcomes: one row per promise (the first of a tenant's promise_id), with its
-- job's first start and completion, its placement and whether start and completion were
-- met (reconcile/reports/promises.py defines each column's rule).
-- {placement}: the promise's class, else its first attempt's allocation's (figures.placement_sql)
CREATE OR REPLACE TEMP TABLE promise_outcomes AS
WITH promise AS (
    SELECT seq, tenant, promise_id, job_id, t AS made, start_by, complete_by, placement_class AS cls, gpus
    FROM ev WHERE type = 'policy.promise'
    QUALIFY row_number() OVER (PARTITION BY tenant, promise_id ORDER BY t, seq) = 1),
first_start AS (
    SELECT tenant, job_id, t AS started, allocation_id FROM ev WHERE type = 'job.started'
    QUALIFY row_number() OVER (PARTITION BY tenant, job_id ORDER BY t, seq) = 1),
completion AS (SELECT tenant, job_id, min(t) AS completed FROM ev WHERE type = 'job.completed' GROUP BY ALL),
grant_ AS (
    SELECT tenant, allocation_id, placement_class AS cls, profile FROM ev WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
joined AS (
    SELECT p.*, s.started, s.allocation_id, c.completed, h.h,
           {placement}
               AS placement,
           count(*) OVER (PARTITION BY p.promise_id) AS same_id
    FROM promise p
    LEFT JOIN first_start s ON s.tenant = p.tenant AND s.job_id = p.job_id
    LEFT JOIN completion c ON c.tenant = p.tenant AND c.job_id = p.job_id
    LEFT JOIN grant_ g ON g.tenant = p.tenant AND g.allocation_id = s.allocation_id
    LEFT JOIN horizons h ON h.tenant = p.tenant)
SELECT *,
       CASE WHEN started IS NOT NULL AND started <= start_by THEN 'met'
            WHEN started IS NOT NULL THEN 'late'
            WHEN start_by < h THEN 'not_started' ELSE 'pending' END AS start_status,
       CASE WHEN complete_by IS NULL THEN 'none'
            WHEN completed IS NOT NULL AND completed <= complete_by THEN 'met'
            WHEN completed IS NOT NULL THEN 'late'
            WHEN complete_by < h THEN 'not_completed' ELSE 'pending' END AS completion_status,
       started - start_by AS start_delay, completed - complete_by AS completion_delay
FROM joined
