"""Stand-alone verifiers for RFC 9162 §2.1 Merkle proofs, and the proof shapes.

This module imports nothing but the standard library, so a customer can copy it into their own tooling
and check a packet without gpuledger. Hash prefixes (RFC 9162 §2.1.1): leaf 0x00, node 0x01.
Every verifier first checks the proof's length against what the tree size implies and
says "expected N, got M" when they differ.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from hashlib import sha256

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"


class ProofError(ValueError):
    """A proof that does not verify; the message says which check failed."""


def hash_leaf(data: bytes) -> bytes:
    return sha256(LEAF_PREFIX + data).digest()


def hash_children(left: bytes, right: bytes) -> bytes:
    return sha256(NODE_PREFIX + left + right).digest()


def inclusion_proof_length(index: int, size: int) -> int:
    """How many hashes PATH(index, D[size]) holds (RFC 9162 §2.1.3.1)."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    inner = (index ^ (size - 1)).bit_length()
    border = bin(index >> inner).count("1")
    return inner + border


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, proof: list[bytes]) -> bytes:
    """The root that `proof` and `leaf` imply (RFC 9162 §2.1.3.2)."""
    expected = inclusion_proof_length(index, size)
    if len(proof) != expected:
        raise ProofError(f"inclusion proof for leaf {index} of {size}: expected {expected} hashes, got {len(proof)}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = hash_children(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = hash_children(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the tree is deep")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes], root: bytes) -> None:
    """Raise ProofError unless `leaf` is leaf `index` of the tree of `size` with `root`."""
    computed = root_from_inclusion_proof(index, size, leaf, proof)
    if computed != root:
        raise ProofError(f"inclusion proof for leaf {index} of {size}: computed root {computed.hex()}, expected {root.hex()}")


def verify_consistency(first: int, second: int, first_root: bytes, second_root: bytes, proof: list[bytes]) -> None:
    """Raise ProofError unless the tree of size `first` is a prefix of the one of `second`
    (RFC 9162 §2.1.4.2)."""
    if not 0 < first <= second:
        raise ProofError(f"no consistency proof from size {first} to size {second}")
    if first == second:
        if proof:
            raise ProofError(f"consistency proof between equal sizes: expected 0 hashes, got {len(proof)}")
        if first_root != second_root:
            raise ProofError(f"two roots for size {first}: {first_root.hex()} and {second_root.hex()}")
        return
    if not proof:
        raise ProofError(f"consistency proof from {first} to {second}: expected hashes, got none")
    path = list(proof)
    if first & (first - 1) == 0:  # an exact power of two: the first root is a node of the path
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(f"consistency proof from {first} to {second} is too long")
        if fn & 1 or fn == sn:
            fr = hash_children(c, fr)
            sr = hash_children(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = hash_children(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError(f"consistency proof from {first} to {second} is too short")
    if fr != first_root:
        raise ProofError(f"consistency proof from {first} to {second}: computed first root {fr.hex()}, expected {first_root.hex()}")
    if sr != second_root:
        raise ProofError(f"consistency proof from {first} to {second}: computed second root {sr.hex()}, expected {second_root.hex()}")


# -- checkpoints (c2sp.org/tlog-checkpoint) and per-tenant heads -----------------------

def merkle_root(leaves: list[bytes]) -> bytes:
    """MTH of a list of leaf hashes (RFC 9162 §2.1.1); the empty list hashes to SHA-256("")."""
    if not leaves:
        return sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hash_children(merkle_root(leaves[:k]), merkle_root(leaves[k:]))


def tenant_head_leaf(tenant: str, tenant_seq: int, leaf: bytes) -> bytes:
    """The leaf of the tenant-head tree: RFC 8785 JSON {"leaf", "tenant", "tenant_seq"}."""
    body = json.dumps({"leaf": leaf.hex(), "tenant": tenant, "tenant_seq": tenant_seq},
                      ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hash_leaf(body.encode("utf-8"))


def tenant_order(tenant: str) -> bytes:
    """Tenants are sorted by their UTF-8 bytes in the tenant-head tree."""
    return tenant.encode("utf-8")


@dataclass(frozen=True)
class Checkpoint:
    """The body of a checkpoint note: origin, size, root, then gpuledger's extension lines
    `chain <hex>`, `tenants <count> <base64 root>` and `time <RFC 3339>`."""

    origin: str
    size: int
    root: bytes
    chain_head: bytes
    tenant_count: int
    tenant_root: bytes
    time: str

    def text(self) -> str:
        return (
            f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"
            f"chain {self.chain_head.hex()}\n"
            f"tenants {self.tenant_count} {base64.b64encode(self.tenant_root).decode()}\n"
            f"time {self.time}\n"
        )

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        lines = text.split("\n")
        if len(lines) < 7 or lines[-1] != "":
            raise ProofError("a checkpoint has origin, size, root and extension lines, each ending in a newline")
        origin, size, root = lines[0], lines[1], lines[2]
        extensions = {}
        for line in lines[3:-1]:
            key, _, value = line.partition(" ")
            extensions[key] = value
        try:
            count, tenant_root = extensions["tenants"].split(" ")
            return cls(origin, int(size), base64.b64decode(root, validate=True),
                       bytes.fromhex(extensions["chain"]), int(count),
                       base64.b64decode(tenant_root, validate=True), extensions["time"])
        except (KeyError, ValueError) as exc:
            raise ProofError(f"malformed checkpoint: {exc}") from None


def verify_tenant_head(tenant: str, tenant_seq: int, leaf: bytes, index: int, proof: list[bytes], checkpoint: Checkpoint) -> None:
    """Raise ProofError unless the checkpoint commits to (tenant_seq, leaf) as `tenant`'s head."""
    verify_inclusion(index, checkpoint.tenant_count, tenant_head_leaf(tenant, tenant_seq, leaf), proof, checkpoint.tenant_root)


# -- multi-leaf inclusion proofs ---------------------------------------------------------
#
# A compact proof that several leaves are in one tree: walking RFC 9162's split of
# [0, size) left to right, every maximal subtree that holds none of the proven leaves
# contributes its hash, in that order. The verifier walks the same split.


def multiproof_ranges(indices: list[int], start: int, end: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes a multi-leaf proof of `indices` (sorted) holds."""
    inside = [i for i in indices if start <= i < end]
    if not inside:
        return [(start, end)]
    if end - start == 1:
        return []
    k = 1 << ((end - start - 1).bit_length() - 1)
    return multiproof_ranges(inside, start, start + k) + multiproof_ranges(inside, start + k, end)


def root_from_multiproof(size: int, leaves: dict[int, bytes], proof: list[bytes]) -> bytes:
    """The root implied by the proven leaves (index → leaf hash) and the proof's hashes."""
    indices = sorted(leaves)
    if not indices or indices[0] < 0 or indices[-1] >= size:
        raise ProofError(f"multi-leaf proof: leaf indices must lie in [0, {size})")
    expected = len(multiproof_ranges(indices, 0, size))
    if len(proof) != expected:
        raise ProofError(f"multi-leaf proof for {len(indices)} leaves of {size}: expected {expected} hashes, got {len(proof)}")
    supply = iter(proof)

    def walk(start: int, end: int) -> bytes:
        if not any(start <= i < end for i in indices):
            return next(supply)
        if end - start == 1:
            return leaves[start]
        k = 1 << ((end - start - 1).bit_length() - 1)
        left = walk(start, start + k)
        return hash_children(left, walk(start + k, end))

    return walk(0, size)


def verify_multiproof(size: int, leaves: dict[int, bytes], proof: list[bytes], root: bytes) -> None:
    computed = root_from_multiproof(size, leaves, proof)
    if computed != root:
        raise ProofError(f"multi-leaf proof of {len(leaves)} leaves: computed root {computed.hex()}, expected {root.hex()}")
