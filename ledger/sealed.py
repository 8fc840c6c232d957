"""Sealed pages: a columnar copy of the entries, kept beside them for fast reads.

Each complete run of `Store.sealed_entries` entries (65,536 by default), counted from
seq 1, is copied once, at the end of the `gpuledger ingest` that completed it
(`ledger.sealing.seal_in_child`) or when a checkpoint is signed (`seal_store`), into one
row of `sealed_pages`: a Parquet file (zstd) of the columns a reconciliation reads (seq,
type, tenant, event), with its SHA-256. A checkpoint also gives each page its extras (a
row of `sealed_extras`, `seal_extras`): a Parquet file of the entries' other columns
(EXTRAS_SCHEMA), which an export reads (`sealed_with_extras`), with its SHA-256; the
ingest's sealing leaves them out (they cost it four times the page). A reader takes the
contiguous run of pages from seq 1 whose digest and row count hold (an export: with
extras whose digest and rows hold too), and reads everything after it from `entries`; a
page that fails either check, and every page after it, is not used.
`verify` compares every page's columns and extras with the entries themselves
(`sealed_problem`, and `PageComparer` in its range pass), so a copy can only ever agree
with the entries or be named: it is never a second source of truth.

Why a copy at all: reading an entry through a Python database driver costs about 1.7 µs
of CPU (docs/store-read.md), more than the engine's own work on it at field scale; a
page is one row, and DuckDB reads its Parquet as it reads an exported file. Why in a
process of its own after an ingest, and not in the append that completes a run: pyarrow
and the Parquet writer cost a process about 85 MB, which an ingest, whose memory stays
flat with the file's size, should not carry; the ingest waits for its sealing child,
which starts only when a complete run is waiting.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from hashlib import sha256

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import Connection, func, insert, select

from ledger.errors import StoreWriteFailed
from ledger.migrations import has_sealed_extras
from ledger.pages import (
    ENTRY_SCHEMA,
    EXTRAS_SCHEMA,
    PAGE_SCHEMA,
    driver_rows,
    rows_table,
    store_pages,
)
from ledger.sealed_read import PageRow, page_fault, page_rows, read_sealed
from ledger.sealing import last_sealed_seq
from ledger.store import SEALED_ENTRIES, Store
from ledger.tables import entries, sealed_extras, sealed_pages


def seal_store(store: Store, extras: bool = True) -> int:
    """Seal every complete run of the store's entries not sealed yet, a page a write
    transaction (an ingest waits for one page at most, never for all), then, with
    `extras`, give each page that has none its extras, likewise. Returns the number of
    pages written."""
    written = 0
    while True:
        with store.writing() as conn:
            if not seal(conn, store.sealed_entries, most=1):
                break
        written += 1
    while extras:
        with store.writing() as conn:
            if not has_sealed_extras(conn) or not seal_extras(conn, most=1):
                break
    return written


def seal(conn: Connection, size: int = SEALED_ENTRIES, most: int | None = None) -> int:
    """Copy complete, not yet sealed runs of `size` entries into `sealed_pages` (at most
    `most`), in the caller's transaction. Returns the number of pages written."""
    last_sealed = last_sealed_seq(conn)
    head = int(conn.execute(select(func.coalesce(func.max(entries.c.seq), 0))).scalar_one())
    written = 0
    while last_sealed + size <= head and (most is None or written < most):
        first, last = last_sealed + 1, last_sealed + size
        rows = store_pages(conn, upto_seq=last, after=first - 1, page_rows=_ROW_GROUP)
        parquet = _parquet(rows)
        conn.execute(
            insert(sealed_pages).values(
                first_seq=first,
                last_seq=last,
                entries=size,
                digest=sha256(parquet).digest(),
                page=parquet,
            )
        )
        last_sealed, written = last, written + 1
    return written


def seal_extras(conn: Connection, most: int | None = None) -> int:
    """Give sealed pages that have none their extras (at most `most`), in the caller's
    transaction, in seq order. Returns how many were written."""
    query = (
        select(sealed_pages.c.first_seq, sealed_pages.c.last_seq)
        .outerjoin(sealed_extras, sealed_extras.c.first_seq == sealed_pages.c.first_seq)
        .where(sealed_extras.c.first_seq.is_(None))
        .order_by(sealed_pages.c.first_seq)
    )
    waiting = conn.execute(query if most is None else query.limit(most)).all()
    for first, last in waiting:
        extras = _parquet(extras_tables(conn, int(first), int(last)))
        conn.execute(
            insert(sealed_extras).values(
                first_seq=first, digest=sha256(extras).digest(), extras=extras
            )
        )
    return len(waiting)


def extras_tables(conn: Connection, first: int, last: int, batch: int = 0) -> Iterator[pa.Table]:
    """The entries `first`..`last`'s EXTRAS_SCHEMA columns, `batch` rows a table (the
    sealing row group by default), read through the driver's cursor."""
    sql = (
        f"SELECT {', '.join(EXTRAS_SCHEMA.names)} FROM entries WHERE seq > {{mark}} "
        "AND seq <= {mark} ORDER BY seq"
    )
    for rows in driver_rows(conn, sql, (first - 1, last), batch or _ROW_GROUP):
        yield rows_table(rows, EXTRAS_SCHEMA)


#: Rows read and written at a time while sealing: a sealing process's memory stays small
#: (16,384 rows a group cost one about 80 MB more, 4,096 about 35; a whole page as Python
#: rows would be hundreds), and DuckDB reads the row groups in parallel (a reconciliation
#: reads pages of either size as fast).
_ROW_GROUP = 4_096


def _parquet(tables: Iterator[pa.Table]) -> bytes:
    """The tables as one Parquet file (zstd), a row group each."""
    sink = io.BytesIO()
    writer: pq.ParquetWriter | None = None
    for table in tables:
        writer = writer or pq.ParquetWriter(sink, table.schema, compression="zstd")
        writer.write_table(table)
    if writer is not None:
        writer.close()
    return sink.getvalue()


def entry_tables(
    conn: Connection, tenant: str | None = None, upto_seq: int | None = None
) -> Iterator[pa.Table]:
    """The entries as `store_pages` gives them, read from the usable sealed pages first
    (decoded, with the tenant filter applied) and from the rows after them."""
    covered = 0
    for page in read_sealed(conn, upto_seq):
        table = pq.read_table(pa.BufferReader(page.parquet))
        if tenant is not None:
            column = table.column("tenant")
            table = table.filter(pc.or_kleene(pc.equal(column, tenant), pc.is_null(column)))
        covered = page.last_seq
        yield table
    yield from store_pages(conn, tenant, upto_seq=upto_seq, after=covered)


def page_extras(conn: Connection, first_seq: int) -> tuple[bytes, bytes] | None:
    """The extras of the page starting at `first_seq` and their digest; None for a page
    sealed without them (or a store whose `sealed_pages` has no such columns yet)."""
    if not has_sealed_extras(conn):
        return None
    rows = list(
        driver_rows(
            conn,
            "SELECT extras, digest FROM sealed_extras WHERE first_seq = {mark}",
            (first_seq,),
            1,
        )
    )
    if not rows:
        return None
    extras, digest = rows[0][0]
    return bytes(extras), bytes(digest)


def extraspage_fault(page: PageRow, extras: bytes, digest: bytes) -> str | None:
    """What is wrong with a page's extras on their own (digest, rows, columns), or None."""
    fault = page_fault(page.first_seq, page.last_seq, page.entries, digest, extras, page.first_seq)
    if fault is not None:
        return f"its extras: {fault.replace('its Parquet', 'their Parquet')}"
    if pq.ParquetFile(pa.BufferReader(extras)).schema_arrow != EXTRAS_SCHEMA:
        return "its extras do not hold an entry's other columns"
    return None


def sealed_with_extras(conn: Connection) -> Iterator[tuple[int, int, pa.Table]]:
    """The usable pages that keep their extras, in seq order from seq 1, each as
    (first_seq, last_seq, every column of its entries in ENTRY_SCHEMA's order): what an
    export reads instead of the rows. Stops at the first page that is not whole (its own
    check, its extras' check) or has no extras; the caller reads on from the rows."""
    expected = 1
    for page in page_rows(conn, None):
        if page.fault(expected) is not None:
            return
        found = page_extras(conn, page.first_seq)
        if found is None or extraspage_fault(page, *found) is not None:
            return
        columns = pq.read_table(pa.BufferReader(page.parquet))
        extras = pq.read_table(pa.BufferReader(found[0]))
        if not columns.column("seq").equals(extras.column("seq")):
            return
        yield page.first_seq, page.last_seq, entry_table(columns, extras)
        expected = page.last_seq + 1


def entry_table(columns: pa.Table, extras: pa.Table) -> pa.Table:
    """A page's columns and its extras as one table of ENTRY_SCHEMA (the same seqs)."""
    both = {name: columns.column(name) for name in columns.column_names}
    both.update({name: extras.column(name) for name in extras.column_names})
    return pa.table([both[field.name] for field in ENTRY_SCHEMA], schema=ENTRY_SCHEMA)


def page_bounds(conn: Connection) -> list[tuple[int, int]]:
    """(first_seq, last_seq) of every sealed page, in order (the pages themselves not read)."""
    rows = conn.execute(
        select(sealed_pages.c.first_seq, sealed_pages.c.last_seq).order_by(
            sealed_pages.c.first_seq
        )
    )
    return [(int(first), int(last)) for first, last in rows]


def gap_problem(bounds: list[tuple[int, int]]) -> tuple[int, str] | None:
    """Pages that do not follow one another from seq 1, as (seq, what), or None."""
    expected = 1
    for first, last in bounds:
        if first != expected:
            return (
                first,
                f"the sealed page of seqs {first}–{last}: starts at seq {first}, where seq "
                f"{expected} was expected",
            )
        expected = last + 1
    return None


def sealed_problem(
    conn: Connection, first: int = 1, last: int | None = None
) -> tuple[int, str] | None:
    """The first sealed page starting in seqs [first, last] that does not hold exactly its
    entries' columns, as (seq, what), or None: each read back, checked against its digest
    and row count, and compared with `entries` column by column. (That the pages follow one
    another is `gap_problem`'s.)"""
    for page in page_rows(conn, None, first, last):
        start, end = page.first_seq, page.last_seq
        fault = page.fault(start)
        if fault is not None:
            return start, f"the sealed page of seqs {start}–{end}: {fault}"
        try:
            copy = pq.read_table(pa.BufferReader(page.parquet))
        except (pa.ArrowException, OSError) as exc:
            return (
                start,
                f"the sealed page of seqs {start}–{end}: its Parquet cannot be read ({exc})",
            )
        difference: tuple[int, str] | str | None = _difference(
            copy, pa.concat_tables(store_pages(conn, upto_seq=end, after=start - 1))
        )
        if difference is None:
            difference = _extras_difference(conn, page)
        if isinstance(difference, str):
            return start, f"the sealed page of seqs {start}–{end}: {difference}"
        if difference is not None:
            seq, column = difference
            return (
                seq,
                f"the sealed page of seqs {start}–{end} differs from the entries at seq {seq}, "
                f"column {column}",
            )
    return None


def _extras_difference(conn: Connection, page: PageRow) -> tuple[int, str] | str | None:
    """What is wrong with a page's extras (a fault, as text), the first (seq, column) at
    which they differ from the entries, or None (also for a page without extras)."""
    found = page_extras(conn, page.first_seq)
    if found is None:
        return None
    fault = extraspage_fault(page, *found)
    if fault is not None:
        return fault
    copy = pq.read_table(pa.BufferReader(found[0]))
    stored = pa.concat_tables(list(extras_tables(conn, page.first_seq, page.last_seq)))
    return _difference(copy, stored)


def sealed_problem_in(span: tuple[str, int, int]) -> tuple[int, str] | None:
    """`sealed_problem` for the pages starting in [first, last] of the store at `url`, on a
    connection of its own: one process's share of verify's check."""
    url, first, last = span
    store = Store(url)
    try:
        with store.reading() as conn:
            return sealed_problem(conn, first, last)
    finally:
        store.close()


def _difference(copy: pa.Table, stored: pa.Table) -> tuple[int, str] | None:
    """The first (seq, column) at which the copy differs from the stored entries."""
    if copy.column_names != stored.column_names or copy.num_rows != stored.num_rows:
        seq = stored.column("seq")[0].as_py() if stored.num_rows else 0
        return seq, "(the page's shape)"
    for name in stored.column_names:
        if copy.column(name).equals(stored.column(name)):
            continue
        ours, theirs = copy.column(name).to_pylist(), stored.column(name).to_pylist()
        # values equal as Python's but the columns not (another type): named at the first row
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b), 0)
        return int(stored.column("seq")[at].as_py()), name
    return None


class PageComparer:
    """The sealed pages over seqs [first, last], compared with batches of the entries as
    they stream past in seq order (verify's range pass, ledger/verify_ranges.py): one page
    held at a time, each checked on its own (digest, row count) when it is read, and only
    its row groups within [first, last] decoded (a page the next range shares is not
    decoded twice). The pass needs only a yes: where this says no, verify's own check
    names the page."""

    def __init__(self, conn: Connection, first: int, last: int) -> None:
        self._first, self._last, self._conn = first, last, conn
        sql = (
            "SELECT first_seq, last_seq, entries, digest, page FROM sealed_pages "
            "WHERE last_seq >= {mark} AND first_seq <= {mark} ORDER BY first_seq"
        )
        self._rows = (
            PageRow(int(r[0]), int(r[1]), int(r[2]), bytes(r[3]), bytes(r[4]))
            for (r,) in driver_rows(conn, sql, (first, last), 1)
        )
        self._page: tuple[int, int, pa.Table] | None = None
        self._faulty = False

    def agrees(self, batch: pa.RecordBatch) -> bool:
        """The batch's seq, type, tenant and event, and where a page keeps its extras,
        the entry's other columns, are the sealed pages' for those seqs (seqs past the last
        page have no copy to agree with)."""
        seqs = batch.column("seq")
        at, end, offset = int(seqs[0].as_py()), int(seqs[len(seqs) - 1].as_py()), 0
        while at <= end:
            page = self._page_holding(at)
            if page is None:
                return not self._faulty
            first, last, table = page  # `first`: the seq of the table's first row
            count = min(end, last) - at + 1
            part = table.slice(at - first, count)
            for name in part.column_names:
                ours = batch.column(name).slice(offset, count)
                if not part.column(name).cast(ours.type).equals(pa.chunked_array([ours])):
                    return False
            at, offset = at + count, offset + count
        return True

    def _page_holding(self, seq: int) -> tuple[int, int, pa.Table] | None:
        while self._page is None or self._page[1] < seq:
            row = next(self._rows, None)
            if row is None:
                return None
            if row.first_seq > seq or row.fault(row.first_seq) is not None:
                self._faulty = True  # a page out of place or unreadable: verify's check names it
                return None
            try:
                self._page = self._rows_within(row)
            except (pa.ArrowException, OSError):
                self._faulty = True
                return None
        return self._page

    def _rows_within(self, row: PageRow) -> tuple[int, int, pa.Table]:
        """The page's row groups that hold seqs of [first, last], as (seq of the first row
        read, the page's last seq, the rows)."""
        page = pq.ParquetFile(pa.BufferReader(row.parquet))
        if page.schema_arrow != PAGE_SCHEMA:
            raise pa.ArrowInvalid("not a sealed page's columns")  # verify's own check names it
        wanted, start, opening = [], row.first_seq, None
        for group in range(page.metadata.num_row_groups):
            end = start + page.metadata.row_group(group).num_rows - 1
            if end >= self._first and start <= self._last:
                wanted.append(group)
                opening = start if opening is None else opening
            start = end + 1
        # one thread: verify already runs a process a core, and starting Arrow's pool costs ~70 ms
        rows = page.read_row_groups(wanted, use_threads=False)
        opening = opening if opening is not None else row.first_seq
        found = page_extras(self._conn, row.first_seq)
        if found is not None:
            if extraspage_fault(row, *found) is not None:
                raise pa.ArrowInvalid("a page's extras amiss")  # verify's own check names it
            extras = pq.read_table(pa.BufferReader(found[0]), use_threads=False)
            extras = extras.slice(opening - row.first_seq, rows.num_rows)
            for name in EXTRAS_SCHEMA.names[1:]:  # all but seq, which the page holds
                rows = rows.append_column(name, extras.column(name))
        return opening, row.last_seq, rows


def main() -> None:
    """`python -m ledger.sealed [ENTRIES]`, the store's URL on standard input: seal every
    complete run (of ENTRIES, default 65,536) and print how many pages were written; a
    store that refuses a page exits 3 with its reason as the last line."""
    from ledger.arrow_probe import skip_pandas_probe

    skip_pandas_probe()  # pyarrow's pandas probe would cost this process ~50 MB
    store = Store(sys.stdin.readline().strip())
    if len(sys.argv) > 1:
        store.sealed_entries = int(sys.argv[1])
    try:
        written = seal_store(store, extras=False)  # the extras wait for a checkpoint
    except StoreWriteFailed as exc:
        print(exc.reason, file=sys.stderr)
        sys.exit(3)
    finally:
        store.close()
    print(written)


if __name__ == "__main__":
    main()
