"""Sealed pages (ledger/sealed.py): each complete run of entries is copied once, after the
ingest that completed it or when a checkpoint is signed, into a Parquet page; the
reconciliation reads the pages and
then the rows after them; `verify` compares every page with the entries. On SQLite and
PostgreSQL, with pages of 8 entries so that a small ledger has several.

The oracle for a page's content is the entries table read through SQLAlchemy Core; for a
reconciliation, the same events in a store whose page size no ledger here reaches (so it
is read from the rows alone)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from hashlib import sha256
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import Connection, select, text

import ledger.sealed as sealed
from ledger import Appender, Store, append_stream, verify_ledger
from ledger.checkpoint import sign_checkpoint
from ledger.note import Signer
from ledger.pages import ENTRY_SCHEMA, store_pages
from ledger.sealed import entry_tables, seal, seal_store, sealed_with_extras
from ledger.sealed_read import read_sealed
from ledger.tables import entries, sealed_extras, sealed_pages
from reconcile import reconcile_store
from tests.reconcile_helpers import Scenario, ingest, records
from tests.test_verify_tamper import drop_guards

PAGE = 8


def _events() -> list[dict[str, Any]]:
    """Two tenants' jobs, a fault between them and their billing: 47 events."""
    s = Scenario()
    s.terms(at="09:00", stall=120)
    s.grant("a1", gpus=8, at="10:00")
    s.grant("z1", gpus=4, at="10:00", tenant="zeta", node="n2")
    s.start("j1", "a1", at="10:01")
    s.start("k1", "z1", at="10:01", tenant="zeta")
    for minute in range(2, 20):
        s.progress("j1", step=minute, at=f"10:{minute:02d}")
        s.progress("k1", step=minute, at=f"10:{minute:02d}", tenant="zeta")
    s.fault(at="10:20", node="n2", device="GPU-1")
    s.cleared(at="10:40", node="n2", device="GPU-1")
    s.complete("j1", at="10:50")
    s.release("a1", at="10:55")
    s.line("L1", "a1", "10:00", "11:00", gpus=8, amount="16.00")
    s.line("L2", "z1", "10:00", "11:00", gpus=4, amount="8.00", tenant="zeta", invoice="INV-2")
    return s.events


@pytest.fixture
def paged(store: Store) -> Iterator[Store]:
    store.sealed_entries = PAGE
    ingest(store, _events())
    assert seal_store(store) == 5
    yield store


@pytest.fixture
def unpaged(tmp_path: Any) -> Iterator[Store]:
    plain = Store(f"sqlite:///{tmp_path / 'plain.db'}")
    plain.init()
    ingest(plain, _events())
    yield plain
    plain.close()


def _pages(conn: Connection) -> list[tuple[int, int, pa.Table]]:
    rows = conn.execute(select(sealed_pages).order_by(sealed_pages.c.first_seq)).all()
    return [(r.first_seq, r.last_seq, pq.read_table(pa.BufferReader(bytes(r.page)))) for r in rows]


def test_every_complete_run_is_sealed_once_with_its_entries_columns(paged: Store) -> None:
    with paged.reading() as conn:
        pages = _pages(conn)
        stored = conn.execute(
            select(entries.c.seq, entries.c.type, entries.c.tenant, entries.c.event).order_by(
                entries.c.seq
            )
        ).all()
    assert len(stored) == len(_events()) == 47
    assert [(first, last) for first, last, _ in pages] == [
        (1, 8),
        (9, 16),
        (17, 24),
        (25, 32),
        (33, 40),
    ]
    for first, last, table in pages:
        assert table.column_names == ["seq", "type", "tenant", "event"]
        as_rows = list(
            zip(*(table.column(name).to_pylist() for name in table.column_names), strict=True)
        )
        assert as_rows == [tuple(row) for row in stored[first - 1 : last]]


def test_reingesting_the_same_events_seals_nothing_more(paged: Store) -> None:
    report = append_stream(Appender(paged), records(_events()), 5000)
    assert report.appended == 0
    with paged.reading() as conn:
        assert conn.execute(text("SELECT count(*) FROM sealed_pages")).scalar_one() == 5


@pytest.mark.parametrize(
    "filters", [{}, {"tenant": "zeta"}, {"tenant": "acme"}, {"upto_seq": 20}, {"upto_seq": 44}]
)
def test_a_store_read_through_its_pages_reconciles_as_one_read_from_its_rows(
    paged: Store, unpaged: Store, filters: dict[str, Any]
) -> None:
    with paged.reading() as conn:
        assert len(list(read_sealed(conn, filters.get("upto_seq")))) == {20: 2, 44: 5}.get(
            filters.get("upto_seq", 44)
        )
    assert (
        reconcile_store(paged, **filters).as_json()
        == reconcile_store(unpaged, **filters).as_json()
    )


#: verify's three ways through the pages: the walk, the pages checked in processes of their
#: own (a ledger too small for ranges), and the range pass comparing them as it reads the
#: entries (47 entries: ranges 1-12, 13-24, 25-36, 37-47, so pages straddle ranges).
MODES = [{"processes": 1}, {"processes": 2}, {"processes": 2, "smallest_range": 10}]


@pytest.mark.parametrize("mode", MODES)
def test_verify_checks_every_page_and_counts_them(paged: Store, mode: dict[str, Any]) -> None:
    result = verify_ledger(paged, **mode)
    assert result.ok, result.problem
    assert "5 sealed pages against the entries" in result.checked
    assert result.ranges == (4 if "smallest_range" in mode else 0)


def _rewrite_page(store: Store, first: int, change: Any, digest: bool = True) -> None:
    """Alter the Parquet of the page starting at `first` (`change` maps the table), below
    the append-only guards; with `digest`, its digest is made to match again."""
    with store.writing() as conn:
        drop_guards(conn)
        blob = bytes(
            conn.execute(
                select(sealed_pages.c.page).where(sealed_pages.c.first_seq == first)
            ).scalar_one()
        )
        sink = io.BytesIO()
        pq.write_table(
            change(pq.read_table(pa.BufferReader(blob))),
            sink,
            compression="zstd",
            row_group_size=sealed._ROW_GROUP,
        )
        values: dict[str, Any] = {"page": sink.getvalue()}
        if digest:
            values["digest"] = sha256(sink.getvalue()).digest()
        conn.execute(
            sealed_pages.update().where(sealed_pages.c.first_seq == first).values(**values)
        )


def _step_renamed(table: pa.Table) -> pa.Table:
    events = [e.replace('"step":5,', '"step":6,') for e in table.column("event").to_pylist()]
    return table.set_column(3, "event", pa.array(events, pa.string()))


def _one_event_padded(table: pa.Table) -> pa.Table:
    events = table.column("event").to_pylist()
    return table.set_column(3, "event", pa.array([events[0] + " ", *events[1:]], pa.string()))


@pytest.mark.parametrize("mode", MODES)
def test_a_page_altered_with_its_digest_is_named_by_verify_at_its_seq_and_column(
    paged: Store, unpaged: Store, mode: dict[str, Any]
) -> None:
    with paged.reading() as conn:
        seq = (
            conn.execute(text("SELECT seq FROM entries WHERE event LIKE :p"), {"p": '%"step":5,%'})
            .scalars()
            .all()
        )
    assert seq == [12, 13]  # j1's and k1's step 5, both in the page of seqs 9–16
    _rewrite_page(paged, 9, _step_renamed)
    problem = verify_ledger(paged, **mode).problem
    assert problem is not None and (problem.seq, problem.kind) == (12, "sealed")
    assert (
        "the sealed page of seqs 9–16 differs from the entries at seq 12, column event"
        in problem.message
    )
    # the reconciliation did read the page: its progress is no longer the entries'
    assert reconcile_store(paged).as_json() != reconcile_store(unpaged).as_json()


@pytest.mark.parametrize("mode", MODES)
def test_a_page_that_fails_its_digest_is_not_read_and_is_named(
    paged: Store, unpaged: Store, mode: dict[str, Any]
) -> None:
    _rewrite_page(paged, 17, _one_event_padded, digest=False)
    with paged.reading() as conn:
        assert [page.first_seq for page in read_sealed(conn)] == [1, 9]  # the rest from the rows
    assert reconcile_store(paged).as_json() == reconcile_store(unpaged).as_json()
    problem = verify_ledger(paged, **mode).problem
    assert problem is not None and (problem.seq, problem.kind) == (17, "sealed")
    assert problem.message.endswith("its Parquet does not match its digest")


def test_pages_are_append_only(paged: Store) -> None:
    with pytest.raises(Exception, match="append-only"):
        with paged.writing() as conn:
            conn.execute(text("UPDATE sealed_pages SET entries = 9 WHERE first_seq = 1"))


def test_a_checkpoint_seals_the_runs_completed_since_the_last(store: Store) -> None:
    store.sealed_entries = PAGE
    signer = Signer.generate("test")
    ingest(store, _events()[:20])
    sign_checkpoint(store, signer)
    with store.reading() as conn:
        assert [(first, last) for first, last, _ in _pages(conn)] == [(1, 8), (9, 16)]
    ingest(store, _events()[20:33])  # 33 entries: the runs of seqs 17–24 and 25–32 complete
    with store.reading() as conn:
        assert len(_pages(conn)) == 2  # an append seals nothing
    sign_checkpoint(store, signer)
    with store.reading() as conn:
        assert [(first, last) for first, last, _ in _pages(conn)] == [
            (1, 8),
            (9, 16),
            (17, 24),
            (25, 32),
        ]
        assert seal(conn, PAGE) == 0  # nothing left to seal


def test_the_reports_read_the_same_events_through_pages(paged: Store, unpaged: Store) -> None:
    from reconcile.reports import loaded

    def events(store: Store) -> list[tuple[Any, ...]]:
        with loaded(store, "zeta") as data:
            return [
                tuple(row) for row in data.con.execute("SELECT * FROM ev ORDER BY seq").fetchall()
            ]

    assert (
        len(events(paged)) == 23
    )  # zeta's grant, start, 18 marks and line, and the fleet's fault and clear
    assert events(paged) == events(unpaged)


@pytest.mark.parametrize(
    "filters", [{}, {"tenant": "zeta"}, {"upto_seq": 20}, {"tenant": "acme", "upto_seq": 41}]
)
def test_entry_tables_give_the_rows_store_pages_gives(
    paged: Store, filters: dict[str, Any]
) -> None:
    with paged.reading() as conn:
        tables = list(entry_tables(conn, filters.get("tenant"), filters.get("upto_seq")))
        rows = pa.concat_tables(
            store_pages(conn, filters.get("tenant"), upto_seq=filters.get("upto_seq"))
        )
    assert len(tables) > 2  # pages, then rows
    assert pa.concat_tables(tables).equals(rows)


@pytest.mark.parametrize("mode", MODES)
def test_pages_that_do_not_follow_one_another_are_named(
    paged: Store, mode: dict[str, Any]
) -> None:
    with paged.writing() as conn:
        drop_guards(conn)
        conn.execute(text("DELETE FROM sealed_pages WHERE first_seq = 9"))
    with paged.reading() as conn:
        assert [page.first_seq for page in read_sealed(conn)] == [1]  # the rest from the rows
    problem = verify_ledger(paged, **mode).problem
    assert problem is not None and (problem.seq, problem.kind) == (17, "sealed")
    assert problem.message.endswith("starts at seq 17, where seq 9 was expected")


@pytest.mark.parametrize("mode", MODES)
def test_a_page_whose_parquet_is_not_parquet_is_named(paged: Store, mode: dict[str, Any]) -> None:
    with paged.writing() as conn:
        drop_guards(conn)
        junk = b"PAR1 not a page"
        conn.execute(
            sealed_pages.update()
            .where(sealed_pages.c.first_seq == 25)
            .values(page=junk, digest=sha256(junk).digest())
        )
    problem = verify_ledger(paged, **mode).problem
    assert problem is not None and (problem.seq, problem.kind) == (25, "sealed")
    assert "its Parquet cannot be read" in problem.message


def test_the_range_pass_reads_only_the_row_groups_of_its_seqs(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of 8 entries in row groups of 3 (3, 3, 2 rows): the range 13-24 starts in the
    second row group of the page of seqs 9-16 and reads it from there; an edit in that
    page's first row group (seq 12) is the range 1-12's to find, one in its second (seq 13)
    the range 13-24's."""
    monkeypatch.setattr(sealed, "_ROW_GROUP", 3)
    store.sealed_entries = PAGE
    ingest(store, _events())
    assert seal_store(store) == 5
    with store.reading() as conn:
        groups = [
            pq.ParquetFile(pa.BufferReader(bytes(page))).metadata.num_row_groups
            for page in conn.execute(select(sealed_pages.c.page)).scalars()
        ]
    assert groups == [3] * 5
    result = verify_ledger(store, processes=2, smallest_range=10)
    assert result.ok and result.ranges == 4, result.problem
    _rewrite_page(store, 9, _seq_13_altered)
    with store.reading() as conn:
        page = conn.execute(
            select(sealed_pages.c.page).where(sealed_pages.c.first_seq == 9)
        ).scalar_one()
        assert pq.ParquetFile(pa.BufferReader(bytes(page))).metadata.num_row_groups == 3
    assert (
        verify_ledger(store, processes=2, smallest_range=10).ranges == 0
    )  # the range 13-24 said no
    problem = verify_ledger(store, processes=2, smallest_range=10).problem
    assert problem is not None and (problem.seq, problem.kind) == (13, "sealed")


def _seq_13_altered(table: pa.Table) -> pa.Table:
    events = table.column("event").to_pylist()
    events[13 - 9] = events[13 - 9].replace('"step":5,', '"step":6,')
    return table.set_column(3, "event", pa.array(events, pa.string()))


# -- sealed as entries arrive: after an ingest, in a process of its own (ledger/sealing.py) --


def test_an_ingest_s_complete_runs_are_sealed_in_a_child_as_a_checkpoint_seals_them(
    store: Store, unpaged: Store
) -> None:
    """The child writes the pages `seal_store` would (the same bytes as in this process),
    only when a complete run waits, and a second call writes nothing."""
    from ledger.sealing import seal_in_child, unsealed_run

    store.sealed_entries = PAGE
    events = _events()
    ingest(store, events[:5])
    assert not unsealed_run(store) and seal_in_child(store) == 0
    ingest(store, events[5:])
    assert unsealed_run(store)
    assert seal_in_child(store) == 5  # 47 entries: five runs of 8
    assert not unsealed_run(store) and seal_in_child(store) == 0
    with store.reading() as conn:  # the extras wait for a checkpoint
        assert conn.execute(select(sealed_extras.c.first_seq)).all() == []
    unpaged.sealed_entries = PAGE
    assert seal_store(unpaged) == 5
    with store.reading() as conn, unpaged.reading() as plain:
        assert [(f, last, t.to_pylist()) for f, last, t in _pages(conn)] == [
            (f, last, t.to_pylist()) for f, last, t in _pages(plain)
        ]
    assert verify_ledger(store).ok
    assert seal_store(store) == 0  # a checkpoint's sealing: no page, the five pages' extras
    with store.reading() as conn:
        assert [first for first, _last, _t in sealed_with_extras(conn)] == [1, 9, 17, 25, 33]
    assert verify_ledger(store).ok


def test_a_store_that_refuses_the_sealing_child_says_why(tmp_path: Any) -> None:
    """The child cannot write (the store opened read-only): one line naming the reason,
    as StoreWriteFailed, and the entries are as they were."""
    from ledger import StoreWriteFailed
    from ledger.sealing import seal_in_child

    path = tmp_path / "l.db"
    writable = Store(f"sqlite:///{path}")
    writable.init()
    ingest(writable, _events())
    writable.close()
    read_only = Store(f"sqlite:///file:{path}?mode=ro&uri=true")
    read_only.sealed_entries = PAGE
    with pytest.raises(StoreWriteFailed, match="readonly database"):
        seal_in_child(read_only)
    with read_only.reading() as conn:
        assert conn.execute(select(sealed_pages.c.first_seq)).all() == []
    read_only.close()


def test_gpuledger_ingest_seals_what_it_completed_with_no_checkpoint(tmp_path: Any) -> None:
    """A file of 65,536 entries and more (a default page): after `gpuledger ingest` the
    first page is sealed, `verify` agrees with it, and a second ingest of the same file
    (nothing appended) seals nothing more."""
    from click.testing import CliRunner

    from cli import main
    from tests.big_jsonl import write_big

    source = tmp_path / "events.jsonl"
    count = write_big(source, 12)
    assert count > 65_536
    url = f"sqlite:///{tmp_path / 'l.db'}"
    for _ in range(2):
        done = CliRunner().invoke(main, ["ingest", "--db", url, str(source)])
        assert done.exit_code == 0, done.output
    store = Store(url)
    with store.reading() as conn:
        assert conn.execute(select(sealed_pages.c.first_seq, sealed_pages.c.last_seq)).all() == [
            (1, 65_536)
        ]
    assert verify_ledger(store).ok
    store.close()


# -- the extras: an entry's other columns kept beside its page, which an export reads ----


def _rows_export(conn: Connection, **where: Any) -> pa.Table:
    """The oracle: what the rows alone give (`entry_tables`, itself checked against the
    JSON Lines export in tests/test_export_parquet.py)."""
    from ledger.export import entry_tables

    tables = list(entry_tables(conn, **where))
    return pa.concat_tables(tables) if tables else ENTRY_SCHEMA.empty_table()


@pytest.mark.parametrize("where", [{}, {"type_": "job.progress"}, {"tenant": "zeta"}])
def test_an_export_reads_the_sealed_pages_and_their_extras_then_the_rows(
    paged: Store, where: dict[str, str]
) -> None:
    """47 entries: five pages of 8 with their extras (seqs 1-40), then 7 rows. The export's
    tables are the rows', in row groups of 10,000 as before."""
    from ledger.export import export_tables
    from ledger.sealed import sealed_with_extras

    with paged.reading() as conn:
        assert [last for _first, last, _t in sealed_with_extras(conn)] == [8, 16, 24, 32, 40]
        exported = list(export_tables(conn, **where))
        expected = _rows_export(conn, **where)
    assert all(t.schema == ENTRY_SCHEMA for t in exported)
    assert pa.concat_tables(exported).equals(expected)
    assert expected.num_rows > 0


def _rewrite_extras(store: Store, first: int, change: Any, digest: bool = True) -> None:
    """Alter the extras of the page starting at `first`, below the append-only guards."""
    with store.writing() as conn:
        drop_guards(conn)
        blob = conn.execute(
            select(sealed_extras.c.extras).where(sealed_extras.c.first_seq == first)
        ).scalar_one()
        sink = io.BytesIO()
        pq.write_table(change(pq.read_table(pa.BufferReader(bytes(blob)))), sink)
        values: dict[str, Any] = {"extras": sink.getvalue()}
        if digest:
            values["digest"] = sha256(sink.getvalue()).digest()
        conn.execute(
            sealed_extras.update().where(sealed_extras.c.first_seq == first).values(**values)
        )


def _source_renamed_at(seq: int) -> Any:
    def change(table: pa.Table) -> pa.Table:
        sources = table.column("source").to_pylist()
        at = table.column("seq").to_pylist().index(seq)
        sources[at] = "sim://forged"
        return table.set_column(2, "source", pa.array(sources, pa.string()))

    return change


@pytest.mark.parametrize("mode", MODES)
def test_extras_altered_with_their_digest_are_named_by_verify_at_their_seq_and_column(
    paged: Store, mode: dict[str, Any]
) -> None:
    _rewrite_extras(paged, 9, _source_renamed_at(12))
    problem = verify_ledger(paged, **mode).problem
    assert problem is not None and (problem.seq, problem.kind) == (12, "sealed")
    assert (
        "the sealed page of seqs 9–16 differs from the entries at seq 12, column source"
        in problem.message
    )


@pytest.mark.parametrize("mode", MODES)
def test_extras_that_fail_their_digest_are_not_exported_and_are_named(
    paged: Store, mode: dict[str, Any]
) -> None:
    from ledger.export import export_tables
    from ledger.sealed import sealed_with_extras

    _rewrite_extras(paged, 17, _source_renamed_at(20), digest=False)
    with paged.reading() as conn:
        assert [first for first, _last, _t in sealed_with_extras(conn)] == [1, 9]
        assert pa.concat_tables(list(export_tables(conn))).equals(_rows_export(conn))
    problem = verify_ledger(paged, **mode).problem
    assert problem is not None and (problem.seq, problem.kind) == (17, "sealed")
    assert problem.message.endswith("its extras: their Parquet does not match its digest")


def test_a_store_made_before_the_extras_exports_from_rows_until_a_checkpoint_makes_them(
    store: Store,
) -> None:
    """A store with no `sealed_extras` table: pages are sealed alone and the export reads
    the rows; `init` makes the table, and the next checkpoint's sealing gives every page,
    the older ones too, its extras, which the export then reads."""
    from ledger.export import export_tables
    from ledger.migrations import has_sealed_extras

    store.sealed_entries = PAGE
    with store.writing() as conn:
        drop_guards(conn)
        conn.execute(text("DROP TABLE sealed_extras"))
    events = _events()
    ingest(store, events[:20])
    assert seal_store(store) == 2
    with store.reading() as conn:
        assert not has_sealed_extras(conn) and list(sealed_with_extras(conn)) == []
        assert pa.concat_tables(list(export_tables(conn))).equals(_rows_export(conn))
    assert verify_ledger(store).ok
    store.init()
    ingest(store, events[20:])
    assert seal_store(store) == 3
    with store.reading() as conn:
        assert has_sealed_extras(conn)
        assert [first for first, _last, _t in sealed_with_extras(conn)] == [1, 9, 17, 25, 33]
        assert pa.concat_tables(list(export_tables(conn))).equals(_rows_export(conn))
    assert verify_ledger(store).ok
    with pytest.raises(Exception, match="append-only"):
        with store.writing() as conn:
            conn.execute(text("DELETE FROM sealed_extras WHERE first_seq = 1"))
