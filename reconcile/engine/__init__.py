"""The reconciliation engine (rules in reconcile/RULES.md): DuckDB over an Arrow
snapshot of the ledger's entries. It reads the ledger and never writes to it.

    entries ──(Arrow pages)──> ev ──> facts and labelled spans ──> lines, pieces, sweep
            ──> cells (line, label, GPU-µs) ──> money (exact, rounded per invoice) ──> Reconciliation
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ledger import Store
from reconcile.engine.classify import classify
from reconcile.engine.intervals import build_spans
from reconcile.engine.money import MoneyOverflow, allocate
from reconcile.engine.result import Cell, Reconciliation  # noqa: F401  (Cell: part of the API)
from reconcile.engine.snapshot import entry_pages, load_pages, load_parquet, load_store, open_engine

UNBILLED = """
WITH held AS (
    SELECT a.tenant, sum(CAST(a.g_a AS HUGEINT) * greatest(least(a.released, h.h) - a.granted, 0)) AS us
    FROM allocs a JOIN horizons h ON h.tenant = a.tenant GROUP BY a.tenant),
billed AS (
    SELECT gl.tenant, sum(CAST(gl.gpus AS HUGEINT) * greatest(least(p.e, h.h) - p.s, 0)) AS us
    FROM pieces p JOIN gpu_lines gl ON gl.seq = p.owner JOIN horizons h ON h.tenant = gl.tenant GROUP BY gl.tenant)
SELECT held.tenant, CAST(held.us - coalesce(billed.us, 0) AS VARCHAR) FROM held LEFT JOIN billed USING (tenant)
"""

CELLS = """
SELECT l.invoice_id, l.line_id, l.tenant, l.allocation_id, l.currency, m.minor, m.label,
       CAST(m.gpu_us AS BIGINT) AS gpu_us, CAST(m.cents AS BIGINT) AS cents,
       l.amount AS billed_amount, l.ps, l.pe, l.description
FROM money m JOIN lines_ev l ON l.seq = m.seq  -- money holds no replaced line
WHERE ($invoice IS NULL OR l.invoice_id = $invoice)
ORDER BY l.seq, m.label
"""


def run(con: duckdb.DuckDBPyConnection, invoice: str | None = None) -> Reconciliation:
    """Reconcile what `ev` holds. The cells come back as one Arrow table (columnar, no
    Python object per cell until one is asked for)."""
    build_spans(con)
    classify(con)
    allocate(con)
    unbilled = {tenant: int(us) for tenant, us in con.execute(UNBILLED).fetchall()}
    table: pa.Table = con.sql(CELLS, params={"invoice": invoice}).to_arrow_table()
    if invoice is not None:
        tenants = set(table.column("tenant").to_pylist())
        unbilled = {t: us for t, us in unbilled.items() if t in tenants}
    return Reconciliation(table, unbilled)


#: Past this many entries the engine works in a scratch file under a memory cap, so a
#: month of a large fleet stays within a few GB (DuckDB spills what does not fit).
LARGE_LEDGER = 2_000_000
MEMORY_LIMIT = os.environ.get("GPULEDGER_ENGINE_MEMORY", "3GB")


@contextmanager
def engine(entries: int, threads: int | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """An engine sized for `entries`: in memory when small, a capped scratch file when large."""
    if entries <= LARGE_LEDGER:
        con = open_engine(threads)
        try:
            yield con
        finally:
            con.close()
        return
    with tempfile.TemporaryDirectory(prefix="gpuledger-reconcile-") as scratch:
        con = open_engine(threads, MEMORY_LIMIT, Path(scratch) / "spill", Path(scratch) / "engine.duckdb")
        try:
            yield con
        finally:
            con.close()


def reconcile_store(store: Store, tenant: str | None = None, invoice: str | None = None,
                    threads: int | None = None, upto_seq: int | None = None) -> Reconciliation:
    """Reconcile the ledger in `store` (one consistent snapshot), optionally one tenant's
    entries (with the fleet's), one invoice's lines, and only entries up to `upto_seq`."""
    with store.reading() as conn:
        size = conn.exec_driver_sql("SELECT coalesce(max(seq), 0) FROM entries").scalar() or 0
        with engine(int(size), threads) as con:
            load_store(con, conn, tenant, upto_seq)
            return run(con, invoice)


def reconcile_entries(entries: Iterable[dict[str, Any]], invoice: str | None = None) -> Reconciliation:
    """Reconcile entries given as dicts with seq, type, tenant and event (a packet's)."""
    with engine(0) as con:
        load_pages(con, entry_pages(entries))
        return run(con, invoice)


def reconcile_parquet(path: Path, invoice: str | None = None, threads: int | None = None) -> Reconciliation:
    """Reconcile an exported entries file (`gpuledger export --format parquet`)."""
    with engine(parquet_rows(path), threads) as con:
        load_parquet(con, path)
        return run(con, invoice)


def reconcile_tables(pages: Iterable[pa.Table], invoice: str | None = None) -> Reconciliation:
    with engine(0) as con:
        load_pages(con, pages)
        return run(con, invoice)


def parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


__all__ = ["MoneyOverflow", "Reconciliation", "reconcile_entries", "reconcile_parquet", "reconcile_store", "reconcile_tables", "run"]
