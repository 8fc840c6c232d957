"""`checkpoint_tenants` and the stored note are checked as the entries are (issue 28).

A packet's tenant-head proof is built from a checkpoint's `checkpoint_tenants` rows, and
the packet carries the checkpoint's stored note: an edit to either must make `verify`
name it, and `dispute --stored-checkpoint` refuse in one line rather than crash. Each
case edits the good signed ledger of tests/test_verify_tamper.py below the triggers, on
SQLite and PostgreSQL, and is verified both by the walk from seq 1 and by the range pass.

By hand: entries 1..120 alternate acme, acme, zeta (zeta at every third seq); checkpoint
#1 is signed at size 60 (acme's head tenant_seq 40, zeta's 20) and #2 at size 120 (acme
80, zeta 40).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from ledger import Store, verify_ledger
from ledger.note import Signer
from tests.conftest import run_cli, write_jsonl
from tests.reconcile_helpers import Scenario
from tests.test_verify_tamper import drop_guards, signed_ledger


def lower_acme_head(conn: Connection) -> None:
    conn.execute(
        text(
            "UPDATE checkpoint_tenants SET tenant_seq = 39 WHERE checkpoint_seq = 1 AND tenant = "
            "'acme'"
        )
    )


def zero_zeta_leaf(conn: Connection) -> None:
    conn.execute(
        text(
            "UPDATE checkpoint_tenants SET leaf_hash = :z WHERE checkpoint_seq = 2 AND tenant = "
            "'zeta'"
        ),
        {"z": bytes(32)},
    )


def delete_zeta_row(conn: Connection) -> None:
    conn.execute(
        text("DELETE FROM checkpoint_tenants WHERE checkpoint_seq = 1 AND tenant = 'zeta'")
    )


def add_a_tenant_row(conn: Connection) -> None:
    conn.execute(
        text(
            "INSERT INTO checkpoint_tenants (checkpoint_seq, tenant, tenant_seq, leaf_hash) "
            "VALUES (2, 'ghost', 1, :z)"
        ),
        {"z": bytes(32)},
    )


def older_head_for_acme(conn: Connection) -> None:
    """#2's acme row made #1's: a real head of acme, at the wrong size."""
    leaf = conn.execute(
        text(
            "SELECT leaf_hash FROM checkpoint_tenants WHERE checkpoint_seq = 1 AND tenant = 'acme'"
        )
    ).scalar_one()
    conn.execute(
        text(
            "UPDATE checkpoint_tenants SET tenant_seq = 40, leaf_hash = :l "
            "WHERE checkpoint_seq = 2 AND tenant = 'acme'"
        ),
        {"l": leaf},
    )


def edit_the_tenants_line(conn: Connection) -> None:
    note = conn.execute(text("SELECT note FROM checkpoints WHERE checkpoint_seq = 1")).scalar_one()
    assert "\ntenants 2 " in note
    conn.execute(
        text("UPDATE checkpoints SET note = :n WHERE checkpoint_seq = 1"),
        {"n": note.replace("\ntenants 2 ", "\ntenants 3 ")},
    )


#: tamper, the seq named, the start of the message
CASES: dict[str, tuple[Callable[[Connection], Any], int, str]] = {
    "a head lowered": (
        lower_acme_head,
        60,
        "checkpoint #1 at size 60: checkpoint_tenants gives tenant 'acme' the head tenant_seq "
        "39, ",
    ),
    "a leaf replaced": (
        zero_zeta_leaf,
        120,
        "checkpoint #2 at size 120: checkpoint_tenants gives tenant 'zeta' the head tenant_seq "
        f"40, leaf {'00' * 32}; the ledger gives tenant_seq 40, leaf ",
    ),
    "a row deleted": (
        delete_zeta_row,
        60,
        "checkpoint #1 at size 60: checkpoint_tenants lacks tenant 'zeta' (head: tenant_seq 20)",
    ),
    "a row added": (
        add_a_tenant_row,
        120,
        "checkpoint #2 at size 120: checkpoint_tenants holds tenant 'ghost', which has no entry "
        "up to size 120",
    ),
    "an older head": (
        older_head_for_acme,
        120,
        "checkpoint #2 at size 120: checkpoint_tenants gives tenant 'acme' the head tenant_seq "
        "40, ",
    ),
    "the note's tenants line": (
        edit_the_tenants_line,
        60,
        "checkpoint #1 at size 60: its note's tenants line says 3 ",
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_verify_names_an_edit_of_what_a_packet_relies_on(store: Store, case: str) -> None:
    tamper, seq, message = CASES[case]
    signer = Signer.generate("ledger.example")
    signed_ledger(store, signer)
    with store.engine.begin() as conn:
        drop_guards(conn)
        tamper(conn)
    # the walk from seq 1, and the range pass (two processes, ranges of 10 entries and up)
    for how in ({"processes": 1}, {"processes": 2, "smallest_range": 10}):
        for verifiers in ([], [signer.verifier]):
            result = verify_ledger(store, verifiers, **how)  # type: ignore[arg-type]
            assert result.problem is not None, (case, how)
            assert (result.problem.seq, result.problem.kind) == (seq, "checkpoint"), str(
                result.problem
            )
            assert result.problem.message.startswith(message), str(result.problem)


def test_the_range_pass_still_runs_on_a_good_ledger(store: Store) -> None:
    signer = Signer.generate("ledger.example")
    signed_ledger(store, signer)
    result = verify_ledger(store, [signer.verifier], processes=2, smallest_range=10)
    assert result.ok and result.ranges >= 2, (result.problem, result.ranges)


# -- the CLI: verify exits 1, dispute --stored-checkpoint refuses in one line ----------


def disputable(folder: Path, url: str) -> Path:
    """acme holds A1 (2 GPUs) 10:00-11:00, billed for it on INV-1; a checkpoint of it."""
    s = Scenario()
    s.grant("A1", gpus=2, at="10:00")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=2, amount="7.20")
    key = folder / "key"
    assert run_cli("keygen", "--out", str(key))[0] == 0
    assert (
        run_cli("ingest", "--db", url, str(write_jsonl(folder / "events.jsonl", s.events)))[0] == 0
    )
    assert run_cli("checkpoint", "--db", url, "--key", str(key))[0] == 0
    return key


def dispute(url: str, key: Path, out: Path) -> tuple[int, str, str]:
    return run_cli(
        "dispute",
        "--db",
        url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-1",
        "--key",
        str(key),
        "--out",
        str(out),
        "--stored-checkpoint",
    )


def test_an_edited_tenant_head_fails_verify_and_the_stored_checkpoint_dispute(
    tmp_path: Path, db_url: str
) -> None:
    key = disputable(tmp_path, db_url)
    out = tmp_path / "packet.json"
    store = Store(db_url)
    try:
        with store.engine.begin() as conn:
            drop_guards(conn)
            conn.execute(
                text("UPDATE checkpoint_tenants SET tenant_seq = 2")
            )  # acme's head is its 3rd entry
    finally:
        store.close()
    code, out_text, err = run_cli("verify", "--db", db_url)
    assert code == 1
    assert (
        "checkpoint #1 at size 3: checkpoint_tenants gives tenant 'acme' the head tenant_seq 2, "
        in out_text + err
    )
    code, said, err = dispute(db_url, key, out)
    assert (code, said) == (2, "")
    assert err == (
        "Error: checkpoint #1: its stored tenant heads (checkpoint_tenants) do not match its "
        "tenant-head root and the entries: the store was edited; `gpuledger verify` names it\n"
    )
    assert not out.exists() and not out.with_suffix(".letter.html").exists()


def test_a_packet_from_an_edited_entry_is_not_written(tmp_path: Path, db_url: str) -> None:
    key = disputable(tmp_path, db_url)
    out = tmp_path / "packet.json"
    store = Store(db_url)
    try:
        with store.engine.begin() as conn:
            drop_guards(conn)
            event = conn.execute(
                text("SELECT event FROM entries WHERE type = 'billing.line'")
            ).scalar_one()
            conn.execute(
                text("UPDATE entries SET event = :e WHERE type = 'billing.line'"),
                {"e": event.replace('"7.20"', '"1.20"')},
            )
    finally:
        store.close()
    code, said, err = dispute(db_url, key, out)
    assert (code, said) == (1, "")
    assert (
        err.startswith("FAILED: the packet built from this store does not verify: bundle: ")
        and err.count("\n") == 1
    )
    assert err.endswith("; no packet was written (`gpuledger verify` checks the store)\n")
    assert not out.exists() and not out.with_suffix(".letter.html").exists()
