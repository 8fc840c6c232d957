"""Stand-alone verifiers for RFC 9162 §2.1 Merkle proofs, and the proof shapes.

This module imports nothing but hashlib, so a customer can copy it into their own tooling
and check a packet without gpuledger. Hash prefixes (RFC 9162 §2.1.1): leaf 0x00, node 0x01.
Every verifier first checks the proof's length against what the tree size implies and
says "expected N, got M" when they differ.
"""

from __future__ import annotations

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
