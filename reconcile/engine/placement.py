"""Placement as sold (RULES.md 13): each line's placement state, and the share of its
customer-borne amount that is claimed when its allocation was not placed as sold.

The captures are few (one `placement.observed` per node of an allocation, the latest
kept), so each allocation's state is worked out here in Python from its grant and its
captures; the lines' states and shares are then one table, `line_placement`, that the
reconciliation reads beside its cells. The state never changes a category.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Any

import duckdb
import pyarrow as pa

AS_SOLD, NOT_AS_SOLD, UNOBSERVED = "as_sold", "not_as_sold", "unobserved"
PLACEMENT_STATES = (AS_SOLD, NOT_AS_SOLD, UNOBSERVED)
#: placement_credit_share when the terms in force give none (RULES.md 13)
DEFAULT_SHARE = Fraction(1)
_NVLINK = re.compile(r"NV\d+")

#: the grants with a capture (the others are unobserved)
GRANTS = """
SELECT tenant, aid, g_a, devices, coalesce(placement_class, 'whole') FROM allocs
WHERE (tenant, aid) IN (SELECT tenant, data->>'allocation_id' FROM evidence
                        WHERE type = 'placement.observed')
"""

#: the latest capture of each node of (tenant, allocation), whatever its time
CAPTURES = """
SELECT tenant, data->>'allocation_id' AS aid, CAST(data->'topology' AS VARCHAR) FROM evidence
WHERE type = 'placement.observed' AND data->>'allocation_id' IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY tenant, data->>'allocation_id', data->>'node'
                           ORDER BY t DESC, seq DESC) = 1
"""

#: each line after corrections: its allocation's state (unobserved when it names none
#: granted to its tenant) and, when not_as_sold, placement_credit_share of the terms in
#: force at its period_start as text (a terms event without one: NULL, the default).
#: One row a (tenant, invoice, line) key, as the reconciliation reads a line: of lines
#: sent under one key and not corrected, the latest in ledger order, so that the table
#: is the same whatever the order DuckDB's threads (or a cluster's partitions) give.
LINES = """
CREATE OR REPLACE TABLE line_placement AS
WITH shares AS (
    SELECT tenant, t, placement_credit_share AS share FROM ev_rest WHERE type = 'policy.terms'
    QUALIFY row_number() OVER (PARTITION BY tenant, t ORDER BY seq DESC) = 1),
placed AS (
    SELECT l.seq, l.tenant, l.invoice_id, l.line_id, l.ps,
           coalesce(ap.state, 'unobserved') AS state
    FROM lines l LEFT JOIN allocation_placement ap ON ap.tenant = l.tenant AND ap.aid = l.aid),
shared AS (
    SELECT p.seq, p.tenant, p.invoice_id, p.line_id, p.state,
           CASE WHEN p.state = 'not_as_sold' THEN sh.share END AS share
    FROM placed p ASOF LEFT JOIN shares sh ON sh.tenant = p.tenant AND p.ps >= sh.t)
SELECT tenant, invoice_id, line_id, state, share FROM shared
QUALIFY row_number() OVER (PARTITION BY tenant, invoice_id, line_id ORDER BY seq DESC) = 1
"""


def capture_gpus(topology: dict[str, Any], devices: list[str] | None) -> set[str]:
    """A capture's GPUs of an allocation: those its devices name (`3` or `GPU3`; a MIG
    instance `<gpu>/<gi>` names its GPU) when all are in the capture, else all of them."""
    names = {str(gpu.get("name")) for gpu in topology.get("gpus") or ()}
    wanted = {
        d if d.startswith("GPU") else f"GPU{d}"
        for d in (str(x).split("/", 1)[0] for x in devices or ())
    }
    return wanted if wanted and wanted <= names else names


def allocation_state(
    g_a: int | None, devices: list[str] | None, cls: str, captures: list[dict[str, Any]]
) -> str:
    """RULES.md 13: as_sold, not_as_sold or unobserved, from the grant and its captures."""
    if not captures:
        return UNOBSERVED
    if cls != "whole" or g_a == 1:
        return AS_SOLD
    seen, slow = 0, False
    for topology in captures:
        mine = capture_gpus(topology, devices)
        seen += len(mine)
        slow = slow or any(
            {str(link.get("a")), str(link.get("b"))} <= mine
            and not _NVLINK.fullmatch(str(link.get("link")))
            for link in topology.get("links") or ()
        )
    if g_a is None or seen > g_a:
        return UNOBSERVED
    return NOT_AS_SOLD if seen < g_a or slow else AS_SOLD


def share_of(text: str | None) -> Fraction:
    """placement_credit_share as a fraction in [0, 1]; the default when absent or unreadable."""
    if text is None:
        return DEFAULT_SHARE
    try:
        share = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return DEFAULT_SHARE
    return share if 0 <= share <= 1 else DEFAULT_SHARE


def build_placement(con: duckdb.DuckDBPyConnection) -> None:
    """Make `allocation_placement` (tenant, aid, state) and `line_placement` (tenant,
    invoice_id, line_id, state, share): each line's placement state and, for a
    not_as_sold line, its placement_credit_share as given (`share_of` reads it)."""
    captures: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for tenant, aid, topology in con.execute(CAPTURES).fetchall():
        parsed = json.loads(topology) if topology else None
        if isinstance(parsed, dict):
            captures.setdefault((tenant, aid), []).append(parsed)
    states = [
        (tenant, aid, allocation_state(g_a, devices, cls, captures.get((tenant, aid), [])))
        for tenant, aid, g_a, devices, cls in con.execute(GRANTS).fetchall()
    ]
    page = pa.table(
        {
            "tenant": pa.array([r[0] for r in states], pa.string()),
            "aid": pa.array([r[1] for r in states], pa.string()),
            "state": pa.array([r[2] for r in states], pa.string()),
        }
    )
    con.register("allocation_placement_page", page)
    con.execute(
        "CREATE OR REPLACE TABLE allocation_placement AS SELECT * FROM allocation_placement_page"
    )
    con.unregister("allocation_placement_page")
    con.execute(LINES)
