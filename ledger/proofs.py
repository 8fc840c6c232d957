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
# contributes its hash, in that order. That order is the order of the subtrees' first
# leaves, which lets both sides work bottom-up, level by level, in O(k log n) for k
# proven leaves: RFC 9162's tree is the binary tree whose node (level l, position p)
# covers leaves [p·2^l, (p+1)·2^l) ∩ [0, size), a node with an empty right half being its
# left child carried up unchanged.

Node = tuple[int, int]  # (level, position)


def _uncovered_siblings(indices: list[int], size: int) -> list[Node]:
    """Every maximal subtree of the tree of `size` holding none of `indices` (sorted,
    distinct, in range): the siblings of the proven leaves' paths, sorted by first leaf."""
    found: list[Node] = []
    covered, level = indices, 0
    while (1 << level) < size:
        for i, p in enumerate(covered):
            if p & 1 and (i == 0 or covered[i - 1] != p - 1):
                found.append((level, p - 1))
            elif not p & 1 and (p + 1) << level < size and (i + 1 == len(covered) or covered[i + 1] != p + 1):
                found.append((level, p + 1))
        covered = _parents(covered)
        level += 1
    return sorted(found, key=lambda node: node[1] << node[0])


def _parents(positions: list[int]) -> list[int]:
    parents: list[int] = []
    for p in positions:
        if not parents or parents[-1] != p >> 1:
            parents.append(p >> 1)
    return parents


def multiproof_ranges(indices: list[int], start: int, end: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes a multi-leaf proof of `indices` (sorted) holds, for the
    subtree [start, end) (indices outside it are ignored)."""
    size = end - start
    inside = sorted({i - start for i in indices if start <= i < end})
    if not inside:
        return [(start, end)]
    return [(start + (p << level), start + min((p + 1) << level, size)) for level, p in _uncovered_siblings(inside, size)]


def root_from_multiproof(size: int, leaves: dict[int, bytes], proof: list[bytes]) -> bytes:
    """The root implied by the proven leaves (index → leaf hash) and the proof's hashes."""
    indices = sorted(leaves)
    if not indices or indices[0] < 0 or indices[-1] >= size:
        raise ProofError(f"multi-leaf proof: leaf indices must lie in [0, {size})")
    siblings = _uncovered_siblings(indices, size)
    if len(proof) != len(siblings):
        raise ProofError(f"multi-leaf proof for {len(indices)} leaves of {size}: expected {len(siblings)} hashes, got {len(proof)}")
    given = dict(zip(siblings, proof))
    level_nodes = [(i, leaves[i]) for i in indices]
    level = 0
    while (1 << level) < size:
        level_nodes = _level_up(level_nodes, level, size, given)
        level += 1
    return level_nodes[0][1]


def _level_up(nodes: list[tuple[int, bytes]], level: int, size: int, given: dict[Node, bytes]) -> list[tuple[int, bytes]]:
    """The parents of `nodes` (sorted by position) at `level`, each sibling taken from
    `nodes` or from the proof; a node whose right sibling is empty is carried up."""
    parents: list[tuple[int, bytes]] = []
    i = 0
    while i < len(nodes):
        p, node_hash = nodes[i]
        if p & 1:
            parents.append((p >> 1, hash_children(given[(level, p - 1)], node_hash)))
        elif i + 1 < len(nodes) and nodes[i + 1][0] == p + 1:
            parents.append((p >> 1, hash_children(node_hash, nodes[i + 1][1])))
            i += 1
        elif (p + 1) << level < size:
            parents.append((p >> 1, hash_children(node_hash, given[(level, p + 1)])))
        else:
            parents.append((p >> 1, node_hash))
        i += 1
    return parents


def verify_multiproof(size: int, leaves: dict[int, bytes], proof: list[bytes], root: bytes) -> None:
    computed = root_from_multiproof(size, leaves, proof)
    if computed != root:
        raise ProofError(f"multi-leaf proof of {len(leaves)} leaves: computed root {computed.hex()}, expected {root.hex()}")
