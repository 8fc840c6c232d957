"""Witness cosignatures (c2sp.org/tlog-cosignature `cosignature/v1`) and an offline
witness (c2sp.org/tlog-witness semantics, with files in place of HTTP).

Cosignature: a note signature line "— <witness name> base64(key id ‖ timestamp ‖ sig)",
where the key id is SHA-256(name ‖ 0x0A ‖ 0x04 ‖ public key)[:4], timestamp a
big-endian u64 of POSIX seconds, and sig an Ed25519 signature over

    cosignature/v1
    time <timestamp>
    <the checkpoint's whole note text>

Witness rules, in the order they apply to a request (old size, proof, checkpoint):
1. the checkpoint's origin is one the witness was told to follow (else refused: usage);
2. the checkpoint is signed by that log's key (else refused: usage);
3. old size ≤ checkpoint size, and old size = the size the witness last cosigned for the
   origin (0 if never) (else refused: the log must ask again from the witness's size);
4. old size 0: the proof is empty; equal sizes: equal roots; otherwise the RFC 9162
   consistency proof from the last cosigned checkpoint verifies (else: a fork, refused
   with both checkpoints named, exit 1);
5. the new checkpoint is stored (atomically, under a lock) and then cosigned.
"""

from __future__ import annotations

import base64
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger.note import COSIGNATURE_V1, SIGNATURE_LINE_PREFIX, NoteError, Signer, Verifier, split_note

COSIGNATURE_HEADER = b"cosignature/v1\n"
_MAX_TIMESTAMP = 2**63 - 1
_BLOB_SIZE = 4 + 8 + 64


class CosignatureError(NoteError):
    """A cosignature that is missing or does not verify; the message says which."""


def cosignature_message(body: str, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header, the time line, the checkpoint text."""
    return COSIGNATURE_HEADER + b"time %d\n" % timestamp + body.encode("utf-8")


def cosign(witness: Signer, body: str, timestamp: int | None = None) -> str:
    """The cosignature line (ending in a newline) of `witness` on a checkpoint's text."""
    if witness.alg != COSIGNATURE_V1:
        raise NoteError(f"{witness.name} is not a witness cosigner key (type 04)")
    when = int(time.time()) if timestamp is None else timestamp
    blob = witness.verifier.id + when.to_bytes(8, "big") + witness.raw_sign(cosignature_message(body, when))
    return f"{SIGNATURE_LINE_PREFIX}{witness.name} {base64.b64encode(blob).decode()}\n"


def verify_cosignature(note: str, witness: Verifier) -> int:
    """The timestamp of `witness`'s valid cosignature on the note; else raise."""
    text, signatures = split_note(note)
    for name, blob in signatures:
        if name != witness.name or blob[:4] != witness.id:
            continue  # another key: ignored, as signed-note requires
        if len(blob) != _BLOB_SIZE:
            raise CosignatureError(f"the cosignature by {witness.name}: expected {_BLOB_SIZE} bytes, got {len(blob)}")
        timestamp = int.from_bytes(blob[4:12], "big")
        if timestamp > _MAX_TIMESTAMP:
            raise CosignatureError(f"the cosignature by {witness.name} has a timestamp past 2**63 - 1")
        try:
            Ed25519PublicKey.from_public_bytes(witness.public).verify(blob[12:], cosignature_message(text, timestamp))
        except InvalidSignature:
            raise CosignatureError(f"the cosignature by {witness.name} does not match the checkpoint") from None
        return timestamp
    raise CosignatureError(f"the checkpoint carries no cosignature by witness {witness.name} (key id {witness.id.hex()})")


def require_cosignatures(note: str, witnesses: list[Verifier]) -> list[int]:
    """Each named witness's cosignature timestamp; raise on the first one missing or bad."""
    return [verify_cosignature(note, w) for w in witnesses]

