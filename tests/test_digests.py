"""ledger/digests.py: many SHA-256 digests a call, in C (ledger/_digests.c) and in its
hashlib fallback, each checked against hashlib one digest at a time."""

from __future__ import annotations

from collections.abc import Callable
from hashlib import sha256
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import digests
from ledger.merkle import Frontier
from ledger.proofs import NODE_PREFIX, merkle_root

Each = Callable[[Any, Any], bytes]


def _c_module() -> ModuleType:
    return pytest.importorskip(  # type: ignore[no-any-return, unused-ignore]
        "ledger._digests",
        reason="ledger/_digests.c was not built here (no compiler or OpenSSL headers)",
    )


def implementations() -> list[tuple[Each, Callable[..., bytes], Callable[..., bytes]]]:
    fallback = (digests._each, digests._pairs, digests._chain)
    built = digests._built()
    return [fallback] if built is None else [fallback, (built.each, built.pairs, built.chain)]


IMPLEMENTATIONS = pytest.mark.parametrize(
    "each,pairs,chain", implementations(), ids=lambda f: f.__module__
)


def _offsets(parts: list[bytes]) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.concatenate(([0], np.cumsum([len(p) for p in parts], dtype=np.int64))).astype(
        np.int64
    )


@IMPLEMENTATIONS
@settings(max_examples=60, deadline=None)
@given(parts=st.lists(st.binary(max_size=300), max_size=40))
def test_each_is_the_digest_of_every_span(
    each: Each, pairs: Any, chain: Any, parts: list[bytes]
) -> None:
    expected = b"".join(sha256(p).digest() for p in parts)
    assert each(b"".join(parts), _offsets(parts)) == expected


@IMPLEMENTATIONS
@settings(max_examples=40, deadline=None)
@given(
    hashes=st.lists(st.binary(min_size=32, max_size=32), max_size=20),
    prefix=st.binary(max_size=64),
)
def test_pairs_and_chain_against_hashlib(
    each: Each,
    pairs: Callable[..., bytes],
    chain: Callable[..., bytes],
    hashes: list[bytes],
    prefix: bytes,
) -> None:
    lefts, rights = b"".join(hashes), b"".join(reversed(hashes))
    assert pairs(prefix, lefts, rights) == b"".join(
        sha256(prefix + a + b).digest() for a, b in zip(hashes, reversed(hashes))
    )
    link, links = bytes(range(32)), []
    for leaf in hashes:
        link = sha256(prefix + link + leaf).digest()
        links.append(link)
    assert chain(prefix, bytes(range(32)), lefts) == b"".join(links)


def joined_implementations() -> list[Callable[[list[digests.Part], int], bytes]]:
    built = digests._built()
    return [digests._joined] if built is None else [digests._joined, built.joined]


@pytest.mark.parametrize("joined", joined_implementations(), ids=lambda f: f.__module__)
@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.lists(st.binary(max_size=80), min_size=3, max_size=3), max_size=30),
    constants=st.lists(st.binary(max_size=20), min_size=2, max_size=2),
)
def test_joined_is_the_digest_of_each_rows_parts(
    joined: Callable[[list[digests.Part], int], bytes],
    rows: list[list[bytes]],
    constants: list[bytes],
) -> None:
    """Columns and constants interleaved, as verify's leaves are built (a column of three
    values a row, then the same bytes, then another column, …)."""
    columns = [[row[c] for row in rows] for c in range(3)]
    parts: list[digests.Part] = [constants[0]]
    for c, column in enumerate(columns):
        parts.append((b"".join(column), _offsets(column)))
        parts.append(constants[c % 2])
    expected = b"".join(
        sha256(
            constants[0] + row[0] + constants[0] + row[1] + constants[1] + row[2] + constants[0]
        ).digest()
        for row in rows
    )
    assert joined(parts, len(rows)) == expected


@pytest.mark.parametrize("joined", joined_implementations(), ids=lambda f: f.__module__)
def test_joined_refuses_offsets_that_do_not_fit(
    joined: Callable[[list[digests.Part], int], bytes],
) -> None:
    with pytest.raises(ValueError):
        joined([(b"abc", np.array([0, 4], dtype=np.int64))], 1)  # past the data
    with pytest.raises(ValueError):
        joined([(b"abc", np.array([0, 1, 2], dtype=np.int64))], 1)  # a row too many
    with pytest.raises(ValueError):
        joined([(b"abc", np.array([2, 1], dtype=np.int64))], 1)  # out of order
    assert joined([b"x"], 0) == b""
    with pytest.raises((ValueError, OverflowError, MemoryError)):
        joined([b"x"], -1)
    with pytest.raises(ValueError):
        joined(
            [(b"", np.array([7], dtype=np.int64))], 0
        )  # no rows, and still an offset past the data


@IMPLEMENTATIONS
def test_offsets_and_prefixes_are_refused_alike(
    each: Each, pairs: Callable[..., bytes], chain: Callable[..., bytes]
) -> None:
    """What a review found the C module and the fallback disagreed on: a lone offset
    outside the data, offsets that are not int64, prefixes past 64 bytes."""
    for data, offsets in ((b"", [5]), (b"abc", [-1])):
        with pytest.raises(ValueError):
            each(data, np.array(offsets, dtype=np.int64))
    assert each(b"abc", np.array([3], dtype=np.int64)) == b""
    with pytest.raises(ValueError):
        each(
            b"abc", np.array([0, 3], dtype=np.int32)
        )  # int32 read as int64 would be [0 | 3 << 32]
    with pytest.raises(ValueError):
        pairs(bytes(65), bytes(32), bytes(32))
    with pytest.raises(ValueError):
        chain(bytes(65), bytes(32), bytes(32))


@IMPLEMENTATIONS
def test_bad_shapes_are_value_errors(
    each: Each, pairs: Callable[..., bytes], chain: Callable[..., bytes]
) -> None:
    with pytest.raises(ValueError):
        each(b"abc", np.array([0, 4], dtype=np.int64))  # past the data
    with pytest.raises(ValueError):
        each(b"abc", np.array([2, 1], dtype=np.int64))  # out of order
    with pytest.raises(ValueError):
        pairs(b"", bytes(32), bytes(64))
    with pytest.raises(ValueError):
        chain(b"", bytes(31), bytes(32))


def test_the_c_module_releases_nothing_it_was_given() -> None:
    """Buffers are released (a numpy array given to it can be resized afterwards) and the
    input bytes are left as they were."""
    c = _c_module()
    offsets = np.array([0, 3], dtype=np.int64)
    data = bytearray(b"abc")
    assert c.each(data, offsets) == sha256(b"abc").digest()
    data.extend(b"d")  # a bytearray with an export still held could not grow
    offsets.resize(3, refcheck=True)


@settings(max_examples=40, deadline=None)
@given(start=st.integers(0, 70), count=st.integers(0, 70))
def test_frontier_extend_packed_is_push_one_at_a_time(start: int, count: int) -> None:
    leaves = [sha256(i.to_bytes(4, "big")).digest() for i in range(start + count)]
    one_by_one, packed = Frontier(0), Frontier(0)
    for leaf in leaves[:start]:
        one_by_one.push(leaf)
        packed.push(leaf)
    one_by_one.completed.clear()
    packed.completed.clear()
    for leaf in leaves[start:]:
        one_by_one.push(leaf)
    packed.extend_packed(b"".join(leaves[start:]))
    assert (packed.size, packed.hashes) == (one_by_one.size, one_by_one.hashes)
    assert sorted(packed.completed) == sorted(one_by_one.completed)
    if leaves:
        assert packed.root() == merkle_root(leaves)


def level_implementations() -> list[Callable[[bytes, Any], bytes]]:
    built = digests._built()
    return [digests._level] if built is None else [digests._level, built.level]


@pytest.mark.parametrize("level_up", level_implementations(), ids=lambda f: f.__module__)
def test_level_up_hashes_consecutive_pairs(level_up: Callable[[bytes, Any], bytes]) -> None:
    level = [sha256(bytes([i])).digest() for i in range(6)]
    expected = b"".join(
        sha256(NODE_PREFIX + level[i] + level[i + 1]).digest() for i in range(0, 6, 2)
    )
    assert level_up(NODE_PREFIX, b"".join(level)) == expected
    assert level_up(NODE_PREFIX, b"") == b""
    with pytest.raises(ValueError):
        level_up(NODE_PREFIX, b"".join(level[:3]))  # an odd count
    assert digests.split(expected) == [expected[i : i + 32] for i in (0, 32, 64)]
