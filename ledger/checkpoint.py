"""Signing checkpoints: the tree head, the chain head, the per-tenant heads and the fleet
heads (ledger/fleet_store.py), under the
append lock so that no batch lands between reading the head and signing it.

Reads are O(T log n) for T tenants: the tenants come from a loose scan of the
(tenant, tenant_seq) index, each head from one index probe; the root from the stored tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, func, insert, select

from ledger.append import utc_now
from ledger.errors import LedgerError
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
            select(entries.c.tenant_seq, entries.c.leaf_hash).where(entries.c.tenant == tenant)
            .order_by(entries.c.tenant_seq.desc()).limit(1)
        ).one()
        heads.append(TenantHead(tenant, int(row.tenant_seq), bytes(row.leaf_hash)))
        tenant = conn.execute(select(func.min(entries.c.tenant)).where(entries.c.tenant > tenant)).scalar()
    return sorted(heads, key=lambda h: tenant_order(h.tenant))


def tenant_root(heads: list[TenantHead]) -> bytes:
    return merkle_root([tenant_head_leaf(h.tenant, h.tenant_seq, h.leaf) for h in heads])


def check_origin(origin: str) -> None:
    """tlog-checkpoint: the origin is one non-empty line; as note text it holds no control
    character (a newline in it would make every later parse of the note fail)."""
    if not origin:
        raise NoteError("--origin: must not be empty (c2sp.org/tlog-checkpoint)")
    bad = next((c for c in origin if ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF), None)
    if bad is not None:
        raise NoteError(f"--origin: {origin!r} holds {bad!r}: an origin is one line with no control character")


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


def sign_checkpoint(store: Store, signer: Signer, origin: str = DEFAULT_ORIGIN) -> SignedCheckpoint:
    """Sign the ledger's head as a C2SP checkpoint, store it, and return it."""
    check_origin(origin)
    check_key_name(signer.name)
    with store.writing() as conn:
        head = conn.execute(select(entries.c.seq, entries.c.chain_hash).order_by(entries.c.seq.desc()).limit(1)).first()
        if head is None:
            raise LedgerError("the ledger is empty: there is nothing to sign")
        size = int(head.seq)
        heads = current_tenant_heads(conn)
        fleet = current_fleet_heads(conn, size)
        body = Checkpoint(origin, size, TreeReader(conn).root(size), bytes(head.chain_hash),
                          len(heads), tenant_root(heads), format_utc(utc_now()),
                          *quarantine_head(conn), len(fleet), fleet_root(fleet))
        note = sign_body(signer, body)
        number = conn.execute(select(func.coalesce(func.max(checkpoints.c.checkpoint_seq), 0))).scalar_one() + 1
        conn.execute(insert(checkpoints).values(
            checkpoint_seq=number, origin=origin, tree_size=size, root_hash=body.root,
            chain_head=body.chain_head, tenant_root=body.tenant_root, signed_at=body.time,
            key_name=signer.name, note=note,
        ))
        if heads:
            conn.execute(insert(checkpoint_tenants), [
                {"checkpoint_seq": number, "tenant": h.tenant, "tenant_seq": h.tenant_seq, "leaf_hash": h.leaf}
                for h in heads
            ])
        store_fleet_heads(conn, number, fleet)
    seal_store(store)  # after signing, a page a transaction: the signature waits for none
    return SignedCheckpoint(number, body, note)


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
        select(checkpoint_tenants.c.tenant, checkpoint_tenants.c.tenant_seq, checkpoint_tenants.c.leaf_hash)
        .where(checkpoint_tenants.c.checkpoint_seq == checkpoint_seq)
    ).all()
    heads = sorted((TenantHead(r.tenant, int(r.tenant_seq), bytes(r.leaf_hash)) for r in rows), key=lambda h: tenant_order(h.tenant))
    for index, head in enumerate(heads):
        if head.tenant == tenant:
            leaves = [tenant_head_leaf(h.tenant, h.tenant_seq, h.leaf) for h in heads]
            return TenantHeadProof(tenant, head.tenant_seq, head.leaf, index, inclusion_path(index, leaves))
    raise LedgerError(f"checkpoint #{checkpoint_seq} holds no entry of tenant {tenant!r}")
