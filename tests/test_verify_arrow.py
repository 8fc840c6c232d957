"""Verify's fast pass reads entries as Arrow through ADBC (ledger/arrow_entries.py) and
builds each entry's canonical bytes column-wise. These tests hold that reading to the
reference (ledger.hashing.entry_bytes) and to the walk's verdict:
- the column-wise bytes equal entry_bytes for any strings it accepts, and it refuses the
  strings RFC 8785 escapes;
- a ledger of awkward entries (quotes, backslashes, control characters, non-ASCII,
  entries without a tenant leading a batch) passes in ranges on both backends, so the
  fast pass read it clean rather than falling back to the walk;
- on SQLite, a value stored with another storage class but the same bytes gets the
  same verdict from the walk and from the fast pass.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import ledger.arrow_entries as arrow_entries
from ledger import Appender, Store, append_stream, verify_ledger
from ledger.arrow_entries import _SCHEMA, entry_batches, leaf_inputs, plain
from ledger.hashing import LEAF_PREFIX, entry_bytes
from ledger.verify_ranges import RangeTask, check_range
from schemas import Accepted, Origin, validate_event
from tests.conftest import event
from tests.test_verify_tamper import drop_guards

# Strings without the characters RFC 8785 escapes: anything from U+0020 up but `"` and `\`.
_PLAIN_TEXT = st.text(
    st.characters(min_codepoint=0x20, blacklist_characters='"\\', blacklist_categories=["Cs"]),
    max_size=12,
)


def _row(
    seq: int,
    recorded_at: str,
    source: str,
    id_: str,
    type_: str,
    tenant: str | None,
    event_bytes: bytes,
    salt: bytes,
) -> dict[str, Any]:
    return {
        "seq": seq,
        "recorded_at": recorded_at,
        "source": source,
        "id": id_,
        "type": type_,
        "tenant": tenant,
        "tenant_seq": None if tenant is None else seq,
        "event": event_bytes,
        "salt": salt,
        "leaf_hash": bytes(32),
        "chain_hash": bytes(32),
        "tenant_prev": None if tenant is None else bytes(32),
    }


def _batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=_SCHEMA)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            _PLAIN_TEXT,
            _PLAIN_TEXT,
            _PLAIN_TEXT,
            _PLAIN_TEXT,
            st.none() | _PLAIN_TEXT,
            st.binary(min_size=16, max_size=16),
            st.integers(1, 2**53),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_the_column_wise_bytes_are_entry_bytes(
    rows: list[tuple[str, str, str, str, str | None, bytes, int]],
) -> None:
    event_bytes = b'{"data":{"x":"\\u00e9"},"id":"e"}'
    built = [
        _row(seq, at, source, id_, type_, tenant, event_bytes, salt)
        for at, source, id_, type_, tenant, salt, seq in rows
    ]
    batch = _batch(built)
    assert plain(batch)
    expected = [
        LEAF_PREFIX
        + entry_bytes(
            r["seq"],
            r["recorded_at"],
            r["source"],
            r["id"],
            r["type"],
            r["tenant"],
            r["tenant_seq"],
            r["event"],
            r["salt"],
        )
        for r in built
    ]
    assert leaf_inputs(batch).to_pylist() == expected


@pytest.mark.parametrize("awkward", ['a"b', "a\\b", "a\nb", "a\x00b", "a\x1fb"])
@pytest.mark.parametrize("column", ["id", "source", "recorded_at", "type", "tenant"])
def test_a_string_that_needs_escapes_is_not_built_column_wise(column: str, awkward: str) -> None:
    row = _row(1, "2026-01-05T10:00:00Z", "s", "i", "job.progress", "acme", b"{}", bytes(16))
    assert plain(_batch([row]))
    assert not plain(_batch([row, {**row, "seq": 2, column: awkward}]))


def test_a_salt_of_another_length_is_not_built_column_wise() -> None:
    row = _row(1, "2026-01-05T10:00:00Z", "s", "i", "job.progress", None, b"{}", bytes(16))
    assert not plain(_batch([row, {**row, "seq": 2, "salt": bytes(15)}]))


def _awkward_ledger(store: Store) -> int:
    """30 fleet entries without a tenant, then tenants' entries with ids and sources that
    need JSON escapes or are not ASCII, among plain ones."""
    fleet = [
        event("device.discovered", f"d{i}", {"node": f"n{i}", "device": i}) for i in range(30)
    ]
    ids = ['q"uote', "back\\slash", "tab\there", "bell\x07", "Zürich-αβγ-日本", "plain"]
    work = [
        event(
            "job.progress",
            f"{ids[i % len(ids)]}-{i}",
            {"tenant": "acme" if i % 2 else "zeta", "job_id": "j", "step": i},
            source="test://fleet/" + ("é" if i % 5 == 0 else "a"),
        )
        for i in range(60)
    ]
    records = [
        Accepted.of(validate_event(e), Origin("t.jsonl", i)) for i, e in enumerate(fleet + work, 1)
    ]
    append_stream(Appender(store), records, batch_size=7)
    return len(records)


def test_awkward_entries_pass_the_fast_pass_on_both_backends(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        arrow_entries, "BATCH_ROWS", 4
    )  # batches of plain and escaped entries, a tenant-less lead
    count = _awkward_ledger(store)
    assert check_range(RangeTask(store.url, 1, count, {}, frozenset())).clean
    result = verify_ledger(store, processes=2, smallest_range=20)
    assert result.ok, str(result.problem)
    assert result.ranges == 4 and result.entries == count == 90
    batches = list(entry_batches(store.url, 1, count))
    if store.dialect == "sqlite":  # its batch size is ours to set; PostgreSQL's is by bytes
        assert [b.num_rows for b in batches][:3] == [
            3,
            4,
            4,
        ]  # the opening row of types taken off the first
    assert sum(b.num_rows for b in batches) == count


def test_an_altered_awkward_entry_is_named_by_the_walk(store: Store) -> None:
    count = _awkward_ledger(store)
    with store.writing() as conn:
        drop_guards(conn)
        conn.execute(text("UPDATE entries SET id = 'back\\slash-99' WHERE seq = 32"))
    assert not check_range(RangeTask(store.url, 1, count, {}, frozenset())).clean
    result = verify_ledger(store, processes=2, smallest_range=20)
    assert result.ranges == 0 and result.problem is not None
    assert (result.problem.seq, result.problem.kind) == (32, "edited")


@pytest.mark.parametrize(
    "column, cast", [("id", "BLOB"), ("tenant", "BLOB"), ("salt", "TEXT"), ("leaf_hash", "TEXT")]
)
def test_sqlite_storage_class_with_the_same_bytes_gets_one_verdict(
    sqlite_url: str, column: str, cast: str
) -> None:
    """SQLite lets a TEXT column hold a BLOB (and a BLOB column TEXT); verify checks bytes,
    and the walk and the fast pass read the same bytes."""
    store = Store(sqlite_url)
    store.init()
    count = _awkward_ledger(store)
    with store.writing() as conn:
        drop_guards(conn)
        conn.execute(
            text(f"UPDATE entries SET {column} = CAST({column} AS {cast}) WHERE seq = 40")
        )
        assert (
            conn.execute(text(f"SELECT typeof({column}) FROM entries WHERE seq = 40")).scalar_one()
            == cast.lower()
        )
    walked = verify_ledger(store, processes=1)
    in_ranges = verify_ledger(store, processes=2, smallest_range=20)
    # where the driver sees both classes in one batch it types the column otherwise and
    # the fast pass leaves the range to the walk; either way the verdict is the walk's
    assert walked.ok and in_ranges.ok
    store.close()
    assert count == 90


def test_sqlite_a_tenant_seq_stored_as_text_is_named_alike(sqlite_url: str) -> None:
    store = Store(sqlite_url)
    store.init()
    _awkward_ledger(store)
    with store.writing() as conn:
        drop_guards(conn)
        conn.execute(text("UPDATE entries SET tenant_seq = 'seven' WHERE seq = 50"))
    walked = verify_ledger(store, processes=1)
    in_ranges = verify_ledger(store, processes=2, smallest_range=20)
    assert walked.problem is not None and in_ranges.problem is not None
    assert str(walked.problem) == str(in_ranges.problem) and walked.problem.seq == 50
    store.close()


def test_without_the_adbc_drivers_the_walk_checks_it_all(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A platform without the ADBC drivers' wheels: verify still passes a good ledger, by
    the walk, and still names an edited entry."""
    import ledger.verify

    def missing() -> None:
        raise ImportError("No module named 'adbc_driver_sqlite'")

    monkeypatch.setattr(ledger.verify, "drivers", missing)
    count = _awkward_ledger(store)
    result = verify_ledger(store, processes=2, smallest_range=20)
    assert result.ok and result.ranges == 0 and result.entries == count
    with store.writing() as conn:
        drop_guards(conn)
        conn.execute(text("UPDATE entries SET id = 'plain-98' WHERE seq = 61"))
    problem = verify_ledger(store, processes=2, smallest_range=20).problem
    assert problem is not None and (problem.seq, problem.kind) == (61, "edited")


# -- tampering that the fast pass once passed while the walk named it (found in review) --


def _both(store: Store) -> tuple[str | None, str | None]:
    walked = verify_ledger(store, processes=1).problem
    in_ranges = verify_ledger(store, processes=2, smallest_range=20).problem
    return (None if walked is None else str(walked)), (
        None if in_ranges is None else str(in_ranges)
    )


def _tampered(
    sqlite_url: str, *statements: str, params: dict[str, Any] | None = None, sealed: int = 0
) -> Store:
    store = Store(sqlite_url)
    store.init()
    if sealed:
        store.sealed_entries = sealed
    _awkward_ledger(store)
    if sealed:
        from ledger.sealed import seal_store

        assert seal_store(store) > 0
    with store.writing() as conn:
        drop_guards(conn)
        for statement in statements:
            conn.execute(text(statement), params or {})
    return store


@pytest.mark.parametrize(
    "statement",
    [
        # the last page ends before it starts
        "UPDATE sealed_pages SET last_seq = 74 WHERE first_seq = 81",
        "INSERT INTO sealed_pages (first_seq, last_seq, entries, digest, page) VALUES (91, 90, 0, "
        "x'00', x'00')",
    ],
)
def test_a_sealed_page_that_no_range_reads_is_named(sqlite_url: str, statement: str) -> None:
    store = _tampered(sqlite_url, statement, sealed=8)
    walked, in_ranges = _both(store)
    assert walked is not None and "sealed" in walked and in_ranges == walked
    store.close()


def test_a_tree_node_at_a_fractional_idx_is_missing_in_both(sqlite_url: str) -> None:
    store = _tampered(sqlite_url, "UPDATE tree_nodes SET idx = 1.5 WHERE level = 4 AND idx = 1")
    walked, in_ranges = _both(store)
    assert walked is not None and "tree node (level 4, index 1)" in walked and in_ranges == walked
    store.close()


def test_a_real_salt_rehashed_as_the_driver_would_print_it_is_named(sqlite_url: str) -> None:
    """SQLite keeps 1.5 as a REAL in the BLOB salt column; ADBC, uncast, printed it as
    b'1.500000e+00', the walk's CAST as b'1.5'. The entry is rehashed over the former."""
    from ledger.hashing import chain_hash, entry_leaf

    store = _tampered(sqlite_url, "UPDATE entries SET salt = 1.5 WHERE seq = 90")
    with store.reading() as conn:
        row = conn.exec_driver_sql(
            "SELECT recorded_at, source, id, type, tenant, tenant_seq, CAST(event AS BLOB) "
            "FROM entries WHERE seq = 90"
        ).one()
        before = bytes(
            conn.exec_driver_sql("SELECT chain_hash FROM entries WHERE seq = 89").scalar_one()
        )
    leaf = entry_leaf(
        90, row[0], row[1], row[2], row[3], row[4], row[5], bytes(row[6]), b"%e" % 1.5
    )
    chain = chain_hash(before, leaf)
    with store.writing() as conn:
        conn.execute(
            text("UPDATE entries SET leaf_hash = :l, chain_hash = :c WHERE seq = 90"),
            {"l": leaf, "c": chain},
        )
        conn.execute(text("UPDATE batches SET chain_head = :c WHERE last_seq = 90"), {"c": chain})
    walked, in_ranges = _both(store)
    assert walked is not None and walked.startswith("seq 90: edited") and in_ranges == walked
    store.close()


@pytest.mark.parametrize("retyped", ["seq as int32", "tenant dictionary-encoded"])
def test_a_sealed_page_of_other_column_types_is_named(sqlite_url: str, retyped: str) -> None:
    """The right values in columns of other types: the range pass compared values cast to
    the entries' types and passed it; the walk's check stopped on StopIteration."""
    import io
    from hashlib import sha256

    import pyarrow.parquet as pq

    store = _tampered(sqlite_url, sealed=8)
    with store.writing() as conn:
        drop_guards(conn)
        blob = bytes(
            conn.exec_driver_sql("SELECT page FROM sealed_pages WHERE first_seq = 9").scalar_one()
        )
        table = pq.read_table(pa.BufferReader(blob))
        if retyped == "seq as int32":
            table = table.set_column(0, "seq", table.column("seq").cast(pa.int32()))
        else:
            table = table.set_column(2, "tenant", table.column("tenant").dictionary_encode())
        sink = io.BytesIO()
        pq.write_table(table, sink)
        page = sink.getvalue()
        conn.execute(
            text("UPDATE sealed_pages SET page = :p, digest = :d WHERE first_seq = 9"),
            {"p": page, "d": sha256(page).digest()},
        )
    walked, in_ranges = _both(store)
    assert walked is not None and walked.startswith("seq 9: sealed") and in_ranges == walked
    store.close()


def test_reading_through_adbc_in_the_store_s_own_process_loses_no_write(sqlite_url: str) -> None:
    """The driver bundles its own SQLite: a writable connection of it, closing, took itself
    for the file's last and deleted the write-ahead log under the store's connections, and
    the store's next commit was lost. It now opens read-only."""
    import sqlite3

    store = Store(sqlite_url)
    store.init()
    count = _awkward_ledger(store)
    assert sum(batch.num_rows for batch in entry_batches(store.url, 1, count)) == count
    with store.writing() as conn:
        drop_guards(conn)
        conn.execute(text("UPDATE entries SET id = 'written-after' WHERE seq = 5"))
    path = sqlite_url.removeprefix("sqlite:///")
    assert sqlite3.connect(path).execute("SELECT id FROM entries WHERE seq = 5").fetchone() == (
        "written-after",
    )
    store.close()
