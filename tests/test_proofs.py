"""RFC 9162 proofs: Certificate Transparency vectors, every leaf of every size, bit flips,
and the store-backed generator against a reference built straight from the RFC."""

from __future__ import annotations

from hashlib import sha256

import pytest

from ledger import Appender, Store, append_stream
from ledger.proofs import (
    ProofError,
    hash_leaf,
    inclusion_proof_length,
    verify_consistency,
    verify_inclusion,
)
from ledger.tree import TreeReader
from schemas import Accepted, Origin, validate_event
from tests.conftest import progress

# Certificate Transparency's reference test data (merkle_tree_test.cc, also in
# transparency-dev/merkle): eight leaves, the root at each size, and sample proofs.
CT_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    bytes(range(0x50, 0x58)),
    bytes(range(0x60, 0x70)),
]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_INCLUSION = [  # (leaf index, tree size, proof)
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
CT_CONSISTENCY = [  # (first size, second size, proof)
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]


def mth(leaves: list[bytes]) -> bytes:
    """MTH over leaf hashes exactly as RFC 9162 §2.1.1 writes it: a reference that shares
    no code with ledger/."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def ref_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) exactly as RFC 9162 §2.1.3.1 writes it."""
    n = len(leaves)
    if n == 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return ref_path(m, leaves[:k]) + [mth(leaves[k:])]
    return ref_path(m - k, leaves[k:]) + [mth(leaves[:k])]


def ref_subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b) exactly as RFC 9162 §2.1.4.1 writes it."""
    n = len(leaves)
    if m == n:
        return [] if whole else [mth(leaves)]
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        return ref_subproof(m, leaves[:k], whole) + [mth(leaves[k:])]
    return ref_subproof(m - k, leaves[k:], False) + [mth(leaves[:k])]


CT_HASHES = [hash_leaf(x) for x in CT_LEAVES]


def test_ct_roots() -> None:
    assert [mth(CT_HASHES[:n]).hex() for n in range(1, 9)] == CT_ROOTS


@pytest.mark.parametrize(("index", "size", "proof"), CT_INCLUSION)
def test_ct_inclusion_vectors(index: int, size: int, proof: list[str]) -> None:
    hashes = [bytes.fromhex(h) for h in proof]
    assert ref_path(index, CT_HASHES[:size]) == hashes
    verify_inclusion(index, size, CT_HASHES[index], hashes, bytes.fromhex(CT_ROOTS[size - 1]))


@pytest.mark.parametrize(("first", "second", "proof"), CT_CONSISTENCY)
def test_ct_consistency_vectors(first: int, second: int, proof: list[str]) -> None:
    hashes = [bytes.fromhex(h) for h in proof]
    assert (ref_subproof(first, CT_HASHES[:second], True) if first < second else []) == hashes
    verify_consistency(
        first,
        second,
        bytes.fromhex(CT_ROOTS[first - 1]),
        bytes.fromhex(CT_ROOTS[second - 1]),
        hashes,
    )


LEAVES_300 = [sha256(b"leaf %d" % i).digest() for i in range(300)]


def test_every_leaf_of_every_size_up_to_300_proves() -> None:
    for size in range(1, 301):
        root = mth(LEAVES_300[:size])
        for index in range(size):
            proof = ref_path(index, LEAVES_300[:size])
            assert len(proof) == inclusion_proof_length(index, size)
            verify_inclusion(index, size, LEAVES_300[index], proof, root)


def test_every_size_pair_up_to_64_is_consistent() -> None:
    for second in range(1, 65):
        for first in range(1, second + 1):
            proof = ref_subproof(first, LEAVES_300[:second], True) if first < second else []
            verify_consistency(
                first, second, mth(LEAVES_300[:first]), mth(LEAVES_300[:second]), proof
            )


def flips(proof: list[bytes]) -> list[list[bytes]]:
    out = []
    for i, h in enumerate(proof):
        for bit in range(len(h) * 8):
            changed = bytearray(h)
            changed[bit // 8] ^= 1 << (bit % 8)
            out.append(proof[:i] + [bytes(changed)] + proof[i + 1 :])
    return out


@pytest.mark.parametrize(
    ("index", "size"), [(0, 1), (0, 2), (5, 8), (6, 7), (12, 13), (0, 300), (257, 300), (299, 300)]
)
def test_every_single_bit_change_to_an_inclusion_proof_fails(index: int, size: int) -> None:
    root = mth(LEAVES_300[:size])
    proof = ref_path(index, LEAVES_300[:size])
    for bad in flips(proof) + flips([LEAVES_300[index]]):
        leaf = bad.pop() if len(bad) == len(proof) + 1 else LEAVES_300[index]
        with pytest.raises(ProofError):
            verify_inclusion(
                index, size, leaf if len(bad) == len(proof) else LEAVES_300[index], bad, root
            )
    with pytest.raises(ProofError, match="expected"):
        verify_inclusion(index, size, LEAVES_300[index], proof + [root], root)


@pytest.mark.parametrize(
    ("first", "second"), [(1, 2), (3, 7), (4, 8), (6, 8), (100, 300), (256, 300)]
)
def test_every_single_bit_change_to_a_consistency_proof_fails(first: int, second: int) -> None:
    a, b = mth(LEAVES_300[:first]), mth(LEAVES_300[:second])
    proof = ref_subproof(first, LEAVES_300[:second], True)
    for bad in flips(proof):
        with pytest.raises(ProofError):
            verify_consistency(first, second, a, b, bad)
    with pytest.raises(ProofError):
        verify_consistency(first, second, a, b, proof[:-1])


def test_store_proofs_equal_the_reference(store: Store) -> None:
    records = [Accepted.of(validate_event(progress(i)), Origin("t", i)) for i in range(1, 301)]
    append_stream(Appender(store), records, batch_size=64)
    with store.reading() as conn:
        reader = TreeReader(conn)
        leaves = reader.leaves(0, 300)
        for size in (1, 2, 3, 15, 16, 17, 31, 32, 33, 100, 255, 256, 257, 300):
            assert reader.root(size) == mth(leaves[:size])
            for index in sorted({0, size // 3, size // 2, size - 1}):
                assert reader.inclusion_proof(index, size) == ref_path(index, leaves[:size])
            for first in sorted({1, size // 2 or 1, size - 1 or 1, size}):
                expected = ref_subproof(first, leaves[:size], True) if first < size else []
                assert reader.consistency_proof(first, size) == expected


def test_multileaf_proofs_for_every_subset_shape() -> None:
    import random

    from ledger.proofs import multiproof_ranges, root_from_multiproof

    rng = random.Random(5)
    for size in range(1, 80, 2):
        for _ in range(4):
            chosen = sorted(rng.sample(range(size), rng.randint(1, size)))
            proof = [mth(LEAVES_300[a:b]) for a, b in multiproof_ranges(chosen, 0, size)]
            leaves = {i: LEAVES_300[i] for i in chosen}
            assert root_from_multiproof(size, leaves, proof) == mth(LEAVES_300[:size])
            if proof:
                for bad in flips(proof)[::101]:
                    with pytest.raises(ProofError):
                        verify_multiproof_root(size, leaves, bad)


def verify_multiproof_root(size: int, leaves: dict[int, bytes], proof: list[bytes]) -> None:
    from ledger.proofs import verify_multiproof

    verify_multiproof(size, leaves, proof, mth(LEAVES_300[:size]))
