"""The reconciliation engine (rules in reconcile/RULES.md): DuckDB over an Arrow
snapshot of the ledger's entries. It reads the ledger and never writes to it.

    entries ──(Arrow pages)──> ev ──> facts and labelled spans ──> lines, pieces, sweep
            ──> cells (line, label, GPU-µs) ──> money (exact, rounded per invoice)
            ──> Reconciliation

Each of those steps, and what the reports and packets build beside them, is a stage of
`reconcile.engine.pipeline` (its docstring gives the order rules); the calls below make a
`Pipeline` over their entries and return its reconciliation.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ledger.driver import ReadableStore
from reconcile.engine.money import MoneyOverflow
from reconcile.engine.pipeline import (
    CELLS,
    UNBILLED,
    Pipeline,
    engine,
    parquet_rows,
)
from reconcile.engine.result import Cell, Reconciliation
from reconcile.engine.scope import ALL_TIME, Period


def run(con: duckdb.DuckDBPyConnection, invoice: str | None = None) -> Reconciliation:
    """Reconcile what `ev` holds in `con` (its entries loaded, nothing built yet)."""
    return Pipeline(con).reconciliation(invoice)


def reconcile_store(
    store: ReadableStore,
    tenant: str | None = None,
    invoice: str | None = None,
    threads: int | None = None,
    upto_seq: int | None = None,
    period: Period = ALL_TIME,
) -> Reconciliation:
    """Reconcile the ledger in `store` (one consistent snapshot), optionally one tenant's
    entries (with the fleet's), one invoice's lines, only entries up to `upto_seq`, and
    only the lines billed in `period` (scope.Period)."""
    with Pipeline.of_store(store, tenant, threads, upto_seq, period=period) as pipe:
        return pipe.reconciliation(invoice)


def reconcile_entries(
    entries: Iterable[dict[str, Any]], invoice: str | None = None
) -> Reconciliation:
    """Reconcile entries given as dicts with seq, type, tenant and event (a packet's)."""
    with Pipeline.of_entries(entries) as pipe:
        return pipe.reconciliation(invoice)


def reconcile_parquet(
    path: Path, invoice: str | None = None, threads: int | None = None
) -> Reconciliation:
    """Reconcile an exported entries file (`gpuledger export --format parquet`)."""
    with Pipeline.of_parquet(path, threads) as pipe:
        return pipe.reconciliation(invoice)


def reconcile_tables(pages: Iterable[pa.Table], invoice: str | None = None) -> Reconciliation:
    with Pipeline.of_pages(pages) as pipe:
        return pipe.reconciliation(invoice)


__all__ = [
    "CELLS",
    "UNBILLED",
    "Cell",
    "MoneyOverflow",
    "ALL_TIME",
    "Period",
    "Pipeline",
    "Reconciliation",
    "engine",
    "parquet_rows",
    "reconcile_entries",
    "reconcile_parquet",
    "reconcile_store",
    "reconcile_tables",
    "run",
]
