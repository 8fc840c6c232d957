"""C2SP signed notes with Ed25519 keys, in the formats standard tools read.

- Signed note (c2sp.org/signed-note): the text, a blank line, then one line a signature:
  "— <key name> <base64(key id ‖ signature)>". The key id is the first 4 bytes of
  SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ public key); 0x01 marks Ed25519.
- Verifier key: "<name>+<key id hex>+<base64(0x01 ‖ public key)>".
- Signer key (the private file, mode 0600): "PRIVATE+KEY+<name>+<key id hex>+<base64(0x01 ‖ seed)>".
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PrivateFormat, PublicFormat, NoEncryption

ED25519 = b"\x01"
SIGNATURE_LINE_PREFIX = "\u2014 "  # em dash, space
K = TypeVar("K")


class NoteError(ValueError):
    """A key file or a signed note that cannot be used; the message says why."""


def key_id(name: str, public: bytes) -> bytes:
    return sha256(name.encode() + b"\n" + ED25519 + public).digest()[:4]


def _check_name(name: str) -> None:
    if not name or "+" in name or any(c.isspace() for c in name):
        raise NoteError(f"key name {name!r} must be non-empty, with no '+' and no spaces")


@dataclass(frozen=True)
class Verifier:
    name: str
    public: bytes

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.public)

    def text(self) -> str:
        return f"{self.name}+{self.id.hex()}+{base64.b64encode(ED25519 + self.public).decode()}"

    @classmethod
    def parse(cls, text: str) -> Verifier:
        parts = text.strip().split("+", 2)  # base64 may hold '+'
        if len(parts) != 3:
            raise NoteError("a verifier key reads <name>+<key id>+<base64 key>")
        name, hex_id, encoded = parts
        verifier = cls(name, _ed25519_key(encoded, "verifier key"))
        if verifier.id.hex() != hex_id.lower():
            raise NoteError(f"verifier key id {hex_id} does not match its name and key ({verifier.id.hex()})")
        return verifier

    def verify(self, note: str) -> str:
        """The note's text if one of its signatures is this key's valid one; else raise."""
        text, signatures = split_note(note)
        key = Ed25519PublicKey.from_public_bytes(self.public)
        for name, blob in signatures:
            if name == self.name and blob[:4] == self.id:
                try:
                    key.verify(blob[4:], text.encode())
                except InvalidSignature:
                    raise NoteError(f"the signature by {self.name} does not match the note") from None
                return text
        raise NoteError(f"the note carries no signature by {self.name} (key id {self.id.hex()})")


@dataclass(frozen=True)
class Signer:
    name: str
    seed: bytes

    @property
    def verifier(self) -> Verifier:
        public = Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return Verifier(self.name, public.public_bytes(Encoding.Raw, PublicFormat.Raw))

    @classmethod
    def generate(cls, name: str) -> Signer:
        _check_name(name)
        key = Ed25519PrivateKey.generate()
        return cls(name, key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))

    def text(self) -> str:
        return f"PRIVATE+KEY+{self.name}+{self.verifier.id.hex()}+{base64.b64encode(ED25519 + self.seed).decode()}"

    @classmethod
    def parse(cls, text: str) -> Signer:
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("a signer key reads PRIVATE+KEY+<name>+<key id>+<base64 key>")
        signer = cls(parts[2], _ed25519_key(parts[4], "signer key"))
        if signer.verifier.id.hex() != parts[3].lower():
            raise NoteError("the signer key's id does not match its key")
        return signer

    def sign(self, text: str) -> str:
        """The signed note: text (ending in a newline), a blank line, the signature line."""
        if not text.endswith("\n"):
            raise NoteError("note text must end with a newline")
        signature = Ed25519PrivateKey.from_private_bytes(self.seed).sign(text.encode())
        blob = base64.b64encode(self.verifier.id + signature).decode()
        return f"{text}\n{SIGNATURE_LINE_PREFIX}{self.name} {blob}\n"


def split_note(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    """The note's text and its (key name, key id ‖ signature) pairs."""
    text, sep, block = note.rpartition("\n\n")
    if not sep:
        raise NoteError("a signed note needs a blank line before its signatures")
    signatures = []
    for line in block.splitlines():
        if not line.startswith(SIGNATURE_LINE_PREFIX):
            raise NoteError(f"not a signature line: {line[:40]!r}")
        name, _, encoded = line[len(SIGNATURE_LINE_PREFIX):].partition(" ")
        blob = _b64(encoded, "signature")
        if len(blob) < 5:
            raise NoteError("a signature line is too short")
        signatures.append((name, blob))
    if not signatures:
        raise NoteError("the note is not signed")
    return text + "\n", signatures


def write_keypair(path: Path, name: str) -> Signer:
    """PATH holds the signer key (mode 0600, created exclusively), PATH.pub the verifier."""
    signer = Signer.generate(name)
    pub = Path(f"{path}.pub")
    for target in (path, pub):
        if target.exists():
            raise NoteError(f"{target}: already exists; keys are never overwritten")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(signer.text() + "\n")
    pub.write_text(signer.verifier.text() + "\n")
    return signer


def read_signer(path: Path) -> Signer:
    return _read_key(path, Signer.parse)


def read_verifier(path: Path) -> Verifier:
    return _read_key(path, Verifier.parse)


def _read_key(path: Path, parse: Callable[[str], K]) -> K:
    try:
        return parse(path.read_text())
    except OSError as exc:
        raise NoteError(f"{path}: cannot read the key: {exc.strerror}") from exc
    except NoteError as exc:
        raise NoteError(f"{path}: {exc}") from exc


def _ed25519_key(encoded: str, what: str) -> bytes:
    """The 32 key bytes of base64(0x01 ‖ key), the note formats' Ed25519 key encoding."""
    raw = _b64(encoded, what)
    if raw[:1] != ED25519 or len(raw) != 33:
        raise NoteError(f"the {what} is not an Ed25519 key")
    return raw[1:]


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise NoteError(f"the {what} is not valid base64") from None
