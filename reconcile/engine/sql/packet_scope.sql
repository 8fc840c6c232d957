-- packet_scope: one promise's job, for its diagnostic packet ($tenant, $job, $pid): its
-- Pods (packet_pods), the allocations it started on or was decided onto with their first
-- grant and release (packet_allocations), and the window of its events (packet_window).
-- {about_job}: an event about the job (its id, one of its Pods, one of its allocations).
CREATE OR REPLACE TEMP TABLE packet_pods AS
SELECT DISTINCT pod FROM ev WHERE type = 'job.started' AND tenant = $tenant AND job_id = $job AND pod IS NOT NULL;

CREATE OR REPLACE TEMP TABLE packet_allocations AS
WITH aids AS (
    SELECT DISTINCT allocation_id AS aid FROM ev
    WHERE tenant = $tenant AND allocation_id IS NOT NULL
      AND ((type = 'job.started' AND job_id = $job)
           OR (type = 'policy.decision' AND (job_id = $job OR job_id IN (SELECT pod FROM packet_pods))))),
first_grant AS (
    SELECT allocation_id AS aid, t AS granted, seq AS grant_seq, gpus, node, devices, fabric_domain,
           placement_class, profile, {nodes} AS nodes
    FROM ev WHERE type = 'allocation.granted' AND tenant = $tenant AND allocation_id IN (SELECT aid FROM aids)
    QUALIFY row_number() OVER (PARTITION BY allocation_id ORDER BY t, seq) = 1),
releases AS (
    SELECT allocation_id AS aid, t, seq, reason FROM ev
    WHERE type = 'allocation.released' AND tenant = $tenant AND allocation_id IN (SELECT aid FROM aids))
SELECT a.aid, gr.granted, gr.grant_seq, gr.gpus, gr.node, gr.devices, gr.fabric_domain, gr.placement_class, gr.profile,
       gr.nodes,
       rel.t AS released, rel.seq AS release_seq, rel.reason AS release_reason
FROM aids a LEFT JOIN first_grant gr ON gr.aid = a.aid LEFT JOIN releases rel ON rel.aid = a.aid AND rel.t >= gr.granted
QUALIFY row_number() OVER (PARTITION BY a.aid ORDER BY rel.t NULLS LAST, rel.seq) = 1;

CREATE OR REPLACE TEMP TABLE packet_window AS
WITH about AS (
    SELECT t, ps, pe, start_by, complete_by FROM ev
    WHERE tenant = $tenant AND ({about_job} OR (type = 'policy.promise' AND promise_id = $pid))),
span AS (SELECT least(min(t), min(ps), min(start_by)) AS w0,
                greatest(max(t), max(pe), max(start_by), max(complete_by)) AS w1 FROM about)
SELECT w0, CASE WHEN w1 > w0 THEN w1 ELSE w0 + 1000000 END AS w1 FROM span
