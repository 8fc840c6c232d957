"""Verification: recompute every leaf, the chain, the tenant chains and the stored tree.

Checks, in the order they apply to the entry at position `seq` (expected gapless from 1):
1. seq continuity: a gap means entries were deleted;
2. the leaf: recomputed from the stored columns (the stored canonical event spliced in);
   a mismatch is an edit, unless the row hashes correctly under another nearby seq
   (then it was moved: reordered, inserted before, or renumbered);
3. the chain: chain[seq] = H(0x02 ‖ chain[seq-1] ‖ leaf);
4. the tenant chain: tenant_seq gapless per tenant, tenant_prev = that tenant's previous leaf;
5. every batch's recorded chain head, and the stored tree nodes completed by this leaf;
6. every checkpoint signed at this size: its root, chain head and tenant-head root
   against the recomputed ones; its stored note (read without its signature) saying the
   same; its `checkpoint_tenants` rows equal to the tenant heads the walk holds here (a
   packet's tenant-head proof is built from them); and (given the public key) its
   signature, and that its stored columns say what its signed note says;
7. before 6, that all checkpoints of this size sign the same root and chain head (two
   that differ are a fork: two histories signed for one size).
At the end: the last seq against the last committed batch (a truncated tail or rows past
it), every checkpoint above the last seq (truncated below a signed size), the count of
stored tree nodes, and a consistency proof between each pair of consecutive checkpoints
(in signing order: each later one extends the earlier one), and the quarantine's chain
against the head each checkpoint commits to (ledger/quarantine.py's rules), and each
witness cosignature kept with a checkpoint under the witness key stored beside it, and
every sealed page (ledger/sealed.py) against the entries it copies.
Then, since the store's own tables can be rolled back or rewritten by whoever keeps it:
given public keys, each must have signed at least one stored checkpoint; and each
checkpoint saved outside the store must verify under a given key, be no larger than the
store, and be extended by it (an RFC 9162 consistency proof from its size to the head,
computed from the stored tree, against its signed root).
The first failure is reported, with its seq.

Checks 1 to 5 and 6-7 of a clean ledger run first in ranges on every core
(ledger/verify_ranges.py); the walk from seq 1 described above runs when that pass is
not worth it (a small ledger, one core) or finds anything amiss, and names the problem.
"""

from __future__ import annotations

import copy
import gc
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.engine import make_url

from ledger import verify_ranges
from ledger.arrow_entries import drivers
from ledger.checkpoint import TenantHead, tenant_root
from ledger.fleet_store import fleet_heads_problem
from ledger.hashing import CHAIN_PREFIX, ZERO_HASH, chain_hash, entry_bytes, entry_leaf, leaf_hash
from ledger.merkle import STORED_MIN_LEVEL, Frontier
from ledger.note import COSIGNATURE_V1, NoteError, Verifier, split_note
from ledger.proofs import Checkpoint, CheckpointBody, ProofError, tenant_order, verify_consistency
from ledger.quarantine import quarantine_problem
from ledger.sealed import gap_problem, page_bounds, sealed_problem, sealed_problem_in
from ledger.store import Store
from ledger.tables import (
    batches,
    checkpoint_tenants,
    checkpoints,
    cosignatures,
    entries,
    sealed_pages,
    tree_nodes,
)
from ledger.tree import TreeReader, stored_nodes
from ledger.verify_ranges import (
    RangeSummary,
    RangeTask,
    check_range,
    cores,
    cut,
    stitch,
    verify_pages,
    worker_started,
)
from ledger.witness import CosignatureError, verify_cosignature
from schemas.errors import CheckFailed

_MOVE_WINDOW = 64
#: Below this many entries a range is not worth a process of its own: the whole range
#: takes half a second in one process, of which forking, reading the frontier and the
#: stitch would eat a good part.
SMALLEST_RANGE = 100_000
#: Ranges per process: more than one, so that a process slowed by others on a shared
#: machine holds up less of the whole.
_RANGES_PER_PROCESS = 4
#: fork where the platform has it: a spawned process spends ~0.4 s importing before it
#: checks anything. The children open their own connections and never touch the parent's.
_START = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


@dataclass(frozen=True)
class Problem:
    seq: int
    # deleted | edited | moved | chain | tenant-chain | batch | tree | truncated | inserted |
    # checkpoint | signature | fork | unsigned | rollback | quarantine | cosignature | sealed
    kind: str
    message: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.kind}: {self.message}"


@dataclass
class VerifyResult:
    entries: int = 0
    tenants: int = 0
    problem: Problem | None = None
    checked: list[str] = field(default_factory=list)
    #: Ranges checked in parallel processes (0: the entries were walked in this process).
    ranges: int = 0

    @property
    def ok(self) -> bool:
        return self.problem is None


class LedgerTampered(CheckFailed):
    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class _Walk:
    """State carried from one entry to the next."""

    def __init__(
        self,
        batch_heads: dict[int, bytes],
        signed: dict[int, list[Any]],
        verifiers: Sequence[Verifier],
        conn: Connection | None = None,
    ) -> None:
        self.signed = signed
        self.conn = conn  # reads each checkpoint's stored tenant heads when the walk reaches it
        self.verifiers = {v.name: v for v in verifiers}
        self.seq = 0
        self.chain = ZERO_HASH
        self.tenants: dict[str, tuple[int, bytes]] = {}
        self.frontier = Frontier(0)
        self.batch_heads = batch_heads
        self.nodes_seen = 0
        #: Sizes at which a batch or a checkpoint must be checked: the tight loop hands them on.
        self.special = set(batch_heads) | set(signed)


@dataclass(frozen=True)
class SavedCheckpoint:
    """A checkpoint's signed note that someone kept outside the store, and where from."""

    where: str
    note: str


def verify_ledger(
    store: Store,
    verifiers: Sequence[Verifier] = (),
    saved: Sequence[SavedCheckpoint] = (),
    processes: int | None = None,
    smallest_range: int = SMALLEST_RANGE,
) -> VerifyResult:
    """Check the whole ledger (and, given the public key, every checkpoint's signature,
    and that the store still extends each saved checkpoint); the result names the first
    problem, if any.

    The entries are first checked in ranges on `processes` processes (default: every
    core this process may use), ranges of at least `smallest_range` entries
    (ledger/verify_ranges.py); when that pass finds anything amiss, or cannot run, the
    walk from seq 1 in this process checks them and names the first problem."""
    with store.reading() as conn:
        heads = {
            int(r.last_seq): bytes(r.chain_head)
            for r in conn.execute(select(batches.c.last_seq, batches.c.chain_head))
        }
        signed: dict[int, list[Any]] = {}
        for row in conn.execute(select(checkpoints).order_by(checkpoints.c.checkpoint_seq)):
            signed.setdefault(int(row.tree_size), []).append(row)
        walk = _Walk(heads, signed, verifiers, conn)
        result = VerifyResult()
        workers = cores() if processes is None else processes
        result.ranges = _check_in_ranges(store, conn, walk, workers, smallest_range)
        problem = None
        if not result.ranges:
            walk = _Walk(heads, signed, verifiers, conn)
            problem = next(
                filter(None, (_check_page(conn, walk, page) for page in verify_pages(conn))), None
            )
        # A saved checkpoint says more (rolled back to where, or forked) than a missing signature.
        result.problem = problem or (
            _check_end(conn, walk)
            or next(filter(None, (_check_saved(conn, walk, c) for c in saved)), None)
            or _check_signed_by(walk, verifiers)
            or _check_sealed(store, conn, workers, walk.seq if result.ranges else None)
        )
        result.entries = walk.seq
        result.tenants = len(walk.tenants)
        result.checked = [
            "leaves",
            "chain",
            "tenant chains",
            "batch heads",
            "tree nodes",
            "quarantine chain",
        ]
        if result.ranges:
            result.checked[0] = f"leaves (in {result.ranges} ranges on {workers} processes)"
        pages = conn.execute(select(func.count()).select_from(sealed_pages)).scalar_one()
        if pages:
            result.checked.append(
                f"{pages} sealed page{'s' if pages > 1 else ''} against the entries"
            )
        count = sum(len(v) for v in signed.values())
        if count:
            result.checked.append(
                f"{count} checkpoints"
                + (
                    " and their signatures"
                    if verifiers
                    else " (signatures not checked: no --pubkey)"
                )
            )
        if saved:
            result.checked.append(
                f"that the store extends {len(saved)} saved "
                f"checkpoint{'s' if len(saved) > 1 else ''}"
            )
        return result


def _check_in_ranges(
    store: Store, conn: Connection, walk: _Walk, processes: int, smallest: int
) -> int:
    """The parallel pass (ledger/verify_ranges.py): the number of ranges checked, with the
    walk brought to the ledger's end; 0 when it did not run or anything was amiss (the
    walk is then left for the walk from seq 1 to redo)."""
    if processes < 2 or _memory_database(store):
        return 0
    last = int(conn.execute(select(func.coalesce(func.max(entries.c.seq), 0))).scalar_one())
    spans = cut(last, processes * _RANGES_PER_PROCESS, smallest)
    if len(spans) < 2:
        return 0
    tasks = [
        RangeTask(
            store.url,
            first,
            end,
            {s: h for s, h in walk.batch_heads.items() if first <= s <= end},
            frozenset(s for s in walk.signed if first <= s <= end),
        )
        for first, end in spans
    ]
    # Out of the collector's reach while the children live: a collection in a forked child
    # would write to every inherited object's header and so copy the parent's heap.
    gc.freeze()
    verify_ranges.forked_from = store if _START == "fork" else None
    try:
        drivers()  # imported before the fork (and, were they missing, the walk does it all)
        pool = ProcessPoolExecutor(
            min(processes, len(tasks)),
            mp_context=multiprocessing.get_context(_START),
            initializer=worker_started,
        )
        try:
            summaries = list(pool.map(check_range, tasks))
        finally:
            pool.shutdown(wait=False)  # the workers exit on their own while the checks below run
    except (
        Exception
    ):  # whatever stopped the fast pass, the walk from seq 1 meets it and says it as it always has
        return 0
    finally:
        verify_ranges.forked_from = None
        gc.unfreeze()
    return len(summaries) if _stitched(walk, summaries, last) else 0


def _stitched(walk: _Walk, summaries: list[RangeSummary], last: int) -> bool:
    """The ranges joined: tenant links across them, then every checkpoint at its size
    (rules 6 and 7, with the state the ranges handed on); True, and the walk at the
    ledger's end, when all of it holds."""
    joined = stitch(summaries)
    if joined is None:
        return False
    heads, at_sizes = joined
    for at, tenants in at_sizes:
        view = copy.copy(walk)
        view.seq, view.chain, view.tenants, view.frontier = (
            at.size,
            at.chain,
            tenants,
            Frontier(at.size, at.frontier),
        )
        rows = walk.signed.get(at.size, [])
        if _check_fork(view, rows) or any(_check_checkpoint(view, row) for row in rows):
            return False
    walk.seq, walk.chain, walk.tenants = last, summaries[-1].chain, heads
    walk.frontier = Frontier(last, summaries[-1].frontier)
    walk.nodes_seen = sum(s.nodes for s in summaries)
    return True


def require_intact(store: Store, verifiers: Sequence[Verifier] = ()) -> VerifyResult:
    """verify_ledger(), raising LedgerTampered on the first problem."""
    result = verify_ledger(store, verifiers)
    if result.problem is not None:
        raise LedgerTampered(result.problem)
    return result


def _check_page(
    conn: Connection,
    walk: _Walk,
    rows: list[tuple],  # type: ignore[type-arg]
) -> Problem | None:
    problem = _check_entries(walk, rows)
    if problem is not None:
        return problem
    problem = _check_nodes(conn, walk, walk.frontier.completed)
    walk.frontier.completed.clear()  # memory stays at one page
    return problem


def _check_entries(walk: _Walk, rows: list[tuple]) -> Problem | None:  # type: ignore[type-arg]
    """Checks 1 to 4 for each row in a tight loop on locals; a row that fails any of them,
    or closes a batch or a checkpoint, goes through _check_entry, which names the problem
    (or checks the batch head and checkpoints) with the walk's state brought up to date."""
    seq, chain, tenants, leaves = walk.seq, walk.chain, walk.tenants, []
    special = walk.special
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
        if number == seq + 1 and number not in special:
            if (
                entry_leaf(
                    number, recorded_at, source, id_, type_, tenant, tenant_seq, event, salt
                )
                == leaf
            ):
                next_chain = sha256(CHAIN_PREFIX + chain + leaf).digest()
                if next_chain == stored_chain:
                    if tenant is None:
                        ok = tenant_seq is None and prev is None
                    else:
                        last_seq, last_leaf = tenants.get(tenant, (0, ZERO_HASH))
                        ok = tenant_seq == last_seq + 1 and prev == last_leaf
                        if ok:
                            tenants[tenant] = (tenant_seq, leaf)
                    if ok:
                        seq, chain = number, next_chain
                        leaves.append(leaf)
                        continue
        walk.seq, walk.chain = seq, chain
        walk.frontier.extend(leaves)
        leaves = []
        problem = _check_entry(walk, row)
        if problem is not None:
            return problem
        seq, chain = walk.seq, walk.chain
    walk.seq, walk.chain = seq, chain
    walk.frontier.extend(leaves)
    return None


def _check_entry(walk: _Walk, row: tuple) -> Problem | None:  # type: ignore[type-arg]
    seq, recorded_at, source, id_, type_, tenant, tenant_seq, event, salt, leaf, chain, prev = row
    expected = walk.seq + 1
    if seq != expected:
        return Problem(
            expected,
            "deleted",
            f"seq {expected} to {seq - 1} are missing (found seq {seq} after {walk.seq})",
        )
    body = bytes(event)
    salt, leaf, chain, prev = bytes(salt), bytes(leaf), bytes(chain), prev and bytes(prev)
    computed = leaf_hash(
        entry_bytes(seq, recorded_at, source, id_, type_, tenant, tenant_seq, body, salt)
    )
    if computed != leaf:
        return _leaf_problem(row, body, salt, leaf)
    walk.chain = chain_hash(walk.chain, leaf)
    if walk.chain != chain:
        return Problem(
            seq, "chain", f"chain hash expected {walk.chain.hex()}, stored {chain.hex()}"
        )
    problem = _check_tenant(walk, seq, tenant, tenant_seq, prev, leaf)
    if problem is not None:
        return problem
    recorded_head = walk.batch_heads.get(seq)
    if recorded_head is not None and recorded_head != walk.chain:
        return Problem(
            seq,
            "batch",
            f"the batch ending here recorded chain head {recorded_head.hex()}, the chain gives "
            f"{walk.chain.hex()}",
        )
    walk.frontier.push(leaf)
    walk.seq = seq
    signed_here = walk.signed.get(seq, [])
    problem = _check_fork(walk, signed_here)
    for row in signed_here:
        problem = problem or _check_checkpoint(walk, row)
    return problem


def _check_checkpoint(walk: _Walk, row: Any) -> Problem | None:
    """Rule 6, at the moment the walk reaches the checkpoint's size."""
    size, number = int(row.tree_size), row.checkpoint_seq
    root = walk.frontier.root()
    heads = sorted(
        (TenantHead(t, n, leaf) for t, (n, leaf) in walk.tenants.items()),
        key=lambda h: tenant_order(h.tenant),
    )
    expected = {
        "root": (root, bytes(row.root_hash)),
        "chain head": (walk.chain, bytes(row.chain_head)),
        "tenant-head root": (tenant_root(heads), bytes(row.tenant_root)),
    }
    for what, (computed, stored) in expected.items():
        if computed != stored:
            return Problem(
                size,
                "checkpoint",
                f"checkpoint #{number} at size {size}: {what} signed {stored.hex()}, the ledger "
                f"gives {computed.hex() if computed else None}",
            )
    return (
        _check_note(walk, row, heads)
        or _check_tenant_heads(walk, row)
        or _check_signature(walk, row)
    )


def _check_note(walk: _Walk, row: Any, heads: list[TenantHead]) -> Problem | None:
    """The stored note, read without its signature (a packet carries the note, not the
    columns), says what the ledger gives at this size: size, root, chain head, and the
    tenants extension line (count and tenant-head root)."""
    size, number = int(row.tree_size), row.checkpoint_seq
    try:
        body = Checkpoint.parse(split_note(row.note)[0])
    except (NoteError, ProofError) as exc:
        return Problem(
            size, "checkpoint", f"checkpoint #{number}: its stored note does not parse: {exc}"
        )
    said = {
        "size": (body.size, size),
        "root": (body.root, bytes(row.root_hash)),
        "chain head": (body.chain_head, walk.chain),
        "tenants line": (
            (body.tenant_count, body.tenant_root),
            (len(heads), bytes(row.tenant_root)),
        ),
    }
    for what, (noted, computed) in said.items():
        if noted != computed:
            return Problem(
                size,
                "checkpoint",
                f"checkpoint #{number} at size {size}: its note's {what} says "
                f"{_shown(noted)}, the ledger gives {_shown(computed)}",
            )
    return None


def _check_tenant_heads(walk: _Walk, row: Any) -> Problem | None:
    """`checkpoint_tenants` holds exactly the tenant heads the walk reached at this size:
    a packet's tenant-head proof is built from those rows. The walk already holds the
    heads (the tenant-head root was computed from them), so this costs one indexed read
    of the checkpoint's rows."""
    if walk.conn is None:
        return None
    size, number = int(row.tree_size), row.checkpoint_seq
    stored = {
        r.tenant: (int(r.tenant_seq), bytes(r.leaf_hash))
        for r in walk.conn.execute(
            select(
                checkpoint_tenants.c.tenant,
                checkpoint_tenants.c.tenant_seq,
                checkpoint_tenants.c.leaf_hash,
            ).where(checkpoint_tenants.c.checkpoint_seq == number)
        )
    }
    if stored == walk.tenants:
        return None
    where = f"checkpoint #{number} at size {size}: checkpoint_tenants"
    for tenant in sorted(set(stored) | set(walk.tenants), key=tenant_order):
        computed, kept = walk.tenants.get(tenant), stored.get(tenant)
        if kept is None and computed is not None:
            return Problem(
                size,
                "checkpoint",
                f"{where} lacks tenant {tenant!r} (head: tenant_seq {computed[0]})",
            )
        if computed is None:
            return Problem(
                size,
                "checkpoint",
                f"{where} holds tenant {tenant!r}, which has no entry up to size {size}",
            )
        if kept != computed and kept is not None:
            return Problem(
                size,
                "checkpoint",
                f"{where} gives tenant {tenant!r} the head tenant_seq {kept[0]}, "
                f"leaf {kept[1].hex()}; the ledger gives tenant_seq {computed[0]}, "
                f"leaf {computed[1].hex()}",
            )
    return None


def _shown(value: Any) -> str:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return " ".join(_shown(v) for v in value)
    return str(value)


def _check_fork(walk: _Walk, rows: list[Any]) -> Problem | None:
    """Rule 7: checkpoints of one size sign one root and one chain head. Two that differ
    are a fork (two histories signed), whichever of them the ledger matches; given the
    public key, both signatures are checked first, since a fork is a claim about the signer."""
    if len(rows) < 2:
        return None
    first = rows[0]
    for other in rows[1:]:
        if (bytes(first.root_hash), bytes(first.chain_head)) == (
            bytes(other.root_hash),
            bytes(other.chain_head),
        ):
            continue
        problem = _check_signature(walk, first) or _check_signature(walk, other)
        if problem is not None:
            return problem
        size = int(first.tree_size)
        return Problem(
            size,
            "fork",
            f"checkpoints #{first.checkpoint_seq} and #{other.checkpoint_seq} both sign size "
            f"{size}, with roots {bytes(first.root_hash).hex()} and "
            f"{bytes(other.root_hash).hex()}: two histories were signed",
        )
    return None


def _check_signature(walk: _Walk, row: Any) -> Problem | None:
    """Given the public keys: the checkpoint's note is signed, and says what its columns say."""
    if not walk.verifiers:
        return None
    size, number = int(row.tree_size), row.checkpoint_seq
    verifier = walk.verifiers.get(row.key_name)
    if verifier is None:
        return Problem(
            size,
            "signature",
            f"checkpoint #{number} is signed by {row.key_name!r}, and no public key of that name "
            "was given",
        )
    try:
        body = Checkpoint.parse(verifier.verify(row.note))
    except (NoteError, ProofError) as exc:
        return Problem(size, "signature", f"checkpoint #{number}: {exc}")
    if (body.size, body.root, body.chain_head, body.tenant_root, body.tenant_count) != (
        size,
        bytes(row.root_hash),
        bytes(row.chain_head),
        bytes(row.tenant_root),
        len(walk.tenants),
    ):
        return Problem(
            size,
            "checkpoint",
            f"checkpoint #{number}: its stored columns differ from its signed note",
        )
    return None


def _check_saved(conn: Connection, walk: _Walk, saved: SavedCheckpoint) -> Problem | None:
    """The store still extends a checkpoint saved outside it: signed by a given key, no
    larger than the store, and consistent with the store's head by an RFC 9162 proof
    computed from the stored tree. A rollback or a fork of the store fails here, even with
    every checkpoint row deleted or rewritten."""
    body, problem = _saved_body(walk, saved)
    if body is None:
        return problem
    size, head = body.size, walk.seq
    label = f"the saved checkpoint {saved.where} (size {size}, root {body.root.hex()})"
    if size > head:
        return Problem(
            head + 1,
            "rollback",
            f"{label} is larger than the store, which ends at seq {head}: "
            "the store was rolled back or truncated below a checkpoint the log signed",
        )
    if size == 0:
        return None
    head_root = walk.frontier.root() or b""
    proof = TreeReader(conn).consistency_proof(size, head)
    try:
        verify_consistency(size, head, body.root, head_root, proof)
    except ProofError as exc:
        stored = TreeReader(conn).root(size)
        return Problem(
            size,
            "fork",
            f"the store does not extend {label}: the store's root at size {size} is "
            f"{stored.hex()} ({exc})",
        )
    return None


def _saved_body(
    walk: _Walk, saved: SavedCheckpoint
) -> tuple[CheckpointBody | None, Problem | None]:
    """The saved checkpoint's body, once a given key's signature on it verifies."""
    errors = []
    for verifier in walk.verifiers.values():
        try:
            return CheckpointBody.parse(verifier.verify(saved.note)), None
        except (NoteError, ProofError) as exc:
            errors.append(str(exc))
    reason = "; ".join(errors) or "no public key was given"
    return None, Problem(
        walk.seq, "signature", f"the saved checkpoint {saved.where} does not verify: {reason}"
    )


def _check_signed_by(walk: _Walk, verifiers: Sequence[Verifier]) -> Problem | None:
    """Given a public key, the store must hold a checkpoint it signed: whoever keeps the
    ledger could otherwise delete every checkpoint, and nothing would be checked."""
    names = {row.key_name for rows in walk.signed.values() for row in rows}
    for verifier in verifiers:
        if verifier.name not in names:
            return Problem(
                walk.seq,
                "unsigned",
                f"no checkpoint signed by {verifier.name} (key id {verifier.id.hex()}) is stored: "
                "nothing ties the store to that key (checkpoints deleted, or never signed)",
            )
    return None


def _check_sealed(
    store: Store, conn: Connection, processes: int, compared_through: int | None
) -> Problem | None:
    """The sealed pages (ledger/sealed.py) follow one another from seq 1, and each holds
    exactly its entries' columns. The range pass compares them as it reads the entries
    (`compared_through`: the entries it passed clean); otherwise they are checked here, in
    `processes` processes, a share of the pages each, where the store can be opened from
    another process. Where the range pass found a page amiss it was not clean, and this
    check names the page."""
    bounds = page_bounds(conn)
    found = gap_problem(bounds)
    # the range pass compared every page only if the pages tile seqs 1..compared_through:
    # a page that ends before it starts, or past that, was read by no range
    compared = compared_through is not None and all(
        first <= last <= compared_through for first, last in bounds
    )
    if found is None and bounds and not compared:
        found = (
            _sealed_in_processes(store, bounds, processes)
            if processes > 1 and len(bounds) > 1 and not _memory_database(store)
            else sealed_problem(conn)
        )
    return Problem(found[0], "sealed", found[1]) if found else None


def _sealed_in_processes(
    store: Store, bounds: list[tuple[int, int]], processes: int
) -> tuple[int, str] | None:
    share = -(-len(bounds) // processes)
    spans = [
        (store.url, bounds[i][0], bounds[min(i + share, len(bounds)) - 1][0])
        for i in range(0, len(bounds), share)
    ]
    try:
        with ProcessPoolExecutor(
            len(spans), mp_context=multiprocessing.get_context(_START)
        ) as pool:
            found = [
                problem for problem in pool.map(sealed_problem_in, spans) if problem is not None
            ]
    except Exception:  # no processes to be had: this one checks them all, and says what it finds
        with store.reading() as conn:
            return sealed_problem(conn)
    return min(found, default=None)  # the first seq named


def _memory_database(store: Store) -> bool:
    """A memory database is this process's alone."""
    return store.dialect == "sqlite" and make_url(store.url).database in (None, "", ":memory:")


def _leaf_problem(
    row: tuple,  # type: ignore[type-arg]
    body: bytes,
    salt: bytes,
    stored: bytes,
) -> Problem:
    seq, recorded_at, source, id_, type_, tenant, tenant_seq = row[:7]
    for other in range(max(1, seq - _MOVE_WINDOW), seq + _MOVE_WINDOW + 1):
        if (
            other != seq
            and leaf_hash(
                entry_bytes(other, recorded_at, source, id_, type_, tenant, tenant_seq, body, salt)
            )
            == stored
        ):
            how = (
                "an entry was inserted before it"
                if other < seq
                else "it was moved up (rows reordered, or renumbered after a deletion)"
            )
            return Problem(
                min(seq, other),
                "moved",
                f"the entry stored at seq {seq} was written as seq {other}: {how}",
            )
    computed = leaf_hash(
        entry_bytes(seq, recorded_at, source, id_, type_, tenant, tenant_seq, body, salt)
    )
    return Problem(
        seq,
        "edited",
        f"the entry's content or salt does not match its leaf hash (computed {computed.hex()}, "
        f"stored {stored.hex()})",
    )


def _check_tenant(
    walk: _Walk,
    seq: int,
    tenant: str | None,
    tenant_seq: int | None,
    prev: bytes | None,
    leaf: bytes,
) -> Problem | None:
    if tenant is None:
        if tenant_seq is not None or prev is not None:
            return Problem(
                seq,
                "tenant-chain",
                "a fleet entry (no tenant) carries a tenant_seq or tenant_prev",
            )
        return None
    last_seq, last_leaf = walk.tenants.get(tenant, (0, ZERO_HASH))
    if tenant_seq != last_seq + 1:
        return Problem(
            seq,
            "tenant-chain",
            f"tenant {tenant!r}: tenant_seq expected {last_seq + 1}, stored {tenant_seq}",
        )
    if prev != last_leaf:
        return Problem(
            seq,
            "tenant-chain",
            f"tenant {tenant!r}: tenant_prev expected {last_leaf.hex()}, stored "
            f"{prev.hex() if prev else None}",
        )
    walk.tenants[tenant] = (tenant_seq, leaf)
    return None


def _check_nodes(
    conn: Connection, walk: _Walk, expected: list[tuple[int, int, bytes]]
) -> Problem | None:
    walk.nodes_seen += len(expected)
    stored = stored_nodes(conn, [(level, idx) for level, idx, _ in expected])
    for level, idx, digest in expected:
        if stored.get((level, idx)) != digest:
            first = (idx << level) + 1
            state = "missing" if (level, idx) not in stored else "different"
            return Problem(
                first,
                "tree",
                f"tree node (level {level}, index {idx}) over seq {first}..{(idx + 1) << level} "
                f"is {state}",
            )
    return None


def _check_end(conn: Connection, walk: _Walk) -> Problem | None:
    committed = conn.execute(select(func.coalesce(func.max(batches.c.last_seq), 0))).scalar_one()
    if walk.seq < committed:
        return Problem(
            walk.seq + 1,
            "truncated",
            f"the ledger ends at seq {walk.seq}, but a committed batch reaches seq {committed}",
        )
    if walk.seq > committed:
        return Problem(
            committed + 1,
            "inserted",
            f"seq {committed + 1} to {walk.seq} are not in any committed batch",
        )
    beyond = sorted(size for size in walk.signed if size > walk.seq)
    if beyond:
        return Problem(
            walk.seq + 1,
            "truncated",
            f"the ledger ends at seq {walk.seq}, below checkpoint "
            f"#{walk.signed[beyond[0]][0].checkpoint_seq} signed at size {beyond[0]}",
        )
    stored_nodes = conn.execute(select(func.count()).select_from(tree_nodes)).scalar_one()
    if stored_nodes != walk.nodes_seen:
        return Problem(
            walk.seq + 1,
            "truncated",
            f"{stored_nodes} tree nodes are stored, but {walk.seq} entries make "
            f"{walk.nodes_seen}: leaves are missing past seq {walk.seq}",
        )
    return (
        _check_consistency(conn, walk)
        or _check_quarantine(conn, walk)
        or _check_cosignatures(conn, walk)
        or _check_fleet_heads(conn)
    )


def _check_fleet_heads(conn: Connection) -> Problem | None:
    """Each checkpoint's stored fleet heads, and the fleet root its note signs, against the
    fleet entries up to its size (ledger/fleet_store.py)."""
    found = fleet_heads_problem(conn)
    return None if found is None else Problem(found[0], "checkpoint", found[1])


def _check_cosignatures(conn: Connection, walk: _Walk) -> Problem | None:
    """Each witness cosignature kept with a checkpoint verifies under the key stored with
    it (whether that witness is trusted is for verify-packet --witness to say)."""
    if not conn.dialect.has_table(conn, "cosignatures"):
        return None  # a store from before witnesses: nothing gathered
    notes = {int(row.checkpoint_seq): row for rows in walk.signed.values() for row in rows}
    for row in conn.execute(
        select(cosignatures).order_by(cosignatures.c.checkpoint_seq, cosignatures.c.witness_key)
    ):
        checkpoint = notes.get(int(row.checkpoint_seq))
        if checkpoint is None:
            return Problem(
                walk.seq,
                "cosignature",
                f"a cosignature by {row.witness_key} is kept for checkpoint "
                f"#{row.checkpoint_seq}, which is not stored",
            )
        try:
            verify_cosignature(
                checkpoint.note + row.line, Verifier.parse(row.witness_key, COSIGNATURE_V1)
            )
        except (NoteError, CosignatureError) as exc:
            return Problem(
                int(checkpoint.tree_size),
                "cosignature",
                f"checkpoint #{row.checkpoint_seq}: {exc}",
            )
    return None


def _check_quarantine(conn: Connection, walk: _Walk) -> Problem | None:
    """The quarantine's chain, and each checkpoint's commitment to its head (the note's
    `quarantine` extension line; checkpoints signed before the chain have none)."""
    commitments = []
    for rows in walk.signed.values():
        for row in rows:
            try:
                body = Checkpoint.parse(split_note(row.note)[0])
            except (NoteError, ProofError) as exc:
                return Problem(
                    int(row.tree_size),
                    "checkpoint",
                    f"checkpoint #{row.checkpoint_seq}: its note does not parse: {exc}",
                )
            if body.quarantine_count is not None and body.quarantine_head is not None:
                commitments.append(
                    (int(row.checkpoint_seq), body.quarantine_count, body.quarantine_head)
                )
    message = quarantine_problem(conn, commitments)
    return Problem(walk.seq, "quarantine", message) if message else None


def _check_consistency(conn: Connection, walk: _Walk) -> Problem | None:
    """Each checkpoint against the one signed before it, by an RFC 9162 consistency proof."""
    ordered = sorted(
        (row for rows in walk.signed.values() for row in rows), key=lambda r: r.checkpoint_seq
    )
    reader = TreeReader(conn)
    for earlier, later in zip(ordered, ordered[1:]):
        first, second = int(earlier.tree_size), int(later.tree_size)
        if second < first:
            return Problem(
                second + 1,
                "checkpoint",
                f"checkpoint #{later.checkpoint_seq} (size {second}) is smaller than the earlier "
                f"#{earlier.checkpoint_seq} (size {first})",
            )
        try:
            verify_consistency(
                first,
                second,
                bytes(earlier.root_hash),
                bytes(later.root_hash),
                reader.consistency_proof(first, second),
            )
        except ProofError as exc:
            return Problem(
                first,
                "checkpoint",
                f"checkpoint #{later.checkpoint_seq} contradicts #{earlier.checkpoint_seq}: {exc}",
            )
    return None


__all__ = [
    "LedgerTampered",
    "Problem",
    "STORED_MIN_LEVEL",
    "SMALLEST_RANGE",
    "SavedCheckpoint",
    "VerifyResult",
    "require_intact",
    "verify_ledger",
    "verify_pages",
]
