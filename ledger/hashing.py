"""Leaf, chain and node hashes (docs/ledger-format.md), each with its own domain-separation prefix.

    leaf  = SHA-256(0x00 ‖ canonical(entry without hashes, salt included))
    node  = SHA-256(0x01 ‖ left ‖ right)                      (RFC 9162 §2.1.1)
    chain = SHA-256(0x02 ‖ chain[seq-1] ‖ leaf),  chain[0] = 32 zero bytes
    tenant_prev = leaf of the same tenant's previous entry (32 zero bytes for the first)

The canonical entry is an RFC 8785 object with the keys event, id, recorded_at, salt,
seq, source, tenant, tenant_seq, type (in that, sorted, order); `event` is the stored
canonical event spliced in verbatim, `salt` is lower-case hex. Building it by splicing
hashes the bytes that are stored, never a re-serialisation of them.
"""

from __future__ import annotations

from hashlib import sha256

import orjson

from ledger.proofs import LEAF_PREFIX, NODE_PREFIX
from ledger.proofs import hash_children as node_hash

__all__ = [
    "CHAIN_PREFIX",
    "LEAF_PREFIX",
    "NODE_PREFIX",
    "ZERO_HASH",
    "chain_hash",
    "entry_bytes",
    "entry_leaf",
    "leaf_hash",
    "node_hash",
]

CHAIN_PREFIX = b"\x02"
ZERO_HASH = bytes(32)
HASH_SIZE = 32
SALT_SIZE = 16
_EVENT_OPEN = b'{"event":'
_LEAF_EVENT_OPEN = LEAF_PREFIX + _EVENT_OPEN


def _fields(
    seq: int,
    recorded_at: str,
    source: str,
    id: str,
    type: str,
    tenant: str | None,
    tenant_seq: int | None,
    salt: bytes,
) -> bytes:
    """The entry's members after `event`, as `,"id":…,"type":…}`: one orjson call on a dict
    built in sorted key order. orjson escapes strings exactly as RFC 8785 does (checked by
    the canonical tests), and writes these integers (< 2**53) as JCS does."""
    members = orjson.dumps(
        {
            "id": id,
            "recorded_at": recorded_at,
            "salt": salt.hex(),
            "seq": seq,
            "source": source,
            "tenant": tenant,
            "tenant_seq": tenant_seq,
            "type": type,
        }
    )
    return b"," + members[1:]


def entry_bytes(
    seq: int,
    recorded_at: str,
    source: str,
    id: str,
    type: str,
    tenant: str | None,
    tenant_seq: int | None,
    event: bytes,
    salt: bytes,
) -> bytes:
    """The canonical bytes of an entry without its hashes."""
    return (
        _EVENT_OPEN + event + _fields(seq, recorded_at, source, id, type, tenant, tenant_seq, salt)
    )


def entry_leaf(
    seq: int,
    recorded_at: str,
    source: str,
    id: str,
    type: str,
    tenant: str | None,
    tenant_seq: int | None,
    event: bytes,
    salt: bytes,
) -> bytes:
    """leaf_hash(entry_bytes(...)), fed to the hash in pieces: the event is never copied."""
    digest = sha256(_LEAF_EVENT_OPEN)
    digest.update(event)
    digest.update(_fields(seq, recorded_at, source, id, type, tenant, tenant_seq, salt))
    return digest.digest()


def leaf_hash(entry: bytes) -> bytes:
    return sha256(LEAF_PREFIX + entry).digest()


def chain_hash(previous: bytes, leaf: bytes) -> bytes:
    return sha256(CHAIN_PREFIX + previous + leaf).digest()
