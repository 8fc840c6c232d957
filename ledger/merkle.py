"""RFC 9162 Merkle tree over the entries' leaf hashes, in `seq` order (leaf i = seq i+1).

Storage rule: the interior node (level, idx) of every *complete* subtree, which covers
leaves [idx·2^level, (idx+1)·2^level), is written in the same transaction as the leaf
that completes it, for level ≥ STORED_MIN_LEVEL. Lower nodes are rebuilt from at most
2^STORED_MIN_LEVEL leaves, so any subtree hash costs O(log n) reads, never a rebuild.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ledger.digests import DIGEST, level_up, split
from ledger.proofs import NODE_PREFIX, merkle_root
from ledger.proofs import hash_children as node_hash

#: Nodes below this level are not stored: 16 leaves are cheaper to read than n/2 rows to write.
STORED_MIN_LEVEL = 4


def perfect_subtrees(start: int, end: int) -> list[tuple[int, int]]:
    """The complete aligned subtrees (level, idx) that tile [start, end), left to right.

    With start = 0 this is the binary decomposition of the tree size: RFC 9162's
    MTH(D[0:n]) is the right fold of their hashes.
    """
    tiles: list[tuple[int, int]] = []
    while start < end:
        level = (start & -start).bit_length() - 1 if start else (end - start).bit_length() - 1
        while (1 << level) > end - start:
            level -= 1
        tiles.append((level, start >> level))
        start += 1 << level
    return tiles


def fold_right(hashes: list[bytes]) -> bytes:
    """Combine subtree hashes, right to left: H(a, H(b, H(c, d)))."""
    acc = hashes[-1]
    for left in reversed(hashes[:-1]):
        acc = node_hash(left, acc)
    return acc


def root_of_leaves(leaves: list[bytes]) -> bytes:
    """MTH of leaf hashes held in memory (RFC 9162 §2.1.1); used on ≤ 16 leaves."""
    if not leaves:
        raise ValueError("the empty tree has no subtree hashes")
    return merkle_root(leaves)


@dataclass
class Frontier:
    """The right edge of the tree: the hashes of the complete subtrees of its size's
    binary decomposition, highest first. Appending a leaf is a binary-counter carry."""

    size: int
    hashes: list[bytes] = field(default_factory=list)
    #: Nodes completed by push() at a stored level, as (level, idx, hash).
    completed: list[tuple[int, int, bytes]] = field(default_factory=list)

    def push(self, leaf: bytes) -> None:
        self.hashes.append(leaf)
        index = self.size  # 0-based index of the new leaf
        level = 0
        while index & 1:
            right = self.hashes.pop()
            left = self.hashes.pop()
            merged = node_hash(left, right)
            self.hashes.append(merged)
            index >>= 1
            level += 1
            if level >= STORED_MIN_LEVEL:
                self.completed.append((level, index, merged))
        self.size += 1

    def extend(self, leaves: Iterable[bytes]) -> None:
        """push() each leaf (extend_packed on the leaves end to end)."""
        self.extend_packed(b"".join(leaves))

    def extend_packed(self, leaves: bytes) -> None:
        """push() each of the packed 32-byte leaves, computed a level at a time: every
        node of a level is made in one call (ledger/digests.py), and the pending left
        siblings come off the frontier.

        At level L the run of new nodes starts at index size >> L; when that index is odd,
        its left sibling is the frontier's level-L subtree (bit L of size is set), always
        the lowest one still held. An odd node left over at the right waits at level L.
        """
        run = leaves
        start, level, waiting = self.size, 0, []
        self.size += len(run) // DIGEST
        while run:
            if start & 1:
                run = self.hashes.pop() + run
                start -= 1
            if len(run) // DIGEST & 1:
                waiting.append(run[-DIGEST:])
                run = run[:-DIGEST]
            run = level_up(NODE_PREFIX, run)
            start >>= 1
            level += 1
            if level >= STORED_MIN_LEVEL:
                self.completed.extend((level, start + i, h) for i, h in enumerate(split(run)))
        self.hashes.extend(reversed(waiting))

    def root(self) -> bytes | None:
        return fold_right(self.hashes) if self.hashes else None


def inclusion_path(index: int, leaves: list[bytes]) -> list[bytes]:
    """PATH(index, D[n]) over leaves held in memory (RFC 9162 §2.1.3.1); for small trees
    such as the tenant-head tree."""
    if len(leaves) <= 1:
        return []
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    if index < k:
        return inclusion_path(index, leaves[:k]) + [root_of_leaves(leaves[k:])]
    return inclusion_path(index - k, leaves[k:]) + [root_of_leaves(leaves[:k])]
