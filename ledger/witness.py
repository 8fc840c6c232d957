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
import fcntl
import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import Connection, func, insert, select

from ledger.checkpoint import SignedCheckpoint, check_origin
from ledger.errors import LedgerError
from ledger.note import (
    COSIGNATURE_V1,
    SIGNATURE_LINE_PREFIX,
    NoteError,
    Signer,
    Verifier,
    read_signer,
    split_note,
    write_keypair,
)
from ledger.proofs import (
    Checkpoint,
    CheckpointBody,
    ProofError,
    parse_decimal,
    parse_hash_base64,
    verify_consistency,
)
from ledger.store import Store
from ledger.tables import checkpoints, cosignatures, entries
from ledger.tree import TreeReader
from schemas.errors import CheckFailed

COSIGNATURE_HEADER = b"cosignature/v1\n"
_MAX_TIMESTAMP = 2**63 - 1
_BLOB_SIZE = 4 + 8 + 64


class CosignatureError(CheckFailed, ValueError):
    """A cosignature that is missing or does not verify; the message says which."""


def cosignature_message(body: str, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header, the time line, the checkpoint text."""
    return COSIGNATURE_HEADER + b"time %d\n" % timestamp + body.encode("utf-8")


def cosign(witness: Signer, body: str, timestamp: int | None = None) -> str:
    """The cosignature line (ending in a newline) of `witness` on a checkpoint's text."""
    if witness.alg != COSIGNATURE_V1:
        raise NoteError(f"{witness.name} is not a witness cosigner key (type 04)")
    when = int(time.time()) if timestamp is None else timestamp
    blob = (
        witness.verifier.id
        + when.to_bytes(8, "big")
        + witness.raw_sign(cosignature_message(body, when))
    )
    return f"{SIGNATURE_LINE_PREFIX}{witness.name} {base64.b64encode(blob).decode()}\n"


def verify_cosignature(note: str, witness: Verifier) -> int:
    """The timestamp of `witness`'s valid cosignature on the note; else raise."""
    text, signatures = split_note(note)
    for name, blob in signatures:
        if name != witness.name or blob[:4] != witness.id:
            continue  # another key: ignored, as signed-note requires
        if len(blob) != _BLOB_SIZE:
            raise CosignatureError(
                f"the cosignature by {witness.name}: expected {_BLOB_SIZE} bytes, got {len(blob)}"
            )
        timestamp = int.from_bytes(blob[4:12], "big")
        if timestamp > _MAX_TIMESTAMP:
            raise CosignatureError(
                f"the cosignature by {witness.name} has a timestamp past 2**63 - 1"
            )
        try:
            Ed25519PublicKey.from_public_bytes(witness.public).verify(
                blob[12:], cosignature_message(text, timestamp)
            )
        except InvalidSignature:
            raise CosignatureError(
                f"the cosignature by {witness.name} does not match the checkpoint"
            ) from None
        return timestamp
    raise CosignatureError(
        f"the checkpoint carries no cosignature by witness {witness.name} (key id "
        f"{witness.id.hex()})"
    )


def require_cosignatures(note: str, witnesses: list[Verifier]) -> list[int]:
    """Each named witness's cosignature timestamp; raise on the first one missing or bad."""
    return [verify_cosignature(note, w) for w in witnesses]


# -- the witness: a state folder, one record per log -------------------------------------

KEY_FILE = "witness.key"
LOGS = "logs"
MAX_PROOF_LINES = 63


class WitnessError(NoteError):
    """A request the witness cannot act on (unknown log, bad signature, wrong old size):
    nothing was cosigned, and nothing about the log is wrong. Exit 2."""


class ForkDetected(CheckFailed):
    """The log showed a checkpoint inconsistent with one the witness cosigned. Exit 1."""

    #: its report is several lines (both checkpoints, as signed): each is shown escaped
    multiline = True


@dataclass(frozen=True)
class WitnessRequest:
    """The tlog-witness add-checkpoint body: old size, consistency proof, checkpoint."""

    old_size: int
    proof: list[bytes]
    note: str

    def text(self) -> str:
        proof = "".join(base64.b64encode(h).decode() + "\n" for h in self.proof)
        return f"old {self.old_size}\n{proof}\n{self.note}"

    @classmethod
    def parse(cls, text: str) -> WitnessRequest:
        head, sep, note = text.partition("\n\n")
        if not sep:
            raise WitnessError(
                "a witness request reads: old <size>, proof lines, a blank line, the checkpoint"
            )
        lines = head.split("\n")
        if not lines[0].startswith("old "):
            raise WitnessError(f"the request's first line is {lines[0][:40]!r}, not 'old <size>'")
        if len(lines) - 1 > MAX_PROOF_LINES:
            raise WitnessError(
                f"the request holds {len(lines) - 1} proof lines, more than {MAX_PROOF_LINES}"
            )
        try:
            old = parse_decimal(lines[0][4:], "old size")
            proof = [
                parse_hash_base64(line, f"proof line {i}") for i, line in enumerate(lines[1:], 1)
            ]
        except ProofError as exc:
            raise WitnessError(str(exc)) from None
        return cls(old, proof, note)


@dataclass(frozen=True)
class LogRecord:
    """What the witness keeps for one log: its origin, its key, the last checkpoint cosigned."""

    origin: str
    log_key: Verifier
    checkpoint: str | None

    def body(self) -> CheckpointBody | None:
        return (
            None
            if self.checkpoint is None
            else CheckpointBody.parse(split_note(self.checkpoint)[0])
        )


def init_witness(state: Path, name: str) -> Verifier:
    """Create the state folder and the witness's cosigner key (type 04), once."""
    state.mkdir(parents=True, exist_ok=True)
    (state / LOGS).mkdir(exist_ok=True)
    key = state / KEY_FILE
    if not key.exists():
        return write_keypair(key, name, COSIGNATURE_V1).verifier
    verifier = read_signer(key, COSIGNATURE_V1).verifier
    if name and name != verifier.name:
        raise WitnessError(
            f"the witness in {state} is already named {verifier.name!r}; a key's name never "
            "changes",
            option="name",
        )
    return verifier


def follow_log(state: Path, origin: str, log_key: Verifier) -> LogRecord:
    """Trust `log_key` for checkpoints of `origin`; never replaces a log's key."""
    check_origin(origin)
    with _locked(state):
        known = _read_log(state, origin)
        if known is not None:
            if known.log_key != log_key:
                raise WitnessError(
                    f"{origin!r}: the witness already follows it under key {known.log_key.text()}",
                    option="origin",
                )
            return known
        record = LogRecord(origin, log_key, None)
        _write_log(state, record)
        return record


def cosign_request(state: Path, request: WitnessRequest, now: int | None = None) -> str:
    """Rules 1 to 5 of the module docstring: the cosignature line, or an exception."""
    witness = read_signer(state / KEY_FILE, COSIGNATURE_V1)
    with _locked(state):
        record, text = _checked_text(state, request)
        _check_consistent(record, request, CheckpointBody.parse(text))
        _write_log(state, LogRecord(record.origin, record.log_key, request.note))
    return cosign(witness, text, now)


def _checked_text(state: Path, request: WitnessRequest) -> tuple[LogRecord, str]:
    """Rules 1 and 2: the checkpoint is of a followed log, signed by that log's key; the
    log's record and the checkpoint's text."""
    try:
        text, _ = split_note(request.note)
        body = CheckpointBody.parse(text)
    except ProofError as exc:
        raise WitnessError(f"the request's checkpoint: {exc}") from None
    record = _read_log(state, body.origin)
    if record is None:
        raise WitnessError(
            f"the witness does not follow a log with origin {body.origin!r} "
            "(initialise it with that log's origin and key first)"
        )
    try:
        return record, record.log_key.verify(request.note)
    except NoteError as exc:
        raise WitnessError(
            f"the checkpoint of {body.origin!r} is not signed by the log's key: {exc}"
        ) from None


def _check_consistent(record: LogRecord, request: WitnessRequest, new: CheckpointBody) -> None:
    """Rules 3 and 4."""
    old = record.body()
    old_size = 0 if old is None else old.size
    if request.old_size > new.size:
        raise WitnessError(
            f"old size {request.old_size} is larger than the checkpoint's size {new.size}"
        )
    if request.old_size != old_size:
        raise WitnessError(
            f"the witness last cosigned {record.origin!r} at size {old_size}, the request starts "
            f"at {request.old_size}: make the request from size {old_size}"
        )
    if new.size == 0 and new.root != sha256(b"").digest():
        raise WitnessError(
            "a checkpoint of size 0 must carry the empty tree's root, SHA-256 of nothing"
        )
    if old is None or old.size == 0:
        if request.proof:
            raise WitnessError("a request from size 0 carries no consistency proof")
        return
    try:
        verify_consistency(old.size, new.size, old.root, new.root, request.proof)
    except ProofError as exc:
        raise ForkDetected(
            f"fork: {record.origin!r} showed a checkpoint of size {new.size} (root "
            f"{new.root.hex()}) that does not extend the one "
            f"this witness cosigned, size {old.size} (root {old.root.hex()}): {exc}\n"
            f"cosigned earlier:\n{record.checkpoint}offered now:\n{request.note}"
        ) from None


def show_witness(state: Path) -> list[str]:
    """The witness's verifier key, then one line per log it follows."""
    lines = [read_signer(state / KEY_FILE, COSIGNATURE_V1).verifier.text()]
    for path in sorted((state / LOGS).glob("*.json")):
        record = _parse_log(path)
        body = record.body()
        last = (
            "nothing cosigned yet"
            if body is None
            else f"cosigned size {body.size}, root {base64.b64encode(body.root).decode()}"
        )
        lines.append(f"{record.origin}  {record.log_key.text()}  {last}")
    return lines


def _log_path(state: Path, origin: str) -> Path:
    return state / LOGS / f"{sha256(origin.encode()).hexdigest()[:32]}.json"


def _read_log(state: Path, origin: str) -> LogRecord | None:
    path = _log_path(state, origin)
    return _parse_log(path) if path.exists() else None


def _parse_log(path: Path) -> LogRecord:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LogRecord(data["origin"], Verifier.parse(data["log_key"]), data["checkpoint"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WitnessError(f"{path}: not a witness log record: {exc}") from None


def _write_log(state: Path, record: LogRecord) -> None:
    """Write-then-rename, fsynced: the record is the old one or the new one, never half."""
    path = _log_path(state, record.origin)
    temporary = path.with_suffix(".tmp")
    data = {
        "origin": record.origin,
        "log_key": record.log_key.text(),
        "checkpoint": record.checkpoint,
    }
    with temporary.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, ensure_ascii=False, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


@contextmanager
def _locked(state: Path) -> Iterator[None]:
    """Check and update under one lock: two requests must not both pass from one state."""
    if not (state / KEY_FILE).exists():
        raise WitnessError(
            f"{state}: not a witness state folder (run `gpuledger witness init` first)"
        )
    with (state / "lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- the log side: requests to witnesses, and their cosignatures kept with the checkpoint ---

_RECENT = 16  # a witness's answer is matched against this many of the latest checkpoints


def witness_request(store: Store, signed: SignedCheckpoint, old_size: int) -> WitnessRequest:
    """The add-checkpoint body for a witness that last cosigned size `old_size`."""
    with store.reading() as conn:
        return witness_request_in(conn, signed, old_size)


def witness_request_in(
    conn: Connection, signed: SignedCheckpoint, old_size: int
) -> WitnessRequest:
    """`witness_request` read through `conn` (the checkpoint's own transaction, before it
    commits: a request that cannot be made then leaves no checkpoint signed)."""
    size = signed.body.size
    if old_size > size:
        raise LedgerError(
            f"size {old_size} is past the checkpoint's size {size}", option="witness_request_from"
        )
    proof = TreeReader(conn).consistency_proof(old_size, size) if 0 < old_size < size else []
    return WitnessRequest(old_size, proof, signed.note)


def write_witness_request(
    conn: Connection, signed: SignedCheckpoint, old_size: int, out: Path
) -> None:
    """Write the request to `staged(out)`, which the caller renames to `out` once the
    checkpoint is committed (or removes); a file that cannot be written is a LedgerError
    naming `out`."""
    text = witness_request_in(conn, signed, old_size).text()
    try:
        with staged(out).open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise LedgerError(
            f"cannot write {out}: {exc.strerror or exc}; no checkpoint was stored", option="out"
        ) from None


def staged(out: Path) -> Path:
    """Where a file meant for `out` is written until what it depends on is committed."""
    return out.with_name(f".{out.name}.partial")


def add_cosignatures(
    store: Store, response: str, witnesses: list[Verifier]
) -> list[tuple[int, str]]:
    """Keep each witness's cosignature in `response` (signature lines) with the recent
    checkpoint it verifies on; returns (checkpoint_seq, witness name) per cosignature kept."""
    lines = [line + "\n" for line in response.splitlines() if line]
    kept: list[tuple[int, str]] = []
    with store.writing() as conn:
        recent = conn.execute(
            select(checkpoints.c.checkpoint_seq, checkpoints.c.note)
            .order_by(checkpoints.c.checkpoint_seq.desc())
            .limit(_RECENT)
        ).all()
        for witness in witnesses:
            number, line, timestamp = _matching(recent, lines, witness)
            stored = conn.execute(
                select(cosignatures.c.line).where(
                    cosignatures.c.checkpoint_seq == number,
                    cosignatures.c.witness_key == witness.text(),
                )
            ).scalar()
            if stored is None:
                conn.execute(
                    insert(cosignatures).values(
                        checkpoint_seq=number,
                        witness_key=witness.text(),
                        timestamp=timestamp,
                        line=line,
                    )
                )
            kept.append((number, witness.name))
    return kept


def _matching(recent: Sequence[Any], lines: list[str], witness: Verifier) -> tuple[int, str, int]:
    for line in lines:
        if not line.startswith(f"{SIGNATURE_LINE_PREFIX}{witness.name} "):
            continue
        for row in recent:
            try:
                return int(row.checkpoint_seq), line, verify_cosignature(row.note + line, witness)
            except CosignatureError:
                continue
    raise CosignatureError(
        f"no valid cosignature by {witness.name} on any of the latest {_RECENT} checkpoints",
        option="cosignatures",
    )


def cosigned_note(conn: Connection, checkpoint_seq: int, note: str) -> str:
    """The checkpoint's note with the cosignatures gathered for it appended."""
    rows = (
        conn.execute(
            select(cosignatures.c.line)
            .where(cosignatures.c.checkpoint_seq == checkpoint_seq)
            .order_by(cosignatures.c.witness_key)
        )
        .scalars()
        .all()
    )
    return note + "".join(rows)


def latest_cosigned_checkpoint(store: Store) -> SignedCheckpoint:
    """The latest stored checkpoint, with its cosignatures, if it covers the store's head."""
    with store.reading() as conn:
        row = conn.execute(
            select(checkpoints).order_by(checkpoints.c.checkpoint_seq.desc()).limit(1)
        ).first()
        head = conn.execute(select(func.coalesce(func.max(entries.c.seq), 0))).scalar_one()
        if row is None:
            raise LedgerError(
                "no checkpoint is stored: sign one first (`gpuledger checkpoint`)",
                option="stored_checkpoint",
            )
        if int(row.tree_size) != head:
            raise LedgerError(
                f"the latest checkpoint #{row.checkpoint_seq} has size {row.tree_size}, the "
                f"store's head is seq {head}: sign (and have witnesses cosign) a new one first",
                option="stored_checkpoint",
            )
        note = cosigned_note(conn, int(row.checkpoint_seq), row.note)
    return SignedCheckpoint(
        int(row.checkpoint_seq), Checkpoint.parse(split_note(row.note)[0]), note
    )
