"""Reading the stored Merkle tree: subtree hashes, the root at any size, the frontier.

Every read is O(log n): a stored node is one row, a low subtree is at most
2**STORED_MIN_LEVEL leaf hashes read in one range scan (ledger.merkle's storage rule).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, and_, select

from ledger.merkle import STORED_MIN_LEVEL, Frontier, fold_right, perfect_subtrees, root_of_leaves
from ledger.proofs import multiproof_ranges
from ledger.tables import entries


def stored_nodes(
    conn: Connection, keys: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], bytes]:
    """The stored hashes of nodes (level, idx) among `keys`; absent ones are left out.

    One statement of `(level = ? AND idx IN (...)) OR ...`, which both backends plan as
    primary-key probes (SQLite plans a row-value IN as a full scan).
    """
    by_level: dict[int, list[int]] = {}
    for level, idx in keys:
        by_level.setdefault(level, []).append(idx)
    found: dict[tuple[int, int], bytes] = {}
    terms = [
        (level, indexes[i : i + 500])
        for level, indexes in by_level.items()
        for i in range(0, len(indexes), 500)
    ]
    for start in range(0, len(terms), 50):  # bounded statement size
        # Integers only, formatted by int(): the hot path skips SQL expression building.
        condition = " OR ".join(
            f"(level = {int(level)} AND idx IN ({','.join(str(int(i)) for i in chunk)}))"
            for level, chunk in terms[start : start + 50]
        )
        rows = conn.exec_driver_sql(
            f"SELECT level, idx, hash FROM tree_nodes WHERE {condition}"
        ).all()
        found.update({(int(r[0]), int(r[1])): bytes(r[2]) for r in rows})
    return found


#: Leaf ranges per statement: SQLite refuses an expression tree deeper than 1,000, and
#: each range adds to its depth (a packet of many scattered entries asks for thousands).
SPANS_PER_STATEMENT = 200


def leaf_spans(conn: Connection, spans: list[tuple[int, int]]) -> dict[int, bytes]:
    """Leaf hashes (by 0-based index) of several leaf ranges [start, end), a few hundred
    ranges per statement."""
    found: dict[int, bytes] = {}
    for start in range(0, len(spans), SPANS_PER_STATEMENT):
        condition = " OR ".join(
            f"(seq > {int(a)} AND seq <= {int(b)})"
            for a, b in spans[start : start + SPANS_PER_STATEMENT]
        )
        rows = conn.exec_driver_sql(f"SELECT seq, leaf_hash FROM entries WHERE {condition}")
        found.update({int(r[0]) - 1: bytes(r[1]) for r in rows})
    return found


def _split(size: int) -> int:
    """The largest power of two smaller than size (RFC 9162's k)."""
    return 1 << ((size - 1).bit_length() - 1)


def inclusion_ranges(index: int, start: int, end: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes make PATH(index, D[start:end]), in proof order."""
    if end - start <= 1:
        return []
    k = _split(end - start)
    if index < start + k:
        return inclusion_ranges(index, start, start + k) + [(start + k, end)]
    return inclusion_ranges(index, start + k, end) + [(start, start + k)]


def consistency_ranges(
    first: int, start: int, end: int, whole: bool = True
) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes make SUBPROOF(first, D[start:end], whole)."""
    if first == end - start:
        return [] if whole else [(start, end)]
    k = _split(end - start)
    if first <= k:
        return consistency_ranges(first, start, start + k, whole) + [(start + k, end)]
    return consistency_ranges(first - k, start + k, end, False) + [(start, start + k)]


class TreeReader:
    """Subtree hashes of the tree as stored, read through one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def leaves(self, start: int, end: int) -> list[bytes]:
        """Leaf hashes of leaves [start, end) (0-based: leaf i is seq i+1)."""
        rows = (
            self.conn.execute(
                select(entries.c.leaf_hash)
                .where(and_(entries.c.seq > start, entries.c.seq <= end))
                .order_by(entries.c.seq)
            )
            .scalars()
            .all()
        )
        if len(rows) != end - start:
            raise LookupError(
                f"leaves [{start}, {end}): expected {end - start}, found {len(rows)}"
            )
        return list(rows)

    def subtree_hashes(self, tiles: list[tuple[int, int]]) -> list[bytes]:
        """The hashes of complete subtrees (level, idx), in the order given."""
        found = stored_nodes(self.conn, [t for t in tiles if t[0] >= STORED_MIN_LEVEL])
        low = sorted(
            {
                (idx << level, (idx + 1) << level)
                for level, idx in tiles
                if level < STORED_MIN_LEVEL
            }
        )
        leaves = leaf_spans(self.conn, low)
        result = []
        for level, idx in tiles:
            if level >= STORED_MIN_LEVEL:
                if (level, idx) not in found:
                    raise LookupError(f"tree node (level {level}, index {idx}) is not stored")
                result.append(found[(level, idx)])
            else:
                span = range(idx << level, (idx + 1) << level)
                if any(i not in leaves for i in span):
                    raise LookupError(f"leaves [{span.start}, {span.stop}) are not all stored")
                result.append(root_of_leaves([leaves[i] for i in span]))
        return result

    def range_hash(self, start: int, end: int) -> bytes:
        """MTH of leaves [start, end), for ranges RFC 9162 proofs use."""
        return fold_right(self.subtree_hashes(perfect_subtrees(start, end)))

    def range_hashes(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """MTH of each aligned leaf range, with every stored node read in one pass."""
        tilings = [perfect_subtrees(a, b) for a, b in ranges]
        flat = self.subtree_hashes([t for tiling in tilings for t in tiling])
        hashes, at = [], 0
        for tiling in tilings:
            hashes.append(fold_right(flat[at : at + len(tiling)]))
            at += len(tiling)
        return hashes

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """RFC 9162 inclusion proof of leaf `index` (0-based) in the tree of `size`."""
        if not 0 <= index < size:
            raise ValueError(f"leaf {index} is outside a tree of size {size}")
        return self.range_hashes(inclusion_ranges(index, 0, size))

    def consistency_proof(self, first: int, second: int) -> list[bytes]:
        """RFC 9162 consistency proof from the tree of size `first` to that of `second`."""
        if not 0 < first <= second:
            raise ValueError(f"no consistency proof from size {first} to size {second}")
        return self.range_hashes(consistency_ranges(first, 0, second)) if first < second else []

    def multiproof(self, indices: list[int], size: int) -> list[bytes]:
        """Multi-leaf inclusion proof of leaves `indices` (0-based) in the tree of `size`."""
        return self.range_hashes(multiproof_ranges(sorted(set(indices)), 0, size))

    def frontier(self, size: int) -> Frontier:
        return Frontier(size, self.subtree_hashes(perfect_subtrees(0, size)))

    def root(self, size: int) -> bytes:
        if size <= 0:
            raise ValueError("the empty tree has no root to sign")
        return self.range_hash(0, size)
