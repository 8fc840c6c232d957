"""Reading entries out: JSON Lines (one entry a line, the event embedded as stored, hashes
in hex) or Parquet (one row an entry), filtered by type and tenant, streamed in pages."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import Connection, select

from ledger.pages import ENTRY_SCHEMA as ENTRY_SCHEMA
from ledger.pages import bulk_batches, driver_rows, rows_table, sql_texts, typed
from ledger.sealed import sealed_with_extras
from ledger.store import Store, head_seq
from ledger.tables import entries, quarantine

_PAGE = 10_000

_HASH_COLUMNS = ("salt", "leaf_hash", "chain_hash", "tenant_prev")


def entry_pages(
    conn: Connection, type_: str | None = None, tenant: str | None = None
) -> Iterator[list[dict[str, Any]]]:
    """Entries in seq order, a page of dicts at a time."""
    last = 0
    while True:
        query = select(*[entries.c[f.name] for f in ENTRY_SCHEMA]).where(entries.c.seq > last)
        if type_ is not None:
            query = query.where(entries.c.type == type_)
        if tenant is not None:
            query = query.where(entries.c.tenant == tenant)
        rows = conn.execute(query.order_by(entries.c.seq).limit(_PAGE)).mappings().all()
        if not rows:
            return
        page = [{str(k): v for k, v in r.items()} for r in rows]
        for row in page:
            for name in _HASH_COLUMNS:
                if row[name] is not None:
                    row[name] = bytes(row[name])
        yield page
        last = page[-1]["seq"]


def entry_tables(
    conn: Connection, type_: str | None = None, tenant: str | None = None, after: int = 0
) -> Iterator[pa.Table]:
    """Entries in seq order (past seq `after`) as Arrow tables of ENTRY_SCHEMA, `_PAGE`
    rows each: one query read through the database driver's cursor (`driver_rows`), each
    page made column by column (no Python dict an entry), the same rows as `entry_pages`."""
    names = [field.name for field in ENTRY_SCHEMA]
    sql = f"SELECT {', '.join(names)} FROM entries WHERE seq > {{mark}}"
    params: tuple[Any, ...] = (int(after),)
    if type_ is not None:
        sql += " AND type = {mark}"
        params += (type_,)
    if tenant is not None:
        sql += " AND tenant = {mark}"
        params += (tenant,)
    for rows in driver_rows(conn, sql + " ORDER BY seq", params, _PAGE):
        yield rows_table(rows, ENTRY_SCHEMA)


def bulk_entry_tables(
    conn: Connection, type_: str | None = None, tenant: str | None = None, after: int = 0
) -> Iterator[pa.Table] | None:
    """`entry_tables`' tables, the rows read as Arrow by the database's ADBC driver
    (`bulk_batches`: no Python object a value), in `conn`'s snapshot; None where they
    cannot be read so."""
    where = f"seq > {int(after)} AND seq <= {head_seq(conn)}"
    if type_ is not None:
        where += f" AND type = {sql_texts([type_])}"
    if tenant is not None:
        where += f" AND tenant = {sql_texts([tenant])}"
    batches = bulk_batches(conn, ENTRY_SCHEMA.names, where)
    if batches is None:
        return None
    return _in_pages(typed(batch, ENTRY_SCHEMA) for batch in batches)


def export_tables(
    conn: Connection, type_: str | None = None, tenant: str | None = None
) -> Iterator[pa.Table]:
    """What `export --format parquet` writes, as tables of `_PAGE` rows (the file's row
    groups): the entries of the sealed pages that have their extras (ledger/sealed.py),
    decoded and filtered, then the rest from the rows (in bulk where the database's ADBC
    driver can, else through its Python driver); the same tables as the rows alone give."""
    covered = 0

    def sealed() -> Iterator[pa.Table]:
        nonlocal covered
        for _first, last, table in sealed_with_extras(conn):
            yield _selected(table, type_, tenant)
            covered = last

    def rest() -> Iterator[pa.Table]:
        bulk = bulk_entry_tables(conn, type_, tenant, after=covered)
        yield from bulk if bulk is not None else entry_tables(conn, type_, tenant, covered)

    tables = itertools.chain(sealed(), rest())
    return _in_pages(batch for table in tables for batch in table.to_batches())


def _selected(table: pa.Table, type_: str | None, tenant: str | None) -> pa.Table:
    """The entries of `table` of that type and tenant (a tenant's: not the fleet's)."""
    if type_ is not None:
        table = table.filter(pc.equal(table.column("type"), type_))
    if tenant is not None:
        table = table.filter(pc.equal(table.column("tenant"), tenant))
    return table


def _in_pages(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
    """The batches as tables of `_PAGE` rows (the last fewer): the file's row groups, as
    `entry_tables` makes them, whatever batches the driver hands over."""
    held: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        held.append(batch)
        rows += batch.num_rows
        while rows >= _PAGE:
            table = pa.Table.from_batches(held)
            yield table.slice(0, _PAGE).combine_chunks()
            rest = table.slice(_PAGE)
            held, rows = rest.to_batches(), rest.num_rows
    if rows:
        yield pa.Table.from_batches(held, schema=ENTRY_SCHEMA).combine_chunks()


def entry_json_line(row: dict[str, Any]) -> bytes:
    """One entry as a JSON line: the stored event verbatim, hashes and salt in hex."""
    head = {k: (v.hex() if isinstance(v, bytes) else v) for k, v in row.items() if k != "event"}
    event: str = row["event"]
    return orjson.dumps(head)[:-1] + b',"event":' + event.encode("utf-8") + b"}\n"


def export_entries(
    store: Store,
    out: IO[bytes] | Path,
    fmt: str = "jsonl",
    type_: str | None = None,
    tenant: str | None = None,
) -> int:
    """Write the selected entries; returns how many."""
    count = 0
    with store.reading() as conn:
        if fmt == "parquet":
            with pq.ParquetWriter(out, ENTRY_SCHEMA) as writer:
                for table in export_tables(conn, type_, tenant):
                    writer.write_table(table)
                    count += table.num_rows
            return count
        pages = entry_pages(conn, type_, tenant)
        assert not isinstance(out, Path)
        for page in pages:
            out.write(b"".join(entry_json_line(row) for row in page))
            count += len(page)
    return count


def quarantined(store: Store) -> list[dict[str, Any]]:
    """Every quarantined record, oldest first, with the record as text where it is UTF-8."""
    with store.reading() as conn:
        rows = conn.execute(select(quarantine).order_by(quarantine.c.qid)).mappings().all()
    listing = []
    for row in rows:
        item = dict(row)
        item["record"] = bytes(item["record"]).decode("utf-8", "replace")
        for name in ("record_hash", "existing_hash", "incoming_hash", "chain_hash"):
            item[name] = bytes(item[name]).hex() if item[name] is not None else None
        listing.append(item)
    return listing
