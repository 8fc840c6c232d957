"""The store's entries as Arrow pages (seq, type, tenant, event), read through the
database driver's own cursor: what the reconciliation and the sealed copies are built
from (docs/store-read.md)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection

from ledger.errors import LedgerError

PAGE_ROWS = 100_000


def store_pages(
    conn: Connection,
    tenant: str | tuple[str, ...] | None = None,
    page_rows: int = PAGE_ROWS,
    upto_seq: int | None = None,
    after: int = 0,
) -> Iterator[pa.Table]:
    """The store's entries in seq order as Arrow pages; with `tenant`, that tenant's and
    the fleet's only (the figures of a tenant rest on nothing else; a tuple of tenants: theirs
    and the fleet's, a partition's); with `upto_seq`, only
    entries up to that seq (a checkpoint's tree size); only those past seq `after`.

    Rows come through the database driver's own cursor, on the connection (and so in the
    snapshot) of `conn`, and become Arrow in one call per page: building a Python row
    object per entry and four columns from them cost more than reading the rows."""
    sqlite = conn.dialect.name == "sqlite"
    # SQLite hands TEXT over as str, decoded and then encoded again by Arrow; as a BLOB
    # the event's bytes go straight into Arrow, which checks they are UTF-8 (psycopg's
    # bytea would come back hex-encoded: there text is the cheaper form).
    event = "CAST(event AS BLOB)" if sqlite else "event"
    sql = (
        f"SELECT seq, type, tenant, {event} FROM entries WHERE seq > {{mark}} AND seq <= {{mark}}"
    )
    params: tuple[Any, ...] = (after, upto_seq if upto_seq is not None else 2**62)
    if isinstance(tenant, str):
        sql += " AND (tenant = {mark} OR tenant IS NULL)"
        params += (tenant,)
    elif tenant is not None:
        marks = ", ".join(["{mark}"] * len(tenant)) or "NULL"
        sql += f" AND (tenant IN ({marks}) OR tenant IS NULL)"
        params += tenant
    row_type = _ROW_BLOB if sqlite else _ROW_TEXT
    for rows in driver_rows(conn, sql + " ORDER BY seq", params, page_rows):
        yield _page_of_rows(rows, row_type)


def driver_rows(
    conn: Connection, sql: str, params: tuple[Any, ...], batch: int
) -> Iterator[list[tuple[Any, ...]]]:
    """`sql`'s rows (each `{mark}` a parameter), `batch` at a time, through the database
    driver's own cursor on `conn` (its snapshot). One query read in batches: on PostgreSQL
    through a server-side cursor, so the server streams the rows in index order (a query a
    batch, `seq > last ... LIMIT`, is planned as a scan and a sort of the whole table for
    every batch)."""
    sqlite = conn.dialect.name == "sqlite"
    driver: Any = conn.connection.driver_connection
    cursor = driver.cursor() if sqlite else driver.cursor(f"gpuledger_rows_{next(_CURSORS)}")
    try:
        cursor.execute(sql.format(mark="?" if sqlite else "%s"), params)
        while rows := cursor.fetchmany(batch):
            yield rows
    finally:
        cursor.close()


_CURSORS = itertools.count(1)
_ROW_TEXT = pa.struct(
    [("seq", pa.int64()), ("type", pa.string()), ("tenant", pa.string()), ("event", pa.string())]
)
#: The columns of a page, as `store_pages` makes them (and a sealed page holds them).
PAGE_SCHEMA = pa.schema(list(_ROW_TEXT))
_ROW_BLOB = pa.struct(
    [("seq", pa.int64()), ("type", pa.string()), ("tenant", pa.string()), ("event", pa.binary())]
)


class UnreadableEntry(LedgerError):
    """An entry whose event is not UTF-8 text: the store was altered below its guards."""


def _page_of_rows(rows: list[tuple[Any, ...]], row_type: pa.StructType) -> pa.Table:
    """Driver rows (seq, type, tenant, event) as a page: Arrow reads the tuples as structs."""
    seq, type_, tenant, event = pa.array(rows, row_type).flatten()
    try:
        text = event.cast(pa.string())
    except pa.ArrowInvalid:
        raise _not_text(rows) from None
    return pa.table({"seq": seq, "type": type_, "tenant": tenant, "event": text})


def _not_text(rows: list[tuple[Any, ...]]) -> UnreadableEntry:
    for row in rows:
        try:
            bytes(row[3]).decode("utf-8")
        except UnicodeDecodeError as exc:
            return UnreadableEntry(
                f"entries: seq {row[0]}: field event: not UTF-8 text at byte {exc.start}; "
                f"the store was altered (gpuledger verify names every altered entry)"
            )
    return UnreadableEntry("entries: a page's events are not UTF-8 text; the store was altered")
