"""Reading entries out: JSON Lines (one entry a line, the event embedded as stored, hashes
in hex) or Parquet (one row an entry), filtered by type and tenant, streamed in pages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Connection, select

from ledger.pages import driver_rows
from ledger.store import Store
from ledger.tables import entries, quarantine

_PAGE = 10_000

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
    conn: Connection, type_: str | None = None, tenant: str | None = None
) -> Iterator[pa.Table]:
    """Entries in seq order as Arrow tables of ENTRY_SCHEMA, `_PAGE` rows each: one query
    read through the database driver's cursor (`driver_rows`), each page made column by
    column (no Python dict an entry), the same rows as `entry_pages`."""
    names = [field.name for field in ENTRY_SCHEMA]
    sql = f"SELECT {', '.join(names)} FROM entries WHERE seq > {{mark}}"
    params: tuple[Any, ...] = (0,)
    if type_ is not None:
        sql += " AND type = {mark}"
        params += (type_,)
    if tenant is not None:
        sql += " AND tenant = {mark}"
        params += (tenant,)
    for rows in driver_rows(conn, sql + " ORDER BY seq", params, _PAGE):
        columns = zip(*rows)
        yield pa.Table.from_arrays(
            [pa.array(column, field.type) for column, field in zip(columns, ENTRY_SCHEMA)],
            schema=ENTRY_SCHEMA,
        )


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
                for table in entry_tables(conn, type_, tenant):
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
