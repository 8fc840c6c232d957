"""Tenant-scoped evidence bundles: a tenant's entries with the proofs that they are in
the ledger, all of them, as one signed checkpoint says.

A bundle holds: the signed checkpoint note; the entries (canonical event, salt and every
hashed column, so each leaf can be recomputed); `withheld` fleet entries, by seq and leaf
hash only (their content names another tenant); one multi-leaf inclusion proof of both;
the tenant-head proof; and, when asked, a consistency proof from an earlier tree size the
customer already holds. Other tenants appear only as hashes, and leaves are salted, so
those hashes reveal nothing.

Freshness rule (`check_extends`): given the customer's previous checkpoint, the bundle's
must be of the same log and either the same tree (same size, same root) or a larger one
that the carried consistency proof shows extends it; smaller is stale, anything else a fork.

Completeness rule: the tenant's entries in the bundle must carry tenant_seq 1..n exactly,
where (n, leaf) is the head the checkpoint commits to, and the n-th must have that leaf.

Fleet completeness rule (ledger/fleet_heads.py): for every fleet key of the tenant's
allocations, the bundle's `fleet` member holds the checkpoint's committed (count, head)
with the seqs of the key's entries, each carried or withheld, whose leaves chain to that
head; or committed neighbours proving the key has no entry. A checkpoint that commits to
no fleet heads (signed before they existed) cannot prove it: its bundles are refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, select

from ledger.checkpoint import tenant_head_proof
from ledger.errors import LedgerError
from ledger.fleet_heads import allocation_keys, check_fleet, entry_keys
from ledger.fleet_store import fleet_section
from ledger.hashing import entry_bytes, leaf_hash
from ledger.note import NoteError, Verifier
from ledger.proofs import (
    Checkpoint,
    ProofError,
    verify_consistency,
    verify_multiproof,
    verify_tenant_head,
)
from ledger.store import Store
from ledger.tables import checkpoints, entries
from ledger.tree import TreeReader
from ledger.verify_ranges import leaves_in_processes
from schemas.documents.bundle import BUNDLE_VERSION as BUNDLE_VERSION  # the bundle's format
from schemas.documents.bundle import ENTRY_FIELDS

#: Below this many entries a range is not worth a process of its own (verify_bundle).
SMALLEST_LEAF_RANGE = 100_000
_ENTRY_FIELDS = ENTRY_FIELDS  # a bundle entry's columns: schemas/documents/bundle.py's Entry


def build_bundle(
    store: Store,
    tenant: str,
    fleet_seqs: Iterable[int] = (),
    checkpoint_seq: int | None = None,
    since_checkpoint_seq: int | None = None,
    withheld_seqs: Iterable[int] = (),
    since_size: int | None = None,
) -> dict[str, Any]:
    """All of `tenant`'s entries up to the checkpoint, plus the fleet entries named by
    `fleet_seqs` (health faults that explain findings), with their proofs. Fleet entries
    named by `withheld_seqs` are proven by leaf hash alone (their content is not carried);
    `since_size` (or the size of checkpoint `since_checkpoint_seq`) adds a consistency
    proof from that earlier tree to the checkpoint's."""
    with store.reading() as conn:
        checkpoint = _checkpoint_row(conn, checkpoint_seq)
        size = int(checkpoint.tree_size)
        rows = _tenant_rows(conn, tenant, size) + _fleet_rows(conn, sorted(set(fleet_seqs)), size)
        rows.sort(key=lambda r: r["seq"])
        withheld = _fleet_rows(conn, sorted(set(withheld_seqs) - set(fleet_seqs)), size)
        withheld.sort(key=lambda r: r["seq"])
        reader = TreeReader(conn)
        head = tenant_head_proof(conn, int(checkpoint.checkpoint_seq), tenant)
        proven = [r["seq"] - 1 for r in rows + withheld]
        bundle: dict[str, Any] = {
            "version": BUNDLE_VERSION,
            "tenant": tenant,
            "checkpoint": checkpoint.note,
            "entries": [_entry_json(r) for r in rows],
            "inclusion": [h.hex() for h in reader.multiproof(proven, size)],
            "tenant_head": {
                "tenant_seq": head.tenant_seq,
                "leaf": head.leaf.hex(),
                "index": head.index,
                "proof": [h.hex() for h in head.proof],
            },
        }
        fleet, listed = fleet_section(conn, checkpoint, tenant)
        unsupplied = sorted(listed - {r["seq"] for r in rows + withheld})
        if unsupplied:
            raise LedgerError(
                f"fleet entry seq {unsupplied[0]} touches {tenant!r}'s allocations: "
                "the bundle must carry it or withhold it"
            )
        bundle["fleet"] = fleet
        if withheld:
            bundle["withheld"] = [
                {"seq": r["seq"], "leaf": entry_leaf(_entry_json(r)).hex()} for r in withheld
            ]
        if since_checkpoint_seq is not None:
            since_size = int(_checkpoint_row(conn, since_checkpoint_seq).tree_size)
        if since_size is not None:
            if not 0 < since_size <= size:
                raise LedgerError(
                    f"{since_size} is not a tree size in [1, {size}], the checkpoint's",
                    option="since_size",
                )
            bundle["consistency"] = {
                "from_size": since_size,
                "proof": [h.hex() for h in reader.consistency_proof(since_size, size)],
            }
    return bundle


def _checkpoint_row(conn: Connection, number: int | None) -> Any:
    query = select(checkpoints).order_by(checkpoints.c.checkpoint_seq.desc()).limit(1)
    if number is not None:
        query = select(checkpoints).where(checkpoints.c.checkpoint_seq == number)
    row = conn.execute(query).first()
    if row is None:
        raise LedgerError(
            "no checkpoint is stored yet: sign one first (`gpuledger checkpoint`)"
            if number is None
            else f"no checkpoint #{number}"
        )
    return row


def _tenant_rows(conn: Connection, tenant: str, size: int) -> list[dict[str, Any]]:
    query = select(*[entries.c[f] for f in _ENTRY_FIELDS]).where(
        entries.c.tenant == tenant, entries.c.seq <= size
    )
    return [dict(r._mapping) for r in conn.execute(query.order_by(entries.c.tenant_seq))]


def _fleet_rows(conn: Connection, seqs: list[int], size: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for start in range(0, len(seqs), 500):
        query = select(*[entries.c[f] for f in _ENTRY_FIELDS]).where(
            entries.c.seq.in_(seqs[start : start + 500])
        )
        found.extend(dict(r._mapping) for r in conn.execute(query))
    for row in found:
        if row["tenant"] is not None:
            raise LedgerError(
                f"seq {row['seq']} belongs to a tenant, not to the fleet: it cannot go in another "
                "tenant's bundle"
            )
        if row["seq"] > size:
            raise LedgerError(f"seq {row['seq']} is past the checkpoint's size {size}")
    return found


def _entry_json(row: dict[str, Any]) -> dict[str, Any]:
    out = {str(k): v for k, v in row.items()}
    out["salt"] = bytes(row["salt"]).hex()
    return out


def entry_leaf(entry: dict[str, Any]) -> bytes:
    """The leaf hash of a bundle entry, recomputed from its columns."""
    return leaf_hash(
        entry_bytes(
            entry["seq"],
            entry["recorded_at"],
            entry["source"],
            entry["id"],
            entry["type"],
            entry["tenant"],
            entry["tenant_seq"],
            entry["event"].encode("utf-8"),
            bytes.fromhex(entry["salt"]),
        )
    )


def verify_bundle(
    bundle: dict[str, Any],
    verifier: Verifier,
    earlier_checkpoint: str | None = None,
    processes: int = 1,
) -> Checkpoint:
    """Check a bundle with the public key alone; raise ProofError naming what fails.

    With `processes` > 1 a large bundle's leaf hashes are computed in that many forked
    processes first. One by default: measured on two busy cores (bench/packet.py), the
    children copying the parent's heap as they touch the entries cost more than the
    hashing they share (bench/README.md, "Field-scale speed")."""
    try:
        checkpoint = Checkpoint.parse(verifier.verify(bundle["checkpoint"]))
        tenant, items = bundle["tenant"], bundle["entries"]
        # hashed in processes first when asked and the bundle is large; this loop still checks each
        # entry in turn
        hashed = (
            leaves_in_processes(entry_leaf, items, processes, SMALLEST_LEAF_RANGE)
            if isinstance(items, list)
            else None
        )
        leaves = {}
        for position, entry in enumerate(items):
            if entry["tenant"] not in (tenant, None):
                raise ProofError(f"seq {entry['seq']} belongs to another tenant")
            if not 1 <= entry["seq"] <= checkpoint.size:
                raise ProofError(
                    f"seq {entry['seq']} is outside the checkpoint's tree of {checkpoint.size}"
                )
            leaves[entry["seq"] - 1] = (
                hashed[position] if hashed is not None else entry_leaf(entry)
            )
        withheld = bundle.get("withheld", [])
        for item in withheld:
            if not 1 <= item["seq"] <= checkpoint.size:
                raise ProofError(
                    f"withheld seq {item['seq']} is outside the checkpoint's tree of "
                    f"{checkpoint.size}"
                )
            leaves[item["seq"] - 1] = bytes.fromhex(item["leaf"])
        if len(leaves) != len(items) + len(withheld):
            raise ProofError("an entry appears twice")
        verify_multiproof(
            checkpoint.size,
            leaves,
            [bytes.fromhex(h) for h in bundle["inclusion"]],
            checkpoint.root,
        )
        _check_complete(tenant, items, bundle["tenant_head"], checkpoint)
        _check_fleet(bundle, tenant, items, leaves, checkpoint)
        if earlier_checkpoint is not None:
            _check_consistent(bundle, verifier, earlier_checkpoint, checkpoint)
    except NoteError as exc:
        raise ProofError(f"checkpoint: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ProofError):
            raise
        raise ProofError(f"malformed bundle: {type(exc).__name__}: {exc}") from None
    return checkpoint


def _check_complete(
    tenant: str, items: list[dict[str, Any]], head: dict[str, Any], checkpoint: Checkpoint
) -> None:
    proof = [bytes.fromhex(h) for h in head["proof"]]
    verify_tenant_head(
        tenant, head["tenant_seq"], bytes.fromhex(head["leaf"]), head["index"], proof, checkpoint
    )
    own = sorted((e for e in items if e["tenant"] == tenant), key=lambda e: e["tenant_seq"])
    numbers = [e["tenant_seq"] for e in own]
    if numbers != list(range(1, head["tenant_seq"] + 1)):
        missing = sorted(set(range(1, head["tenant_seq"] + 1)) - set(numbers))
        raise ProofError(
            "the tenant's entries are incomplete: the checkpoint commits to "
            f"{head['tenant_seq']}, "
            f"missing tenant_seq {missing[:5]}{'…' if len(missing) > 5 else ''}"
        )
    if entry_leaf(own[-1]) != bytes.fromhex(head["leaf"]):
        raise ProofError("the tenant's last entry is not the head the checkpoint commits to")


def _check_fleet(
    bundle: dict[str, Any],
    tenant: str,
    items: list[dict[str, Any]],
    leaves: dict[int, bytes],
    checkpoint: Checkpoint,
) -> None:
    """Every fleet entry touching one of the tenant's allocations is in the bundle
    (carried, or withheld by its leaf), as the checkpoint's fleet heads say."""
    needed: set[str] = set()
    carried: dict[int, set[str]] = {}
    for entry in items:
        if entry["tenant"] == tenant and entry["type"] == "allocation.granted":
            data = json.loads(entry["event"]).get("data")
            needed |= allocation_keys(data) if isinstance(data, dict) else set()
        elif entry["tenant"] is None:
            carried[entry["seq"]] = entry_keys(entry["type"], entry["event"])
    by_seq = {index + 1: leaf for index, leaf in leaves.items()}
    check_fleet(bundle.get("fleet"), needed, by_seq, carried, checkpoint)


def _check_consistent(
    bundle: dict[str, Any], verifier: Verifier, earlier_note: str, checkpoint: Checkpoint
) -> None:
    try:
        earlier = Checkpoint.parse(verifier.verify(earlier_note))
    except NoteError as exc:
        raise ProofError(f"previous checkpoint: {exc}") from None
    check_extends(checkpoint, bundle.get("consistency"), earlier)


def check_extends(
    checkpoint: Checkpoint, consistency: dict[str, Any] | None, earlier: Checkpoint
) -> None:
    """Raise ProofError unless `checkpoint` is the same tree as `earlier` or a later one
    that extends it, by the consistency proof `consistency` ({from_size, proof}) carries.

    A stale checkpoint (older than the one the customer holds) and a fork (the same size
    with another root, or a proof that fails) are told apart, each naming both sizes."""
    old, new = earlier.size, checkpoint.size
    if checkpoint.origin != earlier.origin:
        raise ProofError(
            f"the packet's checkpoint is of log {checkpoint.origin!r}, the previous one of "
            f"{earlier.origin!r}"
        )
    if new < old:
        raise ProofError(
            f"stale: the packet's checkpoint is of tree size {new}, older than the previous "
            f"checkpoint of tree size {old}"
        )
    if new == old:
        if checkpoint.root != earlier.root:
            raise ProofError(
                f"fork: the packet's checkpoint and the previous one are both of tree size {new} "
                f"with different roots ({checkpoint.root.hex()} and {earlier.root.hex()})"
            )
        return
    if consistency is None:
        raise ProofError(
            f"the packet carries no consistency proof from the previous tree size {old} to its "
            f"tree size {new} (a dispute built since tree size {old} carries one)"
        )
    if consistency["from_size"] != old:
        raise ProofError(
            f"the packet's consistency proof starts at tree size {consistency['from_size']}, "
            f"the previous checkpoint is of tree size {old}"
        )
    try:
        verify_consistency(
            old,
            new,
            earlier.root,
            checkpoint.root,
            [bytes.fromhex(h) for h in consistency["proof"]],
        )
    except ProofError as exc:
        raise ProofError(
            f"fork: the packet's tree of size {new} does not extend the previous tree of size "
            f"{old}: {exc}"
        ) from None
