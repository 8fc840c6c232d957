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
        raise _not_text([row[0] for row in rows], [row[3] for row in rows]) from None
    return pa.table({"seq": seq, "type": type_, "tenant": tenant, "event": text})


def _not_text(seqs: list[Any], values: list[Any], field: str = "event") -> UnreadableEntry:
    """The first of `values` (a column of entries `seqs`) that is not UTF-8, named."""
    for seq, value in zip(seqs, values, strict=True):
        try:
            bytes(value or b"").decode("utf-8")
        except UnicodeDecodeError as exc:
            return UnreadableEntry(
                f"entries: seq {seq}: field {field}: not UTF-8 text at byte {exc.start}; "
                f"the store was altered (gpuledger verify names every altered entry)"
            )
    return UnreadableEntry(f"entries: a page's {field}s are not UTF-8 text; the store was altered")


#: SQLite's ADBC driver takes a column's Arrow type from its first batch (a column of
#: NULLs there becomes INT64), so the query opens with one row of the right types (seq 0,
#: taken off again). Every text column is read as BLOB: Arrow checks the bytes are UTF-8
#: when it casts them to `string`, as `store_pages` does for the event.
_BULK_SQLITE = (
    "SELECT 0 AS seq, x'' AS type, x'' AS tenant, x'' AS event UNION ALL SELECT * FROM ("
    "SELECT seq, CAST(type AS BLOB), CAST(tenant AS BLOB), CAST(event AS BLOB) FROM entries "
    "WHERE {where} ORDER BY seq)"
)
_BULK_POSTGRESQL = "SELECT seq, type, tenant, event FROM entries WHERE {where} ORDER BY seq"


def bulk_pages(
    conn: Connection,
    tenant: str | tuple[str, ...] | None = None,
    upto_seq: int | None = None,
    after: int = 0,
) -> Iterator[pa.Table] | None:
    """`store_pages`' pages read in bulk: the rows come as Arrow columns from the database's
    ADBC driver (a C library; no Python object a row, about a third of the driver's CPU an
    entry), on a connection of their own. None where that cannot be done: a store in
    memory (no other connection sees it), or a driver missing.

    The snapshot is still `conn`'s: the head is read there, and the entries are
    append-only and numbered without gaps, so the rows up to it are the same in any later
    snapshot."""
    sqlite = conn.dialect.name == "sqlite"
    url = conn.engine.url
    database = url.database or ""
    if sqlite and (database in ("", ":memory:") or "mode=memory" in str(url)):
        return None
    try:
        import adbc_driver_manager
        import adbc_driver_postgresql
        import adbc_driver_sqlite
    except ImportError:
        return None
    if upto_seq is None:
        head = conn.exec_driver_sql("SELECT coalesce(max(seq), 0) FROM entries").scalar()
        upto_seq = int(head or 0)
    where = f"seq > {int(after)} AND seq <= {int(upto_seq)}"
    if tenant is not None:
        tenants = (tenant,) if isinstance(tenant, str) else tenant
        listed = ", ".join("'" + t.replace("'", "''") + "'" for t in tenants) or "NULL"
        where += f" AND (tenant IN ({listed}) OR tenant IS NULL)"
    if sqlite:
        from urllib.parse import quote

        database_ = adbc_driver_sqlite.connect(f"file:{quote(database)}?mode=ro")
        sql = _BULK_SQLITE.format(where=where)
    else:
        database_ = adbc_driver_postgresql.connect(
            url.set(drivername="postgresql").render_as_string(hide_password=False),
            db_kwargs={"adbc.postgresql.type_resolver_mode": "builtin"},
        )
        sql = _BULK_POSTGRESQL.format(where=where)
    return _bulk(adbc_driver_manager, database_, sql, sqlite)


def _bulk(adbc: Any, database: Any, sql: str, sqlite: bool) -> Iterator[pa.Table]:
    from ledger.store import SQLITE_BUSY_TIMEOUT_S

    connection = adbc.AdbcConnection(database)
    try:
        statement = adbc.AdbcStatement(connection)
        try:
            if sqlite:
                # read-only, and waiting as the store's own connections wait (ledger/store.py)
                statement.set_sql_query(
                    f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}"
                )
                statement.execute_update()
                statement.set_options(**{"adbc.sqlite.query.batch_rows": str(PAGE_ROWS)})
            else:
                # the index scan on seq, in order (ledger/arrow_entries.py says why)
                for setting in ("enable_bitmapscan", "enable_seqscan"):
                    statement.set_sql_query(f"SET {setting} = off")
                    statement.execute_update()
            statement.set_sql_query(sql)
            stream, _ = statement.execute_query()
            reader = pa.RecordBatchReader._import_from_c(stream.address)
            opening = sqlite
            for batch in reader:
                if opening:
                    if not batch.num_rows or batch.column(0)[0].as_py() != 0:
                        raise LedgerError("entries: the bulk read's opening row is missing")
                    batch, opening = batch.slice(1), False
                if batch.num_rows:
                    yield _bulk_page(batch)
        finally:
            statement.close()
    finally:
        connection.close()
        database.close()


def _bulk_page(batch: pa.RecordBatch) -> pa.Table:
    columns = []
    for name, column in zip(PAGE_SCHEMA.names, batch.columns, strict=True):
        wanted = PAGE_SCHEMA.field(name).type
        if column.type != wanted:
            try:
                column = column.cast(wanted)
            except pa.ArrowInvalid:
                raise _not_text(batch.column(0).to_pylist(), column.to_pylist(), name) from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=PAGE_SCHEMA)
