"""`export --format parquet` reads the store column-wise through its driver
(`ledger.export.entry_tables`): the file holds, row for row and field for field, the
entries the JSON Lines export gives (read through SQLAlchemy, a row at a time), with the
schema it always had, on SQLite and PostgreSQL, whole and filtered."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import ledger
from ledger import Store
from ledger.export import ENTRY_SCHEMA
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
