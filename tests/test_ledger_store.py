"""The store on both backends: pinned hashes, idempotency, conflicts, quarantine,
append-only triggers, atomic batches, nesting transactions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from ingest import extract
from ledger import Appender, Store, append_stream, verify_ledger
from ledger.checkpoint import sign_checkpoint
from ledger.note import COSIGNATURE_V1, Signer
from ledger.tables import APPEND_ONLY, batches, entries, quarantine
from ledger.witness import add_cosignatures, cosign
from schemas import Accepted, Origin, Rejected, validate_event
from tests.conftest import FIXED_TIME, event, fixed_salts, progress, write_jsonl

# Worked out independently of the ledger code: sha256 over the reference RFC 8785
# encoding of the entry dicts (see test_entry_bytes_match_the_reference_encoder).
VECTOR_EVENTS = [
    event(
        "job.progress",
        "p1",
        {"tenant": "zürich-labs", "job_id": "训练-1", "step": 7},
        source="slurm://cluster-a",
    ),
    event("health.fault", "f1", {"node": "n1", "code": "xid-79"}, source="dcgm://n1"),
]
VECTOR_HASHES = [
    (
        "d6ddce76d3b2a9cdfbcfe2cf7b099fa89938742709c2e14676ed4cbea9fbac02",
        "060170bc6202731c97737107cef8497b51a3882041299e21b350981a45d7064c",
    ),
    (
        "17850df506020e345a58e8bdbad91f51284e54d9a2c757eb15a22a58d217bed2",
        "b67e6260a44cc40ae4185157b65de7fd9639b8208b05848328e3f57d7d8233b2",
    ),
]


def accepted(raw: dict[str, Any], line: int = 1, file: str = "t.jsonl") -> Accepted:
    return Accepted.of(validate_event(raw), Origin(file, line))


def rows(store: Store, table: Any = entries) -> list[Any]:
    with store.reading() as conn:
        return list(conn.execute(select(table)).all())


def test_pinned_hashes_on_every_backend(store: Store) -> None:
    appender = Appender(store, clock=lambda: FIXED_TIME, salts=fixed_salts)
    result = appender.append([accepted(e, i) for i, e in enumerate(VECTOR_EVENTS, 1)])
    assert (result.appended, result.first_seq, result.last_seq) == (2, 1, 2)
    stored = sorted(rows(store), key=lambda r: r.seq)
    assert [(bytes(r.leaf_hash).hex(), bytes(r.chain_hash).hex()) for r in stored] == VECTOR_HASHES
    assert bytes(stored[0].tenant_prev) == bytes(32)
    assert stored[1].tenant is None and stored[1].tenant_seq is None
    assert stored[0].event == (
        '{"data":{"job_id":"训练-1","step":7,"tenant":"zürich-labs"},"id":"p1","source":"slurm://'
        'cluster-a","specversion":"1.0","time":"2026-01-05T10:00:00Z","type":"job.progress"}'
    )


def test_reingest_appends_nothing_and_counts_duplicates(store: Store, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", [progress(i) for i in range(1, 51)])
    appender = Appender(store)
    first = append_stream(appender, extract(path), batch_size=7)
    again = append_stream(appender, extract(path), batch_size=7)
    assert (first.read, first.appended, first.duplicates) == (50, 50, 0)
    assert (again.read, again.appended, again.duplicates, again.quarantined) == (50, 0, 50, 0)
    assert len(rows(store)) == 50
    assert verify_ledger(store).ok


def test_duplicate_inside_one_batch_is_counted_once(store: Store) -> None:
    result = Appender(store).append([accepted(progress(1)), accepted(progress(1), 2)])
    assert (result.appended, result.duplicates) == (1, 1)


def test_same_key_other_content_is_a_conflict_in_quarantine(store: Store) -> None:
    appender = Appender(store)
    appender.append([accepted(progress(1))])
    changed = progress(1)
    changed["data"]["step"] = 99
    result = appender.append([accepted(changed, 4, "late.jsonl")])
    assert (result.appended, result.quarantined) == (0, 1)
    [row] = rows(store, quarantine)
    assert (row.kind, row.file, row.line, row.field) == ("conflict", "late.jsonl", 4, "id")
    assert row.existing_hash != row.incoming_hash and len(row.existing_hash) == 32
    assert b'"step":99' in bytes(row.record)
    [entry] = rows(store)
    assert '"step":1' in entry.event  # never silently replaced


def test_invalid_records_are_kept_whole_and_good_ones_appended(store: Store) -> None:
    bad = Rejected(Origin("x.jsonl", 2), "data.gpus", "Field required", b'{"raw": "kept"}')
    result = Appender(store).append([accepted(progress(1)), bad, accepted(progress(3), 3)])
    assert (result.appended, result.quarantined) == (2, 1)
    [row] = rows(store, quarantine)
    assert (row.kind, row.file, row.line, row.field, row.reason, bytes(row.record)) == (
        "invalid",
        "x.jsonl",
        2,
        "data.gpus",
        "Field required",
        b'{"raw": "kept"}',
    )


def test_requarantining_the_same_record_keeps_one_row(store: Store) -> None:
    bad = Rejected(Origin("x.jsonl", 2), "data.gpus", "Field required", b"{}")
    Appender(store).append([bad])
    Appender(store).append([bad])
    assert len(rows(store, quarantine)) == 1


def test_tenant_chain_links_each_tenant_to_its_previous_leaf(store: Store) -> None:
    appender = Appender(store)
    appender.append([accepted(progress(1, "a")), accepted(progress(2, "b"), 2)])
    appender.append([accepted(progress(3, "a"), 3)])
    by_seq = {r.seq: r for r in rows(store)}
    assert [(r.tenant, r.tenant_seq) for _, r in sorted(by_seq.items())] == [
        ("a", 1),
        ("b", 1),
        ("a", 2),
    ]
    assert bytes(by_seq[3].tenant_prev) == bytes(by_seq[1].leaf_hash)
    assert bytes(by_seq[2].tenant_prev) == bytes(32)


@pytest.mark.parametrize("table", APPEND_ONLY)
@pytest.mark.parametrize("statement", ["UPDATE {t} SET {c} = {c}", "DELETE FROM {t}"])
def test_database_refuses_update_and_delete(
    store: Store, tmp_path: Path, table: str, statement: str
) -> None:
    store.sealed_entries = 8  # sealed_pages has rows too (and, once checkpointed, sealed_extras)
    appender = Appender(store)
    append_stream(appender, [accepted(progress(i), i) for i in range(1, 40)])
    fault = event(
        "health.fault", "f1", {"node": "n1", "code": "xid-79"}
    )  # a row in checkpoint_fleet
    appender.append([accepted(fault, 40), Rejected(Origin("x", 1), "f", "r", b"{}")])
    note = sign_checkpoint(store, Signer.generate("test")).note
    witness = Signer.generate("witness", COSIGNATURE_V1)
    add_cosignatures(store, cosign(witness, note.partition("\n\n")[0] + "\n"), [witness.verifier])
    column = {
        "entries": "event",
        "batches": "recorded_at",
        "quarantine": "reason",
        "tree_nodes": "hash",
        "checkpoints": "note",
        "checkpoint_tenants": "tenant_seq",
        "cosignatures": "line",
        "sealed_pages": "digest",
        "sealed_extras": "digest",
        "checkpoint_fleet": "entry_count",
    }[table]
    with store.reading() as conn:
        assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() > 0
    with pytest.raises(DBAPIError, match="append-only"):
        with store.engine.begin() as conn:
            conn.execute(text(statement.format(t=table, c=column)))


def test_a_failing_batch_leaves_nothing_behind(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    appender = Appender(store)
    appender.append([accepted(progress(1))])
    import ledger.append as append_module

    def broken(conn: Any, batch_rows: Any) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(append_module, "_bulk_insert_entries", broken)
    bad = Rejected(Origin("x.jsonl", 9), "f", "r", b"{}")
    with pytest.raises(RuntimeError):
        appender.append([accepted(progress(2), 2), bad])
    assert len(rows(store)) == 1 and rows(store, quarantine) == []
    with store.reading() as conn:
        assert conn.execute(select(func.count()).select_from(batches)).scalar_one() == 1


def test_nested_writes_are_savepoints(store: Store) -> None:
    appender = Appender(store)
    with store.writing():
        appender.append([accepted(progress(1))])
        with pytest.raises(RuntimeError):
            with store.writing():
                appender.append([accepted(progress(2), 2)])
                raise RuntimeError("inner fails")
        appender.append([accepted(progress(3), 3)])
    assert sorted(r.seq for r in rows(store)) == [1, 2]
    assert verify_ledger(store).ok


def test_init_is_safe_to_repeat(store: Store) -> None:
    store.init()
    store.init()
    assert store.is_initialised()


def test_large_batches_build_the_stored_tree(store: Store) -> None:
    append_stream(
        Appender(store), [accepted(progress(i), i) for i in range(1, 300)], batch_size=37
    )
    result = verify_ledger(store)
    assert (result.ok, result.entries) == (True, 299)


def test_postgres_refuses_truncate(pg_url: str) -> None:
    store = Store(pg_url)
    store.init()
    Appender(store).append([accepted(progress(1))])
    with pytest.raises(DBAPIError, match="append-only"):
        with store.engine.begin() as conn:
            conn.execute(text("TRUNCATE entries"))
    assert len(rows(store)) == 1
