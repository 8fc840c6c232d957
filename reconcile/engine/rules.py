"""RULES.md's tables and predicates, written once: the label table, which fault touches
which allocation, and when a fault is open. The engine, the dispute and the packets all
take them from here, as Python values or as SQL fragments rendered from the same words.

**The label table.** Every billed GPU-second gets one label: a category with its bearer
(and, for productive time, the job's acceptance). `LABELS` lists them in RULES.md's
category order, and everything else is read from that order:

- a label's `code` (the integer the engine's tables carry) is its place in the table;
- the order is the rounding's tie order and the order categories are reported in;
- a `SPAN` label is a labelled span on an allocation's timeline; the sweep keeps the open
  ones as a bit mask (bit = code) and the lowest set bit wins, so the table's order is
  RULES.md's priority order too;
- the `IDLE` label is what the sweep gives where no span is open (rule 9);
- a `LINE` label is given per billing line, outside the sweep (unallocated, double
  billing, money-only lines).

**Touches** (RULES.md §Categories 7): a fault touches an allocation by fabric domain; or by
node, when it names no device, the allocation lists none (`devices: []` is none given,
docs/events.md), or the device is the allocation's; or, naming no node, by device alone. A
device is the allocation's when it is one of its devices or the whole GPU one of its MIG instances
(`<gpu>/<instance>`, as dcgm names them) is carved from. Devices compare as text.

**Fault windows**: a `health.fault` is open from its time to the first `health.cleared`
after it (time, then ledger order) with the same node, device, fabric_domain and code,
else forever (`INF`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import duckdb

INF: Final = 2**62  # +∞ on the engine's integer µs timeline
SECOND: Final = 1_000_000
FAULT_LOOKBACK_US: Final = (
    300 * SECOND
)  # a critical fault this close before a failure makes it the provider's
CRITICAL: Final = "critical"

SPAN: Final = "span"
IDLE: Final = "idle"
LINE: Final = "line"


@dataclass(frozen=True)
class Label:
    code: int  # its place in LABELS: priority, bit, tie order and the engine's integer, at once
    category: str
    bearer: str  # who bears it; the restart categories have one label per bearer (rule: by cause)
    way: str  # SPAN, IDLE or LINE: how the engine gives it
    acceptance: str | None = None

    @property
    def name(self) -> str:
        """`stalled_fault`, `restart_lost.provider`, `productive.accepted`: unique in the table."""
        qualifier = self.acceptance or (
            self.bearer if self.category.startswith("restart_") else None
        )
        return f"{self.category}.{qualifier}" if qualifier else self.category

    @property
    def bit(self) -> int:
        if self.way != SPAN:
            raise ValueError(
                f"{self.name} is given per line or where no span is open: it has no bit"
            )
        return 1 << self.code


_ROWS: tuple[tuple[str, str, str, str | None], ...] = (
    ("unallocated", "provider", LINE, None),
    ("double_billed", "provider", LINE, None),
    ("reclaimed", "provider", SPAN, None),
    ("checkpoint", "customer", SPAN, None),
    ("restart_lost", "provider", SPAN, None),
    ("restart_lost", "customer", SPAN, None),
    ("restart_recovery", "provider", SPAN, None),
    ("restart_recovery", "customer", SPAN, None),
    ("productive", "customer", SPAN, "accepted"),
    ("productive", "customer", SPAN, "rejected"),
    ("productive", "customer", SPAN, "pending"),
    ("stalled_fault", "provider", SPAN, None),
    ("startup", "customer", SPAN, None),
    ("idle_reserved", "customer", IDLE, None),
    ("idle_unexplained", "disputed", SPAN, None),
    ("money_only", "customer", LINE, None),
)

#: Every label, in RULES.md's category order (unallocated, rules 1-10, money_only).
LABELS: tuple[Label, ...] = tuple(Label(code, *row) for code, row in enumerate(_ROWS))
LABEL_BY_CODE: Mapping[int, Label] = {label.code: label for label in LABELS}
_BY_NAME: Mapping[str, Label] = {label.name: label for label in LABELS}
#: The categories in that order (a category with two labels sits where its first does).
CATEGORY_ORDER: tuple[str, ...] = tuple(dict.fromkeys(label.category for label in LABELS))
SPAN_LABELS: tuple[Label, ...] = tuple(label for label in LABELS if label.way == SPAN)
(IDLE_LABEL,) = (label for label in LABELS if label.way == IDLE)
BEARERS: tuple[str, ...] = ("provider", "customer", "disputed")
ACCEPTANCE: tuple[str, ...] = tuple(label.acceptance for label in LABELS if label.acceptance)


def label(name: str) -> Label:
    """The label called `name` (see `Label.name`); KeyError names the ones there are."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no label {name!r}; labels: {', '.join(_BY_NAME)}") from None


def code(name: str) -> int:
    """The engine's integer for the label called `name`, for SQL."""
    return label(name).code


def codes_sql(labels: Iterable[Label]) -> str:
    """`2, 11, 14`: labels' codes for an SQL `IN (…)`."""
    return ", ".join(str(one.code) for one in labels)


def bit_sql(code_column: str) -> str:
    """SQL: the bit of a span label held in `code_column`."""
    return f"(CAST(1 AS BIGINT) << {code_column})"


def winner_sql(mask: str) -> str:
    """SQL: the label of a moment whose open span labels are the bits of `mask`: the first
    in priority order, else the idle label."""
    whens = " ".join(f"WHEN {mask} & {one.bit} <> 0 THEN {one.code}" for one in SPAN_LABELS)
    return f"CASE {whens} ELSE {IDLE_LABEL.code} END"


def by_bearer_sql(category: str, provider: str) -> str:
    """SQL: the label of a restart `category`, the provider's when the boolean `provider` holds."""
    return (
        f"CASE WHEN {provider} THEN {code(category + '.provider')} ELSE "
        f"{code(category + '.customer')} END"
    )


def by_acceptance_sql(state: str) -> str:
    """SQL: the productive label of a job whose acceptance is `state` (NULL: pending)."""
    productive = [one for one in LABELS if one.acceptance]
    whens = " ".join(f"WHEN '{one.acceptance}' THEN {one.code}" for one in productive)
    return f"CASE coalesce({state}, '{productive[-1].acceptance}') {whens} END"


# -- touches and fault windows ------------------------------------------------------


def device_held_sql(device: str, devices: str) -> str:
    """SQL: `device` is one of `devices`, or the whole GPU one of them (a MIG instance
    `<gpu>/<instance>`) is carved from."""
    return (
        f"(list_contains({devices}, {device}) "
        f"OR list_contains(list_transform({devices}, lambda held: split_part(held, '/', "
        f"1)), {device}))"
    )


def holds_sql(device: str, devices: str) -> str:
    """SQL: a grant listing `devices` on a node holds that node's `device`: every device
    when it lists none (absent or empty: none given, docs/events.md), else those listed
    (`device_held_sql`)."""
    return f"(coalesce(len({devices}), 0) = 0 OR {device_held_sql(device, devices)})"


def touches_sql(fault: str, alloc: str) -> str:
    """SQL: the fault (or clearing) row `fault` touches the allocation row `alloc`
    (columns node, device, fabric_domain; nodes, devices, fabric_domain). The
    allocation's `nodes` are its grant's `nodes` and its `node` (RULES.md 11):
    `nodes_sql` makes them."""
    held = device_held_sql(f"{fault}.device", f"{alloc}.devices")
    return (
        f"coalesce(({fault}.fabric_domain IS NOT NULL AND {fault}.fabric_domain = "
        f"{alloc}.fabric_domain)"
        f" OR (list_contains({alloc}.nodes, {fault}.node) AND ({fault}.device IS NULL"
        f" OR {holds_sql(f'{fault}.device', f'{alloc}.devices')}))"
        f" OR ({fault}.node IS NULL AND {fault}.device IS NOT NULL AND {held}), false)"
    )


def nodes_sql(nodes: str, node: str) -> str:
    """SQL: an allocation's nodes (RULES.md 11), its grant's `nodes` list and its `node`."""
    return (
        f"list_distinct(list_concat(coalesce({nodes}, []), "
        f"CASE WHEN {node} IS NULL THEN [] ELSE [{node}] END))"
    )


def touching_sql(allocs: str, faults: str, columns: str) -> str:
    """SQL: `columns` of every (allocation `a`, fault `f`) pair where the fault touches
    the allocation. Each branch joins on one way of touching, so no branch pairs every
    allocation with every fault; each keeps only the pairs `touches_sql` accepts."""
    touches = touches_sql("f", "a")
    return f"""
SELECT {columns} FROM {allocs} a JOIN {faults} f ON f.fabric_domain = a.fabric_domain
    WHERE {touches}
UNION
SELECT {columns} FROM (SELECT *, unnest(nodes) AS one_node FROM {allocs}) a
JOIN {faults} f ON f.node = a.one_node WHERE {touches}
UNION
SELECT {columns} FROM {allocs} a, {faults} f WHERE f.node IS NULL AND {touches}"""


def fault_windows_sql(events: str, critical_only: bool) -> str:
    """SQL: each `health.fault` of `events` (columns type, t, seq, node, device,
    fabric_domain, code, severity) with its window [open_t, close_t) and the seq of the
    `health.cleared` that closes it (NULL, and close_t INF, while it is open)."""
    critical = f"AND f.severity = '{CRITICAL}'" if critical_only else ""
    return f"""
SELECT f.seq, f.node, f.device, f.fabric_domain, f.code, f.severity, f.t AS open_t,
       coalesce(min(c.t), {INF}) AS close_t, arg_min(c.seq, (c.t, c.seq)) AS close_seq
FROM {events} f LEFT JOIN {events} c
  ON c.type = 'health.cleared' AND c.code = f.code
 AND c.node IS NOT DISTINCT FROM f.node AND c.device IS NOT DISTINCT FROM f.device
 AND c.fabric_domain IS NOT DISTINCT FROM f.fabric_domain
 AND (c.t > f.t OR (c.t = f.t AND c.seq > f.seq))
WHERE f.type = 'health.fault' {critical}
GROUP BY f.seq, f.node, f.device, f.fabric_domain, f.code, f.severity, f.t"""


def touching_health(
    grants: Sequence[Mapping[str, Any]], health: Sequence[tuple[int, Mapping[str, Any]]]
) -> list[int]:
    """The seqs of the health events (seq, event data) that touch one of the allocations
    `grants` (allocation.granted data), by `touches_sql` itself: the dispute chooses its
    fleet entries by the rule the engine classifies with."""
    if not grants or not health:
        return []
    con = duckdb.connect()
    try:
        con.execute(
            "CREATE TABLE allocs (nodes VARCHAR[], devices VARCHAR[], fabric_domain VARCHAR)"
        )
        con.execute(
            "CREATE TABLE faults (seq BIGINT, node VARCHAR, device VARCHAR, fabric_domain VARCHAR)"
        )
        con.executemany(
            "INSERT INTO allocs VALUES (?, ?, ?)",
            [(_nodes(g), _texts(g.get("devices")), _text(g.get("fabric_domain"))) for g in grants],
        )
        con.executemany(
            "INSERT INTO faults VALUES (?, ?, ?, ?)",
            [
                (seq, _text(d.get("node")), _text(d.get("device")), _text(d.get("fabric_domain")))
                for seq, d in health
            ],
        )
        rows = con.execute(
            f"SELECT DISTINCT seq FROM ({touching_sql('allocs', 'faults', 'f.seq')}) ORDER BY seq"
        )
        return [int(seq) for (seq,) in rows.fetchall()]
    finally:
        con.close()


def _nodes(grant: Mapping[str, Any]) -> list[str]:
    """RULES.md 11: a grant's nodes, its `nodes` and its `node`."""
    every = [str(n) for n in grant.get("nodes") or ()]
    node = grant.get("node")
    return every + ([str(node)] if node is not None and str(node) not in every else [])


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _texts(values: Any) -> list[str] | None:
    return None if values is None else [str(v) for v in values]
