-- claims: what one invoice's dispute claims ($invoice), stretch by stretch
-- (reconcile/packets/claims.py says how each claim is read). claim_lines: the invoice's GPU
-- lines; claim_raw_stretches: the sweep of classify.py over their allocations, each stretch
-- kept with its [s, e) (`other`: the line owning a double-billed stretch); claim_stretches:
-- those of one line and label swept into stretches that do not overlap; claim_bounds: the
-- first and last instant of each claim. Placeholders: the label bit and winner of
-- rules.py, the sweep's claim codes, the codes of double_billed and unallocated, +inf.
CREATE OR REPLACE TEMP TABLE claim_lines AS
SELECT gl.seq, gl.tenant, gl.aid, gl.alloc_key, gl.gpus, gl.g_b, gl.clamped_start, gl.clamped_end, l.ps, l.pe
FROM gpu_lines gl JOIN lines_ev l ON l.seq = gl.seq WHERE l.invoice_id = $invoice;

CREATE OR REPLACE TEMP TABLE claim_raw_stretches AS
WITH alloc_keys AS (SELECT DISTINCT alloc_key FROM claim_lines),
pts AS (
    SELECT m.alloc_key, m.s AS t, {label_bit} AS d, CAST(0 AS BIGINT) AS o FROM merged m SEMI JOIN alloc_keys USING (alloc_key)
    UNION ALL SELECT m.alloc_key, m.e, -{label_bit}, 0 FROM merged m SEMI JOIN alloc_keys USING (alloc_key) WHERE m.e < {inf}
    UNION ALL SELECT p.alloc_key, p.s, 0, p.owner FROM pieces p SEMI JOIN alloc_keys USING (alloc_key)
    UNION ALL SELECT p.alloc_key, p.e, 0, -p.owner FROM pieces p SEMI JOIN alloc_keys USING (alloc_key)),
running AS (
    SELECT t, lead(t) OVER w AS t_next, sum(d) OVER w AS mask, sum(o) OVER w AS owner
    FROM pts WINDOW w AS (PARTITION BY alloc_key ORDER BY t)),
swept AS (
    SELECT CAST(owner AS BIGINT) AS owner, {winner} AS label, t AS s, t_next AS e
    FROM running WHERE t_next > t AND owner <> 0)
SELECT w.owner, w.label, w.s, w.e, c.gpus, NULL::BIGINT AS other
FROM swept w JOIN claim_lines c ON c.seq = w.owner
WHERE w.label IN ({sweep_claims})
UNION ALL
-- double_billed: the parts of the clipped window that earlier lines' pieces own
SELECT c.seq, {double_billed}, greatest(p.s, c.clamped_start), least(p.e, c.clamped_end), c.gpus, p.owner
FROM claim_lines c JOIN pieces p ON p.alloc_key = c.alloc_key AND p.owner <> c.seq AND p.s < c.clamped_end AND p.e > c.clamped_start
UNION ALL
-- unallocated: GPUs billed beyond the grant over the whole window …
SELECT seq, {unallocated}, ps, pe, g_b - gpus, NULL FROM claim_lines WHERE g_b > gpus
UNION ALL
-- … and the granted GPUs outside the holding: the whole window when the two never meet
SELECT seq, {unallocated}, ps, pe, gpus, NULL FROM claim_lines WHERE gpus > 0 AND (clamped_start IS NULL OR clamped_end <= clamped_start)
UNION ALL SELECT seq, {unallocated}, ps, least(pe, clamped_start), gpus, NULL FROM claim_lines WHERE gpus > 0 AND clamped_end > clamped_start AND clamped_start > ps
UNION ALL SELECT seq, {unallocated}, greatest(ps, clamped_end), pe, gpus, NULL FROM claim_lines WHERE gpus > 0 AND clamped_end > clamped_start AND clamped_end < pe;

CREATE OR REPLACE TEMP TABLE claim_stretches AS
-- The raw stretches of one (line, label) may overlap: GPUs billed beyond the grant over the
-- whole window, and the granted GPUs outside the holding. So they are swept, not unioned:
-- at each instant the stretch holds the sum of the GPUs of the raw stretches over it, and
-- neighbours with the same GPUs are merged. Sum of (e - s) × gpus is then the cell's.
WITH pts AS (
    SELECT owner, label, s AS t, CAST(gpus AS BIGINT) AS d FROM claim_raw_stretches WHERE e > s
    UNION ALL SELECT owner, label, e, -CAST(gpus AS BIGINT) FROM claim_raw_stretches WHERE e > s),
steps AS (SELECT owner, label, t, sum(d) AS d FROM pts GROUP BY owner, label, t),
levels AS (
    SELECT owner, label, t AS s, lead(t) OVER w AS e, CAST(sum(d) OVER w AS BIGINT) AS gpus FROM steps
    WINDOW w AS (PARTITION BY owner, label ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)),
flagged AS (
    SELECT *, coalesce(s > lag(e) OVER w OR gpus <> lag(gpus) OVER w, true) AS fresh
    FROM levels WHERE e IS NOT NULL AND gpus > 0 WINDOW w AS (PARTITION BY owner, label ORDER BY s)),
islands AS (SELECT *, sum(CASE WHEN fresh THEN 1 ELSE 0 END) OVER (PARTITION BY owner, label ORDER BY s) AS island
            FROM flagged)
SELECT i.owner, i.label, min(i.s) AS s, max(i.e) AS e, i.gpus, c.tenant, c.aid
FROM islands i JOIN claim_lines c ON c.seq = i.owner
GROUP BY i.owner, i.label, i.gpus, i.island, c.tenant, c.aid;

CREATE OR REPLACE TEMP TABLE claim_bounds AS
SELECT owner, label, tenant, aid, min(s) AS first_s, max(e) AS last_e FROM claim_stretches GROUP BY ALL;

-- claim_activity: what the GPU did over each stalled or idle claim (RULES.md 14), from the
-- tenant's own `job.counters` on the allocation's devices (never the fleet's
-- `device.counters`: a packet carries the tenant's entries alone), as sums that add across
-- claims: the stretch time (span_us), the time some sample of the
-- allocation's devices covers (covered_us: a union), the sample time with an SM figure
-- (sampled_us: device-seconds) and the SM-active-weighted sample time (sm_us).
-- Placeholders: the codes of stalled_fault and idle_unexplained.
CREATE OR REPLACE TEMP TABLE claim_activity AS
WITH alloc_devices AS (
    SELECT DISTINCT a.tenant, a.aid, n.node, d.device
    FROM allocs a, unnest(a.nodes) AS n(node), unnest(coalesce(a.devices, [])) AS d(device)
    WHERE EXISTS (SELECT 1 FROM claim_lines l WHERE l.tenant = a.tenant AND l.aid = a.aid)),
asked AS (
    SELECT owner, label, tenant, aid, s, e FROM claim_stretches
    WHERE label IN ({activity_labels})),
samples AS (  -- a device's window counts once: the first with an SM figure, else the first
    SELECT * FROM counters_ev c
    WHERE EXISTS (SELECT 1 FROM alloc_devices ad
                  WHERE ad.tenant = c.tenant AND ad.node = c.node AND ad.device = c.device)
    QUALIFY row_number() OVER (PARTITION BY tenant, node, device, window_start, window_end
                               ORDER BY sm_active IS NULL, seq) = 1),
pieces AS (
    SELECT k.owner, k.label, greatest(c.window_start, k.s) AS a, least(c.window_end, k.e) AS b,
           CAST(c.sm_active AS DECIMAL(38, 11)) AS sm
    FROM asked k JOIN alloc_devices ad ON ad.tenant = k.tenant AND ad.aid = k.aid
    JOIN samples c ON c.tenant = ad.tenant AND c.node = ad.node AND c.device = ad.device
     AND c.window_start < k.e AND c.window_end > k.s),
ordered AS (
    SELECT *, max(b) OVER (PARTITION BY owner, label ORDER BY a, b
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reached
    FROM pieces),
sums AS (
    SELECT owner, label, count(*) AS samples,
           CAST(sum(greatest(0, b - greatest(a, coalesce(reached, a)))) AS BIGINT) AS covered_us,
           CAST(coalesce(sum(b - a) FILTER (WHERE sm IS NOT NULL), 0) AS BIGINT) AS sampled_us,
           coalesce(sum(sm * (b - a)) FILTER (WHERE sm IS NOT NULL), 0) AS sm_us
    FROM ordered GROUP BY owner, label)
SELECT m.owner, m.label, m.samples, m.covered_us, m.sampled_us, m.sm_us,
       (SELECT CAST(sum(k.e - k.s) AS BIGINT) FROM asked k
        WHERE k.owner = m.owner AND k.label = m.label) AS span_us
FROM sums m;
