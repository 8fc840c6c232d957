"""Keys, signed checkpoints, tenant-head proofs, and verify --pubkey against rewrites."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from cli import main
from ledger import Store, verify_ledger
from ledger.checkpoint import tenant_head_proof
from ledger.note import COSIGNATURE_V1, NoteError, Signer, Verifier, read_verifier
from ledger.proofs import (
    Checkpoint,
    CheckpointBody,
    ProofError,
    hash_leaf,
    verify_consistency,
    verify_inclusion,
    verify_tenant_head,
)
from ledger.tree import TreeReader
from tests.conftest import progress, write_jsonl
from tests.test_proofs import mth
from tests.test_verify_tamper import drop_guards


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def ingest(
    db_url: str, path: Path, start: int, stop: int, tenants: tuple[str, ...] = ("acme", "zeta")
) -> None:
    events = [progress(i, tenant=tenants[i % len(tenants)]) for i in range(start, stop)]
    assert run("ingest", "--db", db_url, str(write_jsonl(path, events)))[0] == 0


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.key"
    code, out, _ = run("keygen", "--out", str(path), "--name", "ledger.example")
    assert code == 0 and out.startswith(f"wrote {path} (private, mode 0600)")
    return path


def test_keygen_writes_a_private_file_0600_and_a_verifier(key: Path) -> None:
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    verifier = read_verifier(Path(f"{key}.pub"))
    assert verifier.name == "ledger.example"
    assert run("keygen", "--out", str(key))[0] == 2  # never overwritten


def test_checkpoint_commits_to_root_chain_and_tenant_heads(
    tmp_path: Path, db_url: str, key: Path
) -> None:
    ingest(db_url, tmp_path / "a.jsonl", 1, 45)
    code, note, _ = run("checkpoint", "--db", db_url, "--key", str(key))
    assert code == 0
    body = Checkpoint.parse(read_verifier(Path(f"{key}.pub")).verify(note))
    store = Store(db_url)
    with store.reading() as conn:
        rows = conn.execute(
            text("SELECT seq, tenant, tenant_seq, leaf_hash, chain_hash FROM entries ORDER BY seq")
        ).all()
        proof = tenant_head_proof(conn, 1, "zeta")
    assert body.size == 44 and body.root == mth([bytes(r.leaf_hash) for r in rows])
    assert body.chain_head == bytes(rows[-1].chain_hash)
    # Heads by hand: the last entry of each tenant; zeta's tree leaf is index 1 ("acme" < "zeta").
    last = {r.tenant: r for r in rows}
    assert (proof.index, proof.tenant_seq, proof.leaf) == (
        1,
        last["zeta"].tenant_seq,
        bytes(last["zeta"].leaf_hash),
    )
    assert body.tenant_count == 2
    verify_tenant_head("zeta", proof.tenant_seq, proof.leaf, proof.index, proof.proof, body)
    with pytest.raises(ProofError):
        verify_tenant_head(
            "zeta", proof.tenant_seq - 1, proof.leaf, proof.index, proof.proof, body
        )
    assert run("verify", "--db", db_url, "--pubkey", f"{key}.pub")[0] == 0


def test_later_checkpoints_are_checked_for_consistency(
    tmp_path: Path, db_url: str, key: Path
) -> None:
    for n, (a, b) in enumerate([(1, 20), (20, 77), (77, 78)]):
        ingest(db_url, tmp_path / f"{n}.jsonl", a, b)
        assert run("checkpoint", "--db", db_url, "--key", str(key))[0] == 0
    code, out, _ = run("verify", "--db", db_url, "--pubkey", f"{key}.pub")
    assert code == 0 and "3 checkpoints and their signatures" in out


def tamper(db_url: str, *statements: str) -> None:
    with Store(db_url).engine.begin() as conn:
        drop_guards(conn)
        for statement in statements:
            conn.execute(text(statement))


def test_truncation_below_a_signed_size_is_named(tmp_path: Path, db_url: str, key: Path) -> None:
    ingest(db_url, tmp_path / "a.jsonl", 1, 60)
    run("checkpoint", "--db", db_url, "--key", str(key))
    # A thorough truncation: entries, batch records and tree nodes all made to end at 40.
    tamper(
        db_url,
        "DELETE FROM entries WHERE seq > 40",
        "DELETE FROM batches",
        "INSERT INTO batches SELECT 1, 1, 40, chain_hash, recorded_at FROM entries WHERE seq = 40",
        "DELETE FROM tree_nodes WHERE ((idx + 1) << level) > 40",
    )
    result = verify_ledger(Store(db_url))
    assert result.problem is not None
    assert (result.problem.seq, result.problem.kind) == (41, "truncated")
    assert "below checkpoint #1 signed at size 59" in result.problem.message


def test_a_rewritten_checkpoint_row_is_caught(tmp_path: Path, db_url: str, key: Path) -> None:
    ingest(db_url, tmp_path / "a.jsonl", 1, 30)
    run("checkpoint", "--db", db_url, "--key", str(key))
    tamper(db_url, "UPDATE checkpoints SET root_hash = chain_head")
    code, _, err = run("verify", "--db", db_url, "--pubkey", f"{key}.pub")
    assert code == 1 and err.startswith(
        "FAILED at seq 29: checkpoint: checkpoint #1 at size 29: root signed"
    )


def test_a_forged_note_fails_its_signature(tmp_path: Path, db_url: str, key: Path) -> None:
    ingest(db_url, tmp_path / "a.jsonl", 1, 30)
    run("checkpoint", "--db", db_url, "--key", str(key))
    forger = Signer.generate("ledger.example")  # same name, other key
    store = Store(db_url)
    with store.reading() as conn:
        note = conn.execute(text("SELECT note FROM checkpoints")).scalar_one()
    forged = forger.sign(note.partition("\n\n")[0] + "\n")
    with store.engine.begin() as conn:
        drop_guards(conn)
        conn.execute(text("UPDATE checkpoints SET note = :n"), {"n": forged})
    code, _, err = run("verify", "--db", db_url, "--pubkey", f"{key}.pub")
    assert (
        code == 1
        and "signature: checkpoint #1: the note carries no signature by ledger.example" in err
    )


def test_wrong_public_key_is_refused(tmp_path: Path, sqlite_url: str, key: Path) -> None:
    ingest(sqlite_url, tmp_path / "a.jsonl", 1, 5)
    run("checkpoint", "--db", sqlite_url, "--key", str(key))
    other = tmp_path / "other.pub"
    other.write_text(Signer.generate("someone-else").verifier.text())
    code, _, err = run("verify", "--db", sqlite_url, "--pubkey", str(other))
    assert (
        code == 1 and "signed by 'ledger.example', and no public key of that name was given" in err
    )


@pytest.mark.parametrize("bad", ["x+y", "a+00000000+AQ==", "name+deadbeef+" + "A" * 44])
def test_bad_verifier_keys_are_refused(bad: str) -> None:
    with pytest.raises(NoteError):
        Verifier.parse(bad)


def test_a_note_signed_then_changed_fails() -> None:
    signer = Signer.generate("k")
    note = signer.sign("origin\n1\n" + "AAAA\n")
    with pytest.raises(NoteError):
        signer.verifier.verify(note.replace("\n1\n", "\n2\n"))
    assert signer.verifier.verify(note) == "origin\n1\nAAAA\n"


def test_tree_root_reads_stay_logarithmic(tmp_path: Path, sqlite_url: str) -> None:
    """The root at a size is the fold of at most log2(n) subtree hashes."""
    ingest(sqlite_url, tmp_path / "a.jsonl", 1, 100)
    with Store(sqlite_url).reading() as conn:
        reader = TreeReader(conn)
        leaves = reader.leaves(0, 99)
        assert reader.root(99) == mth(leaves)
        assert hash_leaf(b"") != reader.root(99)


# -- strict formats: nothing signed that a reader refuses, nothing read that the specs refuse -----

ROOT_B64 = (
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I="  # 32 bytes (the tlog-checkpoint example's root)
)
PLAIN = f"example.com/log\n439\n{ROOT_B64}\n"

BAD_CHECKPOINTS: dict[str, str] = {
    "size with a plus sign": f"example.com/log\n+439\n{ROOT_B64}\n",
    "size with a leading zero": f"example.com/log\n0439\n{ROOT_B64}\n",
    "size with a leading space": f"example.com/log\n 439\n{ROOT_B64}\n",
    "size with an underscore": f"example.com/log\n4_39\n{ROOT_B64}\n",
    "size in Arabic-Indic digits": f"example.com/log\n\u0664\u0663\u0669\n{ROOT_B64}\n",
    "size past 2**63 - 1": f"example.com/log\n{2**63}\n{ROOT_B64}\n",
    "root of 0 bytes": "example.com/log\n439\n\n",
    "root of 31 bytes": f"example.com/log\n439\n{base64.b64encode(bytes(31)).decode()}\n",
    "root of 33 bytes": f"example.com/log\n439\n{base64.b64encode(bytes(33)).decode()}\n",
    "root not base64": "example.com/log\n439\n" + "!" * 44 + "\n",
    "empty origin": f"\n439\n{ROOT_B64}\n",
    "empty extension line": f"{PLAIN}\nchain {'0' * 64}\n",
    "two lines only": "example.com/log\n439\n",
    "no final newline": PLAIN[:-1],
    "a CR before a newline": PLAIN.replace("\n", "\r\n"),
    "a tab in the origin": f"example\tcom\n439\n{ROOT_B64}\n",
}


@pytest.mark.parametrize("name", list(BAD_CHECKPOINTS), ids=list(BAD_CHECKPOINTS))
def test_checkpoint_texts_the_spec_refuses_are_refused(name: str) -> None:
    with pytest.raises(ProofError):
        CheckpointBody.parse(BAD_CHECKPOINTS[name])


def test_a_plain_three_line_checkpoint_is_read() -> None:
    body = CheckpointBody.parse(PLAIN)
    assert (body.origin, body.size, body.root, body.extensions) == (
        "example.com/log",
        439,
        base64.b64decode(ROOT_B64),
        (),
    )
    assert body.text() == PLAIN
    with pytest.raises(ProofError, match="not a gpuledger checkpoint: no 'chain' extension line"):
        Checkpoint.parse(PLAIN)


def test_size_zero_is_written_0() -> None:
    assert CheckpointBody.parse(f"o\n0\n{ROOT_B64}\n").size == 0


SIGNER = Signer(name="example.com/log", seed=bytes(range(32)))
GOOD_NOTE = SIGNER.sign(PLAIN)
_SIG_LINE = GOOD_NOTE.split("\n\n")[1]

BAD_NOTES: dict[str, str] = {
    "no final newline": GOOD_NOTE[:-1],
    "CRLF line ends": GOOD_NOTE.replace("\n", "\r\n"),
    "a tab in the text": GOOD_NOTE.replace("example.com/log\n439", "example.com/log\t\n439", 1),
    "no blank line": GOOD_NOTE.replace("\n\n", "\n"),
    "no signature": PLAIN + "\n",
    "a signature line without the em dash": PLAIN + "\n- " + _SIG_LINE[2:],
    "an empty signature": PLAIN + "\n\u2014 example.com/log \n",
    "a key name with a space": GOOD_NOTE.replace(
        "\u2014 example.com/log", "\u2014 example.com/ log"
    ),
    "101 signatures": PLAIN + "\n" + _SIG_LINE * 101,
}


@pytest.mark.parametrize("name", list(BAD_NOTES), ids=list(BAD_NOTES))
def test_notes_go_refuses_are_refused(name: str) -> None:
    with pytest.raises(NoteError):
        SIGNER.verifier.verify(BAD_NOTES[name])


def test_the_good_note_is_read() -> None:
    assert SIGNER.verifier.verify(GOOD_NOTE) == PLAIN


GOOD_VKEY = SIGNER.verifier.text()
BAD_VKEYS: dict[str, str] = {
    "a leading space": " " + GOOD_VKEY,
    "a trailing space": GOOD_VKEY + " ",
    "a trailing newline": GOOD_VKEY + "\n",
    "a space in the name": GOOD_VKEY.replace("example.com/log", "example.com log"),
    "an upper-case key id": GOOD_VKEY.replace(
        SIGNER.verifier.id.hex(), SIGNER.verifier.id.hex().upper()
    ),
    "a 7-digit key id": GOOD_VKEY.replace(SIGNER.verifier.id.hex(), SIGNER.verifier.id.hex()[:7]),
    "an empty name": GOOD_VKEY[len("example.com/log") :],
    "a cosigner key (type 04) given as a note key": Verifier(
        SIGNER.name, SIGNER.verifier.public, COSIGNATURE_V1
    ).text(),
    "name and id do not match": "x+y",
    "too short a key": "a+00000000+AQ==",
    "the id of another key": "name+deadbeef+" + "A" * 44,
}


@pytest.mark.parametrize("name", list(BAD_VKEYS), ids=list(BAD_VKEYS))
def test_verifier_keys_the_spec_refuses_are_refused(name: str) -> None:
    with pytest.raises(NoteError):
        Verifier.parse(BAD_VKEYS[name])


def test_the_signed_note_spec_example_verifies() -> None:
    """c2sp.org/signed-note's own example: this vkey verifies this note."""
    vkey = Verifier.parse("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k")
    note = (
        "This is an example message.\n\n\u2014 example.com/foo "
        "Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTg"
        "K7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
    )
    assert vkey.verify(note) == "This is an example message.\n"


BAD_ORIGINS: dict[str, tuple[str, str]] = {
    "empty": ("", "--origin: must not be empty"),
    "a newline": ("a\nb", "--origin: 'a\\nb' holds '\\n'"),
    "a tab": ("a\tb", "--origin: 'a\\tb' holds '\\t'"),
    "a carriage return": ("a\rb", "--origin: 'a\\rb' holds '\\r'"),
}


@pytest.mark.parametrize("name", list(BAD_ORIGINS), ids=list(BAD_ORIGINS))
def test_checkpoint_refuses_an_origin_no_parser_could_read(
    tmp_path: Path, sqlite_url: str, key: Path, name: str
) -> None:
    origin, message = BAD_ORIGINS[name]
    ingest(sqlite_url, tmp_path / "a.jsonl", 1, 5)
    code, out, err = run("checkpoint", "--db", sqlite_url, "--key", str(key), "--origin", origin)
    assert (code, out) == (2, "")
    assert err.startswith(f"Error: {message}") and err.count("\n") == 1
    assert (
        run("verify", "--db", sqlite_url, "--pubkey", f"{key}.pub")[0] == 1
    )  # and nothing was stored: no checkpoint


BAD_NAMES: dict[str, str] = {
    "empty": "",
    "a control byte": "ledger\x01",
    "an escape": "led\x1bger",
    "a space": "my ledger",
    "a no-break space": "my\xa0ledger",
    "a plus": "a+b",
}


@pytest.mark.parametrize("name", list(BAD_NAMES), ids=list(BAD_NAMES))
def test_keygen_refuses_a_name_go_would_refuse(tmp_path: Path, name: str) -> None:
    code, out, err = run("keygen", "--out", str(tmp_path / "k"), "--name", BAD_NAMES[name])
    assert (code, out) == (2, "") and err.startswith("Error: --name") and err.count("\n") == 1
    assert not (tmp_path / "k").exists()


def test_keygen_show_prints_the_verifier_key_again(key: Path) -> None:
    code, out, _ = run("keygen", "--show", str(key))
    assert code == 0 and out == Path(f"{key}.pub").read_text()


def test_proof_hashes_of_the_wrong_length_are_refused() -> None:
    with pytest.raises(ProofError, match="root: expected 32 bytes, got 0"):
        verify_inclusion(0, 1, b"", [], b"")
    with pytest.raises(ProofError, match="leaf: expected 32 bytes, got 31"):
        verify_inclusion(0, 1, bytes(31), [], bytes(32))
    with pytest.raises(ProofError, match="proof hash 1: expected 32 bytes, got 33"):
        verify_inclusion(0, 3, bytes(32), [bytes(32), bytes(33)], bytes(32))
    with pytest.raises(ProofError, match="first root: expected 32 bytes, got 12"):
        verify_consistency(1, 1, bytes(12), bytes(12), [])
    with pytest.raises(ProofError, match="proof hash 0: expected 32 bytes, got 0"):
        verify_consistency(1, 2, bytes(32), bytes(32), [b""])


def test_verify_checkpoint_file_catches_a_rollback_the_store_hides(
    tmp_path: Path, db_url: str, key: Path
) -> None:
    ingest(db_url, tmp_path / "a.jsonl", 1, 10)
    saved_early = tmp_path / "early.txt"
    saved_early.write_text(run("checkpoint", "--db", db_url, "--key", str(key))[1])
    ingest(db_url, tmp_path / "b.jsonl", 10, 30)
    saved_late = tmp_path / "late.txt"
    saved_late.write_text(run("checkpoint", "--db", db_url, "--key", str(key))[1])
    code, out, _ = run(
        "verify",
        "--db",
        db_url,
        "--pubkey",
        f"{key}.pub",
        "--checkpoint",
        str(saved_early),
        "--checkpoint",
        str(saved_late),
    )
    assert code == 0 and out.endswith("that the store extends 2 saved checkpoints\n")
    # Roll back to the first ingest (9 entries, one batch) and delete the checkpoint signed after
    # it.
    tamper(
        db_url,
        "DELETE FROM checkpoint_tenants WHERE checkpoint_seq = 2",
        "DELETE FROM checkpoints WHERE checkpoint_seq = 2",
        "DELETE FROM entries WHERE seq > 9",
        "DELETE FROM batches WHERE last_seq > 9",
        "DELETE FROM tree_nodes",
    )
    assert run("verify", "--db", db_url, "--pubkey", f"{key}.pub")[0] == 0
    code, _, err = run(
        "verify", "--db", db_url, "--pubkey", f"{key}.pub", "--checkpoint", str(saved_late)
    )
    assert code == 1 and err.startswith(
        f"FAILED at seq 10: rollback: the saved checkpoint {saved_late} (size 29, root "
    )


def test_verify_checkpoint_needs_the_public_key(tmp_path: Path, sqlite_url: str) -> None:
    saved = tmp_path / "c.txt"
    saved.write_text("x\n")
    code, _, err = run("verify", "--db", sqlite_url, "--checkpoint", str(saved))
    assert code == 2 and err == (
        "Error: --checkpoint: give the log's --pubkey too, so that the saved checkpoint's "
        "signature is checked\n"
    )
