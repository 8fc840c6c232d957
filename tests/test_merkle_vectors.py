"""Published vectors against our verifiers: transparency-dev/merkle's inclusion and
consistency test data, and the examples printed in the C2SP specifications
(tests/vectors/README.md gives their sources and licences).

The Merkle reference here is a naive RFC 9162 §2.1 recursion written for this test from
the RFC's text; it shares no code with ledger/."""

from __future__ import annotations

import base64
import json
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest

from ledger.note import COSIGNATURE_V1, Signer, Verifier
from ledger.proofs import CheckpointBody, ProofError, verify_consistency, verify_inclusion
from ledger.witness import cosignature_message, verify_cosignature

VECTORS = Path(__file__).parent / "vectors"
MERKLE = VECTORS / "transparency-dev-merkle"
EXAMPLES = json.loads((VECTORS / "c2sp-examples.json").read_text())

#: Where we knowingly differ from transparency-dev/merkle, and why.
DIVERGENCES = {
    "consistency/additional/sizes-are-equal-one-and-proof-is-empty.json": (
        "its roots are 12-byte placeholders ('don't care 2'); we refuse any hash that is not 32 "
        "bytes"
    ),
}


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def _vector_files(kind: str) -> list[str]:
    return sorted(str(p.relative_to(MERKLE)) for p in (MERKLE / kind).rglob("*.json"))


def _accepts(check: Any) -> bool:
    try:
        check()
    except ProofError:
        return False
    return True


@pytest.mark.parametrize("name", _vector_files("inclusion"))
def test_inclusion_vectors(name: str) -> None:
    v = json.loads((MERKLE / name).read_text())
    proof = [_b64(h) for h in v["proof"] or []]
    accepted = _accepts(
        lambda: verify_inclusion(
            v["leafIdx"], v["treeSize"], _b64(v["leafHash"]), proof, _b64(v["root"])
        )
    )
    assert accepted == (not v["wantErr"]), v["desc"]


@pytest.mark.parametrize("name", _vector_files("consistency"))
def test_consistency_vectors(name: str) -> None:
    v = json.loads((MERKLE / name).read_text())
    proof = [_b64(h) for h in v["proof"] or []]
    accepted = _accepts(
        lambda: verify_consistency(
            v["size1"], v["size2"], _b64(v["root1"]), _b64(v["root2"]), proof
        )
    )
    expected = not v["wantErr"] if name not in DIVERGENCES else v["wantErr"]
    assert accepted == expected, v["desc"]


# -- the naive reference, from RFC 9162 §2.1 ----------------------------------------------

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


def naive_mth(data: list[bytes]) -> bytes:
    if len(data) == 1:
        return sha256(b"\x00" + data[0]).digest()
    k = 1
    while k * 2 < len(data):
        k *= 2
    return sha256(b"\x01" + naive_mth(data[:k]) + naive_mth(data[k:])).digest()


def naive_path(m: int, data: list[bytes]) -> list[bytes]:
    if len(data) == 1:
        return []
    k = 1
    while k * 2 < len(data):
        k *= 2
    if m < k:
        return naive_path(m, data[:k]) + [naive_mth(data[k:])]
    return naive_path(m - k, data[k:]) + [naive_mth(data[:k])]


def naive_subproof(m: int, data: list[bytes], whole: bool) -> list[bytes]:
    if m == len(data):
        return [] if whole else [naive_mth(data)]
    k = 1
    while k * 2 < len(data):
        k *= 2
    if m <= k:
        return naive_subproof(m, data[:k], whole) + [naive_mth(data[k:])]
    return naive_subproof(m - k, data[k:], False) + [naive_mth(data[:k])]


def _happy(kind: str) -> list[str]:
    return [n for n in _vector_files(kind) if n.endswith("happy-path.json")]


@pytest.mark.parametrize("name", _happy("inclusion"))
def test_the_reference_gives_the_happy_inclusion_vectors(name: str) -> None:
    v = json.loads((MERKLE / name).read_text())
    leaves = CT_LEAVES[: v["treeSize"]]
    assert naive_mth(leaves) == _b64(v["root"])
    assert naive_path(v["leafIdx"], leaves) == [_b64(h) for h in v["proof"] or []]


@pytest.mark.parametrize("name", _happy("consistency"))
def test_the_reference_gives_the_happy_consistency_vectors(name: str) -> None:
    v = json.loads((MERKLE / name).read_text())
    first, second = v["size1"], v["size2"]
    assert (naive_mth(CT_LEAVES[:first]), naive_mth(CT_LEAVES[:second])) == (
        _b64(v["root1"]),
        _b64(v["root2"]),
    )
    expected = naive_subproof(first, CT_LEAVES[:second], True) if first < second else []
    assert expected == [_b64(h) for h in v["proof"] or []]


def test_every_proof_of_every_small_tree_matches_the_reference() -> None:
    data = [b"leaf %d" % i for i in range(40)]
    for size in range(1, 41):
        root = naive_mth(data[:size])
        for index in range(size):
            verify_inclusion(
                index,
                size,
                sha256(b"\x00" + data[index]).digest(),
                naive_path(index, data[:size]),
                root,
            )
        for first in range(1, size):
            verify_consistency(
                first,
                size,
                naive_mth(data[:first]),
                root,
                naive_subproof(first, data[:size], True),
            )


# -- C2SP and Go examples ----------------------------------------------------------------


def test_the_signed_note_example() -> None:
    example = EXAMPLES["signed_note"]
    assert Verifier.parse(example["vkey"]).verify(example["note"]) == example["text"]


def test_go_note_package_example_signs_and_verifies() -> None:
    example = EXAMPLES["go_note_example"]
    signer = Signer.parse(example["skey"])
    assert signer.verifier.text() == example["vkey"]
    assert signer.sign(example["text"]) == example["note"]
    assert Verifier.parse(example["vkey"]).verify(example["note"]) == example["text"]


def test_the_checkpoint_example_parses() -> None:
    example = EXAMPLES["checkpoint"]
    body = CheckpointBody.parse(example["note"].partition("\n\n")[0] + "\n")
    assert (body.origin, body.size, body.root) == (
        example["origin"],
        example["size"],
        _b64(example["root_base64"]),
    )


def test_the_cosignature_example_has_the_cosignature_v1_shape() -> None:
    """The spec prints no witness key for its example, so the signature itself cannot be
    checked: its timestamp and the message it signs can."""
    example = EXAMPLES["cosigned_checkpoint"]
    text, _, signatures = example["note"].partition("\n\n")
    line = next(
        s for s in signatures.splitlines() if s.startswith(f"\u2014 {example['cosigner']} ")
    )
    blob = base64.b64decode(line.rsplit(" ", 1)[1])
    assert len(blob) == 4 + 8 + 64 and int.from_bytes(blob[4:12], "big") == example["timestamp"]
    assert (
        cosignature_message(text + "\n", example["timestamp"])
        == example["signed_message"].encode()
    )


def test_a_cosignature_verifies_with_its_type_04_key_only() -> None:
    witness = Signer("witness.example.com/w1", bytes(range(32)), COSIGNATURE_V1)
    body = EXAMPLES["checkpoint"]["note"].partition("\n\n")[0] + "\n"
    timestamp = EXAMPLES["cosigned_checkpoint"]["timestamp"]
    signature = witness.raw_sign(cosignature_message(body, timestamp))
    blob = witness.verifier.id + timestamp.to_bytes(8, "big") + signature
    note = (
        EXAMPLES["checkpoint"]["note"]
        + f"\u2014 {witness.name} {base64.b64encode(blob).decode()}\n"
    )
    assert verify_cosignature(note, witness.verifier) == timestamp
    as_note_key = Verifier(
        witness.name, witness.verifier.public
    )  # the same key as type 01: another key id
    with pytest.raises(Exception, match="no cosignature"):
        verify_cosignature(note, as_note_key)
