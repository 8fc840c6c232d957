"""Verifying ranges of entries in parallel processes: the fast pass of `verify`.

The ledger [1, n] is cut into ranges of seq; each is checked in a process of its own,
reading the store through its own connection, with nothing of the other ranges but what
is stored just before it:
- the chain starts from the stored chain hash of seq first-1, which the range before
  checks as its last link (so every link is checked by exactly one range);
- the tree starts from the stored frontier at size first-1 (stored nodes and leaf
  hashes), each of which the range that completed it checked against its own hashing;
- a tenant's first entry in the range cannot be checked there: the range hands on its
  tenant_seq and tenant_prev, and the parent checks them against that tenant's last
  entry in the ranges before (the stitch);
- at each checkpoint size the range hands on its chain, its frontier and the tenants'
  heads it moved, and the parent checks the checkpoint with the heads of the ranges
  before added (ledger/verify.py's own checkpoint and fork checks).

A range reports only whether it is clean, never what is wrong: the first time anything
is amiss (in a range, at a stitch, at a checkpoint), ledger/verify.py walks the ledger
from seq 1 in one process, as it always has, and that walk names the first broken seq.
So the parallel pass decides only how fast a clean ledger is passed.
"""

from __future__ import annotations

import bisect
import gc
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection

from ledger.arrow_entries import (
    COLUMNS,
    NotReadable,
    entry_batches,
    in_worker,
    leaf_hashes,
    packed,
    plain,
)
from ledger.digests import pairs
from ledger.hashing import CHAIN_PREFIX, ZERO_HASH, entry_leaf
from ledger.merkle import Frontier
from ledger.sealed import PageComparer
from ledger.store import Store
from ledger.tree import TreeReader

PAGE = 20_000
#: Tree nodes a range compares with the stored ones at a time (one query): a range of n
#: entries completes about n/16 stored nodes (ledger/merkle.py's STORED_MIN_LEVEL).
NODES_AT_ONCE = 65_536
#: What the walk selects. SQLite keeps a value's storage class beside it, and a TEXT
#: column can hold a BLOB (a BLOB column TEXT); verify checks the bytes, so each column is
#: read as its own type, exactly as the fast pass's reader sees it (ledger/arrow_entries.py),
#: and the event as its UTF-8 bytes, with no decode to str and encode back (a fifth of
#: the cost of reading a row here).
_SELECTED = {
    "sqlite": (
        "seq, CAST(recorded_at AS TEXT), CAST(source AS TEXT), CAST(id AS TEXT), "
        "CAST(type AS TEXT), CAST(tenant AS TEXT), tenant_seq, CAST(event AS BLOB), "
        "CAST(salt AS BLOB), CAST(leaf_hash AS BLOB), "
        "CAST(chain_hash AS BLOB), CAST(tenant_prev AS BLOB)"
    ),
    "postgresql": (
        "seq, recorded_at, source, id, type, tenant, tenant_seq, "
        "convert_to(event, 'UTF8'), salt, leaf_hash, chain_hash, tenant_prev"
    ),
}

TenantHeads = dict[str, tuple[int, bytes]]
T = TypeVar("T")


def verify_pages(
    conn: Connection, after: int = 0, through: int | None = None
) -> Iterator[list[tuple]]:  # type: ignore[type-arg]
    """Entries with after < seq (≤ through), in seq order, a page at a time, as the
    driver's own tuples (event and hashes as bytes): all that verify reads of them
    (bench/verify.py times this read alone)."""
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    columns = _SELECTED[conn.dialect.name]
    bound = "" if through is None else f" AND seq <= {int(through)}"
    statement = (
        f"SELECT {columns} FROM entries WHERE seq > {mark}{bound} ORDER BY seq LIMIT {PAGE}"
    )
    last = after
    while True:
        rows = _driver_rows(conn, statement, (last,))
        if not rows:
            return
        yield rows
        last = rows[-1][0]


@dataclass(frozen=True)
class RangeTask:
    """Entries first..last of the store at `url`; `batch_heads` and `sizes` (checkpoint
    sizes) are those that fall in the range."""

    url: str
    first: int
    last: int
    batch_heads: dict[int, bytes]
    sizes: frozenset[int]


@dataclass
class AtSize:
    """The range's state just after the entry at a checkpoint's size."""

    size: int
    chain: bytes
    frontier: list[bytes]
    heads: TenantHeads  # the heads this range moved, up to this size


@dataclass
class RangeSummary:
    first: int
    last: int
    clean: bool = False
    #: Each tenant's first entry in the range, as (tenant_seq, tenant_prev): for the stitch.
    openings: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    heads: TenantHeads = field(default_factory=dict)
    at_sizes: list[AtSize] = field(default_factory=list)
    chain: bytes = ZERO_HASH
    frontier: list[bytes] = field(default_factory=list)
    nodes: int = 0


#: A verify worker's stores, by URL, kept with their pooled connections for its next
#: range (a connection and an engine cost a PostgreSQL range several ms); None elsewhere.
_STORES: dict[str, Store] | None = None


#: The verifying process's store, set while it forks its range processes: each reuses its
#: engine, whose dialect is already set up (on PostgreSQL, several queries at the first
#: connection), with a pool of its own.
forked_from: Store | None = None


def worker_started() -> None:
    """Run first in each of verify's range processes (the pool's initializer): keep the
    stores and the ADBC connections from one range to the next."""
    global _STORES
    _STORES = {}
    if forked_from is not None:
        # SQLAlchemy's way after a fork: the parent's pooled connections are left to the
        # parent, unclosed, and this process opens its own
        forked_from.engine.dispose(close=False)
        _STORES[forked_from.url] = forked_from
    in_worker()


def check_range(task: RangeTask) -> RangeSummary:
    """Checks 1 to 5 of ledger/verify.py over one range, in a process of its own."""
    if _STORES is None:
        store = Store(task.url)
        try:
            with store.reading() as conn:
                return _check_range(conn, task)
        finally:
            store.close()
    if task.url not in _STORES:
        _STORES[task.url] = Store(task.url)
    with _STORES[task.url].reading() as conn:
        return _check_range(conn, task)


def _check_range(conn: Connection, task: RangeTask) -> RangeSummary:
    summary = RangeSummary(task.first, task.last)
    start = task.first - 1
    chain = _stored_chain(conn, start)
    if chain is None:
        return summary
    try:
        frontier = TreeReader(conn).frontier(start)
    except LookupError:
        return summary
    seq = start
    heads = sorted(task.batch_heads.items())
    pages = PageComparer(conn, task.first, task.last)
    try:
        for batch in entry_batches(task.url, task.first, task.last):
            if not pages.agrees(batch):
                return summary
            for part in _cut_at_sizes(batch, task.sizes):
                ended = _check_batch(task, summary, frontier, part, seq, chain, heads)
                if ended is None:
                    return summary
                seq, chain = ended
            if len(frontier.completed) >= NODES_AT_ONCE and not _nodes_match(
                conn, frontier, summary
            ):
                return summary
    except NotReadable:
        return summary
    if not _nodes_match(conn, frontier, summary):
        return summary
    summary.clean = seq == task.last
    summary.chain, summary.frontier = chain, frontier.hashes
    return summary


def _cut_at_sizes(batch: pa.RecordBatch, sizes: frozenset[int]) -> Iterator[pa.RecordBatch]:
    """The batch in parts, each ending at a checkpoint's size or at the batch's end: the
    state at each size is handed on as it stood there."""
    ends: list[int] = (
        (np.flatnonzero(np.isin(batch.column("seq").to_numpy(), list(sizes))) + 1).tolist()
        if sizes
        else []
    )
    start = 0
    for end in [*ends, batch.num_rows]:
        if end > start:
            yield batch.slice(start, end - start)
        start = end


def _check_batch(
    task: RangeTask,
    summary: RangeSummary,
    frontier: Frontier,
    batch: pa.RecordBatch,
    seq: int,
    chain: bytes,
    batch_heads: list[tuple[int, bytes]],
) -> tuple[int, bytes] | None:
    """_check_rows for a batch read as Arrow: seq continuity and the stored leaf and chain
    hashes compared for the whole batch at once, the tenant links column-wise; a batch
    whose bytes cannot be built column-wise goes through _check_rows itself."""
    numbers = batch.column("seq").to_numpy()
    if numbers[0] != seq + 1 or not (np.diff(numbers) == 1).all():
        return None
    if not plain(batch):
        return _check_rows(
            task,
            summary,
            frontier,
            list(zip(*(batch.column(n).to_pylist() for n in COLUMNS), strict=True)),
            seq,
            chain,
        )
    joined = leaf_hashes(batch)
    stored = batch.column("chain_hash")
    stored_chains = packed(stored, 32)
    if joined != packed(batch.column("leaf_hash"), 32) or stored_chains is None:
        return None
    # Each stored link is checked against the stored link before it (the first against
    # `chain`, which the range before checked): link by link, that is the chain recomputed.
    if pairs(CHAIN_PREFIX, chain + stored_chains[:-32], joined) != stored_chains:
        return None
    chain = stored[len(stored) - 1].as_py()
    first, last = seq + 1, int(numbers[-1])
    at = bisect.bisect_left(batch_heads, (first, b""))
    while at < len(batch_heads) and batch_heads[at][0] <= last:
        if stored[batch_heads[at][0] - first].as_py() != batch_heads[at][1]:
            return None
        at += 1
    if not _tenants_follow(summary, batch, joined):
        return None
    frontier.extend_packed(joined)
    if last in task.sizes:
        summary.at_sizes.append(AtSize(last, chain, list(frontier.hashes), dict(summary.heads)))
    return last, chain


def _tenants_follow(summary: RangeSummary, batch: pa.RecordBatch, leaves: bytes) -> bool:
    """The tenant links of a batch, column-wise: an entry without a tenant has no
    tenant_seq and no tenant_prev; within the batch each tenant's entries number on by one
    and each names the leaf of the one before; each tenant's first entry follows its head
    so far in the range (or opens the tenant, for the stitch)."""
    absent = batch.column("tenant").is_null()
    for name in ("tenant_seq", "tenant_prev"):
        if not pc.all(pc.equal(absent, batch.column(name).is_null())).as_py():
            return False
    present = pc.invert(absent)
    rows = np.flatnonzero(present.to_numpy(zero_copy_only=False))
    if not len(rows):
        return True
    encoded = pc.dictionary_encode(batch.column("tenant").filter(present))
    prev = packed(batch.column("tenant_prev").filter(present), 32)
    if prev is None:
        return False
    order = np.argsort(encoded.indices.to_numpy(), kind="stable")
    codes = encoded.indices.to_numpy()[order]
    numbers = batch.column("tenant_seq").filter(present).to_numpy()[order]
    prevs = np.frombuffer(prev, dtype=np.uint8).reshape(-1, 32)[order]
    own = np.frombuffer(leaves, dtype=np.uint8).reshape(-1, 32)[rows][order]
    same = codes[1:] == codes[:-1]
    if (
        not ((numbers[1:] == numbers[:-1] + 1) | ~same).all()
        or not ((prevs[1:] == own[:-1]).all(axis=1) | ~same).all()
    ):
        return False
    names = encoded.dictionary.to_pylist()
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    for start, end in zip(starts, [*(starts[1:] - 1), len(codes) - 1], strict=True):
        tenant, opening = names[codes[start]], (int(numbers[start]), prevs[start].tobytes())
        head = summary.heads.get(tenant)
        if head is None:
            summary.openings[tenant] = opening
        elif opening != (head[0] + 1, head[1]):
            return False
        summary.heads[tenant] = (int(numbers[end]), own[end].tobytes())
    return True


def _driver_rows(
    conn: Connection, statement: str, params: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """The rows of `statement` as the driver's own tuples (SQLAlchemy's rows cost more
    than verify's checks of them)."""
    raw: Any = conn.connection.dbapi_connection
    cursor = raw.cursor()
    try:
        cursor.execute(statement, params)
        return cursor.fetchall()  # type: ignore[no-any-return]
    finally:
        cursor.close()


def _stored_chain(conn: Connection, seq: int) -> bytes | None:
    if seq == 0:
        return ZERO_HASH
    rows = _driver_rows(conn, f"SELECT chain_hash FROM entries WHERE seq = {int(seq)}")
    return None if not rows or rows[0][0] is None else bytes(rows[0][0])


def _nodes_match(conn: Connection, frontier: Frontier, summary: RangeSummary) -> bool:
    """The stored tree nodes completed since the last call are the ones hashed here: read
    as one run of idx a level (the nodes a range completes at a level follow one
    another), in one query through the driver's own cursor."""
    completed = sorted(frontier.completed)
    frontier.completed.clear()  # memory stays at about NODES_AT_ONCE nodes
    summary.nodes += len(completed)
    if not completed:
        return True
    runs: dict[int, tuple[int, int]] = {}
    for level, idx, _ in completed:
        low, high = runs.get(level, (idx, idx))
        runs[level] = (min(low, idx), max(high, idx))
    # the stored nodes of those runs, in (level, idx) order, are the computed ones one for
    # one exactly when each node is there and right (and the runs hold no other)
    condition = " OR ".join(
        f"(level = {int(level)} AND idx BETWEEN {int(low)} AND {int(high)})"
        for level, (low, high) in runs.items()
    )
    stored = _driver_rows(
        conn, f"SELECT level, idx, hash FROM tree_nodes WHERE {condition} ORDER BY level, idx"
    )
    # (level, idx) compared too: SQLite would keep an idx of 1.5, which sorts in 1's place
    return [(row[0], row[1], bytes(row[2])) for row in stored] == completed


def _check_rows(
    task: RangeTask,
    summary: RangeSummary,
    frontier: Frontier,
    rows: list[tuple],  # type: ignore[type-arg]
    seq: int,
    chain: bytes,
) -> tuple[int, bytes] | None:
    """Seq continuity, leaf, chain link and tenant links for one page, in a tight loop on
    locals (the same arithmetic as ledger/verify.py's); the (seq, chain) reached, or
    None at the first entry that fails."""
    heads, openings, leaves = summary.heads, summary.openings, []
    batch_heads, sizes = task.batch_heads, task.sizes
    for row in rows:
        (
            number,
            recorded_at,
            source,
            id_,
            type_,
            tenant,
            tenant_seq,
            event,
            salt,
            leaf,
            stored_chain,
            prev,
        ) = row
        if number != seq + 1:
            return None
        if (
            entry_leaf(number, recorded_at, source, id_, type_, tenant, tenant_seq, event, salt)
            != leaf
        ):
            return None
        chain = sha256(CHAIN_PREFIX + chain + leaf).digest()
        if chain != stored_chain:
            return None
        if tenant is None:
            if tenant_seq is not None or prev is not None:
                return None
        else:
            head = heads.get(tenant)
            if head is None:
                openings[tenant] = (tenant_seq, prev)
            elif tenant_seq != head[0] + 1 or prev != head[1]:
                return None
            heads[tenant] = (tenant_seq, leaf)
        seq = number
        leaves.append(leaf)
        if number in batch_heads or number in sizes:
            if batch_heads.get(number, chain) != chain:
                return None
            if number in sizes:
                frontier.extend(leaves)
                leaves = []
                summary.at_sizes.append(AtSize(number, chain, list(frontier.hashes), dict(heads)))
    frontier.extend(leaves)
    return seq, chain


def stitch(
    summaries: list[RangeSummary],
) -> tuple[TenantHeads, list[tuple[AtSize, TenantHeads]]] | None:
    """The tenants' heads after all the ranges, and each checkpoint size's state with the
    heads of every tenant at that size; None when a range is not clean, the ranges do not
    follow each other, or a tenant's first entry in a range does not follow its last
    entry in the ranges before."""
    heads: TenantHeads = {}
    at_sizes: list[tuple[AtSize, TenantHeads]] = []
    expected = 1
    for summary in summaries:
        if not summary.clean or summary.first != expected:
            return None
        for tenant, (tenant_seq, prev) in summary.openings.items():
            last_seq, last_leaf = heads.get(tenant, (0, ZERO_HASH))
            if tenant_seq != last_seq + 1 or prev != last_leaf:
                return None
        at_sizes.extend((at, {**heads, **at.heads}) for at in summary.at_sizes)
        heads.update(summary.heads)
        expected = summary.last + 1
    return heads, at_sizes


def cores() -> int:
    """The cores this process may run on."""
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


def cut(last: int, ranges: int, smallest: int) -> list[tuple[int, int]]:
    """[1, last] as consecutive (first, last) ranges: `ranges` of them, none under
    `smallest` entries (so fewer on a small ledger); none for an empty ledger."""
    if last < 1:
        return []
    count = max(1, min(ranges, last // max(1, smallest)))
    size = -(-last // count)
    return [(first, min(last, first + size - 1)) for first in range(1, last + 1, size)]


# -- leaf hashes of entries held in memory (verify-packet's bundle), on every core --------

#: What forked processes hash: set just before the pool forks, so that each child has the
#: entries already (copy on write), and a task is only a range of their positions.
_SHARED: tuple[Callable[[Any], bytes], Sequence[Any]] | None = None


def leaves_in_processes(
    leaf: Callable[[T], bytes], items: Sequence[T], processes: int, smallest: int
) -> list[bytes] | None:
    """[leaf(item) for item in items], hashed in `processes` forked processes, ranges of
    at least `smallest` items; None when that is not worth it or cannot be done (no fork
    on this platform, or an item that fails to hash: the caller's own loop then meets it
    in its place and says what is wrong as it always has)."""
    global _SHARED
    spans = cut(len(items), processes * 4, smallest)
    if processes < 2 or len(spans) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    _SHARED = (leaf, items)
    # Out of the collector's reach while the children live: a collection in a child would
    # write to every object's header and so copy the parent's whole heap, page by page.
    gc.freeze()
    try:
        with ProcessPoolExecutor(
            min(processes, len(spans)), mp_context=multiprocessing.get_context("fork")
        ) as pool:
            blobs = list(pool.map(_hash_span, spans))
    except Exception:  # any failure: the caller's loop redoes it and names it
        return None
    finally:
        _SHARED = None
        gc.unfreeze()
    joined = b"".join(blobs)
    if len(joined) != 32 * len(items):
        return None
    return [joined[i : i + 32] for i in range(0, len(joined), 32)]


def _hash_span(span: tuple[int, int]) -> bytes:
    assert _SHARED is not None, "forked without the items"
    leaf, items = _SHARED
    return b"".join(leaf(items[i]) for i in range(span[0] - 1, span[1]))
