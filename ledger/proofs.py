"""Stand-alone verifiers for RFC 9162 §2.1 Merkle proofs, and the proof shapes.

This module imports nothing but the standard library, so a customer can copy it into their own
tooling
and check a packet without gpuledger. Hash prefixes (RFC 9162 §2.1.1): leaf 0x00, node 0x01.
Every verifier first checks the proof's length against what the tree size implies and
says "expected N, got M" when they differ.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from hashlib import sha256

from schemas.errors import CheckFailed

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
#: What every hash must be: one SHA-256 output (RFC 9162 §2.1; C2SP tlog-checkpoint roots).
HASH_SIZE = 32


class ProofError(CheckFailed, ValueError):
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
    _require_hash_sizes(f"inclusion proof for leaf {index} of {size}", leaf=leaf, proof=proof)
    if len(proof) != expected:
        raise ProofError(
            f"inclusion proof for leaf {index} of {size}: expected {expected} hashes, got "
            f"{len(proof)}"
        )
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
    _require_hash_sizes(f"inclusion proof for leaf {index} of {size}", root=root)
    computed = root_from_inclusion_proof(index, size, leaf, proof)
    if computed != root:
        raise ProofError(
            f"inclusion proof for leaf {index} of {size}: computed root {computed.hex()}, "
            f"expected {root.hex()}"
        )


def _require_hash_sizes(
    where: str, proof: list[bytes] | tuple[bytes, ...] = (), **hashes: bytes
) -> None:
    """Every hash a proof handles is one SHA-256 output: "expected 32 bytes, got M"."""
    named = list(hashes.items()) + [(f"proof hash {i}", h) for i, h in enumerate(proof)]
    for name, value in named:
        if len(value) != HASH_SIZE:
            raise ProofError(
                f"{where}: {name.replace('_', ' ')}: expected 32 bytes, got {len(value)}"
            )


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: list[bytes]
) -> None:
    """Raise ProofError unless the tree of size `first` is a prefix of the one of `second`
    (RFC 9162 §2.1.4.2)."""
    if not 0 < first <= second:
        raise ProofError(f"no consistency proof from size {first} to size {second}")
    _require_hash_sizes(
        f"consistency proof from {first} to {second}",
        first_root=first_root,
        second_root=second_root,
        proof=proof,
    )
    if first == second:
        if proof:
            raise ProofError(
                f"consistency proof between equal sizes: expected 0 hashes, got {len(proof)}"
            )
        if first_root != second_root:
            raise ProofError(
                f"two roots for size {first}: {first_root.hex()} and {second_root.hex()}"
            )
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
        raise ProofError(
            f"consistency proof from {first} to {second}: computed first root {fr.hex()}, "
            f"expected {first_root.hex()}"
        )
    if sr != second_root:
        raise ProofError(
            f"consistency proof from {first} to {second}: computed second root {sr.hex()}, "
            f"expected {second_root.hex()}"
        )


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
    body = json.dumps(
        {"leaf": leaf.hex(), "tenant": tenant, "tenant_seq": tenant_seq},
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )
    return hash_leaf(body.encode("utf-8"))


def tenant_order(tenant: str) -> bytes:
    """Tenants are sorted by their UTF-8 bytes in the tenant-head tree."""
    return tenant.encode("utf-8")


#: tlog-checkpoint: "ASCII decimal ... with no leading zeroes (unless ... 0)". No sign,
#: no spaces, no underscores, no other scripts' digits (which int() would all accept).
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_HEX_HASH = re.compile(r"[0-9a-f]{64}")
_MAX_SIZE = 2**63 - 1  # the tree size is a u64 everywhere, an int64 in Go's tlog


def parse_decimal(text: str, what: str) -> int:
    """A C2SP decimal: ASCII digits, no leading zero, no sign; at most 2**63 - 1."""
    if not _DECIMAL.fullmatch(text) or int(text) > _MAX_SIZE:
        raise ProofError(f"{what}: {text[:30]!r} is not an ASCII decimal without leading zeroes")
    return int(text)


#: RFC 4648 §4 base64 with its padding, whole quads only: what Go's base64.StdEncoding
#: reads. Python's decoder alone also takes data after the padding, or padding inside.
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def b64decode_strict(text: str) -> bytes:
    """Standard base64, exactly: raise ValueError on anything Go's StdEncoding refuses."""
    if not _BASE64.fullmatch(text):
        raise ValueError("not standard base64 with padding")
    return base64.b64decode(text, validate=True)


def parse_hash_base64(text: str, what: str) -> bytes:
    """A base64 (RFC 4648 §4) SHA-256 hash: exactly 32 bytes."""
    try:
        raw = b64decode_strict(text)
    except ValueError:
        raise ProofError(f"{what}: not valid base64") from None
    if len(raw) != HASH_SIZE:
        raise ProofError(f"{what}: expected {HASH_SIZE} bytes, got {len(raw)}")
    return raw


@dataclass(frozen=True)
class CheckpointBody:
    """Any log's checkpoint text (c2sp.org/tlog-checkpoint): origin, size, root, then
    opaque extension lines. Parsing is as strict as the spec: at least three lines, each
    non-empty and ending in a newline; no control characters but the newlines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [
            self.origin,
            str(self.size),
            base64.b64encode(self.root).decode(),
            *self.extensions,
        ]
        return "".join(f"{line}\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> CheckpointBody:
        if not text.endswith("\n"):
            raise ProofError("a checkpoint's text ends in a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise ProofError(
                f"a checkpoint has at least 3 lines (origin, size, root), got {len(lines)}"
            )
        for number, line in enumerate(lines, 1):
            if not line:
                raise ProofError(f"checkpoint line {number} is empty")
            if any(ord(c) < 0x20 for c in line):
                raise ProofError(f"checkpoint line {number} holds a control character")
        return cls(
            lines[0],
            parse_decimal(lines[1], "checkpoint size"),
            parse_hash_base64(lines[2], "checkpoint root"),
            tuple(lines[3:]),
        )


@dataclass(frozen=True)
class Checkpoint:
    """gpuledger's checkpoint: origin, size, root, then the extension lines `chain <hex>`,
    `tenants <count> <base64 root>`, `time <RFC 3339>`, (since the quarantine is
    chained) `quarantine <count> <hex head>` and (since checkpoints commit to the fleet's
    heads, ledger/fleet_heads.py) `fleet <count> <base64 root>`. Other extension lines
    are ignored."""

    origin: str
    size: int
    root: bytes
    chain_head: bytes
    tenant_count: int
    tenant_root: bytes
    time: str
    quarantine_count: int | None = None
    quarantine_head: bytes | None = None
    fleet_count: int | None = None
    fleet_root: bytes | None = None

    def text(self) -> str:
        extensions = [
            f"chain {self.chain_head.hex()}",
            f"tenants {self.tenant_count} {base64.b64encode(self.tenant_root).decode()}",
            f"time {self.time}",
        ]
        if self.quarantine_count is not None and self.quarantine_head is not None:
            extensions.append(f"quarantine {self.quarantine_count} {self.quarantine_head.hex()}")
        if self.fleet_count is not None and self.fleet_root is not None:
            fleet_root = base64.b64encode(self.fleet_root).decode()
            extensions.append(f"fleet {self.fleet_count} {fleet_root}")
        return CheckpointBody(self.origin, self.size, self.root, tuple(extensions)).text()

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        body = CheckpointBody.parse(text)
        extensions: dict[str, str] = {}
        for line in body.extensions:
            key, _, value = line.partition(" ")
            if key in extensions:
                raise ProofError(f"checkpoint: the {key!r} extension line appears twice")
            extensions[key] = value
        for key in ("chain", "tenants", "time"):
            if key not in extensions:
                raise ProofError(f"not a gpuledger checkpoint: no {key!r} extension line")
        count, _, tenant_root = extensions["tenants"].partition(" ")
        quarantine = None
        if "quarantine" in extensions:
            q_count, _, q_head = extensions["quarantine"].partition(" ")
            quarantine = (
                parse_decimal(q_count, "checkpoint quarantine count"),
                _hex_hash(q_head, "checkpoint quarantine head"),
            )
        fleet = None
        if "fleet" in extensions:
            f_count, _, f_root = extensions["fleet"].partition(" ")
            fleet = (
                parse_decimal(f_count, "checkpoint fleet count"),
                parse_hash_base64(f_root, "checkpoint fleet root"),
            )
        return cls(
            body.origin,
            body.size,
            body.root,
            _hex_hash(extensions["chain"], "checkpoint chain head"),
            parse_decimal(count, "checkpoint tenant count"),
            parse_hash_base64(tenant_root, "checkpoint tenant root"),
            extensions["time"],
            *(quarantine or (None, None)),
            *(fleet or (None, None)),
        )


def _hex_hash(text: str, what: str) -> bytes:
    if not _HEX_HASH.fullmatch(text):
        raise ProofError(f"{what}: expected 64 lower-case hex digits, got {text[:70]!r}")
    return bytes.fromhex(text)


def verify_tenant_head(
    tenant: str,
    tenant_seq: int,
    leaf: bytes,
    index: int,
    proof: list[bytes],
    checkpoint: Checkpoint,
) -> None:
    """Raise ProofError unless the checkpoint commits to (tenant_seq, leaf) as `tenant`'s head."""
    verify_inclusion(
        index,
        checkpoint.tenant_count,
        tenant_head_leaf(tenant, tenant_seq, leaf),
        proof,
        checkpoint.tenant_root,
    )


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
            elif (
                not p & 1
                and (p + 1) << level < size
                and (i + 1 == len(covered) or covered[i + 1] != p + 1)
            ):
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
    return [
        (start + (p << level), start + min((p + 1) << level, size))
        for level, p in _uncovered_siblings(inside, size)
    ]


def root_from_multiproof(size: int, leaves: dict[int, bytes], proof: list[bytes]) -> bytes:
    """The root implied by the proven leaves (index → leaf hash) and the proof's hashes."""
    indices = sorted(leaves)
    if not indices or indices[0] < 0 or indices[-1] >= size:
        raise ProofError(f"multi-leaf proof: leaf indices must lie in [0, {size})")
    siblings = _uncovered_siblings(indices, size)
    if len(proof) != len(siblings):
        raise ProofError(
            f"multi-leaf proof for {len(indices)} leaves of {size}: expected {len(siblings)} "
            f"hashes, got {len(proof)}"
        )
    given = dict(zip(siblings, proof))
    level_nodes = [(i, leaves[i]) for i in indices]
    level = 0
    while (1 << level) < size:
        level_nodes = _level_up(level_nodes, level, size, given)
        level += 1
    return level_nodes[0][1]


def _level_up(
    nodes: list[tuple[int, bytes]], level: int, size: int, given: dict[Node, bytes]
) -> list[tuple[int, bytes]]:
    """The parents of `nodes` (sorted by position) at `level`, each sibling taken from
    `nodes` or from the proof; a node whose right sibling is empty is carried up."""
    parents: list[tuple[int, bytes]] = []
    append, prefix, count, i = parents.append, NODE_PREFIX, len(nodes), 0
    # hash_children inlined: this loop runs once for every node of every proven path
    while i < count:
        p, node_hash = nodes[i]
        if p & 1:
            append((p >> 1, sha256(prefix + given[(level, p - 1)] + node_hash).digest()))
        elif i + 1 < count and nodes[i + 1][0] == p + 1:
            append((p >> 1, sha256(prefix + node_hash + nodes[i + 1][1]).digest()))
            i += 1
        elif (p + 1) << level < size:
            append((p >> 1, sha256(prefix + node_hash + given[(level, p + 1)]).digest()))
        else:
            append((p >> 1, node_hash))
        i += 1
    return parents


def verify_multiproof(
    size: int, leaves: dict[int, bytes], proof: list[bytes], root: bytes
) -> None:
    computed = root_from_multiproof(size, leaves, proof)
    if computed != root:
        raise ProofError(
            f"multi-leaf proof of {len(leaves)} leaves: computed root {computed.hex()}, expected "
            f"{root.hex()}"
        )
