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


def _each(data: Buffer, offsets: Buffer) -> bytes:
    view, at = memoryview(data).cast("B"), np.frombuffer(offsets, dtype=np.int64).tolist()
    if not at or any(a < 0 or a > b for a, b in zip(at, at[1:], strict=False)) or at[-1] > len(view):
        raise ValueError("offsets: out of order or past the data")
    return b"".join(sha256(view[a:b]).digest() for a, b in zip(at, at[1:], strict=False))


def _pairs(prefix: bytes, lefts: Buffer, rights: Buffer) -> bytes:
    left, right = bytes(lefts), bytes(rights)
    if len(left) % DIGEST or len(left) != len(right):
        raise ValueError("lefts and rights: packed 32-byte hashes, as many of each")
    return b"".join(sha256(prefix + left[i:i + DIGEST] + right[i:i + DIGEST]).digest() for i in range(0, len(left), DIGEST))


def _chain(prefix: bytes, start: bytes, leaves: Buffer) -> bytes:
    packed = bytes(leaves)
    if len(start) != DIGEST or len(packed) % DIGEST:
        raise ValueError("start 32 bytes, leaves packed 32-byte hashes")
    links, link = [], start
    for i in range(0, len(packed), DIGEST):
        link = sha256(prefix + link + packed[i:i + DIGEST]).digest()
        links.append(link)
    return b"".join(links)


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
#: The links of a hash chain from `start`: link[i] = SHA-256(prefix ‖ link[i-1] ‖ leaves[i]).
chain: Callable[[bytes, bytes, Buffer], bytes] = _C.chain if _C else _chain


def split(digests: bytes) -> list[bytes]:
    """Packed digests as a list of 32-byte values."""
    return [digests[i:i + DIGEST] for i in range(0, len(digests), DIGEST)]


def level_up(prefix: bytes, level: bytes) -> bytes:
    """A tree level's parents: SHA-256(prefix ‖ left ‖ right) of each consecutive pair of
    the packed hashes (an even count)."""
    rows = np.frombuffer(level, dtype=np.uint8).reshape(-1, 2, DIGEST)
    return pairs(prefix, np.ascontiguousarray(rows[:, 0]), np.ascontiguousarray(rows[:, 1]))
