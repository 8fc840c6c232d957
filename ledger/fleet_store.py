"""The fleet heads in the store: computed when a checkpoint is signed, kept in
`checkpoint_fleet`, proven in a tenant's bundle, and checked by `verify` against the
entries (the rules and the hashing are in ledger/fleet_heads.py).

A checkpoint's heads extend the previous checkpoint's with the fleet entries signed since,
so signing reads only the new entries; `verify` recomputes them all from seq 1.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, insert, select

from ledger.errors import LedgerError
from ledger.fleet_heads import (
    KEYED_TYPES,
    ZERO_HEAD,
    FleetHead,
    allocation_keys,
    chain_step,
    entry_keys,
    fleet_head_leaf,
    key_order,
)
from ledger.merkle import inclusion_path
from ledger.note import NoteError, split_note
from ledger.proofs import Checkpoint, ProofError, merkle_root
from ledger.tables import checkpoint_fleet, checkpoints, entries

Heads = dict[str, tuple[int, bytes]]  # key -> (count, head)


def fleet_root(heads: list[FleetHead]) -> bytes:
    return merkle_root([fleet_head_leaf(h.key, h.count, h.head) for h in heads])


def sorted_heads(heads: Heads) -> list[FleetHead]:
    return sorted(
        (FleetHead(k, c, h) for k, (c, h) in heads.items()), key=lambda h: key_order(h.key)
    )


def keyed_fleet_entries(
    conn: Connection, after: int, upto: int
) -> Iterator[tuple[int, bytes, set[str]]]:
    """(seq, leaf, keys) of each fleet entry of a keyed type with after < seq ≤ upto, in seq order.
    The tenant is tested here, not in SQL: there SQLite would read every fleet entry through
    the tenant index instead of the seq range through the primary key."""
    query = (
        select(
            entries.c.seq, entries.c.type, entries.c.tenant, entries.c.event, entries.c.leaf_hash
        )
        .where(entries.c.type.in_(KEYED_TYPES), entries.c.seq > after, entries.c.seq <= upto)
        .order_by(entries.c.seq)
    )
    for row in conn.execute(query):
        keys = entry_keys(row.type, row.event) if row.tenant is None else set()
        if keys:
            yield int(row.seq), bytes(row.leaf_hash), keys


def extend_heads(heads: Heads, conn: Connection, after: int, upto: int) -> None:
    for _, leaf, keys in keyed_fleet_entries(conn, after, upto):
        for key in keys:
            count, head = heads.get(key, (0, ZERO_HEAD))
            heads[key] = (count + 1, chain_step(head, leaf))


def require_fleet_table(conn: Connection) -> None:
    """A store from before the fleet heads is upgraded by `gpuledger init`, never silently."""
    if not conn.dialect.has_table(conn, "checkpoint_fleet"):
        raise LedgerError(
            "this store was made before checkpoints committed to the fleet's heads: "
            "run `gpuledger init` once to upgrade it (it adds a table; no row changes)",
            option="db",
        )


def current_fleet_heads(conn: Connection, size: int) -> list[FleetHead]:
    """The fleet heads at tree size `size`: the last checkpoint's, extended."""
    require_fleet_table(conn)
    heads, after = _last_committed(conn, size)
    extend_heads(heads, conn, after, size)
    return sorted_heads(heads)


def _last_committed(conn: Connection, size: int) -> tuple[Heads, int]:
    """The heads the newest checkpoint of at most `size` commits to, and its size; nothing
    and 0 when it commits to none, or its stored heads do not give its signed root."""
    row = conn.execute(
        select(checkpoints.c.checkpoint_seq, checkpoints.c.tree_size, checkpoints.c.note)
        .where(checkpoints.c.tree_size <= size)
        .order_by(checkpoints.c.checkpoint_seq.desc())
        .limit(1)
    ).first()
    if row is None:
        return {}, 0
    body = _note_body(row.note)
    if body is None or body.fleet_root is None:
        return {}, 0
    heads = stored_fleet_heads(conn, int(row.checkpoint_seq))
    if (len(heads), fleet_root(heads)) != (body.fleet_count, body.fleet_root):
        return {}, 0  # `verify` names what is wrong; signing recomputes from seq 1
    return {h.key: (h.count, h.head) for h in heads}, int(row.tree_size)


def _note_body(note: str) -> Checkpoint | None:
    try:
        return Checkpoint.parse(split_note(note)[0])
    except (NoteError, ProofError):
        return None


def _commits_fleet(note: str) -> bool:
    body = _note_body(note)
    return body is not None and body.fleet_root is not None


def store_fleet_heads(conn: Connection, checkpoint_seq: int, heads: list[FleetHead]) -> None:
    if heads:
        conn.execute(
            insert(checkpoint_fleet),
            [
                {
                    "checkpoint_seq": checkpoint_seq,
                    "fleet_key": h.key,
                    "entry_count": h.count,
                    "head_hash": h.head,
                }
                for h in heads
            ],
        )


def stored_fleet_heads(conn: Connection, checkpoint_seq: int) -> list[FleetHead]:
    query = select(checkpoint_fleet).where(checkpoint_fleet.c.checkpoint_seq == checkpoint_seq)
    return sorted(
        (
            FleetHead(r.fleet_key, int(r.entry_count), bytes(r.head_hash))
            for r in conn.execute(query)
        ),
        key=lambda h: key_order(h.key),
    )


# -- a tenant's bundle ------------------------------------------------------------------


def tenant_fleet_keys(conn: Connection, tenant: str, size: int) -> set[str]:
    """The fleet keys of every allocation granted to `tenant` up to `size`."""
    query = select(entries.c.event).where(
        entries.c.tenant == tenant, entries.c.type == "allocation.granted", entries.c.seq <= size
    )
    keys: set[str] = set()
    for (event,) in conn.execute(query):
        data = json.loads(event).get("data")
        keys |= allocation_keys(data) if isinstance(data, dict) else set()
    return keys


def covering_fleet_seqs(conn: Connection, tenant: str, size: int) -> dict[str, list[int]]:
    """For each fleet key of the tenant's allocations, the seqs (≤ size) of its fleet entries."""
    needed = tenant_fleet_keys(conn, tenant, size)
    found: dict[str, list[int]] = {key: [] for key in needed}
    if needed:
        for seq, _, keys in keyed_fleet_entries(conn, 0, size):
            for key in keys & needed:
                found[key].append(seq)
    return found


def fleet_section(
    conn: Connection, checkpoint: Any, tenant: str
) -> tuple[dict[str, Any], set[int]]:
    """A bundle's `fleet` member for checkpoint row `checkpoint`, and the seqs it lists:
    for each key of the tenant's allocations, its committed head with its inclusion proof
    in the fleet-head tree and the seqs of its entries, or the committed neighbours that
    prove it has none."""
    number, size = int(checkpoint.checkpoint_seq), int(checkpoint.tree_size)
    body = _note_body(checkpoint.note)
    if body is None or body.fleet_root is None:
        raise LedgerError(
            f"checkpoint #{number} was signed before checkpoints committed to the fleet's heads: "
            "a packet on it cannot prove its fleet evidence complete; sign a new one"
        )
    heads = stored_fleet_heads(conn, number)
    if (len(heads), fleet_root(heads)) != (body.fleet_count, body.fleet_root):
        raise LedgerError(
            f"checkpoint #{number}: the stored fleet heads do not give its signed fleet root "
            "(`gpuledger verify` names what is wrong)"
        )
    leaves = [fleet_head_leaf(h.key, h.count, h.head) for h in heads]
    orders = [key_order(h.key) for h in heads]
    items: dict[int, dict[str, Any]] = {}
    listed: set[int] = set()
    for key, seqs in sorted(covering_fleet_seqs(conn, tenant, size).items()):
        at = bisect_left(orders, key_order(key))
        if at < len(heads) and heads[at].key == key:
            if len(seqs) != heads[at].count:
                raise LedgerError(
                    f"checkpoint #{number}: fleet key {key!r} has {len(seqs)} entries up to seq "
                    f"{size}, the checkpoint commits to {heads[at].count}"
                )
            items[at] = {**_head_item(heads[at], at, leaves), "seqs": seqs}
            listed.update(seqs)
        else:  # absent: its neighbours in key order prove it
            for index in (at - 1, at):
                if 0 <= index < len(heads) and index not in items:
                    items[index] = _head_item(heads[index], index, leaves)
    return {"heads": [items[i] for i in sorted(items)]}, listed


def _head_item(head: FleetHead, index: int, leaves: list[bytes]) -> dict[str, Any]:
    return {
        "key": head.key,
        "count": head.count,
        "head": head.head.hex(),
        "index": index,
        "proof": [h.hex() for h in inclusion_path(index, leaves)],
    }


# -- verify -----------------------------------------------------------------------------


def fleet_heads_problem(conn: Connection) -> tuple[int, str] | None:
    """(tree size, message) of the first checkpoint whose stored fleet heads, or the fleet
    root its note signs, differ from what the entries give; None when all agree."""
    rows = conn.execute(
        select(checkpoints.c.checkpoint_seq, checkpoints.c.tree_size, checkpoints.c.note).order_by(
            checkpoints.c.tree_size, checkpoints.c.checkpoint_seq
        )
    ).all()
    if not conn.dialect.has_table(conn, "checkpoint_fleet"):  # a store from before the table
        committing = next((r for r in rows if _commits_fleet(r.note)), None)
        if committing is None:
            return None
        return int(committing.tree_size), (
            f"checkpoint #{committing.checkpoint_seq}: its note "
            "commits to fleet heads; no checkpoint_fleet is stored"
        )
    heads: Heads = {}
    done = 0
    for row in rows:
        number, size = int(row.checkpoint_seq), int(row.tree_size)
        extend_heads(heads, conn, done, size)
        done = max(done, size)
        message = _checkpoint_fleet_problem(conn, number, row.note, sorted_heads(heads))
        if message is not None:
            return size, f"checkpoint #{number}: {message}"
    return None


def _checkpoint_fleet_problem(
    conn: Connection, number: int, note: str, expected: list[FleetHead]
) -> str | None:
    stored = stored_fleet_heads(conn, number)
    body = _note_body(note)
    if body is None or body.fleet_root is None:
        return (
            f"{len(stored)} fleet heads are stored, but its note commits to none"
            if stored
            else None
        )
    given = {h.key: h for h in stored}
    for head in expected:
        row = given.pop(head.key, None)
        if row != head:
            found = "no row" if row is None else f"count {row.count}, head {row.head.hex()}"
            return (
                f"fleet key {head.key!r}: the entries give count {head.count}, "
                f"head {head.head.hex()}; checkpoint_fleet holds {found}"
            )
    if given:
        key = min(given, key=key_order)
        return f"fleet key {key!r}: checkpoint_fleet holds a row, but no fleet entry touches it"
    if (body.fleet_count, body.fleet_root) != (len(expected), fleet_root(expected)):
        return (
            f"its note signs fleet heads {body.fleet_count} {body.fleet_root.hex()}, "
            f"the entries give {len(expected)} {fleet_root(expected).hex()}"
        )
    return None
