"""The reconciliation's input: the ledger's entries, projected into one typed DuckDB table.

Entries reach DuckDB as Arrow pages (from the store, an exported Parquet file, or a
packet's entries), never row by row. Each page is projected at once: the canonical event
is parsed by DuckDB's JSON reader into the typed columns of `ev`, so the event text
itself is never held for the whole ledger. Times become integer microseconds since the
epoch (UTC), which keeps every interval computation exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqlalchemy import Connection

PAGE_ROWS = 100_000

#: Every `data` field the engine or the reports read, with its DuckDB type.
_DATA_FIELDS: dict[str, str] = {
    "job_id": "VARCHAR", "allocation_id": "VARCHAR", "attempt": "BIGINT", "step": "BIGINT",
    "units": "BIGINT", "checkpoint_id": "VARCHAR", "cause": "VARCHAR", "decision": "VARCHAR",
    "node": "VARCHAR", "device": "VARCHAR", "devices": "VARCHAR[]", "fabric_domain": "VARCHAR",
    "code": "VARCHAR", "severity": "VARCHAR", "gpus": "BIGINT", "placement_class": "VARCHAR",
    "profile": "VARCHAR", "invoice_id": "VARCHAR", "line_id": "VARCHAR", "period_start": "VARCHAR",
    "period_end": "VARCHAR", "amount": "VARCHAR", "currency": "VARCHAR", "category": "VARCHAR",
    "corrects": "VARCHAR", "warmup_allowance_s": "BIGINT", "stall_threshold_s": "BIGINT",
    "reclaim_notice_s": "BIGINT", "promise_id": "VARCHAR", "start_by": "VARCHAR",
    "complete_by": "VARCHAR", "result_id": "VARCHAR", "reason": "VARCHAR", "queue": "VARCHAR",
    "notice_s": "BIGINT", "model": "VARCHAR", "by": "VARCHAR",
    "pod": "VARCHAR",  # kept on a Kubernetes job.started: ties a Pod's scheduler decisions to its job
}
_TIME_FIELDS = ("period_start", "period_end", "start_by", "complete_by")
_RENAMED = {"period_start": "ps", "period_end": "pe"}

EV_COLUMNS = ["seq", "type", "tenant", "t"] + [_RENAMED.get(f, f) for f in _DATA_FIELDS]


def _structure() -> str:
    data = ",".join(f'"{name}":"{kind}"' for name, kind in _DATA_FIELDS.items())
    return '{"time":"VARCHAR","data":{' + data + "}}"


def _us(expr: str) -> str:
    return f"epoch_us(CAST({expr} AS TIMESTAMPTZ))"


def _projection(source: str) -> str:
    columns = []
    for name in _DATA_FIELDS:
        value = f"j.data.{name}"
        columns.append(f'{_us(value) if name in _TIME_FIELDS else value} AS "{_RENAMED.get(name, name)}"')
    return (f"SELECT seq, type, tenant, {_us('j.time')} AS t, {', '.join(columns)} "
            f"FROM (SELECT seq, type, tenant, json_transform(event, '{_structure()}') AS j FROM {source})")


_PROGRESS_PATHS = "['$.time', '$.data.job_id', '$.data.step', '$.data.units']"


def _progress_projection(source: str) -> str:
    """Progress events are most of a ledger: they get a narrow table of their own, read
    with one parse per event into four strings (faster here than a typed struct)."""
    return (f"SELECT seq, tenant, {_us('x[1]')} AS t, x[2] AS job_id, CAST(x[3] AS BIGINT) AS step, "
            f"CAST(x[4] AS BIGINT) AS units FROM (SELECT seq, tenant, json_extract_string(event, {_PROGRESS_PATHS}) AS x "
            f"FROM {source} WHERE type = 'job.progress')")


def open_engine(threads: int | None = None, memory_limit: str | None = None,
                temp_directory: Path | None = None, database: Path | None = None) -> duckdb.DuckDBPyConnection:
    """A private DuckDB with the empty tables `progress` (job.progress events) and
    `ev_rest` (all others), and the view `ev` of both with every typed column. In memory,
    or, for ledgers too big for that, in a scratch `database` file: its tables are stored
    compressed and spill to disk under `memory_limit` instead of growing without bound."""
    con = duckdb.connect(str(database) if database is not None else ":memory:")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    if temp_directory is not None:
        con.execute(f"SET temp_directory = '{_quoted(temp_directory)}'")
    empty = "(SELECT 0::BIGINT AS seq, NULL::VARCHAR AS type, NULL::VARCHAR AS tenant, NULL::VARCHAR AS event WHERE false)"
    con.execute(f"CREATE TABLE ev_rest AS {_projection(empty)}")
    con.execute(f"CREATE TABLE progress AS {_progress_projection(empty)}")
    others = ", ".join(f'NULL::{"BIGINT" if f in _TIME_FIELDS else _DATA_FIELDS[f]} AS "{_RENAMED.get(f, f)}"'
                       for f in _DATA_FIELDS if f not in ("job_id", "step", "units"))  # times are µs in `ev`
    columns = ", ".join(f'"{c}"' for c in EV_COLUMNS)
    con.execute(f"CREATE VIEW ev AS SELECT {columns} FROM ev_rest UNION ALL "
                f"SELECT {columns} FROM (SELECT seq, 'job.progress' AS type, tenant, t, job_id, step, units, "
                f"{others} FROM progress)")
    return con


def _load(con: duckdb.DuckDBPyConnection, source: str) -> None:
    con.execute(f"INSERT INTO progress {_progress_projection(source)}")
    con.execute(f"INSERT INTO ev_rest {_projection(f'(SELECT * FROM {source} WHERE type <> {chr(39)}job.progress{chr(39)})')}")


def load_pages(con: duckdb.DuckDBPyConnection, pages: Iterable[pa.Table]) -> int:
    """Project each Arrow page (columns seq, type, tenant, event) into the engine's tables."""
    count = 0
    for page in pages:
        con.register("ev_page", page)
        _load(con, "ev_page")
        con.unregister("ev_page")
        count += page.num_rows
    return count


def load_parquet(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """Project an exported entries file (`gpuledger export --format parquet`)."""
    source = f"(SELECT seq, type, tenant, event FROM read_parquet('{_quoted(path)}'))"
    before = _count(con)
    _load(con, source)
    return _count(con) - before


def store_pages(conn: Connection, tenant: str | None = None, page_rows: int = PAGE_ROWS,
                upto_seq: int | None = None) -> Iterator[pa.Table]:
    """The store's entries in seq order as Arrow pages; with `tenant`, that tenant's and
    the fleet's only (the figures of a tenant rest on nothing else); with `upto_seq`, only
    entries up to that seq (a checkpoint's tree size)."""
    placeholder = "?" if conn.dialect.name == "sqlite" else "%s"
    sql = f"SELECT seq, type, tenant, event FROM entries WHERE seq <= {placeholder}"
    params: tuple[Any, ...] = (upto_seq if upto_seq is not None else 2**62,)
    if tenant is not None:
        sql += f" AND (tenant = {placeholder} OR tenant IS NULL)"
        params += (tenant,)
    result = conn.execution_options(stream_results=True).exec_driver_sql(sql + " ORDER BY seq", params)
    while rows := result.fetchmany(page_rows):
        yield page_of(list(zip(*rows)))


def entry_pages(entries: Iterable[dict[str, Any]], page_rows: int = PAGE_ROWS) -> Iterator[pa.Table]:
    """Entries given as dicts (a packet's, an export's) as Arrow pages."""
    batch: list[tuple[Any, ...]] = []
    for entry in entries:
        batch.append((entry["seq"], entry["type"], entry["tenant"], entry["event"]))
        if len(batch) >= page_rows:
            yield page_of(list(zip(*batch)))
            batch = []
    if batch:
        yield page_of(list(zip(*batch)))


def page_of(columns: list[tuple[Any, ...]]) -> pa.Table:
    seq, type_, tenant, event = columns
    return pa.table({
        "seq": pa.array(seq, pa.int64()), "type": pa.array(type_, pa.string()),
        "tenant": pa.array(tenant, pa.string()), "event": pa.array(event, pa.string()),
    })


def _count(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT (SELECT count(*) FROM ev_rest) + (SELECT count(*) FROM progress)").fetchone()
    return int(row[0]) if row else 0


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")
