"""The store's read path (`reconcile.engine.snapshot.store_pages`): the driver's rows become
Arrow pages in one call a page. The pages must hold every entry exactly as stored (seq,
type, tenant, the event text byte for byte), on SQLite and PostgreSQL, across page
boundaries, with the tenant and `upto_seq` filters; the oracle is the entries table read
through SQLAlchemy Core, a path that shares no code with the one under test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import select

from ledger import Store
from ledger.pages import bulk_pages
from ledger.tables import entries
from reconcile.engine.snapshot import ReadAhead, store_pages
from tests.reconcile_helpers import Scenario, ingest

#: A tenant the page text must carry intact: quotes, a backslash, a tab, non-ASCII.
ODD = 'ténant "q" \\ x\ty ✓'


def _events() -> list[dict[str, Any]]:
    s = Scenario()
    s.grant("a1", gpus=8, at="10:00")  # seq 1, acme
    s.fault(at="10:05", node="n1", device="GPU-0")  # seq 2, the fleet's (no tenant)
    s.start("j1", "a1", at="10:06")  # seq 3, acme
    s.grant("b1", gpus=4, at="10:07", tenant=ODD)  # seq 4, ODD
    s.progress("j1", step=1, at="10:08")  # seq 5, acme
    s.add(
        "job.failed", "10:09", {"job_id": "jé-✓", "cause": "application"}, tenant=ODD
    )  # seq 6, ODD
    s.cleared(at="10:10", node="n1", device="GPU-0")  # seq 7, fleet
    return s.events


def _pages(store: Store, **options: Any) -> tuple[list[pa.Table], list[tuple[Any, ...]]]:
    with store.reading() as conn:
        pages = list(store_pages(conn, **options))
        stored = conn.execute(
            select(entries.c.seq, entries.c.type, entries.c.tenant, entries.c.event).order_by(
                entries.c.seq
            )
        ).all()
    return pages, [tuple(row) for row in stored]


def _rows(pages: list[pa.Table]) -> list[tuple[Any, ...]]:
    table = pa.concat_tables(pages)
    assert table.schema.names == ["seq", "type", "tenant", "event"]
    assert table.schema.field("event").type == pa.string()
    return list(zip(*(table.column(name).to_pylist() for name in table.schema.names)))


def test_pages_hold_every_entry_as_stored_across_page_boundaries(store: Store) -> None:
    ingest(store, _events())
    pages, stored = _pages(store, page_rows=2)
    assert [page.num_rows for page in pages] == [2, 2, 2, 1]
    assert _rows(pages) == stored
    assert [row[0] for row in stored] == [1, 2, 3, 4, 5, 6, 7]
    assert [row[2] for row in stored] == ["acme", None, "acme", ODD, "acme", ODD, None]
    assert "jé-✓" in stored[5][3]  # non-ASCII event text kept as text


def test_a_tenant_reads_its_entries_and_the_fleets(store: Store) -> None:
    ingest(store, _events())
    pages, stored = _pages(store, tenant=ODD, page_rows=3)
    assert [row[0] for row in _rows(pages)] == [2, 4, 6, 7]
    assert _rows(pages) == [row for row in stored if row[0] in (2, 4, 6, 7)]


def test_upto_seq_stops_at_a_checkpoints_size(store: Store) -> None:
    ingest(store, _events())
    pages, stored = _pages(store, upto_seq=5, page_rows=5)
    assert [page.num_rows for page in pages] == [5]
    assert _rows(pages) == stored[:5]
    acme, _ = _pages(store, tenant="acme", upto_seq=3)
    assert [row[0] for row in _rows(acme)] == [1, 2, 3]


def test_an_empty_store_gives_no_page(store: Store) -> None:
    pages, stored = _pages(store)
    assert pages == [] and stored == []


def _numbered(n: int, fail_at: int | None = None) -> Iterator[pa.Table]:
    for i in range(n):
        if i == fail_at:
            raise RuntimeError(f"page {i} unreadable")
        yield pa.table({"i": [i]})


def test_read_ahead_keeps_the_pages_order_and_raises_the_readers_error() -> None:
    with ReadAhead(_numbered(5)) as pages:
        assert [page.column("i")[0].as_py() for page in pages] == [0, 1, 2, 3, 4]
    seen = []
    with pytest.raises(RuntimeError, match="page 2 unreadable"), ReadAhead(
        _numbered(5, fail_at=2)
    ) as pages:
        for page in pages:
            seen.append(page.column("i")[0].as_py())
    assert seen == [0, 1]


def test_read_ahead_left_early_stops_its_reader() -> None:
    before = threading.active_count()
    with ReadAhead(_numbered(100)) as pages:
        assert next(iter(pages)).column("i")[0].as_py() == 0
        # the consumer stops here (a failed load): the reader must not run on
    assert threading.active_count() == before


def test_read_ahead_reads_before_it_is_asked_and_stops_if_never_asked() -> None:
    """The reader starts when made (the rows come while the engine loads sealed pages),
    and a load that fails before it asks for a page still stops it."""
    read: list[int] = []

    def pages() -> Iterator[pa.Table]:
        for i in range(100):
            read.append(i)
            yield pa.table({"i": [i]})

    before = threading.active_count()
    with ReadAhead(pages()):
        for _ in range(200):  # the first page is read without being asked for
            if read:
                break
            threading.Event().wait(0.01)
        assert read[:1] == [0]
    assert threading.active_count() == before and len(read) < 100


def test_pages_read_ahead_load_the_engine_as_one_page_does(store: Store) -> None:
    """Read ahead two rows a page, the engine's `ev` holds what one page read gives it."""
    from reconcile.engine.snapshot import load_pages, open_engine

    ingest(store, _events())
    views = []
    with store.reading() as conn:
        for ahead in (False, True):
            con = open_engine()
            if ahead:
                with ReadAhead(store_pages(conn, page_rows=2)) as pages:
                    assert load_pages(con, pages) == 7
            else:
                assert load_pages(con, store_pages(conn)) == 7
            views.append(
                con.execute("SELECT seq, type, tenant, job_id FROM ev ORDER BY seq").fetchall()
            )
            con.close()
    assert views[0] == views[1]
    assert [row[:3] for row in views[0]] == [
        (1, "allocation.granted", "acme"),
        (2, "health.fault", None),
        (3, "job.started", "acme"),
        (4, "allocation.granted", ODD),
        (5, "job.progress", "acme"),
        (6, "job.failed", ODD),
        (7, "health.cleared", None),
    ]
    assert views[0][4][3] == "j1" and views[0][5][3] == "jé-✓"


def test_an_event_altered_into_bytes_that_are_not_text_is_named_in_one_line(
    sqlite_url: str,
) -> None:
    """SQLite keeps whatever bytes it is given; PostgreSQL refuses text that is not UTF-8,
    so this tampering exists on SQLite only. The reader must name the entry, and the CLI
    say it in one line (exit 2), not fail with a traceback."""
    from click.testing import CliRunner
    from sqlalchemy import text

    from cli import main
    from reconcile.engine.snapshot import UnreadableEntry

    store = Store(sqlite_url)
    store.init()
    ingest(store, _events())
    with store.engine.begin() as conn:
        conn.execute(text("DROP TRIGGER IF EXISTS entries_no_update"))
        conn.execute(
            text("UPDATE entries SET event = CAST(:e AS TEXT) WHERE seq = 5"),
            {"e": b'{"a":"\xff"}'},
        )
    with pytest.raises(
        UnreadableEntry, match=r"^entries: seq 5: field event: not UTF-8 text at byte 6;"
    ):
        _pages(store, page_rows=2)
    store.close()
    result = CliRunner().invoke(main, ["reconcile", "--db", sqlite_url, "--format", "json"])
    assert result.exit_code == 2, result.output
    assert "entries: seq 5: field event: not UTF-8 text" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_a_store_whose_connection_stays_in_its_thread_is_read_without_read_ahead(
    store: Store,
) -> None:
    """sqlite3 keeps an in-memory database's connection to the thread that made it: the
    store is then read in that thread. Both backends' file and server stores share."""
    from reconcile import reconcile_store
    from reconcile.engine.snapshot import shareable

    memory = Store("sqlite://")
    memory.init()
    for one in (memory, store):
        s = Scenario()
        s.grant("a1", gpus=8, at="10:00")
        s.line("L1", "a1", "10:00", "11:00", gpus=8, amount="1.00")
        ingest(one, s.events)
        with one.reading() as conn:
            assert shareable(conn) is (one is store)
        # 8 GPUs held an hour with no job on them: 28,800 GPU-seconds idle and reserved
        (line,) = reconcile_store(one).as_json()["lines"]
        assert line["gpu_seconds"] == 28_800 and set(line["categories"]) == {"idle_reserved"}
    memory.close()


def test_read_ahead_left_early_closes_the_stores_cursor_in_its_transaction(store: Store) -> None:
    """A load that fails after the first page: the reader's cursor (a server-side one on
    PostgreSQL) is closed before the transaction ends, and the store reads on as before."""
    ingest(store, _events())
    with store.reading() as conn:
        with ReadAhead(store_pages(conn, page_rows=2)) as pages:
            assert next(iter(pages)).column("seq").to_pylist() == [1, 2]
        again = [page.column("seq").to_pylist() for page in store_pages(conn, page_rows=3)]
    assert again == [[1, 2, 3], [4, 5, 6], [7]]


# -- the bulk read: the same pages through PostgreSQL's ADBC driver (ledger.pages) ---------


def _bulk(store: Store, **options: Any) -> list[tuple[Any, ...]]:
    with store.reading() as conn:
        pages = bulk_pages(conn, **options)
        assert pages is not None
        read = list(pages)
    return _rows(read) if read else []


def test_bulk_pages_hold_every_entry_as_stored(pg_url: str) -> None:
    store = Store(pg_url)
    store.init()
    ingest(store, _events())
    _, stored = _pages(store)
    assert _bulk(store) == stored
    assert [row[2] for row in stored] == ["acme", None, "acme", ODD, "acme", ODD, None]
    assert [row[0] for row in _bulk(store, tenant=ODD)] == [2, 4, 6, 7]
    assert [row[0] for row in _bulk(store, tenant=("acme", "nobody"))] == [1, 2, 3, 5, 7]
    assert [row[0] for row in _bulk(store, tenant="o'brien")] == [2, 7]  # quoted, not SQL
    assert [row[0] for row in _bulk(store, upto_seq=5, after=2)] == [3, 4, 5]
    assert _bulk(store, after=7) == []
    store.close()


def test_bulk_pages_read_the_callers_snapshot_while_entries_are_appended(pg_url: str) -> None:
    store = Store(pg_url)
    store.init()
    events = _events()
    ingest(store, events[:4])
    with store.reading() as conn:
        conn.exec_driver_sql("SELECT count(*) FROM entries").scalar()  # the snapshot begins
        ingest(store, events[4:])  # another connection appends seqs 5-7 meanwhile
        pages = bulk_pages(conn)
        assert pages is not None
        assert [row[0] for row in _rows(list(pages))] == [1, 2, 3, 4]
    assert [row[0] for row in _bulk(store)] == [1, 2, 3, 4, 5, 6, 7]
    store.close()


def test_a_sqlite_store_is_never_read_through_a_second_sqlite_library(sqlite_url: str) -> None:
    """SQLite's ADBC driver bundles its own SQLite: a process opening the store's file
    through two libraries loses its locks, so the rows come through sqlite3 (None here)."""
    for url in (sqlite_url, "sqlite://"):
        store = Store(url)
        store.init()
        with store.reading() as conn:
            assert bulk_pages(conn) is None
        store.close()
