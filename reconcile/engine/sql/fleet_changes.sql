-- fleet_changes: each fleet.change overlapping [$since, $until), and its three windows
-- (before, during, after) in fleet_change_windows (reconcile/reports/fleet_changes.py).
CREATE OR REPLACE TEMP TABLE fleet_changes AS
WITH latest AS (SELECT greatest((SELECT max(t) FROM ev_rest), (SELECT max(h) FROM horizons)) AS h),
first_ AS (
    SELECT change_id, change_kind AS kind, nodes, started_at, seq FROM ev_rest WHERE type = 'fleet.change'
    QUALIFY row_number() OVER (PARTITION BY change_id ORDER BY t, seq) = 1),
closed AS (SELECT change_id, max(ended_at) AS ended_at FROM ev_rest WHERE type = 'fleet.change' GROUP BY change_id)
SELECT f.change_id, f.kind, f.nodes, f.started_at, c.ended_at,
       coalesce(c.ended_at, greatest(l.h, f.started_at)) AS window_end
FROM first_ f JOIN closed c USING (change_id), latest l
WHERE f.started_at < $until AND coalesce(c.ended_at, greatest(l.h, f.started_at)) >= $since;

CREATE OR REPLACE TEMP TABLE fleet_change_windows AS
SELECT change_id, 'before' AS phase, started_at - (window_end - started_at) AS lo, started_at AS hi FROM fleet_changes
UNION ALL SELECT change_id, 'during', started_at, window_end FROM fleet_changes
UNION ALL SELECT change_id, 'after', window_end, window_end + (window_end - started_at) FROM fleet_changes
WHERE ended_at IS NOT NULL
