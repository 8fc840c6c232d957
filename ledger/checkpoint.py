"""Signing checkpoints: the tree head, the chain head, the per-tenant heads and the fleet
heads (ledger/fleet_store.py), under the
append lock so that no batch lands between reading the head and signing it.

Reads are O(T log n) for T tenants: the tenants come from a loose scan of the
(tenant, tenant_seq) index, each head from one index probe; the root from the stored tree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, func, insert, select

from ledger.append import utc_now
from ledger.errors import LedgerError, StoreWriteFailed
from ledger.fleet_store import current_fleet_heads, fleet_root, store_fleet_heads
from ledger.merkle import inclusion_path
from ledger.note import NoteError, Signer, check_key_name
from ledger.proofs import Checkpoint, ProofError, merkle_root, tenant_head_leaf, tenant_order
from ledger.quarantine import quarantine_head
from ledger.sealed import seal_store
from ledger.store import Store
from ledger.tables import checkpoint_tenants, checkpoints, entries
from ledger.tree import TreeReader
from schemas import format_utc

DEFAULT_ORIGIN = "gpuledger.local/ledger"


@dataclass(frozen=True)
class TenantHead:
    tenant: str
    tenant_seq: int
    leaf: bytes


@dataclass(frozen=True)
class SignedCheckpoint:
    checkpoint_seq: int
    body: Checkpoint
    note: str


def current_tenant_heads(conn: Connection) -> list[TenantHead]:
    """Every tenant's latest entry, sorted as the tenant-head tree orders them."""
    heads = []
    tenant = conn.execute(select(func.min(entries.c.tenant))).scalar()
    while tenant is not None:
        row = conn.execute(
            select(entries.c.tenant_seq, entries.c.leaf_hash)
            .where(entries.c.tenant == tenant)
            .order_by(entries.c.tenant_seq.desc())
            .limit(1)
        ).one()
        heads.append(TenantHead(tenant, int(row.tenant_seq), bytes(row.leaf_hash)))
        tenant = conn.execute(
            select(func.min(entries.c.tenant)).where(entries.c.tenant > tenant)
        ).scalar()
    return sorted(heads, key=lambda h: tenant_order(h.tenant))


def tenant_root(heads: list[TenantHead]) -> bytes:
    return merkle_root([tenant_head_leaf(h.tenant, h.tenant_seq, h.leaf) for h in heads])


def check_origin(origin: str) -> None:
    """tlog-checkpoint: the origin is one non-empty line; as note text it holds no control
    character (a newline in it would make every later parse of the note fail)."""
    if not origin:
        raise NoteError("must not be empty (c2sp.org/tlog-checkpoint)", option="origin")
    bad = next((c for c in origin if ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF), None)
    if bad is not None:
        raise NoteError(
            f"{origin!r} holds {bad!r}: an origin is one line with no control character",
            option="origin",
        )


def sign_body(signer: Signer, body: Checkpoint) -> str:
    """The signed note of `body`, refused unless it parses back to the same checkpoint:
    nothing is signed that a reader would refuse."""
    text = body.text()
    try:
        parsed = Checkpoint.parse(text)
    except ProofError as exc:
        raise NoteError(f"the checkpoint would not parse back: {exc}") from None
    if parsed != body:
        raise NoteError("the checkpoint would not parse back to what was signed")
    return signer.sign(text)


#: Work done inside the checkpoint's transaction once the checkpoint is stored (the CLI
#: writes a witness request there): whatever it raises rolls the checkpoint back.
BeforeCommit = Callable[[Connection, "SignedCheckpoint"], None]


def sign_checkpoint(
    store: Store,
    signer: Signer,
    origin: str = DEFAULT_ORIGIN,
    before_commit: BeforeCommit | None = None,
) -> SignedCheckpoint:
    """Sign the ledger's head as a C2SP checkpoint, store it, and return it: all or
    nothing. What can fail for want of space comes first (sealing the pages, each in a
    transaction of its own) and the signature is stored in one transaction with its
    tenant heads, so a failed call leaves no signature stored, nor returned to print."""
    check_origin(origin)
    check_key_name(signer.name)
    try:
        seal_store(store)  # before signing: a full disk fails here, with nothing signed
    except StoreWriteFailed as exc:
        raise StoreWriteFailed(
            store.safe_url,
            exc.reason,
            outcome="sealing a page was rolled back; nothing was signed",
        ) from exc
    with store.writing() as conn:
        head = conn.execute(
            select(entries.c.seq, entries.c.chain_hash).order_by(entries.c.seq.desc()).limit(1)
        ).first()
        if head is None:
            raise LedgerError("the ledger is empty: there is nothing to sign")
        size = int(head.seq)
        heads = current_tenant_heads(conn)
        fleet = current_fleet_heads(conn, size)
        body = Checkpoint(
            origin,
            size,
            TreeReader(conn).root(size),
            bytes(head.chain_hash),
            len(heads),
            tenant_root(heads),
            format_utc(utc_now()),
            *quarantine_head(conn),
            len(fleet),
            fleet_root(fleet),
        )
        note = sign_body(signer, body)
        number = (
            conn.execute(
                select(func.coalesce(func.max(checkpoints.c.checkpoint_seq), 0))
            ).scalar_one()
            + 1
        )
        conn.execute(
            insert(checkpoints).values(
                checkpoint_seq=number,
                origin=origin,
                tree_size=size,
                root_hash=body.root,
                chain_head=body.chain_head,
                tenant_root=body.tenant_root,
                signed_at=body.time,
                key_name=signer.name,
                note=note,
            )
        )
        if heads:
            conn.execute(
                insert(checkpoint_tenants),
                [
                    {
                        "checkpoint_seq": number,
                        "tenant": h.tenant,
                        "tenant_seq": h.tenant_seq,
                        "leaf_hash": h.leaf,
                    }
                    for h in heads
                ],
            )
        store_fleet_heads(conn, number, fleet)
        signed = SignedCheckpoint(number, body, note)
        if before_commit is not None:
            before_commit(conn, signed)
    return signed


@dataclass(frozen=True)
class TenantHeadProof:
    """That checkpoint `checkpoint_seq` commits to (tenant_seq, leaf) as `tenant`'s head:
    leaf `index` of the tenant-head tree, with its inclusion proof."""

    tenant: str
    tenant_seq: int
    leaf: bytes
    index: int
    proof: list[bytes]


def tenant_head_proof(conn: Connection, checkpoint_seq: int, tenant: str) -> TenantHeadProof:
    rows = conn.execute(
        select(
            checkpoint_tenants.c.tenant,
            checkpoint_tenants.c.tenant_seq,
            checkpoint_tenants.c.leaf_hash,
        ).where(checkpoint_tenants.c.checkpoint_seq == checkpoint_seq)
    ).all()
    heads = sorted(
        (TenantHead(r.tenant, int(r.tenant_seq), bytes(r.leaf_hash)) for r in rows),
        key=lambda h: tenant_order(h.tenant),
    )
    for index, head in enumerate(heads):
        if head.tenant == tenant:
            leaves = [tenant_head_leaf(h.tenant, h.tenant_seq, h.leaf) for h in heads]
            _require_stored_heads(conn, checkpoint_seq, head, leaves)
            return TenantHeadProof(
                tenant, head.tenant_seq, head.leaf, index, inclusion_path(index, leaves)
            )
    raise LedgerError(f"checkpoint #{checkpoint_seq} holds no entry of tenant {tenant!r}")


def _require_stored_heads(
    conn: Connection, checkpoint_seq: int, head: TenantHead, leaves: list[bytes]
) -> None:
    """No proof from edited rows: they must give the checkpoint's tenant-head root, and the
    tenant's row must be its last entry up to the checkpoint's size (`verify` checks every
    row of every checkpoint; this is the part one proof needs)."""
    row = conn.execute(
        select(checkpoints.c.tree_size, checkpoints.c.tenant_root).where(
            checkpoints.c.checkpoint_seq == checkpoint_seq
        )
    ).one()
    last = conn.execute(
        select(entries.c.tenant_seq, entries.c.leaf_hash)
        .where(entries.c.tenant == head.tenant, entries.c.seq <= row.tree_size)
        .order_by(entries.c.tenant_seq.desc())
        .limit(1)
    ).first()
    if (
        merkle_root(leaves) != bytes(row.tenant_root)
        or last is None
        or (int(last.tenant_seq), bytes(last.leaf_hash)) != (head.tenant_seq, head.leaf)
    ):
        raise LedgerError(
            f"checkpoint #{checkpoint_seq}: its stored tenant heads (checkpoint_tenants) do not "
            "match its tenant-head root and the entries: the store was edited; `gpuledger "
            "verify` names it"
        )
