"""Our checkpoints, notes, leaf hashes, roots and proofs, checked by an independent
implementation: Go's golang.org/x/mod/sumdb/note and sumdb/tlog (tests/interop/main.go),
built offline from Debian's golang-golang-x-mod-dev source. Skips, saying why, when `go`
or that source is absent (.ci/run installs both)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ledger import Appender, Store, append_stream
from ledger.checkpoint import sign_checkpoint
from ledger.hashing import entry_bytes
from ledger.note import COSIGNATURE_V1, NoteError, Signer, Verifier
from ledger.proofs import Checkpoint
from ledger.tables import entries
from ledger.tree import TreeReader
from ledger.witness import cosign
from schemas import Accepted, Origin, validate_event
from tests.conftest import ROOT, progress
from tests.test_checkpoints import BAD_NOTES, SIGNER

GOPATH = Path("/usr/share/gocode")
X_MOD = GOPATH / "src/golang.org/x/mod/sumdb"


def _skip_reason() -> str | None:
    if shutil.which("go") is None:
        return "`go` is not installed (apt-get install golang-go)"
    if not (X_MOD / "note").is_dir() or not (X_MOD / "tlog").is_dir():
        return f"Go's x/mod source is not at {X_MOD} (apt-get install golang-golang-x-mod-dev)"
    return None


@pytest.fixture(scope="module")
def go_checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("interop")
    env = {
        **os.environ,
        "GOPATH": str(GOPATH),
        "GO111MODULE": "off",
        "GOFLAGS": "",
        "GOPROXY": "off",
        "GOCACHE": str(out / "cache"),
        "CGO_ENABLED": "0",
    }
    subprocess.run(
        ["go", "build", "-o", str(out / "interop"), "."],
        cwd=ROOT / "tests/interop",
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out / "interop"


def ask_go(checker: Path, request: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [str(checker)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def append(store: Store, first: int, last: int) -> None:
    events = [progress(i, tenant="acme" if i % 3 else "zeta") for i in range(first, last + 1)]
    records = [
        Accepted.of(validate_event(e), Origin("t.jsonl", i)) for i, e in enumerate(events, first)
    ]
    append_stream(Appender(store), records, batch_size=16)


SIZES = (1, 7, 16, 33, 45)  # checkpoints at these tree sizes: powers of two and not


def test_go_reads_our_checkpoints_leaves_roots_and_proofs(store: Store, go_checker: Path) -> None:
    signer = Signer.generate("gpuledger.example/log")
    notes, last = [], 0
    for size in SIZES:
        append(store, last + 1, size)
        notes.append(sign_checkpoint(store, signer, "gpuledger.example/log").note)
        last = size
    with store.reading() as conn:
        rows = conn.execute(select(entries).order_by(entries.c.seq)).all()
        reader = TreeReader(conn)
        inclusion = [
            (i, n, reader.inclusion_proof(i, n)) for n in SIZES for i in sorted({0, n // 2, n - 1})
        ]
        consistency = [
            (a, b, reader.consistency_proof(a, b)) for a in SIZES for b in SIZES if a < b
        ]
    bodies = [Checkpoint.parse(note.partition("\n\n")[0] + "\n") for note in notes]
    roots = {b.size: b.root for b in bodies}
    leaves = [
        entry_bytes(
            r.seq,
            r.recorded_at,
            r.source,
            r.id,
            r.type,
            r.tenant,
            r.tenant_seq,
            r.event.encode(),
            bytes(r.salt),
        )
        for r in rows
    ]

    answer = ask_go(
        go_checker,
        {
            "vkey": signer.verifier.text(),
            "notes": notes,
            "leaves": [{"data": leaf.hex()} for leaf in leaves],
            "inclusion": [
                {
                    "index": i,
                    "size": n,
                    "leaf": bytes(rows[i].leaf_hash).hex(),
                    "root": roots[n].hex(),
                    "proof": [h.hex() for h in proof],
                }
                for i, n, proof in inclusion
            ],
            "consistency": [
                {
                    "first": a,
                    "second": b,
                    "first_root": roots[a].hex(),
                    "second_root": roots[b].hex(),
                    "proof": [h.hex() for h in proof],
                }
                for a, b, proof in consistency
            ],
        },
    )

    assert [
        (n["ok"], n["signed"], n["origin"], n["size"], n["root"]) for n in answer["notes"]
    ] == [
        (True, ["gpuledger.example/log"], "gpuledger.example/log", b.size, b.root.hex())
        for b in bodies
    ]
    assert answer["leaf_hashes"] == [bytes(r.leaf_hash).hex() for r in rows]
    assert [answer["roots"][size - 1] for size in SIZES] == [roots[size].hex() for size in SIZES]
    assert answer["inclusion"] == [{"ok": True}] * len(inclusion)
    assert answer["consistency"] == [{"ok": True}] * len(consistency)


def test_go_refuses_what_is_wrong(go_checker: Path) -> None:
    """The controls: Go's answer is not always ok."""
    other = Signer("example.com/log", bytes(32))  # same name, another key
    forged = other.sign(
        SIGNER.verifier.verify(SIGNER.sign("example.com/log\n1\n" + "A" * 43 + "=\n"))
    )
    leaf = bytes.fromhex(
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )  # RFC 9162 leaf of b""
    answer = ask_go(
        go_checker,
        {
            "vkey": SIGNER.verifier.text(),
            "notes": [forged],
            "inclusion": [
                {
                    "index": 0,
                    "size": 2,
                    "leaf": leaf.hex(),
                    "root": leaf.hex(),
                    "proof": [leaf.hex()],
                }
            ],
            "consistency": [
                {
                    "first": 1,
                    "second": 2,
                    "first_root": leaf.hex(),
                    "second_root": leaf.hex(),
                    "proof": [leaf.hex()],
                }
            ],
        },
    )
    assert not answer["notes"][0]["ok"]
    assert not answer["inclusion"][0]["ok"] and not answer["consistency"][0]["ok"]


@pytest.mark.parametrize("name", list(BAD_NOTES), ids=list(BAD_NOTES))
def test_go_refuses_every_note_our_parser_refuses(go_checker: Path, name: str) -> None:
    answer = ask_go(go_checker, {"vkey": SIGNER.verifier.text(), "notes": [BAD_NOTES[name]]})
    assert not answer["notes"][0]["ok"], name


def test_a_note_go_signs_is_the_note_we_sign(go_checker: Path) -> None:
    """Ed25519 is deterministic: Go's note.Sign with our signer key gives our bytes."""
    text = "gpuledger.example/log\n3\n" + "A" * 43 + "=\nchain " + "0" * 64 + "\n"
    signed = ask_go(
        go_checker, {"vkey": SIGNER.verifier.text(), "sign": {"skey": SIGNER.text(), "text": text}}
    )["signed"]
    assert signed == SIGNER.sign(text)
    assert SIGNER.verifier.verify(signed) == text


def test_go_refuses_notes_signed_with_a_control_byte_in_the_key_name(go_checker: Path) -> None:
    """Why keygen refuses such a name: Go signs with it, then refuses every note it signed."""
    named = Signer("ledger\x01", bytes(range(32)))
    signed = ask_go(
        go_checker, {"vkey": SIGNER.verifier.text(), "sign": {"skey": named.text(), "text": "x\n"}}
    )["signed"]
    answer = ask_go(go_checker, {"vkey": named.verifier.text(), "notes": [signed]})
    assert answer["notes"][0]["ok"] is False


def test_go_reads_a_cosigned_checkpoint_and_ignores_the_cosignature(go_checker: Path) -> None:
    """A witness's cosignature/v1 line (key type 04, unknown to Go's note) does not stop
    Go from verifying the log's own signature, as signed-note requires."""
    witness = Signer("witness.example/w1", bytes(range(1, 33)), COSIGNATURE_V1)
    body = "example.com/log\n3\n" + "A" * 43 + "=\n"
    note = SIGNER.sign(body) + cosign(witness, body, 1_700_000_000)
    answer = ask_go(go_checker, {"vkey": SIGNER.verifier.text(), "notes": [note]})["notes"][0]
    assert (answer["ok"], answer["signed"], answer["text"]) == (True, [SIGNER.name], body)


def _mutations(note: str, count: int, seed: int) -> list[str]:
    """Notes one edit away from `note`: a character deleted, replaced or inserted, drawn
    from the characters the grammar cares about."""
    rng = random.Random(seed)
    alphabet = [
        "\n",
        "\r",
        "\t",
        " ",
        "\u2014",
        "+",
        "=",
        "/",
        "A",
        "0",
        "\u00a0",
        "\x01",
        "\u3000",
    ]
    out = []
    for _ in range(count):
        at = rng.randrange(len(note) + 1)
        how = rng.choice(("delete", "replace", "insert"))
        char = rng.choice(alphabet)
        if how == "delete" and at < len(note):
            out.append(note[:at] + note[at + 1 :])
        elif how == "replace" and at < len(note):
            out.append(note[:at] + char + note[at + 1 :])
        else:
            out.append(note[:at] + char + note[at:])
    return out


def test_our_note_verifier_agrees_with_go_on_every_one_edit_mutation(go_checker: Path) -> None:
    """A differential test: 600 notes one edit away from a good one (a second signature
    line included, so that edits there count too); we accept exactly those Go accepts."""
    other = Signer("other.example/log", bytes(range(2, 34)))
    note = SIGNER.sign(PLAIN_BODY) + other.sign(PLAIN_BODY).split("\n\n")[1]
    notes = [note, *_mutations(note, 600, seed=11)]
    answers = ask_go(go_checker, {"vkey": SIGNER.verifier.text(), "notes": notes})["notes"]
    ours = []
    for candidate in notes:
        try:
            SIGNER.verifier.verify(candidate)
            ours.append(True)
        except NoteError:
            ours.append(False)
    go = [
        a["ok"] or "fewer than 3 lines" in a.get("error", "") for a in answers
    ]  # the Go side also reads the tree lines
    disagreements = [(n, o, a) for n, o, g, a in zip(notes, ours, go, answers) if o != g]
    assert not disagreements, disagreements[:3]
    assert ours[0] and ours.count(False) > 300  # the good note passes; most edits break it


PLAIN_BODY = "example.com/log\n439\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"


def _vkey_divergence(vkey: str) -> bool:
    """Where we are stricter than Go's note.NewVerifier, on purpose: c2sp.org/signed-note
    writes the key id in lower-case hex (Go's ParseUint takes upper case too); a key name
    with a control character could never verify a note (note.Open refuses them); and Go's
    base64 decoder skips CR and LF inside the key, which RFC 4648 §3.3 says to reject."""
    name, _, rest = vkey.partition("+")
    key = rest.partition("+")[2]
    return (
        any(c.isupper() for c in rest[:8])
        or any(ord(c) < 0x20 for c in name)
        or "\r" in key
        or "\n" in key
    )


def test_our_verifier_key_parser_agrees_with_go(go_checker: Path) -> None:
    vkey = SIGNER.verifier.text()
    vkeys = [
        vkey,
        *_mutations(vkey, 400, seed=5),
        vkey.upper(),
        "a\x01b+" + vkey.partition("+")[2],
    ]
    answers = ask_go(go_checker, {"vkeys": vkeys})["vkeys"]
    ours = []
    for candidate in vkeys:
        try:
            Verifier.parse(candidate)
            ours.append(True)
        except NoteError:
            ours.append(False)
    disagreements = [
        (v, o, a)
        for v, o, a in zip(vkeys, ours, answers)
        if o != a["ok"] and not _vkey_divergence(v)
    ]
    assert not disagreements, disagreements[:3]
    assert ours[0] and ours.count(False) > 200
