"""A range of entries read as Arrow record batches through ADBC, and checked a batch at a
time: the fast pass of `verify` (ledger/verify_ranges.py).

Why a second reader: the Python drivers build a tuple of Python objects for every row,
and that alone cost 2–3 µs an entry, twice the hashing verify must do. The ADBC drivers
(SQLite's and PostgreSQL's, C libraries) hand the rows over as Arrow columns, and the
canonical bytes of every entry are then put together column-wise in Arrow, so that the
only per-entry Python left is the two SHA-256 calls the bare loop makes (bench/verify.py).

Nothing here decides that an entry is altered. A batch it cannot read exactly (a value of
an unexpected type, a string needing JSON escapes) goes through the row-by-row check;
anything amiss makes the range unclean, and verify then walks the ledger from seq 1
through the Python driver and names the problem (docs/ledger-format.md, "Verify").

Why the column-wise bytes can be trusted: for a batch whose strings hold no `"`, `\\` or
control character, RFC 8785 writes each string as its UTF-8 between quotes, integers in
decimal, and the salt in lower-case hex; those are the bytes built here. If they ever
differed from `ledger.hashing.entry_bytes`, the leaf would not match, the range would be
unclean, and the walk would decide: a slower verify, never a different verdict.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy.engine import make_url

from ledger.digests import joined
from ledger.driver import SQLITE_BUSY_TIMEOUT_S
from ledger.hashing import LEAF_PREFIX
from ledger.pages import ENTRY_SCHEMA
from schemas.errors import CheckFailed

#: Rows an Arrow batch holds (SQLite's driver makes batches of 1,024 unless told).
BATCH_ROWS = 20000

COLUMNS = (
    "seq",
    "recorded_at",
    "source",
    "id",
    "type",
    "tenant",
    "tenant_seq",
    "event",
    "salt",
    "leaf_hash",
    "chain_hash",
    "tenant_prev",
)
_TEXT = ("recorded_at", "source", "id", "type", "tenant")

# SQLite's driver takes a column's Arrow type from the values of the first batch (a
# column of NULLs there becomes INT64, and a later string then an error), so the query
# opens with one row of the right types (seq 0, taken off again). Every TEXT and BLOB
# column is read CAST to its type, exactly as the walk reads it (ledger/verify_ranges.py):
# SQLite keeps a value's storage class, and the driver would write a REAL in a BLOB
# column as its own text ('1.500000e+00' where the CAST gives '1.5'). A value of any
# other class in an integer column changes the batch's schema or stops the read, and the
# walk decides.
_SQLITE = """
SELECT 0 AS seq, '' AS recorded_at, '' AS source, '' AS id, '' AS type, '' AS tenant, 0 AS \
tenant_seq,
       x'' AS event, x'' AS salt, x'' AS leaf_hash, x'' AS chain_hash, x'' AS tenant_prev
UNION ALL
SELECT * FROM (SELECT seq, CAST(recorded_at AS TEXT), CAST(source AS TEXT), CAST(id AS TEXT), \
CAST(type AS TEXT),
                      CAST(tenant AS TEXT), tenant_seq, CAST(event AS BLOB), CAST(salt AS BLOB),
                      CAST(leaf_hash AS BLOB), CAST(chain_hash AS BLOB), CAST(tenant_prev AS BLOB)
               FROM entries WHERE seq >= {first} AND seq <= {last} ORDER BY seq)
"""
_POSTGRESQL = """
SELECT seq, recorded_at, source, id, type, tenant, tenant_seq, event, salt, leaf_hash, \
chain_hash, tenant_prev
FROM entries WHERE seq >= {first} AND seq <= {last} ORDER BY seq
"""
#: `ENTRY_SCHEMA`'s columns as the drivers hand them over: the event, the salt and the
#: hashes as plain bytes (SQLite's BLOBs carry no width).
_SCHEMA = pa.schema(
    [
        (
            f.name,
            pa.binary() if f.name == "event" or pa.types.is_fixed_size_binary(f.type) else f.type,
        )
        for f in ENTRY_SCHEMA
    ]
)


def drivers() -> tuple[Any, Any]:
    """The ADBC drivers (SQLite's, PostgreSQL's), imported on first use: that costs 0.3 s,
    which no command but verify should pay. Verify calls this before it forks its range
    processes, so that they inherit the drivers rather than each import them."""
    import adbc_driver_postgresql.dbapi as postgresql
    import adbc_driver_sqlite.dbapi as sqlite

    return sqlite, postgresql


class NotReadable(CheckFailed):
    """The batch is not exactly what verify expects: the pass stops, the walk decides."""


def entry_batches(url: str, first: int, last: int) -> Iterator[pa.RecordBatch]:
    """Entries first..last of the store at `url` (a SQLAlchemy URL), in seq order, as
    batches of the columns in COLUMNS, NULLs as NULLs, on a connection of their own (in
    a verify worker, the one it keeps: `in_worker`)."""
    dialect = make_url(url).get_backend_name()
    sqlite = drivers()[0]
    connection, read = None, False
    try:
        connection = _connection(url)
        with closing(connection.cursor()) as cursor:
            if dialect == "sqlite":
                cursor.adbc_statement.set_options(
                    **{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)}
                )
            cursor.execute(
                (_SQLITE if dialect == "sqlite" else _POSTGRESQL).format(
                    first=int(first), last=int(last)
                )
            )
            opening = dialect == "sqlite"
            for batch in cursor.fetch_record_batch():
                yield _typed(_normalised(batch, opening) if dialect == "sqlite" else batch)
                opening = False
        read = True
    except (OSError, sqlite.Error) as exc:  # the drivers' errors do not cross a process boundary
        raise NotReadable(f"{type(exc).__name__}: {exc}") from None
    finally:
        if connection is not None and not (read and _KEPT is not None):
            _drop(url, connection)


#: A verify worker's connections, by store URL; None in any other process: a worker
#: checks several ranges on one (a PostgreSQL connection is a server process started).
_KEPT: dict[str, Any] | None = None


def in_worker() -> None:
    """Run first in each of verify's worker processes: keep their connections."""
    global _KEPT
    _KEPT = {}


def _connection(url: str) -> Any:
    if _KEPT is not None and url in _KEPT:
        return _KEPT[url]
    sqlite, postgresql = drivers()
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        # read-only: the driver bundles its own SQLite, and a writable connection of that
        # second library, closing, may take itself for the file's last one (POSIX locks are
        # a process's, not a library's) and delete the write-ahead log under the store's
        # own connections in this process; a read-only one never checkpoints or deletes it
        connection = sqlite.connect(f"file:{quote(parsed.database or '')}?mode=ro")
        with closing(connection.cursor()) as cursor:
            # as the store's own connections wait (ledger/store.py): SQLite answers
            # "database is locked" at once otherwise, while another connection opens or
            # checkpoints the write-ahead log
            cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    else:
        # the driver's built-in table of PostgreSQL's own types (all that entries hold): by
        # default it first reads every column of every table in the database (pg_attribute),
        # 20-30 ms of CPU on a small database and minutes on a large one (arrow-adbc #1755)
        connection = postgresql.connect(
            parsed.set(drivername="postgresql").render_as_string(hide_password=False),
            db_kwargs={"adbc.postgresql.type_resolver_mode": "builtin"},
        )
        with closing(connection.cursor()) as cursor:
            # the index scan on seq, already in order: before a table's first ANALYZE (just
            # after an ingest) the planner guesses a range holds 0.5 % of it and picks a
            # bitmap scan and a sort, which doubled the server's work a row
            cursor.execute("SET enable_bitmapscan = off")
            cursor.execute("SET enable_seqscan = off")
    if _KEPT is not None:
        _KEPT[url] = connection
    return connection


def _drop(url: str, connection: Any) -> None:
    if _KEPT is not None:
        _KEPT.pop(url, None)
    try:
        connection.close()
    except Exception:  # a connection that failed may not close cleanly; it is gone either way
        pass


def _normalised(batch: pa.RecordBatch, opening: bool) -> pa.RecordBatch:
    """SQLite's batch without the row of types the query opens with."""
    if opening:
        if not batch.num_rows or batch.column("seq")[0].as_py() != 0:
            raise NotReadable("the query's opening row is missing")
        batch = batch.slice(1)
    return pa.RecordBatch.from_arrays(batch.columns, names=list(COLUMNS))


def _typed(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch as it must be: a value of any other type (a real seq, a text tenant_seq)
    made the driver choose another type for its column."""
    columns = batch.columns
    if (
        batch.schema.field(7).type == pa.string()
    ):  # PostgreSQL's text, as its UTF-8 bytes (no copy)
        columns[7] = columns[7].cast(pa.binary())
    if [column.type for column in columns] != _SCHEMA.types:
        raise NotReadable(f"columns of other types than verify reads: {batch.schema}")
    return pa.RecordBatch.from_arrays(columns, schema=_SCHEMA)


def plain(batch: pa.RecordBatch) -> bool:
    """No string of the entry's own fields holds a character RFC 8785 escapes (`"`, `\\`,
    U+0000–U+001F), and every salt is 16 bytes: its canonical bytes can be built by
    concatenation (leaf_inputs). A string that is not UTF-8 stops the pass (NotReadable):
    the walk decides."""
    for name in _TEXT:
        column = batch.column(name)
        if len(column) and column.null_count < len(column) and _escapes(column):
            return False
        try:
            column.validate(full=True)  # UTF-8: SQLite will store any bytes as TEXT
        except pa.ArrowInvalid:
            raise NotReadable(f"{name}: not UTF-8 text") from None
    return _all_of_width(batch.column("salt"), 16)


def _offsets(column: pa.Array) -> np.ndarray[Any, np.dtype[np.int32]]:
    """Where each value of a string or binary column starts in its data, and the last ends."""
    if column.type not in (pa.binary(), pa.string()):
        raise NotReadable(f"not a binary or string column: {column.type}")
    return np.frombuffer(column.buffers()[1], dtype=np.int32)[
        column.offset : column.offset + len(column) + 1
    ]


def _values(column: pa.Array) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The bytes of a string or binary column's values, end to end (no copy)."""
    offsets = _offsets(column)
    data = column.buffers()[2]
    if data is None or not len(column):
        return np.empty(0, dtype=np.uint8)
    return np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]]


def _all_of_width(column: pa.Array, width: int) -> bool:
    """Every value present and `width` bytes long."""
    return column.null_count == 0 and (
        not len(column) or pc.all(pc.equal(pc.binary_length(column), width)).as_py()
    )


def _escapes(column: pa.Array) -> bool:
    text = _values(column)
    return bool(((text < 0x20) | (text == 0x22) | (text == 0x5C)).any())


#: Each byte's two hex digits, as the uint16 whose little-endian bytes they are.
_HEX_PAIRS = np.array(
    [int.from_bytes(f"{i:02x}".encode(), "little") for i in range(256)], dtype="<u2"
)


def leaf_hashes(batch: pa.RecordBatch) -> bytes:
    """Each entry's leaf hash, end to end, for a `plain` batch: SHA-256 of LEAF_PREFIX ‖
    canonical entry (ledger/hashing.py), a batch in one call that never makes the
    entries' bytes whole (ledger/digests.py)."""
    return joined(
        [part if isinstance(part, bytes) else _spans(part) for part in _leaf_parts(batch)],
        batch.num_rows,
    )


def leaf_inputs(batch: pa.RecordBatch) -> pa.Array:
    """Each entry's leaf hash input, LEAF_PREFIX ‖ canonical entry (ledger/hashing.py), for a
    `plain` batch, as a column."""
    arrays = [
        pa.scalar(part, pa.binary()) if isinstance(part, bytes) else part.cast(pa.binary())
        for part in _leaf_parts(batch)
    ]
    return pc.binary_join_element_wise(*arrays, pa.scalar(b"", pa.binary()))


def _leaf_parts(batch: pa.RecordBatch) -> list[bytes | pa.Array]:
    """The canonical entry's pieces in order: the same bytes for every entry, or a column."""
    column = batch.column
    return [
        LEAF_PREFIX + b'{"event":',
        column("event"),
        b',"id":"',
        column("id"),
        b'","recorded_at":"',
        column("recorded_at"),
        b'","salt":"',
        _hex(column("salt")),
        b'","seq":',
        pc.cast(column("seq"), pa.string()),
        b',"source":"',
        column("source"),
        b'","tenant":',
        pc.fill_null(_quoted(column("tenant")), "null"),
        b',"tenant_seq":',
        pc.fill_null(pc.cast(column("tenant_seq"), pa.string()), "null"),
        b',"type":"',
        column("type"),
        b'"}',
    ]


def _spans(column: pa.Array) -> tuple[Any, np.ndarray[Any, np.dtype[np.int64]]]:
    """A column as (data, int64 offsets) for ledger.digests.joined."""
    if pa.types.is_fixed_size_binary(column.type):
        width = column.type.byte_width
        return column.buffers()[1], (
            np.arange(len(column) + 1, dtype=np.int64) + column.offset
        ) * width
    return column.buffers()[2] or b"", _offsets(column).astype(np.int64)


def _quoted(column: pa.Array) -> pa.Array:
    quote = pa.scalar('"')
    return pc.binary_join_element_wise(quote, column, quote, pa.scalar(""))


def _hex(salts: pa.Array) -> pa.Array:
    """16-byte salts in lower-case hex (SQL's hex() would be the database's word for it)."""
    count = len(salts)
    text = _HEX_PAIRS[_values(salts).reshape(count, 16)]
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(32), count, [None, pa.py_buffer(text)])


def packed(column: pa.Array, width: int) -> bytes | None:
    """The column's values end to end, when every one is present and `width` bytes long."""
    return _values(column).tobytes() if _all_of_width(column, width) else None
