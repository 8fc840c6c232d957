"""The store's entries as Arrow pages (seq, type, tenant, event), read through the
database driver's own cursor: what the reconciliation and the sealed copies are built
from (docs/store-read.md)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from ledger.driver import ReadConnection, head_seq
from ledger.errors import LedgerError

if TYPE_CHECKING:  # SQLAlchemy only where PostgreSQL is read in bulk: see ledger/driver.py
    from sqlalchemy import Connection

PAGE_ROWS = 100_000


def store_pages(
    conn: ReadConnection,
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
    conn: ReadConnection, sql: str, params: tuple[Any, ...], batch: int
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
#: Every column of an entry, as `gpuledger export --format parquet` writes them.
ENTRY_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("recorded_at", pa.string()),
        ("source", pa.string()),
        ("id", pa.string()),
        ("type", pa.string()),
        ("tenant", pa.string()),
        ("tenant_seq", pa.int64()),
        ("event", pa.string()),
        ("salt", pa.binary(16)),
        ("leaf_hash", pa.binary(32)),
        ("chain_hash", pa.binary(32)),
        ("tenant_prev", pa.binary(32)),
    ]
)

#: The columns of an entry a sealed page's `page` does not hold, with `seq` to pair them
#: (a sealed page's `extras`, ledger/sealed.py): what an export writes besides.
EXTRAS_SCHEMA = pa.schema(
    [field for field in ENTRY_SCHEMA if field.name not in ("type", "tenant", "event")]
)


def rows_table(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    """Driver rows (columns in `schema`'s order) as a table, a column at a time."""
    columns = zip(*rows) if rows else [() for _ in schema]
    return pa.Table.from_arrays(
        [pa.array(column, field.type) for column, field in zip(columns, schema)], schema=schema
    )


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


def bulk_batches(
    conn: Connection, columns: Sequence[str], where: str
) -> Iterator[pa.RecordBatch] | None:
    """`entries`' `columns` of the rows `where` (SQL, over `entries`' own columns) in seq
    order, as Arrow batches from PostgreSQL's ADBC driver (a C library: no Python object a
    row, about a third of the Python driver's CPU an entry), on a connection of its own.
    None where that cannot be done: SQLite, or the driver missing.

    Not SQLite: its ADBC driver bundles a second SQLite library, and a process that opens
    the store's file through two libraries loses its locks (POSIX locks are a process's:
    closing the second library's descriptor drops the first's), so the store's own
    connections in this process may read or write the file unguarded; a reconciliation
    run this way was followed by "disk I/O error" (tests/test_cluster.py). Verify reads
    SQLite through ADBC only in processes of its own.

    The caller bounds `where` by a seq read in its own snapshot: the entries are
    append-only and numbered without gaps, so the rows up to it are the same in any later
    snapshot, which is the one this connection reads."""
    if conn.dialect.name != "postgresql":
        return None
    try:
        import adbc_driver_manager
        import adbc_driver_postgresql
    except ImportError:
        return None
    sql = f"SELECT {', '.join(columns)} FROM entries WHERE {where} ORDER BY seq"
    url = conn.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        source = adbc_driver_postgresql.connect(
            url, db_kwargs={"adbc.postgresql.type_resolver_mode": "builtin"}
        )
    except adbc_driver_manager.Error:
        return None  # a URL libpq takes otherwise than psycopg: the rows come as rows
    try:
        connection = adbc_driver_manager.AdbcConnection(source)
    except adbc_driver_manager.Error:
        source.close()
        return None
    return _bulk(adbc_driver_manager, source, connection, sql)


def bulk_pages(
    conn: ReadConnection,
    tenant: str | tuple[str, ...] | None = None,
    upto_seq: int | None = None,
    after: int = 0,
) -> Iterator[pa.Table] | None:
    """`store_pages`' pages read in bulk (`bulk_batches`), in `conn`'s snapshot; None where
    they cannot be."""
    if conn.dialect.name != "postgresql":
        return None  # as `bulk_batches` would answer, without reading the head first
    upto = head_seq(conn) if upto_seq is None else upto_seq
    where = f"seq > {int(after)} AND seq <= {int(upto)}"
    if tenant is not None:
        tenants = (tenant,) if isinstance(tenant, str) else tenant
        where += f" AND (tenant IN ({sql_texts(tenants)}) OR tenant IS NULL)"
    batches = bulk_batches(cast("Connection", conn), PAGE_SCHEMA.names, where)
    if batches is None:
        return None
    return (pa.Table.from_batches([typed(batch, PAGE_SCHEMA)]) for batch in batches)


def sql_texts(texts: Sequence[str]) -> str:
    """SQL: texts as a list of quoted literals (NULL for none), never as SQL."""
    return ", ".join("'" + text.replace("'", "''") + "'" for text in texts) or "NULL"


def _bulk(adbc: Any, database: Any, connection: Any, sql: str) -> Iterator[pa.RecordBatch]:
    try:
        statement = adbc.AdbcStatement(connection)
        try:
            # the index scan on seq, in order (ledger/arrow_entries.py says why)
            for setting in ("enable_bitmapscan", "enable_seqscan"):
                statement.set_sql_query(f"SET {setting} = off")
                statement.execute_update()
            statement.set_sql_query(sql)
            stream, _ = statement.execute_query()
            for batch in pa.RecordBatchReader._import_from_c(stream.address):
                if batch.num_rows:
                    yield batch
        finally:
            statement.close()
    finally:
        connection.close()
        database.close()


def typed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A bulk batch with `schema`'s types: text checked to be UTF-8 where it comes as bytes
    (an entry that is not is named, as `store_pages` names it), binary of a fixed width
    checked to have it."""
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
