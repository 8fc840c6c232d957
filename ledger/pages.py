"""The store's entries as Arrow pages (seq, type, tenant, event), read through the
database driver's own cursor: what the reconciliation and the sealed copies are built
from (docs/store-read.md)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
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


#: Integer columns of `entries`; every other is read as BLOB from SQLite (`bulk_batches`).
_INTEGER_COLUMNS = ("seq", "tenant_seq")


def bulk_batches(
    conn: Connection, columns: Sequence[str], where: str, batch_rows: int = PAGE_ROWS
) -> Iterator[pa.RecordBatch] | None:
    """`entries`' `columns` of the rows `where` (SQL, over `entries`' own columns) in seq
    order, as Arrow batches from the database's ADBC driver (a C library: no Python object
    a row, about a third of the Python driver's CPU an entry), on a connection of its own.
    None where that cannot be done: a store in memory (no other connection sees it), or a
    driver missing. From SQLite, every column but the integers comes as binary (the
    caller's `typed` makes it text, checking it is UTF-8).

    The caller bounds `where` by a seq read in its own snapshot: the entries are
    append-only and numbered without gaps, so the rows up to it are the same in any later
    snapshot, which is the one this connection reads."""
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
    if sqlite:
        from urllib.parse import quote

        # SQLite's driver takes a column's Arrow type from its first batch (a column of
        # NULLs there becomes INT64), so the query opens with one row of the right types
        # (seq 0, taken off again)
        opening = ", ".join(
            f"0 AS {name}" if name in _INTEGER_COLUMNS else f"x'' AS {name}" for name in columns
        )
        selected = ", ".join(
            name if name in _INTEGER_COLUMNS else f"CAST({name} AS BLOB)" for name in columns
        )
        sql = (
            f"SELECT {opening} UNION ALL SELECT * FROM (SELECT {selected} FROM entries "
            f"WHERE {where} ORDER BY seq)"
        )
        source = adbc_driver_sqlite.connect(f"file:{quote(database)}?mode=ro")
    else:
        sql = f"SELECT {', '.join(columns)} FROM entries WHERE {where} ORDER BY seq"
        source = adbc_driver_postgresql.connect(
            url.set(drivername="postgresql").render_as_string(hide_password=False),
            db_kwargs={"adbc.postgresql.type_resolver_mode": "builtin"},
        )
    return _bulk(adbc_driver_manager, source, sql, sqlite, batch_rows)


def head_seq(conn: Connection) -> int:
    """The last seq in `conn`'s snapshot (0 for an empty store)."""
    head = conn.exec_driver_sql("SELECT coalesce(max(seq), 0) FROM entries").scalar()
    return int(head or 0)


def bulk_pages(
    conn: Connection,
    tenant: str | tuple[str, ...] | None = None,
    upto_seq: int | None = None,
    after: int = 0,
) -> Iterator[pa.Table] | None:
    """`store_pages`' pages read in bulk (`bulk_batches`), in `conn`'s snapshot; None where
    they cannot be."""
    upto = head_seq(conn) if upto_seq is None else upto_seq
    where = f"seq > {int(after)} AND seq <= {int(upto)}"
    if tenant is not None:
        tenants = (tenant,) if isinstance(tenant, str) else tenant
        where += f" AND (tenant IN ({sql_texts(tenants)}) OR tenant IS NULL)"
    batches = bulk_batches(conn, PAGE_SCHEMA.names, where)
    if batches is None:
        return None
    return (pa.Table.from_batches([typed(batch, PAGE_SCHEMA)]) for batch in batches)


def sql_texts(texts: Sequence[str]) -> str:
    """SQL: texts as a list of quoted literals (NULL for none), never as SQL."""
    return ", ".join("'" + text.replace("'", "''") + "'" for text in texts) or "NULL"


def _bulk(
    adbc: Any, database: Any, sql: str, sqlite: bool, batch_rows: int
) -> Iterator[pa.RecordBatch]:
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
                statement.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
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
                    yield batch
        finally:
            statement.close()
    finally:
        connection.close()
        database.close()


def typed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A bulk batch with `schema`'s types: text checked to be UTF-8 (an entry that is not
    is named, as `store_pages` names it), binary of a fixed width checked to have it."""
    columns = []
    for field, column in zip(schema, batch.columns, strict=True):
        if column.type != field.type:
            try:
                column = column.cast(field.type)
            except pa.ArrowInvalid:
                if field.type != pa.string():
                    raise
                seqs = batch.column(0).to_pylist()
                raise _not_text(seqs, column.to_pylist(), field.name) from None
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
