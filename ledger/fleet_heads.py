"""Fleet heads: what a checkpoint commits to so that a tenant's packet can prove it holds
*every* fleet event touching the tenant's allocations (docs/ledger-format.md, "The
fleet-head tree"; docs/packets.md, "Fleet evidence is complete").

A fleet event (tenant null) of a keyed type touches one or more **fleet keys**: `node:<name>`,
`fabric:<domain>`, and `device:<device>` for a fault that names a device and no node. An
allocation has the keys of its `node`, each of its `nodes`, its `fabric_domain`, and its
`devices` (each device, and the whole GPU a MIG instance `<gpu>/<instance>` is carved
from). Every fault the engine's touch rule (reconcile/RULES.md §7) says touches an
allocation shares a key with it, so a packet that holds all the fleet entries of its
allocations' keys holds every touching one (and more: the other devices of a node, the
events outside the window; fleet events carry no tenant's data).

For each key, the leaves of its fleet entries in seq order are folded into a chain:

    head_0 = 32 zero bytes      head_i = SHA-256(0x04 ‖ head_{i-1} ‖ leaf_i)

and a checkpoint commits (its `fleet <count> <base64 root>` line) to an RFC 9162 tree over
the (key, count, head) of every key, sorted by the key's UTF-8 bytes. A packet carries, for
each key of its allocations, either that key's committed head with its entries, or the
committed neighbours that prove the key has none.

The standard library and ledger/proofs.py only: one function derives the keys for the
checkpoint's writer and the packet's verifier, and a customer can copy both files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from hashlib import sha256
from typing import Any

from ledger.proofs import Checkpoint, ProofError, hash_leaf, verify_inclusion

#: The fleet event types that touch keys: faults, their clearings, fleet changes, and the
#: devices' counters (what a GPU did: a dispute's idle finding reads them).
KEYED_TYPES = ("health.fault", "health.cleared", "fleet.change", "device.counters")
#: Hash-domain prefix of a key's chain (0x00 leaf, 0x01 node, 0x02 entry chain, 0x03 quarantine).
FLEET_CHAIN_PREFIX = b"\x04"
ZERO_HEAD = bytes(32)


def _text(value: Any) -> str | None:
    """A name as the engine compares it: text, and a device index as its digits."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    return str(value)


def _texts(values: Any) -> list[str]:
    if not isinstance(values, list):
        return []
    return [t for t in (_text(v) for v in values) if t is not None]


def event_keys(type_: str, data: Mapping[str, Any]) -> set[str]:
    """The fleet keys a fleet event of `type_` with `data` touches (none for other types)."""
    keys: set[str] = set()
    if type_ in ("health.fault", "health.cleared", "device.counters"):
        node, device, fabric = (_text(data.get(f)) for f in ("node", "device", "fabric_domain"))
        if node is not None:
            keys.add(f"node:{node}")
        elif device is not None:  # a device named without its node touches that device anywhere
            keys.add(f"device:{device}")
        if fabric is not None:
            keys.add(f"fabric:{fabric}")
    elif type_ == "fleet.change":
        keys.update(f"node:{n}" for n in [*_texts([data.get("node")]), *_texts(data.get("nodes"))])
    return keys


def allocation_keys(grant: Mapping[str, Any]) -> set[str]:
    """The fleet keys of an allocation (its `allocation.granted` data)."""
    keys = {f"node:{n}" for n in [*_texts([grant.get("node")]), *_texts(grant.get("nodes"))]}
    fabric = _text(grant.get("fabric_domain"))
    if fabric is not None:
        keys.add(f"fabric:{fabric}")
    for device in _texts(grant.get("devices")):
        keys.update((f"device:{device}", f"device:{device.split('/', 1)[0]}"))
    return keys


def entry_keys(type_: str, event: str) -> set[str]:
    """The fleet keys of a fleet entry, from its canonical event text."""
    if type_ not in KEYED_TYPES:
        return set()
    data = json.loads(event).get("data")
    return event_keys(type_, data) if isinstance(data, dict) else set()


def chain_step(head: bytes, leaf: bytes) -> bytes:
    return sha256(FLEET_CHAIN_PREFIX + head + leaf).digest()


def chain_of(leaves: Iterable[bytes]) -> bytes:
    head = ZERO_HEAD
    for leaf in leaves:
        head = chain_step(head, leaf)
    return head


def key_order(key: str) -> bytes:
    """Keys are sorted by their UTF-8 bytes in the fleet-head tree."""
    return key.encode("utf-8")


def fleet_head_leaf(key: str, count: int, head: bytes) -> bytes:
    """The leaf of the fleet-head tree: RFC 8785 JSON {"count", "head", "key"}."""
    body = json.dumps(
        {"count": count, "head": head.hex(), "key": key},
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )
    return hash_leaf(body.encode("utf-8"))


@dataclass(frozen=True)
class FleetHead:
    key: str
    count: int
    head: bytes


# -- checking a packet's fleet heads ----------------------------------------------------


def check_fleet(
    fleet: Any,
    needed: set[str],
    leaves: Mapping[int, bytes],
    carried: Mapping[int, set[str]],
    checkpoint: Checkpoint,
) -> int:
    """Raise ProofError unless `fleet` (a bundle's `fleet` member) proves, against the
    checkpoint, that the packet holds every fleet entry of each key in `needed`: the key's
    committed (count, head) is the chain of the listed seqs' leaves, or committed
    neighbours show the key has no entry. `leaves` maps a proven entry's seq to its leaf
    (carried or withheld); `carried` a carried fleet entry's seq to its keys. Returns the
    number of keys with entries."""
    if checkpoint.fleet_count is None or checkpoint.fleet_root is None:
        raise ProofError(
            f"fleet: the checkpoint of tree size {checkpoint.size} commits to no fleet heads "
            "(signed before checkpoints did): the packet cannot prove it holds every fleet "
            "event touching the tenant's allocations; a packet on a newer checkpoint can"
        )
    if not isinstance(fleet, dict) or not isinstance(fleet.get("heads"), list):
        raise ProofError(
            "fleet: the bundle carries no fleet heads: it cannot prove it holds every fleet event "
            "touching the tenant's allocations"
        )
    heads = _proven_heads(fleet["heads"], checkpoint)
    by_key = {item["key"]: item for item in heads}
    for key in sorted(needed, key=key_order):
        if key in by_key:
            _check_chain(by_key[key], leaves, carried)
        else:
            _check_absent(key, heads, checkpoint.fleet_count)
    return sum(1 for key in needed if key in by_key)


def _proven_heads(items: list[Any], checkpoint: Checkpoint) -> list[dict[str, Any]]:
    """The fleet-head items, each verified in the checkpoint's fleet-head tree, by index."""
    assert checkpoint.fleet_count is not None and checkpoint.fleet_root is not None
    by_index: dict[int, dict[str, Any]] = {}
    for item in items:
        key, count, index = item["key"], item["count"], item["index"]
        if (
            not isinstance(key, str)
            or not isinstance(count, int)
            or not isinstance(index, int)
            or count < 1
        ):
            raise ProofError(f"fleet: a head item is malformed: {str(item)[:80]}")
        proof = [bytes.fromhex(h) for h in item["proof"]]
        leaf = fleet_head_leaf(key, count, bytes.fromhex(item["head"]))
        try:
            verify_inclusion(index, checkpoint.fleet_count, leaf, proof, checkpoint.fleet_root)
        except ProofError as exc:
            raise ProofError(
                f"fleet key {key!r}: the checkpoint does not commit to count {count}, "
                f"head {item['head']}: {exc}"
            ) from None
        if by_index.setdefault(index, item) is not item:
            raise ProofError(f"fleet: two head items at index {index}")
    return [by_index[i] for i in sorted(by_index)]


def _check_chain(
    item: dict[str, Any], leaves: Mapping[int, bytes], carried: Mapping[int, set[str]]
) -> None:
    key, count, seqs = item["key"], item["count"], item.get("seqs")
    if not isinstance(seqs, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in seqs
    ):
        raise ProofError(
            f"fleet key {key!r}: the checkpoint commits to {count} entries, the packet lists none"
        )
    if seqs != sorted(set(seqs)):
        raise ProofError(f"fleet key {key!r}: its seqs are not in increasing order")
    if len(seqs) != count:
        raise ProofError(
            f"fleet key {key!r}: the checkpoint commits to {count} entries, "
            f"the packet holds {len(seqs)}: fleet entries were left out"
        )
    missing = [s for s in seqs if s not in leaves]
    if missing:
        raise ProofError(
            f"fleet key {key!r}: the checkpoint commits to {count} entries, the packet lacks "
            f"seq {missing[0]}: a fleet entry was left out"
        )
    stray = next((s for s in seqs if s in carried and key not in carried[s]), None)
    if stray is not None:
        raise ProofError(
            f"fleet key {key!r}: seq {stray} is listed under it but does not touch it"
        )
    if chain_of(leaves[s] for s in seqs) != bytes.fromhex(item["head"]):
        raise ProofError(
            f"fleet key {key!r}: the packet's {count} entries do not give the head the checkpoint "
            f"commits to: fleet entries were left out or replaced"
        )


def _check_absent(key: str, heads: list[dict[str, Any]], count: int) -> None:
    """Committed neighbours prove `key` is no leaf: the tree is empty, or adjacent leaves
    (or the first or last) bracket it in key order."""
    order = key_order(key)
    below = [h for h in heads if key_order(h["key"]) < order]
    above = [h for h in heads if key_order(h["key"]) > order]
    left = max((h["index"] for h in below), default=-1)
    right = min((h["index"] for h in above), default=count)
    if count == 0 or right == left + 1:
        return
    raise ProofError(
        f"fleet key {key!r}: the packet holds neither the checkpoint's head for it nor neighbours "
        "proving it has none: its fleet entries cannot be shown complete"
    )
