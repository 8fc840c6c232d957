"""`export --format parquet` reads the store column-wise through its driver
(`ledger.export.entry_tables`): the file holds, row for row and field for field, the
entries the JSON Lines export gives (read through SQLAlchemy, a row at a time), with the
schema it always had, on SQLite and PostgreSQL, whole and filtered."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import ledger
from ledger import Store
from ledger.export import ENTRY_SCHEMA, _in_pages, bulk_entry_tables, entry_tables
from schemas import Accepted, Origin, validate_event
from tests.test_reconcile_oracle import Fleet

HEX = ("salt", "leaf_hash", "chain_hash", "tenant_prev")


def _fleet() -> list[dict[str, Any]]:
    fleet = Fleet()
    for i in range(25):
        tenant = ("acme", "bravo")[i % 2]
        fleet.add("allocation.granted", i, tenant=tenant, allocation_id=f"A{i}", gpus=1, node="n")
        fleet.add("health.fault", i, node="n", device="GPU0", code="xid-79")  # the fleet's
    return fleet.events


def _jsonl_rows(store: Store, **where: Any) -> list[dict[str, Any]]:
    out = io.BytesIO()
    ledger.export_entries(store, out, "jsonl", **where)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    for row in rows:
        row["event"] = json.dumps(row["event"], separators=(",", ":"))
        for name in HEX:
            row[name] = None if row[name] is None else bytes.fromhex(row[name])
    return rows


def test_the_parquet_export_holds_the_json_lines_entries(store: Store, tmp_path: Path) -> None:
    events = _fleet()
    accepted = [Accepted.of(validate_event(e), Origin("gen", i)) for i, e in enumerate(events, 1)]
    assert ledger.Appender(store).append(accepted).appended == 50
    for where in ({}, {"tenant": "acme"}, {"type_": "health.fault"}):
        path = tmp_path / "entries.parquet"
        count = ledger.export_entries(store, path, "parquet", **where)
        table = pq.read_table(path)
        assert table.schema.equals(ENTRY_SCHEMA)
        expected = _jsonl_rows(store, **where)
        assert count == len(expected) == {(): 50, ("tenant",): 13, ("type_",): 25}[tuple(where)]
        got = table.to_pylist()
        for row in got:
            row["event"] = json.dumps(json.loads(row["event"]), separators=(",", ":"))
        assert got == expected, where
        assert [r["seq"] for r in got] == sorted(r["seq"] for r in got)


def test_the_bulk_read_gives_the_drivers_tables_value_for_value(pg_url: str) -> None:
    """The export reads through PostgreSQL's ADBC driver (`bulk_entry_tables`); the tables
    are those the Python driver's rows make."""
    store = Store(pg_url)
    store.init()
    events = _fleet()
    accepted = [Accepted.of(validate_event(e), Origin("gen", i)) for i, e in enumerate(events, 1)]
    ledger.Appender(store).append(accepted)
    wheres: list[tuple[dict[str, Any], int]] = [
        ({}, 50),
        ({"tenant": "bravo"}, 12),
        ({"type_": "health.fault"}, 25),
        ({"tenant": "o'x"}, 0),  # a quote is a value, not SQL
    ]
    for where, count in wheres:
        with store.reading() as conn:
            bulk = bulk_entry_tables(conn, **where)
            assert bulk is not None
            got = pa.concat_tables([*bulk, ENTRY_SCHEMA.empty_table()])
            rows = pa.concat_tables([*entry_tables(conn, **where), ENTRY_SCHEMA.empty_table()])
        assert got.equals(rows), where
        assert got.num_rows == count, where
    store.close()


def test_bulk_batches_are_written_in_row_groups_of_ten_thousand() -> None:
    def batches(*sizes: int) -> Iterator[pa.RecordBatch]:
        seq = 0
        for size in sizes:
            yield pa.RecordBatch.from_arrays(
                [pa.array(range(seq + 1, seq + size + 1), pa.int64())]
                + [pa.nulls(size, field.type) for field in list(ENTRY_SCHEMA)[1:]],
                schema=ENTRY_SCHEMA,
            )
            seq += size

    tables = list(_in_pages(batches(3, 25_000, 7)))
    assert [t.num_rows for t in tables] == [10_000, 10_000, 5_010]
    assert [t.column("seq")[0].as_py() for t in tables] == [1, 10_001, 20_001]
    assert tables[-1].column("seq")[-1].as_py() == 25_010
