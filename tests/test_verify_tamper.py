"""Tampering below the triggers: each case takes a good ledger, drops the guards, changes
one thing through a small function, and expects verify to name the first bad seq."""

from __future__ import annotations

from collections.abc import Callable
from hashlib import sha256
from typing import Any

import pytest
from sqlalchemy import Connection, insert, select, text

from ledger import Appender, LedgerError, Store, append_stream, verify_ledger
from ledger.checkpoint import sign_checkpoint
from ledger.hashing import chain_hash, entry_bytes, leaf_hash
from ledger.note import Signer
from ledger.quarantine import next_chain
from ledger.tables import APPEND_ONLY, batches, checkpoints, entries, quarantine, tree_nodes
from ledger.verify import SavedCheckpoint
from schemas import Accepted, Origin, Rejected, validate_event
from tests.conftest import FIXED_TIME, progress

SIZE = 120  # spans many batches and stored tree nodes (level 4 and up)


def good_ledger(store: Store) -> None:
    events = [progress(i, tenant="acme" if i % 3 else "zeta") for i in range(1, SIZE + 1)]
    records = [
        Accepted.of(validate_event(e), Origin("t.jsonl", i)) for i, e in enumerate(events, 1)
    ]
    append_stream(Appender(store), records, batch_size=25)
    assert verify_ledger(store).ok


def drop_guards(conn: Connection) -> None:
    for table in APPEND_ONLY:
        if conn.dialect.name == "sqlite":
            conn.execute(text(f"DROP TRIGGER IF EXISTS {table}_no_update"))
            conn.execute(text(f"DROP TRIGGER IF EXISTS {table}_no_delete"))
        else:
            conn.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER USER"))


def edit_payload_byte(conn: Connection) -> None:
    event = conn.execute(text("SELECT event FROM entries WHERE seq = 40")).scalar_one()
    conn.execute(
        text("UPDATE entries SET event = :e WHERE seq = 40"),
        {"e": event.replace('"step":40', '"step":41')},
    )


def delete_row(conn: Connection) -> None:
    conn.execute(text("DELETE FROM entries WHERE seq = 57"))


def swap_rows(conn: Connection) -> None:
    conn.execute(text("UPDATE entries SET seq = -1 WHERE seq = 70"))
    conn.execute(text("UPDATE entries SET seq = 70 WHERE seq = 71"))
    conn.execute(text("UPDATE entries SET seq = 71 WHERE seq = -1"))


def insert_row(conn: Connection) -> None:
    """A careful forger: shifts rows up and inserts one with correct leaf and chain."""
    for seq in range(SIZE, 89, -1):
        conn.execute(text("UPDATE entries SET seq = seq + 1 WHERE seq = :s"), {"s": seq})
    prev_chain = bytes(
        conn.execute(text("SELECT chain_hash FROM entries WHERE seq = 89")).scalar_one()
    )
    body = (
        '{"data":{"code":"xid-79","node":"n1"},"id":"forged","source":"dcgm://n1",'
        '"specversion":"1.0","time":"2026-01-05T10:00:00Z","type":"health.fault"}'
    )
    salt = bytes(16)
    leaf = leaf_hash(
        entry_bytes(
            90,
            "2026-01-05T12:00:00Z",
            "dcgm://n1",
            "forged",
            "health.fault",
            None,
            None,
            body.encode(),
            salt,
        )
    )
    conn.execute(
        text(
            "INSERT INTO entries (seq, recorded_at, source, id, type, tenant, tenant_seq, event, "
            "salt, leaf_hash, chain_hash, tenant_prev)"
            " VALUES (90, '2026-01-05T12:00:00Z', 'dcgm://n1', 'forged', 'health.fault', NULL, "
            "NULL, :e, :s, :l, :c, NULL)"
        ),
        {"e": body, "s": salt, "l": leaf, "c": chain_hash(prev_chain, leaf)},
    )


def truncate_tail(conn: Connection) -> None:
    conn.execute(text("DELETE FROM entries WHERE seq > 100"))


def change_salt(conn: Connection) -> None:
    conn.execute(text("UPDATE entries SET salt = :s WHERE seq = 33"), {"s": b"\x01" * 16})


def append_unrecorded_row(conn: Connection) -> None:
    """A row past the end, hashed correctly, that no batch ever committed."""
    row = conn.execute(text(f"SELECT chain_hash, leaf_hash FROM entries WHERE seq = {SIZE}")).one()
    body = (
        '{"data":{"code":"x","node":"n"},"id":"late","source":"s","specversion":"1.0",'
        '"time":"2026-01-05T10:00:00Z","type":"health.fault"}'
    )
    leaf = leaf_hash(
        entry_bytes(
            SIZE + 1, "t", "s", "late", "health.fault", None, None, body.encode(), bytes(16)
        )
    )
    conn.execute(
        text(
            "INSERT INTO entries (seq, recorded_at, source, id, type, tenant, tenant_seq, event, "
            "salt, leaf_hash, chain_hash, tenant_prev)"
            " VALUES (:q, 't', 's', 'late', 'health.fault', NULL, NULL, :e, :s, :l, :c, NULL)"
        ),
        {
            "q": SIZE + 1,
            "e": body,
            "s": bytes(16),
            "l": leaf,
            "c": chain_hash(bytes(row.chain_hash), leaf),
        },
    )


def edit_tree_node(conn: Connection) -> None:
    conn.execute(
        text("UPDATE tree_nodes SET hash = :h WHERE level = 5 AND idx = 1"), {"h": bytes(32)}
    )


CASES: dict[str, tuple[Callable[[Connection], Any], int, str]] = {
    "one byte of a payload edited": (edit_payload_byte, 40, "edited"),
    "a row deleted": (delete_row, 57, "deleted"),
    "two rows swapped": (swap_rows, 70, "moved"),
    "a row inserted": (insert_row, 90, "moved"),
    "the tail truncated": (truncate_tail, 101, "truncated"),
    "a salt changed": (change_salt, 33, "edited"),
    "a row appended outside any batch": (append_unrecorded_row, SIZE + 1, "inserted"),
    "a stored tree node edited": (edit_tree_node, 33, "tree"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_tampering_is_found_at_the_first_bad_seq(store: Store, case: str) -> None:
    tamper, seq, kind = CASES[case]
    good_ledger(store)
    with store.engine.begin() as conn:
        drop_guards(conn)
        tamper(conn)
    result = verify_ledger(store)
    assert result.problem is not None, case
    assert (result.problem.seq, result.problem.kind) == (seq, kind), str(result.problem)


# -- checkpoint forks: the signer's key in the forger's hands ---------------------------

SIGNED_AT = 60


def signed_ledger(store: Store, signer: Signer) -> None:
    """The good ledger, with a checkpoint signed at SIGNED_AT and another at SIZE."""
    events = [progress(i, tenant="acme" if i % 3 else "zeta") for i in range(1, SIZE + 1)]
    records = [
        Accepted.of(validate_event(e), Origin("t.jsonl", i)) for i, e in enumerate(events, 1)
    ]
    append_stream(Appender(store), records[:SIGNED_AT], batch_size=25)
    sign_checkpoint(store, signer)
    append_stream(Appender(store), records[SIGNED_AT:], batch_size=25)
    sign_checkpoint(store, signer)
    assert verify_ledger(store, [signer.verifier]).ok


def other_history(records: int, edit_at: int) -> Store:
    """A ledger of the same events but one, hashed throughout: a second history."""
    events = [progress(i, tenant="acme" if i % 3 else "zeta") for i in range(1, records + 1)]
    events[edit_at - 1]["data"]["step"] += 1000
    fork = Store("sqlite://")
    fork.init()
    accepted = [
        Accepted.of(validate_event(e), Origin("forged.jsonl", i)) for i, e in enumerate(events, 1)
    ]
    append_stream(Appender(fork), accepted, batch_size=25)
    return fork


def sign_a_second_history_at_the_same_size(store: Store, signer: Signer) -> None:
    """Equivocation: a checkpoint of size SIGNED_AT over another history, signed and stored
    beside the first (an insert: the append-only guards allow it)."""
    fork = other_history(SIGNED_AT, edit_at=30)
    body = sign_checkpoint(fork, signer).body
    with store.engine.begin() as conn:
        conn.execute(
            insert(checkpoints).values(
                checkpoint_seq=3,
                origin=body.origin,
                tree_size=body.size,
                root_hash=body.root,
                chain_head=body.chain_head,
                tenant_root=body.tenant_root,
                signed_at=body.time,
                key_name=signer.name,
                note=signer.sign(body.text()),
            )
        )


def rewrite_history_below_the_first_checkpoint(store: Store, signer: Signer) -> None:
    """A careful forger: every entry, tree node and batch head from seq 30 on rehashed
    over an edited event, and the head signed again; the checkpoint signed at SIGNED_AT
    stays, and no longer fits what is stored."""
    fork = other_history(SIZE, edit_at=30)
    with fork.reading() as source:
        tables = {
            t: [dict(r._mapping) for r in source.execute(select(t))]
            for t in (entries, tree_nodes, batches)
        }
    with store.engine.begin() as conn:
        drop_guards(conn)
        for table, rows in tables.items():
            conn.execute(table.delete())
            conn.execute(insert(table), rows)
    sign_checkpoint(store, signer)


CHECKPOINT_CASES: dict[str, tuple[Callable[[Store, Signer], None], int, str, str]] = {
    "two signed checkpoints of one size, other roots": (
        sign_a_second_history_at_the_same_size,
        SIGNED_AT,
        "fork",
        "checkpoints #1 and #3 both sign size 60",
    ),
    "an earlier checkpoint the later history does not extend": (
        rewrite_history_below_the_first_checkpoint,
        SIGNED_AT,
        "checkpoint",
        "checkpoint #1 at size 60: root signed",
    ),
}


@pytest.mark.parametrize("case", list(CHECKPOINT_CASES), ids=list(CHECKPOINT_CASES))
def test_checkpoint_forks_are_found(store: Store, case: str) -> None:
    tamper, seq, kind, message = CHECKPOINT_CASES[case]
    signer = Signer.generate("ledger.example")
    signed_ledger(store, signer)
    tamper(store, signer)
    for verifiers in ([], [signer.verifier]):  # without and with the signatures checked
        result = verify_ledger(store, verifiers)
        assert result.problem is not None, case
        assert (result.problem.seq, result.problem.kind) == (seq, kind), str(result.problem)
        assert message in result.problem.message, str(result.problem)


# -- rollback and fork: whoever keeps the ledger deletes rows and re-signs ---------------
#
# The store alone cannot show these: after each tamper below the store is consistent with
# itself. What catches them is a key (verify --pubkey: some checkpoint must be signed by
# it) or a checkpoint saved outside the store (verify --checkpoint).

ROLLED_BACK_TO = (
    85  # a batch boundary: batches of 25 end at 25, 50, 60 (the checkpoint), 85, 110, 120
)


def saved_checkpoints(store: Store, signer: Signer) -> list[SavedCheckpoint]:
    """The signed ledger, and both its checkpoints as a customer would have saved them."""
    signed_ledger(store, signer)
    with store.reading() as conn:
        notes = (
            conn.execute(select(checkpoints.c.note).order_by(checkpoints.c.checkpoint_seq))
            .scalars()
            .all()
        )
    return [SavedCheckpoint(f"#{i}", note) for i, note in enumerate(notes, 1)]


def delete_checkpoints(conn: Connection, above_size: int = -1) -> None:
    numbers = f"(SELECT checkpoint_seq FROM checkpoints WHERE tree_size > {above_size})"
    conn.execute(text(f"DELETE FROM checkpoint_tenants WHERE checkpoint_seq IN {numbers}"))
    conn.execute(text(f"DELETE FROM checkpoints WHERE tree_size > {above_size}"))


def roll_back(conn: Connection, size: int) -> None:
    """Entries, batches and tree nodes cut back to `size`, as if nothing came after."""
    conn.execute(text(f"DELETE FROM entries WHERE seq > {size}"))
    conn.execute(text(f"DELETE FROM batches WHERE last_seq > {size}"))
    conn.execute(text(f"DELETE FROM tree_nodes WHERE ((idx + 1) * (1 << level)) > {size}"))


def rollback_with_the_latest_checkpoint_deleted(store: Store, signer: Signer) -> None:
    with store.engine.begin() as conn:
        drop_guards(conn)
        delete_checkpoints(conn, above_size=ROLLED_BACK_TO)
        roll_back(conn, ROLLED_BACK_TO)


def every_checkpoint_deleted(store: Store, signer: Signer) -> None:
    with store.engine.begin() as conn:
        drop_guards(conn)
        delete_checkpoints(conn)


def fork_rewritten_and_re_signed(store: Store, signer: Signer) -> None:
    """Another history from seq 30 on, every checkpoint of the first one deleted, and
    the new head signed: the store agrees with itself throughout."""
    fork = other_history(SIZE, edit_at=30)
    with fork.reading() as source:
        tables = {
            t: [dict(r._mapping) for r in source.execute(select(t))]
            for t in (entries, tree_nodes, batches)
        }
    with store.engine.begin() as conn:
        drop_guards(conn)
        delete_checkpoints(conn)
        for table, rows in tables.items():
            conn.execute(table.delete())
            conn.execute(insert(table), rows)
    sign_checkpoint(store, signer)


ROLLBACK_CASES: dict[str, tuple[Callable[[Store, Signer], None], int, str, str]] = {
    "rolled back to a batch boundary, the latest checkpoint deleted": (
        rollback_with_the_latest_checkpoint_deleted,
        1,
        "rollback",
        f"seq {ROLLED_BACK_TO + 1}: rollback: the saved checkpoint #2 (size {SIZE}, root ",
    ),
    "every checkpoint deleted": (
        every_checkpoint_deleted,
        0,
        "unsigned",
        f"seq {SIZE}: unsigned: no checkpoint signed by ledger.example (key id ",
    ),
    "forked from seq 30, old checkpoints deleted, head re-signed": (
        fork_rewritten_and_re_signed,
        0,
        "fork",
        f"seq {SIGNED_AT}: fork: the store does not extend the saved checkpoint #1 (size "
        f"{SIGNED_AT}, root ",
    ),
}


@pytest.mark.parametrize("case", list(ROLLBACK_CASES), ids=list(ROLLBACK_CASES))
def test_rollback_and_fork_are_found_from_outside_the_store(store: Store, case: str) -> None:
    tamper, which, kind, message = ROLLBACK_CASES[case]
    signer = Signer.generate("ledger.example")
    saved = saved_checkpoints(store, signer)
    tamper(store, signer)
    assert verify_ledger(store).ok, "the store alone shows nothing: the test's premise"
    result = verify_ledger(store, [signer.verifier], [saved[which]] if kind != "unsigned" else [])
    assert result.problem is not None and result.problem.kind == kind, str(result.problem)
    assert str(result.problem).startswith(message), str(result.problem)


def test_a_store_that_still_extends_the_saved_checkpoints_passes(store: Store) -> None:
    signer = Signer.generate("ledger.example")
    saved = saved_checkpoints(store, signer)
    result = verify_ledger(store, [signer.verifier], saved)
    assert result.ok and "that the store extends 2 saved checkpoints" in result.checked


def test_a_rolled_back_store_still_extends_the_earlier_saved_checkpoint(store: Store) -> None:
    signer = Signer.generate("ledger.example")
    saved = saved_checkpoints(store, signer)
    rollback_with_the_latest_checkpoint_deleted(store, signer)
    assert verify_ledger(store, [signer.verifier], saved[:1]).ok  # size 60 <= 85: still extended
    assert verify_ledger(store, [signer.verifier]).ok  # --pubkey alone cannot see it


def test_a_saved_checkpoint_signed_by_another_key_is_refused(store: Store) -> None:
    signer = Signer.generate("ledger.example")
    saved = saved_checkpoints(store, signer)
    forger = Signer.generate("ledger.example")
    note = forger.sign(saved[0].note.partition("\n\n")[0] + "\n")
    result = verify_ledger(store, [signer.verifier], [SavedCheckpoint("forged.txt", note)])
    assert str(result.problem) == (
        f"seq {SIZE}: signature: the saved checkpoint forged.txt does not verify: "
        f"the note carries no signature by ledger.example (key id {signer.verifier.id.hex()})"
    )


# -- the quarantine: chained, and committed to by every checkpoint -----------------------


def rejected(line: int) -> Rejected:
    return Rejected(
        Origin("bad.jsonl", line),
        "data.gpus",
        f"bad record at line {line}",
        b'{"line": %d}' % line,
    )


def quarantined_ledger(store: Store, signer: Signer) -> None:
    """Entries, and four rejected records: two before checkpoint #1, two before #2."""
    appender = Appender(store)
    events = [progress(i) for i in range(1, 21)]
    accepted = [
        Accepted.of(validate_event(e), Origin("t.jsonl", i)) for i, e in enumerate(events, 1)
    ]
    append_stream(appender, [*accepted[:10], rejected(11), rejected(12)], batch_size=25)
    sign_checkpoint(store, signer)
    append_stream(appender, [*accepted[10:], rejected(21), rejected(22)], batch_size=25)
    sign_checkpoint(store, signer)
    assert verify_ledger(store, [signer.verifier]).ok


QUARANTINE_ROW = (
    "INSERT INTO quarantine (qid, recorded_at, kind, file, line, field, reason, record, "
    "record_hash, chain_hash) "
    "VALUES (:qid, 't', 'invalid', 'planted.jsonl', 1, 'x', 'planted', :r, :h, :c)"
)


def plant_without_chain(conn: Connection) -> None:
    conn.execute(text(QUARANTINE_ROW), {"qid": 5, "r": b"p", "h": bytes(32), "c": None})


def plant_with_made_up_chain(conn: Connection) -> None:
    conn.execute(text(QUARANTINE_ROW), {"qid": 5, "r": b"p", "h": bytes(32), "c": bytes(32)})


def plant_and_rechain(conn: Connection) -> None:
    """A careful forger: a row planted as the second, those after it renumbered, and
    every chain hash recomputed as gpuledger would."""
    for qid in (4, 3, 2):
        conn.execute(text("UPDATE quarantine SET qid = qid + 1 WHERE qid = :q"), {"q": qid})
    conn.execute(text(QUARANTINE_ROW), {"qid": 2, "r": b"p", "h": bytes(32), "c": None})
    head = bytes(32)
    for row in conn.execute(select(quarantine).order_by(quarantine.c.qid)).mappings().all():
        head = next_chain(head, row)
        conn.execute(
            text("UPDATE quarantine SET chain_hash = :c WHERE qid = :q"),
            {"c": head, "q": row["qid"]},
        )


def delete_last_quarantine_row(conn: Connection) -> None:
    conn.execute(text("DELETE FROM quarantine WHERE qid = 4"))


def delete_a_middle_quarantine_row(conn: Connection) -> None:
    conn.execute(text("DELETE FROM quarantine WHERE qid = 2"))


def edit_a_reason(conn: Connection) -> None:
    conn.execute(text("UPDATE quarantine SET reason = 'nothing wrong' WHERE qid = 3"))


QUARANTINE_CASES: dict[str, tuple[Callable[[Connection], Any], str]] = {
    "a row planted without a chain hash": (
        plant_without_chain,
        "quarantine row qid 5 has no chain hash, after chained rows",
    ),
    "a row planted with a made-up chain hash": (
        plant_with_made_up_chain,
        "quarantine row qid 5 (row 5): chain hash expected ",
    ),
    "a row planted second, the rest renumbered and rechained": (
        plant_and_rechain,
        "checkpoint #1 commits to 2 quarantined records with head ",
    ),
    "the last row deleted": (
        delete_last_quarantine_row,
        "checkpoint #2 commits to 4 quarantined records, the quarantine holds 3: rows were "
        "deleted",
    ),
    "a middle row deleted": (
        delete_a_middle_quarantine_row,
        "quarantine row qid 3 (row 2): chain hash expected ",
    ),
    "a reason edited": (edit_a_reason, "quarantine row qid 3 (row 3): chain hash expected "),
}


@pytest.mark.parametrize("case", list(QUARANTINE_CASES), ids=list(QUARANTINE_CASES))
def test_quarantine_tampering_is_found(store: Store, case: str) -> None:
    tamper, message = QUARANTINE_CASES[case]
    signer = Signer.generate("ledger.example")
    quarantined_ledger(store, signer)
    with store.engine.begin() as conn:
        drop_guards(conn)
        tamper(conn)
    result = verify_ledger(store)
    assert result.problem is not None and result.problem.kind == "quarantine", str(result.problem)
    assert result.problem.message.startswith(message), str(result.problem)


def test_the_quarantine_chain_by_hand(store: Store) -> None:
    """One rejected record's chain hash, written out from the rule in ledger/quarantine.py."""
    Appender(store, clock=lambda: FIXED_TIME).append(
        [rejected(7), Accepted.of(validate_event(progress(1)), Origin("t", 1))]
    )
    record = b'{"line": 7}'
    row = (
        '{"existing_hash":null,"field":"data.gpus","file":"bad.jsonl","incoming_hash":null,'
        '"kind":"invalid","line":7,"qid":1,"reason":"bad record at line 7","record":"'
        + record.hex()
        + '","record_hash":"'
        + sha256(record).hexdigest()
        + '","record_length":11,"recorded_at":"2026-01-05T12:00:00Z"}'
    )
    expected = sha256(b"\x03" + bytes(32) + row.encode()).digest()
    with store.reading() as conn:
        assert conn.execute(select(quarantine.c.chain_hash)).scalar_one() == expected
    signer = Signer.generate("ledger.example")
    note = sign_checkpoint(store, signer).note
    assert f"\nquarantine 1 {expected.hex()}\n" in note


def test_a_store_from_before_the_chain_is_upgraded_and_verifies(store: Store) -> None:
    """Old rows (no chain_hash) stay readable: init adds the column, they are chained when
    verified, and rows after them are chained as written."""
    Appender(store).append([rejected(1), Accepted.of(validate_event(progress(1)), Origin("t", 1))])
    with store.engine.begin() as conn:
        drop_guards(conn)
        conn.execute(text("ALTER TABLE quarantine DROP COLUMN chain_hash"))
    with pytest.raises(
        LedgerError,
        match="made before the quarantine was chained: run `gpuledger init` once to upgrade it",
    ):
        verify_ledger(store)
    store.init()
    Appender(store).append([rejected(2)])
    signer = Signer.generate("ledger.example")
    sign_checkpoint(store, signer)
    with store.reading() as conn:
        assert [
            r is None
            for r in conn.execute(
                select(quarantine.c.chain_hash).order_by(quarantine.c.qid)
            ).scalars()
        ] == [True, False]
    assert verify_ledger(store, [signer.verifier]).ok


def test_a_store_emptied_of_checkpoints_and_rolled_back_names_the_rollback(store: Store) -> None:
    signer = Signer.generate("ledger.example")
    saved = saved_checkpoints(store, signer)
    with store.engine.begin() as conn:
        drop_guards(conn)
        delete_checkpoints(conn)
        roll_back(conn, 50)
    result = verify_ledger(store, [signer.verifier], saved)
    assert str(result.problem).startswith(
        f"seq 51: rollback: the saved checkpoint #1 (size {SIGNED_AT}, root "
    )
