"""Many SHA-256 digests in one call, for the ledger's hot loops (verify, append).

hashlib costs about 0.4 µs a call here (OpenSSL 3 makes and frees an EVP context each
time), several times the hashing itself: SHA-256 of a 250-byte entry takes well under
0.1 µs with the CPU's SHA instructions. Verify and ingest make three digests an entry
(the leaf, the chain link, a tree node), so they hash a batch at a time through
`ledger._digests`, a small C module (ledger/_digests.c) over OpenSSL's low-level SHA-256,
built when the package is installed. Where it could not be built (no compiler or no
OpenSSL headers), the same functions below run on hashlib: slower, the same digests.

Each function returns the digests end to end, 32 bytes each, as one bytes object.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from hashlib import sha256
from types import ModuleType
from typing import Any

import numpy as np

DIGEST = 32

Buffer = Any  # bytes, memoryview, numpy array: anything with the buffer protocol, C-contiguous


# The hashlib versions below take and refuse what the C module takes and refuses:
# C-contiguous buffers, offsets as int64 in order within the data, prefixes of at most 64
# bytes (tests/test_digests.py holds the two to each other).


def _bytes_of(buffer: Buffer) -> memoryview:
    view = memoryview(buffer)
    if not view.c_contiguous:
        raise BufferError("a C-contiguous buffer expected")
    return view.cast("B")


def _offsets_of(offsets: Buffer, size: int, spans: int | None = None) -> list[int]:
    view = memoryview(offsets)
    if view.itemsize != 8 or view.format.lstrip("@=<") not in ("q", "l"):
        raise ValueError("offsets: an array of int64 expected")
    at: list[int] = view.cast("B").cast("q").tolist()
    if not at or (spans is not None and len(at) != spans + 1):
        raise ValueError("offsets: one int64 a span and one more")
    if at[0] < 0 or at[-1] > size or any(a > b for a, b in zip(at, at[1:], strict=False)):
        raise ValueError("offsets: out of order or past the data")
    return at


def _prefixed(prefix: bytes) -> bytes:
    if isinstance(prefix, (bytearray, memoryview)):  # as the C module's "y#": no mutable buffer
        raise TypeError("prefix: bytes expected")
    if len(prefix) > 64:
        raise ValueError("prefix: at most 64 bytes")
    return bytes(prefix)


def _each(data: Buffer, offsets: Buffer) -> bytes:
    view = _bytes_of(data)
    at = _offsets_of(offsets, len(view))
    return b"".join(sha256(view[a:b]).digest() for a, b in zip(at, at[1:], strict=False))


def _pairs(prefix: bytes, lefts: Buffer, rights: Buffer) -> bytes:
    prefix, left, right = (
        _prefixed(prefix),
        _bytes_of(lefts).tobytes(),
        _bytes_of(rights).tobytes(),
    )
    if len(left) % DIGEST or len(left) != len(right):
        raise ValueError("lefts and rights: packed 32-byte hashes, as many of each")
    return b"".join(
        sha256(prefix + left[i : i + DIGEST] + right[i : i + DIGEST]).digest()
        for i in range(0, len(left), DIGEST)
    )


def _chain(prefix: bytes, start: bytes, leaves: Buffer) -> bytes:
    prefix, packed = _prefixed(prefix), _bytes_of(leaves).tobytes()
    if len(start) != DIGEST or len(packed) % DIGEST:
        raise ValueError("start 32 bytes, leaves packed 32-byte hashes")
    links, link = [], bytes(start)
    for i in range(0, len(packed), DIGEST):
        link = sha256(prefix + link + packed[i : i + DIGEST]).digest()
        links.append(link)
    return b"".join(links)


#: A part of every row's message: the same bytes for all, or a column as (data, int64 offsets).
Part = bytes | tuple[Buffer, Buffer]


def _joined(parts: list[Part], rows: int) -> bytes:
    if rows < 0:
        raise ValueError("rows: not negative")
    spans: list[bytes | tuple[memoryview, list[int]]] = []
    for part in parts:
        if isinstance(part, bytes):
            spans.append(part)
        elif isinstance(part, tuple) and len(part) == 2:
            data = _bytes_of(part[0])
            spans.append((data, _offsets_of(part[1], len(data), rows)))
        else:
            raise TypeError("a part is bytes or a (data, offsets) pair")
    messages = (
        b"".join(
            span if isinstance(span, bytes) else span[0][span[1][i] : span[1][i + 1]]
            for span in spans
        )
        for i in range(rows)
    )
    return b"".join(sha256(message).digest() for message in messages)


def _built() -> ModuleType | None:
    try:
        return importlib.import_module("ledger._digests")
    except ImportError:  # not built here: hashlib, the same digests
        return None


_C = _built()
BUILT = _C is not None
#: SHA-256 of data[offsets[i]:offsets[i+1]] for each i (offsets: int64, in order).
each: Callable[[Buffer, Buffer], bytes] = _C.each if _C else _each
#: SHA-256(prefix ‖ lefts[i] ‖ rights[i]) for each i (packed 32-byte hashes, as many of each).
pairs: Callable[[bytes, Buffer, Buffer], bytes] = _C.pairs if _C else _pairs
#: SHA-256 of each row's message, its parts end to end, never made whole in memory.
joined: Callable[[list[Part], int], bytes] = _C.joined if _C else _joined
#: The links of a hash chain from `start`: link[i] = SHA-256(prefix ‖ link[i-1] ‖ leaves[i]).
chain: Callable[[bytes, bytes, Buffer], bytes] = _C.chain if _C else _chain


def split(digests: bytes) -> list[bytes]:
    """Packed digests as a list of 32-byte values."""
    return [digests[i : i + DIGEST] for i in range(0, len(digests), DIGEST)]


def _level(prefix: bytes, nodes: Buffer) -> bytes:
    packed = _bytes_of(nodes).tobytes()
    if len(packed) % (2 * DIGEST):
        raise ValueError("nodes: an even count of packed 32-byte hashes")
    rows = np.frombuffer(packed, dtype=np.uint8).reshape(-1, 2, DIGEST)
    return _pairs(prefix, rows[:, 0].tobytes(), rows[:, 1].tobytes())


#: A tree level's parents: SHA-256(prefix ‖ left ‖ right) of each consecutive pair of the
#: packed hashes (an even count).
level_up: Callable[[bytes, Buffer], bytes] = _C.level if _C else _level
