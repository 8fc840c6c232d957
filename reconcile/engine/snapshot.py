"""The reconciliation's input: the ledger's entries, projected into one typed DuckDB table.

Entries reach DuckDB as Arrow pages (from the store, an exported Parquet file, or a
packet's entries), never row by row. Each page is projected at once: the canonical event
is parsed by DuckDB's JSON reader into the typed columns of `ev`, so the event text
itself is never held for the whole ledger. Times become integer microseconds since the
epoch (UTC), which keeps every interval computation exact.

Progress events, most of a ledger, are stored under an integer job key (`jobs.jid`, one
per tenant and job of a `job.started`) rather than two strings: the engine's one pass over
each job's events sorts and joins on it. Progress of a job not (yet) started keeps its
`tenant` and `job_id` (NULL otherwise) until a later page starts the job, or for good.
The new jobs of a page are read from the page itself (its few starts parsed a second
time), not from `ev_other`, which grows with every page.
"""

from __future__ import annotations

import queue
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ledger.driver import ReadConnection

# the store's rows as pages live with the store; the engine's callers find them here too
from ledger.pages import PAGE_ROWS as PAGE_ROWS
from ledger.pages import UnreadableEntry as UnreadableEntry
from ledger.pages import bulk_pages
from ledger.pages import store_pages as store_pages
from ledger.sealed_read import read_sealed

#: Every `data` field the engine or the reports read, with its DuckDB type.
_DATA_FIELDS: dict[str, str] = {
    "job_id": "VARCHAR",
    "allocation_id": "VARCHAR",
    "attempt": "BIGINT",
    "step": "BIGINT",
    "units": "BIGINT",
    "checkpoint_id": "VARCHAR",
    "cause": "VARCHAR",
    "decision": "VARCHAR",
    "node": "VARCHAR",
    "device": "VARCHAR",
    "devices": "VARCHAR[]",
    "fabric_domain": "VARCHAR",
    "code": "VARCHAR",
    "severity": "VARCHAR",
    "gpus": "BIGINT",
    "placement_class": "VARCHAR",
    "profile": "VARCHAR",
    "invoice_id": "VARCHAR",
    "line_id": "VARCHAR",
    "period_start": "VARCHAR",
    "period_end": "VARCHAR",
    "amount": "VARCHAR",
    "currency": "VARCHAR",
    "category": "VARCHAR",
    "corrects": "VARCHAR",
    "warmup_allowance_s": "BIGINT",
    "stall_threshold_s": "BIGINT",
    "reclaim_notice_s": "BIGINT",
    "promise_id": "VARCHAR",
    "start_by": "VARCHAR",
    "complete_by": "VARCHAR",
    "result_id": "VARCHAR",
    "reason": "VARCHAR",
    "queue": "VARCHAR",
    "notice_s": "BIGINT",
    "model": "VARCHAR",
    "by": "VARCHAR",
    # kept on a Kubernetes job.started: ties a Pod's scheduler decisions to its job
    "pod": "VARCHAR",
    "placement_credit_share": "VARCHAR",  # policy.terms (RULES.md 13), a decimal kept as text
}
#: start.receipt and fleet.change (report capacity); `kind` is stored as `change_kind`,
#: since reports alias `type AS kind`.
_DATA_FIELDS |= {
    "launched_at": "VARCHAR",
    "submitted_at": "VARCHAR",
    "driver": "VARCHAR",
    "decision_seq": "BIGINT",
    "change_id": "VARCHAR",
    "kind": "VARCHAR",
    "nodes": "VARCHAR[]",
    "started_at": "VARCHAR",
    "ended_at": "VARCHAR",
}
#: a receipt's outcome and a quota's pool (the device timeline and the causes of misses)
_DATA_FIELDS |= {"outcome": "VARCHAR", "pool": "VARCHAR"}
#: a job's requested time limit and run time, as sacct gives them on its end (backfill.sql)
_DATA_FIELDS |= {"timelimit_s": "BIGINT", "elapsed_s": "BIGINT"}
#: a device's counters over a sample window (RULES.md 14, stage `device_activity`)
_DATA_FIELDS |= {"window_start": "VARCHAR", "window_end": "VARCHAR", "sm_active": "VARCHAR"}
_TIME_FIELDS = (
    "period_start",
    "period_end",
    "start_by",
    "complete_by",
    "launched_at",
    "submitted_at",
    "started_at",
    "ended_at",
    "window_start",
    "window_end",
)
_RENAMED = {"period_start": "ps", "period_end": "pe", "kind": "change_kind"}

#: The CloudEvents `source` (who told the event: a cluster, a provider's export) is kept for
#: the types of `ev_other` only (jobs, grants, promises, decisions): report envelope groups
#: jobs by it. Billing lines, checkpoints and progress have it NULL in `ev`.
SOURCE_COLUMN = "source"

EV_COLUMNS = (
    ["seq", "type", "tenant", "t"] + [_RENAMED.get(f, f) for f in _DATA_FIELDS] + [SOURCE_COLUMN]
)

#: The common event types beside progress, each with a narrow table of the fields docs/events.md
#: gives them (other data fields are never interpreted). Every column of a table is written
#: and compressed for every row, so a month of billing lines and checkpoints loads several
#: times faster into a few columns than into the 40 of `ev_other`, the table of all
#: remaining types.
NARROW_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "lines_ev": (
        ("billing.line",),
        (
            "invoice_id",
            "line_id",
            "allocation_id",
            "period_start",
            "period_end",
            "gpus",
            "amount",
            "currency",
            "category",
            "corrects",
        ),
    ),
    "checkpoints_ev": (
        ("checkpoint.started", "checkpoint.saved", "checkpoint.restored"),
        ("job_id", "checkpoint_id", "step"),
    ),
    # many (one per device and sample): a narrow table of their own. A tenant's own
    # counters only: the fleet's `device.counters` are the operator's evidence, and no
    # rule reads them (RULES.md 14)
    "counters_ev": (
        ("job.counters",),
        ("node", "device", "window_start", "window_end", "sm_active"),
    ),
}
_PROGRESS_FIELDS = ("job_id", "step", "units")

#: Evidence beside the engine's input: few events with nested data (a topology, probe
#: figures, a serving window's distributions) that reports read whole. Each is also in
#: `ev_other` with its typed columns; `evidence` keeps its `data` as JSON besides.
EVIDENCE_TYPES = ("placement.observed", "probe.result", "inference.window")


#: What a billing source says a line is, shown to finance and never interpreted: a
#: CloudEvents line's own `description`, else the FOCUS row's ChargeDescription (ingest
#: keeps the whole row under `focus`). Parsed for billing lines only, into `lines_ev`.
_LINE_TEXT_STRUCTURE = ',"description":"VARCHAR","focus":{"ChargeDescription":"VARCHAR"}'
_LINE_TEXT_COLUMN = ", coalesce(j.data.description, j.data.focus.ChargeDescription) AS description"


def _structure(fields: Iterable[str], extra: str = "", source: bool = False) -> str:
    data = ",".join(f'"{name}":"{_DATA_FIELDS[name]}"' for name in fields)
    return (
        '{"time":"VARCHAR",'
        + ('"source":"VARCHAR",' if source else "")
        + '"data":{'
        + data
        + extra
        + "}}"
    )


def _us(expr: str) -> str:
    return f"epoch_us(CAST({expr} AS TIMESTAMPTZ))"


def _projection(
    source: str,
    fields: Iterable[str] = tuple(_DATA_FIELDS),
    line_text: bool = False,
    event_source: bool = False,
) -> str:
    """Typed columns of `fields` (times as µs) from each event of `source`, parsed once;
    with `line_text`, a billing line's `description` last; with `event_source`, the
    event's CloudEvents `source` last."""
    fields = tuple(fields)
    columns = (
        "".join(
            f", {_us(f'j.data.{name}') if name in _TIME_FIELDS else f'j.data.{name}'} AS "
            f'"{_RENAMED.get(name, name)}"'
            for name in fields
        )
        + (_LINE_TEXT_COLUMN if line_text else "")
        + (f', j.source AS "{SOURCE_COLUMN}"' if event_source else "")
    )
    structure = _structure(fields, _LINE_TEXT_STRUCTURE if line_text else "", event_source)
    return (
        f"SELECT seq, type, tenant, {_us('j.time')} AS t{columns} "
        f"FROM (SELECT seq, type, tenant, json_transform(event, '{structure}') AS j FROM {source})"
    )


_PROGRESS_PATHS = "['$.time', " + ", ".join(f"'$.data.{name}'" for name in _PROGRESS_FIELDS) + "]"


def _progress_projection(source: str) -> str:
    """Progress events are most of a ledger: they get a narrow table of their own, read
    with one parse per event into four strings (faster here than a typed struct), keyed
    by their job's `jid` where the job has started (its strings are then not stored)."""
    parsed = (
        f"SELECT seq, tenant, {_us('x[1]')} AS t, x[2] AS job_id, CAST(x[3] AS BIGINT) AS step, "
        "CAST(x[4] AS BIGINT) AS units FROM (SELECT seq, tenant, "
        f"json_extract_string(event, {_PROGRESS_PATHS}) AS x "
        f"FROM {source} WHERE type = 'job.progress')"
    )
    return (
        "SELECT p.seq, p.t, p.step, p.units, j.jid, CASE WHEN j.jid IS NULL THEN p.tenant "
        "END AS tenant, "
        f"CASE WHEN j.jid IS NULL THEN p.job_id END AS job_id "
        f"FROM ({parsed}) p LEFT JOIN jobs j ON j.tenant = p.tenant AND j.job = p.job_id"
    )


def _new_jobs(source: str) -> str:
    """The jobs `source` starts that `jobs` does not hold yet, numbered on from its last."""
    started = (
        "SELECT DISTINCT tenant, json_extract_string(event, '$.data.job_id') AS job "
        f"FROM {source} "
        f"WHERE type = 'job.started'"
    )
    return (
        "SELECT (SELECT coalesce(max(jid), 0) FROM jobs) + row_number() OVER (ORDER BY "
        "tenant, job) AS jid, tenant, job "
        f"FROM ({started} EXCEPT SELECT tenant, job FROM jobs)"
    )


#: Progress that came before its job's start (a later page, or late data) gets its key.
_SETTLE = """
UPDATE progress SET jid = j.jid, tenant = NULL, job_id = NULL FROM jobs j
WHERE progress.jid IS NULL AND j.tenant = progress.tenant AND j.job = progress.job_id
"""


def _types_in(types: Iterable[str]) -> str:
    return "(" + ", ".join(f"'{t}'" for t in types) + ")"


def _loads(source: str) -> list[tuple[str, str]]:
    """Each engine table with the SELECT that fills it from `source` (seq, type, tenant, event)."""
    narrow_types = [t for types, _ in NARROW_TABLES.values() for t in types] + ["job.progress"]
    loads = [
        (
            table,
            _projection(
                f"(SELECT * FROM {source} WHERE type IN {_types_in(types)})",
                fields,
                table == "lines_ev",
            ),
        )
        for table, (types, fields) in NARROW_TABLES.items()
    ]
    loads.append(
        (
            "ev_other",
            _projection(
                f"(SELECT * FROM {source} WHERE type NOT IN {_types_in(narrow_types)})",
                event_source=True,
            ),
        )
    )
    # progress last: it looks its jobs up in `jobs`, which has this source's starts by then
    loads += [("jobs", _new_jobs(source)), ("progress", _progress_projection(source))]
    return [*loads, ("evidence", _evidence_projection(source))]


def _evidence_projection(source: str) -> str:
    """The `EVIDENCE_TYPES` events of `source` with their `data` whole, as JSON."""
    time = _us("json_extract_string(event, '$.time')")
    return (
        f"SELECT seq, type, tenant, {time} AS t, json_extract(event, '$.data') AS data "
        f"FROM {source} WHERE type IN {_types_in(EVIDENCE_TYPES)}"
    )


_FIELD_OF_COLUMN = {_RENAMED.get(f, f): f for f in _DATA_FIELDS}


def _padded(table: str, fields: Iterable[str], type_: str | None = None) -> str:
    """`table` with every column of `ev`, in order: the ones it lacks are NULL."""
    present = set(fields)
    columns = ["seq", f"'{type_}' AS type" if type_ else "type", "tenant", "t"]
    for column in EV_COLUMNS[4:]:
        if column == SOURCE_COLUMN:
            columns.append(f'"{column}"' if column in present else f'NULL::VARCHAR AS "{column}"')
            continue
        field = _FIELD_OF_COLUMN[column]
        kind = "BIGINT" if field in _TIME_FIELDS else _DATA_FIELDS[field]  # times are µs
        columns.append(f'"{column}"' if field in present else f'NULL::{kind} AS "{column}"')
    return f"SELECT {', '.join(columns)} FROM {table}"


def open_engine(
    threads: int | None = None,
    memory_limit: str | None = None,
    temp_directory: Path | None = None,
    database: Path | None = None,
) -> duckdb.DuckDBPyConnection:
    """A private DuckDB with empty tables, one per kind of event (`progress`, the
    `NARROW_TABLES`, `ev_other`) and `jobs` (progress's job keys), the view `ev_rest` of
    all but progress, the view `ev` of all, with every typed column, and the view
    `horizons` (each tenant's latest event time). In memory, or, for ledgers too big for
    that, in a scratch `database` file: its tables are stored compressed and spill to disk
    under `memory_limit` instead of growing without bound."""
    con = duckdb.connect(str(database) if database is not None else ":memory:")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    # DuckDB draws its own progress bar on stdout, TTY or not, for any statement past 2 s:
    # inside `gpuledger reconcile --format json > file` that would corrupt the output. The
    # second setting holds even where something turns the bar back on.
    con.execute("SET enable_progress_bar = false")
    con.execute("SET enable_progress_bar_print = false")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    if temp_directory is not None:
        con.execute(f"SET temp_directory = '{_quoted(temp_directory)}'")
    empty = (
        "(SELECT 0::BIGINT AS seq, NULL::VARCHAR AS type, NULL::VARCHAR AS tenant, "
        "NULL::VARCHAR AS event WHERE false)"
    )
    # jid is 4 bytes: the gaps pass sorts 50M progress marks on it (2^31 jobs would be refused)
    con.execute("CREATE TABLE jobs (jid INTEGER, tenant VARCHAR, job VARCHAR)")
    for table, select in _loads(empty):
        if table != "jobs":
            con.execute(f"CREATE TABLE {table} AS {select}")
    rest = [_padded("ev_other", [*_DATA_FIELDS, SOURCE_COLUMN])] + [
        _padded(table, fields, types[0] if len(types) == 1 else None)
        for table, (types, fields) in NARROW_TABLES.items()
    ]
    con.execute(f"CREATE VIEW ev_rest AS {' UNION ALL '.join(rest)}")
    progress = (
        "(SELECT p.seq, coalesce(p.tenant, j.tenant) AS tenant, p.t, coalesce(p.job_id, "
        "j.job) AS job_id, p.step, p.units "
        "FROM progress p LEFT JOIN jobs j ON j.jid = p.jid)"
    )
    con.execute(
        "CREATE VIEW ev AS SELECT * FROM ev_rest UNION ALL "
        f"{_padded(progress, _PROGRESS_FIELDS, 'job.progress')}"
    )
    con.execute(HORIZONS)
    return con


#: Each tenant's horizon: the time of its latest event (progress reduced per job first,
#: so the millions of marks are never joined to their job's strings).
HORIZONS = """
CREATE VIEW horizons AS
SELECT tenant, max(t) AS h FROM (
    SELECT tenant, t FROM ev_rest
    UNION ALL
    SELECT coalesce(p.tenant, j.tenant), p.t
    FROM (SELECT jid, tenant, max(t) AS t FROM progress GROUP BY jid, tenant) p LEFT JOIN jobs j
        ON j.jid = p.jid)
WHERE tenant IS NOT NULL GROUP BY tenant
"""


def _load(con: duckdb.DuckDBPyConnection, source: str) -> None:
    for table, select in _loads(source):
        con.execute(f"INSERT INTO {table} {select}")


def load_pages(con: duckdb.DuckDBPyConnection, pages: Iterable[pa.Table]) -> int:
    """Project each Arrow page (columns seq, type, tenant, event) into the engine's tables."""
    count = 0
    for page in pages:
        con.register("ev_page", page)
        _load(con, "ev_page")
        con.unregister("ev_page")
        count += page.num_rows
    con.execute(_SETTLE)
    return count


#: Sealed pages projected together: 16 pages of 2^16 entries, about a million entries,
#: so each statement reads many row groups at once (one statement set a page cost about
#: half as much again in CPU) while the scratch folder holds few of them at a time.
SEALED_GROUP = 16


def load_store(
    con: duckdb.DuckDBPyConnection,
    conn: ReadConnection,
    tenant: str | tuple[str, ...] | None = None,
    upto_seq: int | None = None,
) -> None:
    """Project the store's entries (one snapshot: `conn`'s), as `store_pages` selects
    them: the sealed pages' Parquet read by DuckDB as it reads an exported file, then the
    entries after the last usable page as pages of rows, read one page ahead. The rows
    start coming while DuckDB reads the last sealed pages: the driver (which lets go of
    the GIL in the database) and DuckDB (which lets go of it too) work at once."""
    covered = 0
    with tempfile.TemporaryDirectory(prefix="gpuledger-sealed-") as folder:
        group: list[Path] = []
        for page in read_sealed(conn, upto_seq):
            group.append(Path(folder) / f"{page.first_seq}.parquet")
            group[-1].write_bytes(page.parquet)
            covered = page.last_seq
            if len(group) == SEALED_GROUP:
                _load_files(con, group, tenant)
                group = []
        with _rows_after(conn, tenant, upto_seq, covered) as rows:
            if group:
                _load_files(con, group, tenant)
            load_pages(con, rows)


@contextmanager
def _rows_after(
    conn: ReadConnection, tenant: str | tuple[str, ...] | None, upto_seq: int | None, after: int
) -> Iterator[Iterable[pa.Table]]:
    """The entries after seq `after` as pages: in bulk where the database's own Arrow
    driver can (`bulk_pages`), else as driver rows; read ahead in a thread (already
    reading when this yields) where the driver's connection may be shared."""
    bulk = bulk_pages(conn, tenant, upto_seq=upto_seq, after=after)
    if bulk is None:
        bulk = store_pages(conn, tenant, upto_seq=upto_seq, after=after)
        if not shareable(conn):
            yield bulk
            return
    with ReadAhead(bulk) as pages:
        yield pages


def _load_files(
    con: duckdb.DuckDBPyConnection, files: list[Path], tenant: str | tuple[str, ...] | None
) -> None:
    """Project Parquet files of entries (seq, type, tenant, event), then remove them."""
    names = ", ".join(f"'{_quoted(path)}'" for path in files)
    scan = f"SELECT seq, type, tenant, event FROM read_parquet([{names}])"
    if tenant is None:
        _load(con, f"({scan})")
    else:
        # the tenants' rows and the fleet's as two scans: each filter alone goes down into
        # the Parquet reader, which then reads the other columns of matching rows only
        # (`tenant IN (...) OR tenant IS NULL` is applied after reading every row)
        tenants = (tenant,) if isinstance(tenant, str) else tenant
        listed = ", ".join("'" + t.replace("'", "''") + "'" for t in tenants) or "NULL"
        _load(
            con,
            f"({scan} WHERE tenant IN ({listed}) UNION ALL {scan} WHERE tenant IS NULL)",
        )
    for path in files:
        path.unlink()


def load_parquet(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """Project an exported entries file (`gpuledger export --format parquet`)."""
    source = f"(SELECT seq, type, tenant, event FROM read_parquet('{_quoted(path)}'))"
    before = _count(con)
    _load(con, source)
    con.execute(_SETTLE)
    return _count(con) - before


def shareable(conn: ReadConnection) -> bool:
    """Whether another thread may read through `conn`'s driver connection (`read_ahead`).
    psycopg's connections may be shared; sqlite3 refuses one made in another thread
    unless it was opened with check_same_thread=False, as SQLAlchemy opens file databases
    but not in-memory ones: asked of the connection itself, by trying."""
    if conn.dialect.name != "sqlite":
        return True
    driver: Any = conn.connection.driver_connection
    refused: list[BaseException] = []

    def probe() -> None:
        try:
            driver.execute("SELECT 1").close()
        except Exception as exc:  # sqlite3.ProgrammingError: made in another thread
            refused.append(exc)

    worker = threading.Thread(target=probe)
    worker.start()
    worker.join()
    return not refused


class ReadAhead:
    """`pages`, read one page ahead in a thread of their own from the moment this is made:
    the database driver (which lets go of the GIL while the database works) reads the next
    page while DuckDB (which lets go of it too) projects this one, or other work. Used as a
    context manager: the thread has stopped when it exits, read to the end or not, so the
    pages' connection is free again for its owner."""

    def __init__(self, pages: Iterable[pa.Table]) -> None:
        self._ready: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._source = iter(pages)
        self._worker = threading.Thread(
            target=self._produce, name="gpuledger-read-ahead", daemon=True
        )
        self._worker.start()

    def _produce(self) -> None:
        try:
            for page in self._source:
                if self._stop.is_set():
                    return
                self._ready.put(("page", page))
            self._ready.put(("done", None))
        except BaseException as exc:  # handed to the consumer, raised there
            self._ready.put(("error", exc))
        finally:  # its cursor closed here, while the transaction it reads in is open
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[pa.Table]:
        while True:
            kind, item = self._ready.get()
            if kind == "done":
                return
            if kind == "error":
                raise item
            yield item

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        while self._worker.is_alive():  # unblock a producer waiting to put its page
            try:
                self._ready.get(timeout=0.05)
            except queue.Empty:
                pass
        self._worker.join()


def entry_pages(
    entries: Iterable[dict[str, Any]], page_rows: int = PAGE_ROWS
) -> Iterator[pa.Table]:
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
    return pa.table(
        {
            "seq": pa.array(seq, pa.int64()),
            "type": pa.array(type_, pa.string()),
            "tenant": pa.array(tenant, pa.string()),
            "event": pa.array(event, pa.string()),
        }
    )


def _count(con: duckdb.DuckDBPyConnection) -> int:
    """Events held, counted table by table (the view `ev` would join progress to `jobs`)."""
    tables = ["progress", "ev_other", *NARROW_TABLES]
    row = con.execute(
        "SELECT " + " + ".join(f"(SELECT count(*) FROM {table})" for table in tables)
    ).fetchone()
    return int(row[0]) if row else 0


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")
