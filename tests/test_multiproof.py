"""Multi-leaf inclusion proofs (ledger/proofs.py) against a naive RFC 9162 recursion
written here: the tree hash MTH of §2.1.1 and the proof as its definition says it (walking
the RFC's split left to right, the hash of every maximal subtree with no proven leaf).
Many tree sizes, including powers of two and their neighbours, and leaf subsets from one
leaf to all of them, first and last leaves, runs and scattered picks."""

from __future__ import annotations

from hashlib import sha256

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import Appender, Store, append_stream
from ledger.proofs import ProofError, multiproof_ranges, root_from_multiproof, verify_multiproof
from ledger.tree import TreeReader
from schemas import Accepted, Origin, validate_event
from tests.conftest import SLOW, progress


def rfc_leaf(i: int) -> bytes:
    return sha256(b"\x00" + i.to_bytes(4, "big")).digest()


def rfc_mth(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) of RFC 9162 §2.1.1 (leaves already hashed)."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)  # the largest power of two smaller than n
    return sha256(b"\x01" + rfc_mth(leaves[:k]) + rfc_mth(leaves[k:])).digest()


def naive_proof(leaves: list[bytes], chosen: set[int], start: int = 0) -> list[bytes]:
    """The hashes of the maximal subtrees of D[start:start+len(leaves)] holding no chosen leaf."""
    if not any(start <= i < start + len(leaves) for i in chosen):
        return [rfc_mth(leaves)]
    if len(leaves) == 1:
        return []
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return naive_proof(leaves[:k], chosen, start) + naive_proof(leaves[k:], chosen, start + k)


EDGE_SIZES = sorted({1, 2, 3} | {n + d for n in (4, 8, 64, 256, 1024, 4096) for d in (-1, 0, 1)})


@st.composite
def trees_and_subsets(draw: st.DrawFn) -> tuple[int, set[int]]:
    size = draw(st.one_of(st.sampled_from(EDGE_SIZES), st.integers(1, 700)))
    shape = draw(
        st.sampled_from(["scattered", "one", "all", "run", "first and last", "every other"])
    )
    if shape == "one":
        return size, {draw(st.sampled_from(sorted({0, size - 1, draw(st.integers(0, size - 1))})))}
    if shape == "all":
        return size, set(range(size))
    if shape == "run":
        a = draw(st.integers(0, size - 1))
        return size, set(range(a, draw(st.integers(a + 1, size))))
    if shape == "first and last":
        return size, {0, size - 1}
    if shape == "every other":
        return size, set(range(draw(st.integers(0, 1)) if size > 1 else 0, size, 2))
    return size, draw(st.sets(st.integers(0, size - 1), min_size=1, max_size=min(size, 60)))


PROPERTY = settings(max_examples=2000 if SLOW else 300, deadline=None)


@PROPERTY
@given(trees_and_subsets())
def test_the_proof_is_the_naive_one_and_gives_the_rfc_root(case: tuple[int, set[int]]) -> None:
    size, chosen = case
    leaves = [rfc_leaf(i) for i in range(size)]
    proof = naive_proof(leaves, chosen)
    assert [rfc_mth(leaves[a:b]) for a, b in multiproof_ranges(sorted(chosen), 0, size)] == proof
    proven = {i: leaves[i] for i in chosen}
    assert root_from_multiproof(size, proven, proof) == rfc_mth(leaves)


@PROPERTY
@given(trees_and_subsets(), st.data())
def test_any_changed_hash_or_length_fails(case: tuple[int, set[int]], data: st.DataObject) -> None:
    size, chosen = case
    leaves = [rfc_leaf(i) for i in range(size)]
    root, proof = rfc_mth(leaves), naive_proof(leaves, chosen)
    proven = {i: leaves[i] for i in chosen}
    changed_leaf = data.draw(st.sampled_from(sorted(chosen)))
    with pytest.raises(ProofError, match="computed root"):
        verify_multiproof(size, {**proven, changed_leaf: rfc_leaf(size + 1)}, proof, root)
    if proof:
        at = data.draw(st.integers(0, len(proof) - 1))
        bad = proof[:at] + [sha256(proof[at]).digest()] + proof[at + 1 :]
        with pytest.raises(ProofError, match="computed root"):
            verify_multiproof(size, proven, bad, root)
    with pytest.raises(ProofError, match=f"expected {len(proof)} hashes, got {len(proof) + 1}"):
        verify_multiproof(size, proven, proof + [root], root)


def test_a_larger_tree_with_scattered_leaves() -> None:
    """Past the sizes above: 20,000 leaves, one in seven proven (a tenant among several)."""
    size = 20_000
    leaves = [rfc_leaf(i) for i in range(size)]
    chosen = set(range(3, size, 7))
    proof = naive_proof(leaves, chosen)
    assert root_from_multiproof(size, {i: leaves[i] for i in chosen}, proof) == rfc_mth(leaves)


@pytest.mark.parametrize(
    ("size", "indices", "reason"),
    [
        (8, [], "leaf indices must lie in [0, 8)"),
        (8, [8], "leaf indices must lie in [0, 8)"),
        (8, [-1, 2], "leaf indices must lie in [0, 8)"),
    ],
)
def test_leaves_outside_the_tree_are_refused(size: int, indices: list[int], reason: str) -> None:
    with pytest.raises(ProofError) as caught:
        root_from_multiproof(size, {i: bytes(32) for i in indices}, [])
    assert reason in str(caught.value)


def test_ranges_of_a_subtree_and_of_no_leaves() -> None:
    # the subtree [8, 13) of a larger tree, leaf 9 proven: 8, then [10, 12), then 12
    assert multiproof_ranges([1, 9, 20], 8, 13) == [(8, 9), (10, 12), (12, 13)]
    assert multiproof_ranges([], 0, 5) == [(0, 5)]


def test_the_store_cuts_the_naive_proof(store: Store) -> None:
    """TreeReader.multiproof (stored subtree hashes) against the naive proof of its leaves."""
    append_stream(
        Appender(store),
        [Accepted.of(validate_event(progress(i)), Origin("t", i)) for i in range(1, 301)],
        batch_size=64,
    )
    with store.reading() as conn:
        reader = TreeReader(conn)
        leaves = reader.leaves(0, 300)
        for size, chosen in (
            (300, set(range(0, 300, 3))),
            (257, {0, 256}),
            (256, {17}),
            (100, set(range(40, 90))),
        ):
            proof = reader.multiproof(sorted(chosen), size)
            assert proof == naive_proof(leaves[:size], chosen)
            assert root_from_multiproof(
                size, {i: leaves[i] for i in chosen}, proof
            ) == reader.root(size)


def test_thousands_of_scattered_leaves_in_one_proof(store: Store) -> None:
    """A packet of many entries scattered through the tree (a tenant's counters between
    everyone else's) asks for the hashes of thousands of leaf ranges: more than one
    statement may hold on SQLite (an expression tree deeper than 1,000 is refused)."""
    size = 6000
    append_stream(
        Appender(store),
        [Accepted.of(validate_event(progress(i)), Origin("t", i)) for i in range(1, size + 1)],
        batch_size=1000,
    )
    chosen = set(range(0, size, 4))  # 1,500 leaves, each followed by a range of 3
    with store.reading() as conn:
        reader = TreeReader(conn)
        leaves = reader.leaves(0, size)
        proof = reader.multiproof(sorted(chosen), size)
        assert proof == naive_proof(leaves, chosen)
        assert root_from_multiproof(size, {i: leaves[i] for i in chosen}, proof) == reader.root(
            size
        )
