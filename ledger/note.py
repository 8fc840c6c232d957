"""C2SP signed notes with Ed25519 keys, in the formats standard tools read.

- Signed note (c2sp.org/signed-note): the text, a blank line, then one line a signature:
  "— <key name> <base64(key id ‖ signature)>". The key id is the first 4 bytes of
  SHA-256(key name ‖ 0x0A ‖ type ‖ public key); type 0x01 marks an Ed25519 note key,
  0x04 an Ed25519 witness cosigner key (c2sp.org/tlog-cosignature).
- Verifier key: "<name>+<key id hex>+<base64(type ‖ public key)>".
- Signer key (the private file, mode 0600): "PRIVATE+KEY+<name>+<key id hex>+<base64(type ‖
  seed)>".

Strictness rule, both ways: nothing is signed that the spec or Go's
golang.org/x/mod/sumdb/note would refuse, and nothing is accepted that they refuse. A
note is valid UTF-8 with no control character but the newline, its text ends in a
newline, and a key name is non-empty with no Unicode space, no '+', no control character.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from ledger.proofs import b64decode_strict
from schemas.errors import BadInput

ED25519 = b"\x01"
COSIGNATURE_V1 = b"\x04"
SIGNATURE_LINE_PREFIX = "\u2014 "  # em dash, space
#: Go's note.Open refuses a note with more signatures than this.
MAX_SIGNATURES = 100
K = TypeVar("K")
#: Unicode White_Space, as Go's unicode.IsSpace (which isValidName uses) defines it.
_SPACES = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(map(chr, range(0x2000, 0x200B)))
)
_KEY_ID = re.compile(r"[0-9a-f]{8}")


class NoteError(BadInput, ValueError):
    """A key file or a signed note that cannot be used; the message says why."""


def key_id(name: str, public: bytes, alg: bytes = ED25519) -> bytes:
    return sha256(name.encode() + b"\n" + alg + public).digest()[:4]


def check_key_name(name: str, what: str = "key name", option: str | None = None) -> None:
    """Raise NoteError unless `name` is a key name signed notes may carry; `option` is the
    caller's parameter that gave it, if any."""
    if not name:
        raise NoteError(f"{what} must not be empty", option=option)
    for c in name:
        if c in _SPACES or c == "+" or ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF:
            raise NoteError(
                f"{what} {name!r} holds {c!r}: a key name has no space, no '+' and no control "
                "character",
                option=option,
            )


def check_text(text: str, what: str = "note text") -> None:
    """Raise NoteError unless `text` may be signed: ends in a newline, valid UTF-8, and no
    control character but the newline (Go's note.Open refuses any other)."""
    if not text.endswith("\n"):
        raise NoteError(f"{what} must end with a newline")
    for c in text:
        if (ord(c) < 0x20 and c != "\n") or 0xD800 <= ord(c) <= 0xDFFF:
            raise NoteError(
                f"{what} holds {c!r}: signed notes carry no control character but the newline"
            )


@dataclass(frozen=True)
class Verifier:
    name: str
    public: bytes
    alg: bytes = ED25519

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.public, self.alg)

    def text(self) -> str:
        return f"{self.name}+{self.id.hex()}+{base64.b64encode(self.alg + self.public).decode()}"

    @classmethod
    def parse(cls, text: str, alg: bytes = ED25519) -> Verifier:
        """A vkey, exactly: no surrounding space, an 8-digit lower-case hex key id."""
        parts = text.split("+", 2)  # base64 may hold '+'
        if len(parts) != 3:
            raise NoteError("a verifier key reads <name>+<key id>+<base64 key>")
        name, hex_id, encoded = parts
        check_key_name(name, "verifier key name")
        if not _KEY_ID.fullmatch(hex_id):
            raise NoteError(f"verifier key id {hex_id[:20]!r} is not 8 lower-case hex digits")
        verifier = cls(name, _ed25519_key(encoded, "verifier key", alg), alg)
        if verifier.id.hex() != hex_id:
            raise NoteError(
                f"verifier key id {hex_id} does not match its name and key ({verifier.id.hex()})"
            )
        return verifier

    def verify(self, note: str) -> str:
        """The note's text if one of its signatures is this key's valid one; else raise."""
        if self.alg != ED25519:
            raise NoteError(f"{self.name} is not a note signing key (type {self.alg.hex()})")
        text, signatures = split_note(note)
        key = Ed25519PublicKey.from_public_bytes(self.public)
        for name, blob in signatures:
            if name == self.name and blob[:4] == self.id:
                try:
                    key.verify(blob[4:], text.encode())
                except InvalidSignature:
                    raise NoteError(
                        f"the signature by {self.name} does not match the note"
                    ) from None
                return text
        raise NoteError(f"the note carries no signature by {self.name} (key id {self.id.hex()})")


@dataclass(frozen=True)
class Signer:
    name: str
    seed: bytes
    alg: bytes = ED25519

    @property
    def verifier(self) -> Verifier:
        public = Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return Verifier(self.name, public.public_bytes(Encoding.Raw, PublicFormat.Raw), self.alg)

    @classmethod
    def generate(cls, name: str, alg: bytes = ED25519) -> Signer:
        check_key_name(name, option="name")
        key = Ed25519PrivateKey.generate()
        return cls(name, key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()), alg)

    def text(self) -> str:
        key = base64.b64encode(self.alg + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.id.hex()}+{key}"

    @classmethod
    def parse(cls, text: str, alg: bytes = ED25519) -> Signer:
        parts = text.split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("a signer key reads PRIVATE+KEY+<name>+<key id>+<base64 key>")
        check_key_name(parts[2], "signer key name")
        signer = cls(parts[2], _ed25519_key(parts[4], "signer key", alg), alg)
        if signer.verifier.id.hex() != parts[3]:
            raise NoteError("the signer key's id does not match its key")
        return signer

    def raw_sign(self, message: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)

    def sign(self, text: str) -> str:
        """The signed note: text (ending in a newline), a blank line, the signature line."""
        check_text(text)
        check_key_name(self.name)
        if self.alg != ED25519:
            raise NoteError(f"{self.name} is not a note signing key (type {self.alg.hex()})")
        blob = base64.b64encode(self.verifier.id + self.raw_sign(text.encode())).decode()
        return f"{text}\n{SIGNATURE_LINE_PREFIX}{self.name} {blob}\n"


def split_note(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    """The note's text and its (key name, key id ‖ signature) pairs, read as Go's
    note.Open reads them: no control character but the newline anywhere, the signatures
    after the last blank line, every signature line ending in a newline."""
    for c in note:
        if (ord(c) < 0x20 and c != "\n") or 0xD800 <= ord(c) <= 0xDFFF:
            raise NoteError(
                f"the note holds {c!r}: signed notes carry no control character but the newline"
            )
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("a signed note needs a blank line before its signatures")
    text, block = note[: split + 1], note[split + 2 :]
    if not block.endswith("\n"):
        raise NoteError("a signed note ends with a signature line and a newline")
    signatures = []
    for line in block[:-1].split("\n"):
        if not line.startswith(SIGNATURE_LINE_PREFIX):
            raise NoteError(f"not a signature line: {line[:40]!r}")
        name, _, encoded = line[len(SIGNATURE_LINE_PREFIX) :].partition(" ")
        check_key_name(name, "signature key name")
        blob = _b64(encoded, "signature")
        if len(blob) < 5:
            raise NoteError("a signature line is too short")
        signatures.append((name, blob))
    if len(signatures) > MAX_SIGNATURES:
        raise NoteError(
            f"the note carries {len(signatures)} signatures, more than {MAX_SIGNATURES}"
        )
    return text, signatures


def write_keypair(path: Path, name: str, alg: bytes = ED25519) -> Signer:
    """PATH holds the signer key (mode 0600, created exclusively), PATH.pub the verifier."""
    signer = Signer.generate(name, alg)
    pub = Path(f"{path}.pub")
    for target in (path, pub):
        if target.exists():
            raise NoteError(f"{target}: already exists; keys are never overwritten")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(signer.text() + "\n")
    pub.write_text(signer.verifier.text() + "\n")
    return signer


def read_signer(path: Path, alg: bytes = ED25519) -> Signer:
    return _read_key(path, lambda text: Signer.parse(text, alg))


def read_verifier(path: Path, alg: bytes = ED25519) -> Verifier:
    return _read_key(path, lambda text: Verifier.parse(text, alg))


def read_any_signer(path: Path) -> Signer:
    """A note signing key or a witness cosigner key, whichever the file holds."""
    try:
        return read_signer(path)
    except NoteError as as_note_key:
        try:
            return read_signer(path, COSIGNATURE_V1)
        except NoteError:
            raise as_note_key from None


def _read_key(path: Path, parse: Callable[[str], K]) -> K:
    """A key file holds the key and, at most, one final newline (as keygen writes it)."""
    try:
        text = path.read_text(encoding="utf-8")
        return parse(text[:-1] if text.endswith("\n") else text)
    except UnicodeDecodeError:
        raise NoteError(f"{path}: the key is not UTF-8 text") from None
    except OSError as exc:
        raise NoteError(f"{path}: cannot read the key: {exc.strerror}") from exc
    except NoteError as exc:
        raise NoteError(f"{path}: {exc}") from exc


def _ed25519_key(encoded: str, what: str, alg: bytes = ED25519) -> bytes:
    """The 32 key bytes of base64(type ‖ key), the note formats' Ed25519 key encoding."""
    raw = _b64(encoded, what)
    if raw[:1] != alg or len(raw) != 33:
        kind = (
            "a witness cosigner key (type 04)"
            if alg == COSIGNATURE_V1
            else "an Ed25519 note key (type 01)"
        )
        raise NoteError(f"the {what} is not {kind}")
    return raw[1:]


def _b64(text: str, what: str) -> bytes:
    try:
        return b64decode_strict(text)
    except ValueError:
        raise NoteError(f"the {what} is not valid base64") from None
