-- envelope_groups: each job's and each allocation's group, by provider (`source`) and
-- placement class (reconcile/reports/envelope.py defines both). Makes job_groups and
-- allocation_groups. {grant_provider}, {said_provider}: a source cut to scheme and
-- authority; {grant_placement}: the grant's class (figures.placement_sql).
CREATE OR REPLACE TEMP TABLE job_groups AS
WITH keys AS (SELECT tenant, job_id FROM job_outcomes UNION SELECT tenant, job_id FROM promise_outcomes),
said AS (
    SELECT tenant, job_id, source FROM ev_rest
    WHERE job_id IS NOT NULL AND tenant IS NOT NULL AND source IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY tenant, job_id ORDER BY type <> 'job.started', t, seq) = 1),
first_promise AS (
    SELECT tenant, job_id, placement FROM promise_outcomes
    QUALIFY row_number() OVER (PARTITION BY tenant, job_id ORDER BY made, seq) = 1),
grant_ AS (
    SELECT tenant, allocation_id, source, placement_class AS cls, profile FROM ev_rest WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1)
SELECT k.tenant, k.job_id, coalesce({grant_provider}, {said_provider}, 'unknown') AS source,
       coalesce(fp.placement, CASE WHEN g.allocation_id IS NOT NULL THEN {grant_placement} END,
                'unknown') AS placement
FROM keys k
LEFT JOIN said s USING (tenant, job_id)
LEFT JOIN first_promise fp USING (tenant, job_id)
LEFT JOIN job_outcomes j USING (tenant, job_id)
LEFT JOIN grant_ g ON g.tenant = j.tenant AND g.allocation_id = j.first_allocation;

CREATE OR REPLACE TEMP TABLE allocation_groups AS
WITH grant_ AS (
    SELECT tenant, allocation_id, source, placement_class AS cls, profile FROM ev_rest WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
first_job AS (
    SELECT tenant, allocation_id, job_id FROM ev_rest WHERE type = 'job.started'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
keys AS (SELECT tenant, allocation_id FROM grant_ UNION SELECT tenant, allocation_id FROM first_job)
SELECT k.tenant, k.allocation_id, coalesce(j.source, {grant_provider}, 'unknown') AS source,
       coalesce(j.placement, CASE WHEN g.allocation_id IS NOT NULL THEN {grant_placement} END,
                'unknown') AS placement
FROM keys k
LEFT JOIN grant_ g USING (tenant, allocation_id)
LEFT JOIN first_job f USING (tenant, allocation_id)
LEFT JOIN job_groups j ON j.tenant = f.tenant AND j.job_id = f.job_id
