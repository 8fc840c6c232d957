"""Verification: recompute every leaf, the chain, the tenant chains and the stored tree.

Checks, in the order they apply to the entry at position `seq` (expected gapless from 1):
1. seq continuity: a gap means entries were deleted;
2. the leaf: recomputed from the stored columns (the stored canonical event spliced in);
   a mismatch is an edit, unless the row hashes correctly under another nearby seq
   (then it was moved: reordered, inserted before, or renumbered);
3. the chain: chain[seq] = H(0x02 ‖ chain[seq-1] ‖ leaf);
4. the tenant chain: tenant_seq gapless per tenant, tenant_prev = that tenant's previous leaf;
5. every batch's recorded chain head, and the stored tree nodes completed by this leaf.
At the end: the last seq against the last committed batch (a truncated tail or rows past
it) and the count of stored tree nodes. The first failure is reported, with its seq.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlalchemy import Connection, func, select

from ledger.hashing import ZERO_HASH, chain_hash, entry_bytes, leaf_hash
from ledger.merkle import STORED_MIN_LEVEL, Frontier
from ledger.store import Store
from ledger.tables import batches, entries, tree_nodes
from ledger.tree import stored_nodes

_PAGE = 20_000
_MOVE_WINDOW = 64


@dataclass(frozen=True)
class Problem:
    seq: int
    kind: str  # deleted | edited | moved | chain | tenant-chain | batch | tree | truncated | inserted
    message: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.kind}: {self.message}"


@dataclass
class VerifyResult:
    entries: int = 0
    tenants: int = 0
    problem: Problem | None = None
    checked: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.problem is None


class LedgerTampered(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class _Walk:
    """State carried from one entry to the next."""

    def __init__(self, batch_heads: dict[int, bytes]) -> None:
        self.seq = 0
        self.chain = ZERO_HASH
        self.tenants: dict[str, tuple[int, bytes]] = {}
        self.frontier = Frontier(0)
        self.batch_heads = batch_heads
        self.nodes_seen = 0


def verify_ledger(store: Store) -> VerifyResult:
    """Check the whole ledger; the result names the first problem, if any."""
    with store.reading() as conn:
        heads = {int(r.last_seq): bytes(r.chain_head) for r in conn.execute(select(batches.c.last_seq, batches.c.chain_head))}
        walk = _Walk(heads)
        result = VerifyResult()
        for page in _pages(conn):
            problem = _check_page(conn, walk, page)
            if problem is not None:
                result.problem = problem
                break
        else:
            result.problem = _check_end(conn, walk)
        result.entries = walk.seq
        result.tenants = len(walk.tenants)
        result.checked = ["leaves", "chain", "tenant chains", "batch heads", "tree nodes"]
        return result


def require_intact(store: Store) -> VerifyResult:
    """verify_ledger(), raising LedgerTampered on the first problem."""
    result = verify_ledger(store)
    if result.problem is not None:
        raise LedgerTampered(result.problem)
    return result


def _pages(conn: Connection) -> Iterator[list[tuple]]:  # type: ignore[type-arg]
    last = 0
    columns = [entries.c[name] for name in (
        "seq", "recorded_at", "source", "id", "type", "tenant", "tenant_seq", "event", "salt",
        "leaf_hash", "chain_hash", "tenant_prev",
    )]
    while True:
        rows = conn.execute(
            select(*columns).where(entries.c.seq > last).order_by(entries.c.seq).limit(_PAGE)
        ).all()
        if not rows:
            return
        yield [tuple(r) for r in rows]
        last = rows[-1][0]


def _check_page(conn: Connection, walk: _Walk, rows: list[tuple]) -> Problem | None:  # type: ignore[type-arg]
    for row in rows:
        problem = _check_entry(walk, row)
        if problem is not None:
            return problem
    problem = _check_nodes(conn, walk, walk.frontier.completed)
    walk.frontier.completed.clear()  # memory stays at one page
    return problem


def _check_entry(walk: _Walk, row: tuple) -> Problem | None:  # type: ignore[type-arg]
    seq, recorded_at, source, id_, type_, tenant, tenant_seq, event, salt, leaf, chain, prev = row
    expected = walk.seq + 1
    if seq != expected:
        return Problem(expected, "deleted", f"seq {expected} to {seq - 1} are missing (found seq {seq} after {walk.seq})")
    body = event.encode("utf-8")
    salt, leaf, chain, prev = bytes(salt), bytes(leaf), bytes(chain), prev and bytes(prev)
    computed = leaf_hash(entry_bytes(seq, recorded_at, source, id_, type_, tenant, tenant_seq, body, salt))
    if computed != leaf:
        return _leaf_problem(row, body, salt, leaf)
    walk.chain = chain_hash(walk.chain, leaf)
    if walk.chain != chain:
        return Problem(seq, "chain", f"chain hash expected {walk.chain.hex()}, stored {chain.hex()}")
    problem = _check_tenant(walk, seq, tenant, tenant_seq, prev, leaf)
    if problem is not None:
        return problem
    recorded_head = walk.batch_heads.get(seq)
    if recorded_head is not None and recorded_head != walk.chain:
        return Problem(seq, "batch", f"the batch ending here recorded chain head {recorded_head.hex()}, the chain gives {walk.chain.hex()}")
    walk.frontier.push(leaf)
    walk.seq = seq
    return None


def _leaf_problem(row: tuple, body: bytes, salt: bytes, stored: bytes) -> Problem:  # type: ignore[type-arg]
    seq, recorded_at, source, id_, type_, tenant, tenant_seq = row[:7]
    for other in range(max(1, seq - _MOVE_WINDOW), seq + _MOVE_WINDOW + 1):
        if other != seq and leaf_hash(entry_bytes(other, recorded_at, source, id_, type_, tenant, tenant_seq, body, salt)) == stored:
            how = "an entry was inserted before it" if other < seq else "it was moved up (rows reordered, or renumbered after a deletion)"
            return Problem(min(seq, other), "moved", f"the entry stored at seq {seq} was written as seq {other}: {how}")
    return Problem(seq, "edited", f"the entry's content or salt does not match its leaf hash (computed {leaf_hash(entry_bytes(seq, recorded_at, source, id_, type_, tenant, tenant_seq, body, salt)).hex()}, stored {stored.hex()})")


def _check_tenant(walk: _Walk, seq: int, tenant: str | None, tenant_seq: int | None, prev: bytes | None, leaf: bytes) -> Problem | None:
    if tenant is None:
        if tenant_seq is not None or prev is not None:
            return Problem(seq, "tenant-chain", "a fleet entry (no tenant) carries a tenant_seq or tenant_prev")
        return None
    last_seq, last_leaf = walk.tenants.get(tenant, (0, ZERO_HASH))
    if tenant_seq != last_seq + 1:
        return Problem(seq, "tenant-chain", f"tenant {tenant!r}: tenant_seq expected {last_seq + 1}, stored {tenant_seq}")
    if prev != last_leaf:
        return Problem(seq, "tenant-chain", f"tenant {tenant!r}: tenant_prev expected {last_leaf.hex()}, stored {prev.hex() if prev else None}")
    walk.tenants[tenant] = (tenant_seq, leaf)
    return None


def _check_nodes(conn: Connection, walk: _Walk, expected: list[tuple[int, int, bytes]]) -> Problem | None:
    walk.nodes_seen += len(expected)
    stored = stored_nodes(conn, [(level, idx) for level, idx, _ in expected])
    for level, idx, digest in expected:
        if stored.get((level, idx)) != digest:
            first = (idx << level) + 1
            state = "missing" if (level, idx) not in stored else "different"
            return Problem(first, "tree", f"tree node (level {level}, index {idx}) over seq {first}..{(idx + 1) << level} is {state}")
    return None


def _check_end(conn: Connection, walk: _Walk) -> Problem | None:
    committed = conn.execute(select(func.coalesce(func.max(batches.c.last_seq), 0))).scalar_one()
    if walk.seq < committed:
        return Problem(walk.seq + 1, "truncated", f"the ledger ends at seq {walk.seq}, but a committed batch reaches seq {committed}")
    if walk.seq > committed:
        return Problem(committed + 1, "inserted", f"seq {committed + 1} to {walk.seq} are not in any committed batch")
    stored_nodes = conn.execute(select(func.count()).select_from(tree_nodes)).scalar_one()
    if stored_nodes != walk.nodes_seen:
        return Problem(walk.seq + 1, "truncated", f"{stored_nodes} tree nodes are stored, but {walk.seq} entries make {walk.nodes_seen}: leaves are missing past seq {walk.seq}")
    return None


__all__ = ["LedgerTampered", "Problem", "STORED_MIN_LEVEL", "VerifyResult", "require_intact", "verify_ledger"]
