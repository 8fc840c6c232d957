"""Keys, signed checkpoints, tenant-head proofs, and verify --pubkey against rewrites."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from cli import main
from ledger import Store, verify_ledger
from ledger.checkpoint import sign_checkpoint, tenant_head_proof
from ledger.merkle import root_of_leaves
from ledger.note import NoteError, Signer, Verifier, read_verifier
from ledger.proofs import Checkpoint, ProofError, hash_leaf, verify_tenant_head
from ledger.tree import TreeReader
from tests.conftest import progress, write_jsonl
from tests.test_verify_tamper import drop_guards


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def ingest(db_url: str, path: Path, start: int, stop: int, tenants: tuple[str, ...] = ("acme", "zeta")) -> None:
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


def test_checkpoint_commits_to_root_chain_and_tenant_heads(tmp_path: Path, db_url: str, key: Path) -> None:
    ingest(db_url, tmp_path / "a.jsonl", 1, 45)
    code, note, _ = run("checkpoint", "--db", db_url, "--key", str(key))
    assert code == 0
    body = Checkpoint.parse(read_verifier(Path(f"{key}.pub")).verify(note))
    store = Store(db_url)
    with store.reading() as conn:
        rows = conn.execute(text("SELECT seq, tenant, tenant_seq, leaf_hash, chain_hash FROM entries ORDER BY seq")).all()
        proof = tenant_head_proof(conn, 1, "zeta")
    assert body.size == 44 and body.root == root_of_leaves([bytes(r.leaf_hash) for r in rows])
    assert body.chain_head == bytes(rows[-1].chain_hash)
    # Heads by hand: the last entry of each tenant; zeta's tree leaf is index 1 ("acme" < "zeta").
    last = {r.tenant: r for r in rows}
    assert (proof.index, proof.tenant_seq, proof.leaf) == (1, last["zeta"].tenant_seq, bytes(last["zeta"].leaf_hash))
    assert body.tenant_count == 2
    verify_tenant_head("zeta", proof.tenant_seq, proof.leaf, proof.index, proof.proof, body)
    with pytest.raises(ProofError):
        verify_tenant_head("zeta", proof.tenant_seq - 1, proof.leaf, proof.index, proof.proof, body)
    assert run("verify", "--db", db_url, "--pubkey", f"{key}.pub")[0] == 0


def test_later_checkpoints_are_checked_for_consistency(tmp_path: Path, db_url: str, key: Path) -> None:
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
    tamper(db_url, "DELETE FROM entries WHERE seq > 40", "DELETE FROM batches",
           "INSERT INTO batches SELECT 1, 1, 40, chain_hash, recorded_at FROM entries WHERE seq = 40",
           "DELETE FROM tree_nodes WHERE ((idx + 1) << level) > 40")
    result = verify_ledger(Store(db_url))
    assert result.problem is not None
    assert (result.problem.seq, result.problem.kind) == (41, "truncated")
    assert "below checkpoint #1 signed at size 59" in result.problem.message


def test_a_rewritten_checkpoint_row_is_caught(tmp_path: Path, db_url: str, key: Path) -> None:
    ingest(db_url, tmp_path / "a.jsonl", 1, 30)
    run("checkpoint", "--db", db_url, "--key", str(key))
    tamper(db_url, "UPDATE checkpoints SET root_hash = chain_head")
    code, _, err = run("verify", "--db", db_url, "--pubkey", f"{key}.pub")
    assert code == 1 and err.startswith("FAILED at seq 29: checkpoint: checkpoint #1 at size 29: root signed")


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
    assert code == 1 and "signature: checkpoint #1: the note carries no signature by ledger.example" in err


def test_wrong_public_key_is_refused(tmp_path: Path, sqlite_url: str, key: Path) -> None:
    ingest(sqlite_url, tmp_path / "a.jsonl", 1, 5)
    run("checkpoint", "--db", sqlite_url, "--key", str(key))
    other = tmp_path / "other.pub"
    other.write_text(Signer.generate("someone-else").verifier.text())
    code, _, err = run("verify", "--db", sqlite_url, "--pubkey", str(other))
    assert code == 1 and "signed by 'ledger.example', and no public key of that name was given" in err


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
        assert reader.root(99) == root_of_leaves(leaves)
        assert hash_leaf(b"") != reader.root(99)
