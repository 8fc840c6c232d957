"""The reconciliation cut into partitions by tenant, and put back together exactly.

A tenant's figures rest on its own events and the fleet's (events with no tenant) and on
nothing else (RULES.md: a tenant's horizon is its own latest event; an invoice is one
tenant's; a line, an allocation and a job belong to one tenant). So the ledger splits
into partitions, each a set of tenants with the fleet's events, and each partition is
reconciled on its own by the same engine (`Pipeline.of_store`, the slice read straight
from the store: its sealed pages, then its rows).

The global pass is the merge: what crosses tenants is only the order of the cells (the
ledger's, by each line's seq) and the tenants' unbilled time (one figure a tenant). The
cells come back with their line's seq (`KEYED_CELLS`) and are put in ledger order, so
the merged `Reconciliation` is, column for column, the one a single process makes, and
everything written from it is byte for byte the same.

Every partition reads the same snapshot: the head seq is read once (`plan`) and each
partition reads only the entries up to it, so entries appended meanwhile are in none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import text

from ledger import Store
from reconcile.engine.pipeline import KEYED_CELLS, PLACED, UNBILLED, Pipeline
from reconcile.engine.result import Reconciliation


@dataclass(frozen=True)
class Partition:
    """Tenants reconciled together (with the fleet's events), and how many entries they
    have (what the plan balances)."""

    tenants: tuple[str, ...]
    entries: int


@dataclass(frozen=True)
class Plan:
    """The partitions of one reconciliation, all read up to `upto_seq` (one snapshot)."""

    partitions: tuple[Partition, ...]
    upto_seq: int
    fleet_entries: int  # the fleet's events, read by every partition


@dataclass(frozen=True)
class PartialResult:
    """One partition's reconciliation: its cells with their line's seq, its tenants'
    unbilled GPU-µs, its lines' placement states."""

    cells: pa.Table
    unbilled_us: dict[str, int]
    placement: pa.Table


#: PLACED's order (its rows are one a key, so the order is total; nulls last, as DuckDB's).
PLACED_ORDER = [(name, "ascending") for name in ("tenant", "invoice_id", "line_id")]


def plan(
    store: Store,
    parts: int,
    tenant: str | None = None,
    upto_seq: int | None = None,
) -> Plan:
    """At most `parts` partitions of the store's tenants (only `tenant`, when given),
    balanced by entry count: the largest tenant first, each to the lightest partition."""
    with store.reading() as conn:
        head = conn.execute(text("SELECT coalesce(max(seq), 0) FROM entries")).scalar_one()
        upto = int(head) if upto_seq is None else min(int(head), upto_seq)
        if upto == int(head):
            rows = conn.execute(text(_TENANT_HEADS)).all()
        else:  # an earlier snapshot: counted row by row
            rows = conn.execute(
                text("SELECT tenant, count(*) FROM entries WHERE seq <= :upto GROUP BY tenant"),
                {"upto": upto},
            ).all()
    counts = {str(t): int(n) for t, n in rows if t is not None}
    fleet = sum(int(n) for t, n in rows if t is None)
    if tenant is not None:
        counts = {tenant: counts.get(tenant, 0)}
    return Plan(balanced(counts, parts), upto, fleet)


#: Each tenant's entries at the head, from the (tenant, tenant_seq) index alone: a tenant's
#: entries are numbered 1, 2, ... (ledger/append.py), so its count is its last number;
#: the tenants found one index probe each (a loose index scan), not by reading millions
#: of rows (0.26 s of a 3.1M-entry SQLite store's cluster run, before any task started).
#: The fleet's entries (no tenant) are counted: they are few, and the index holds them.
_TENANT_HEADS = """
WITH RECURSIVE tenants(name) AS (
    SELECT min(tenant) FROM entries
    UNION ALL
    SELECT (SELECT min(tenant) FROM entries WHERE tenant > tenants.name) FROM tenants
    WHERE tenants.name IS NOT NULL)
SELECT name, (SELECT max(tenant_seq) FROM entries WHERE tenant = tenants.name)
FROM tenants WHERE name IS NOT NULL
UNION ALL
SELECT NULL, count(*) FROM entries WHERE tenant IS NULL
"""


def balanced(counts: dict[str, int], parts: int) -> tuple[Partition, ...]:
    """Tenants in at most `parts` groups of about equal entries (longest first, each to the
    group with the fewest so far; ties by name, so a plan is the same every time). No
    tenant at all still makes one partition: the fleet's events alone."""
    if not counts:
        return (Partition((), 0),)
    groups: list[tuple[list[str], int]] = [([], 0) for _ in range(max(1, min(parts, len(counts))))]
    for name, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        index = min(range(len(groups)), key=lambda i: (groups[i][1], i))
        names, total = groups[index]
        groups[index] = ([*names, name], total + count)
    return tuple(Partition(tuple(sorted(names)), total) for names, total in groups)


def reconcile_partition(
    url: str,
    tenants: Sequence[str],
    upto_seq: int,
    threads: int | None = None,
    invoice: str | None = None,
) -> PartialResult:
    """Reconcile one partition, reading its slice of the store at `url` up to `upto_seq`.
    A plain function: the cluster runs it as a Ray task (reconcile/engine/cluster.py), and so can
    anything else."""
    store = Store(url)
    try:
        with Pipeline.of_store(store, tuple(tenants), threads, upto_seq) as pipe:
            con = pipe.need("money")
            unbilled = {str(t): int(us) for t, us in con.execute(UNBILLED).fetchall()}
            cells = con.sql(KEYED_CELLS, params={"invoice": invoice}).to_arrow_table()
            placed = pipe.need("placement").sql(PLACED, params={"invoice": invoice})
            return PartialResult(cells, unbilled, placed.to_arrow_table())
    finally:
        store.close()


def merge(parts: Iterable[PartialResult], invoice: str | None = None) -> Reconciliation:
    """The partitions' results as one reconciliation, exactly the single process's: cells
    in ledger order (line seq, then label, as `CELLS` orders them), each tenant's unbilled
    time (with `invoice`: of the tenants that invoice's lines are of)."""
    results = list(parts)
    cells = pa.concat_tables([part.cells for part in results])
    order = pc.sort_indices(cells, sort_keys=[("line_seq", "ascending"), ("label", "ascending")])
    table = cells.take(order).drop_columns(["line_seq"]).combine_chunks()
    unbilled: dict[str, int] = {}
    for part in results:
        unbilled.update(part.unbilled_us)
    if invoice is not None:
        tenants = set(table.column("tenant").to_pylist())
        unbilled = {t: us for t, us in unbilled.items() if t in tenants}
    placement = pa.concat_tables([part.placement for part in results])
    placement = placement.take(pc.sort_indices(placement, sort_keys=PLACED_ORDER))
    placement = placement.combine_chunks()
    return Reconciliation(table, unbilled, placement)


def reconcile_partitioned(
    store: Store,
    parts: int,
    tenant: str | None = None,
    invoice: str | None = None,
    threads: int | None = None,
) -> Reconciliation:
    """The partitioned reconciliation run here, one partition after another: what the
    cluster does, without one (and what its tests compare with)."""
    layout = plan(store, parts, tenant)
    return merge(
        (
            reconcile_partition(store.url, p.tenants, layout.upto_seq, threads, invoice)
            for p in layout.partitions
        ),
        invoice,
    )
