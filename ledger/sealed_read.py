"""A store's sealed pages as a reader takes them (`read_sealed`): each page's row checked
on its own (digest, row count, place), through the database driver alone (no SQLAlchemy:
ledger/driver.py says why). Writing pages, their extras and comparing them with the
entries are `ledger.sealed`'s."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from hashlib import sha256

import pyarrow as pa
import pyarrow.parquet as pq

from ledger.driver import ReadConnection
from ledger.pages import driver_rows


@dataclass(frozen=True)
class SealedPage:
    first_seq: int
    last_seq: int
    parquet: bytes


def read_sealed(conn: ReadConnection, upto_seq: int | None = None) -> Iterator[SealedPage]:
    """The usable pages, in seq order: contiguous from seq 1, each whole by its digest and
    row count, none past `upto_seq`. Stops at the first that is not; the caller reads the
    entries after the last page it was given from `entries`."""
    expected = 1
    for page in page_rows(conn, upto_seq):
        if page.fault(expected) is not None:
            return
        yield SealedPage(page.first_seq, page.last_seq, page.parquet)
        expected = page.last_seq + 1


@dataclass(frozen=True)
class PageRow:
    first_seq: int
    last_seq: int
    entries: int
    digest: bytes
    parquet: bytes

    def fault(self, expected: int) -> str | None:
        return page_fault(
            self.first_seq, self.last_seq, self.entries, self.digest, self.parquet, expected
        )


def page_rows(
    conn: ReadConnection, upto_seq: int | None, first: int = 1, last: int | None = None
) -> Iterator[PageRow]:
    """The pages ending by `upto_seq` and starting in [first, last], one at a time (each is
    megabytes)."""
    sql = (
        "SELECT first_seq, last_seq, entries, digest, page FROM sealed_pages WHERE last_seq <= "
        "{mark} AND first_seq >= {mark} AND first_seq <= {mark} ORDER BY first_seq"
    )
    bounds = (
        upto_seq if upto_seq is not None else 2**62,
        first,
        last if last is not None else 2**62,
    )
    for (row,) in driver_rows(conn, sql, bounds, 1):
        yield PageRow(int(row[0]), int(row[1]), int(row[2]), bytes(row[3]), bytes(row[4]))


def page_fault(
    first: int, last: int, count: int, digest: bytes, parquet: bytes, expected: int
) -> str | None:
    """What is wrong with a page's row on its own, or None."""
    if first != expected:
        return f"starts at seq {first}, where seq {expected} was expected"
    if count != last - first + 1 or count < 1:
        return f"says it holds {count} entries for seqs {first}–{last}"
    if sha256(parquet).digest() != digest:
        return "its Parquet does not match its digest"
    try:
        rows = pq.ParquetFile(pa.BufferReader(parquet)).metadata.num_rows
    except (pa.ArrowException, OSError) as exc:
        return f"its Parquet cannot be read ({exc})"
    return None if rows == count else f"its Parquet holds {rows} rows, not {count}"
