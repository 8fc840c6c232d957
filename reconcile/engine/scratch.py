"""One in-memory DuckDB database for the small queries made over a reconciliation's
result (its line count, its JSON text, its frame for CSV and Parquet): opening a database
costs about 15 ms, a connection to an open one about 0.3 ms, and a command makes several.
Each caller gets a connection of its own (`scratch`): what it registers and the temporary
tables it makes are its own, and go when it closes it."""

from __future__ import annotations

import os
import threading

import duckdb

_LOCK = threading.Lock()
_DATABASE: tuple[int, duckdb.DuckDBPyConnection] | None = None


def scratch() -> duckdb.DuckDBPyConnection:
    """A new connection to this process's scratch database (made on first use, and made
    anew in a forked child, which must not share its parent's)."""
    global _DATABASE
    with _LOCK:
        if _DATABASE is None or _DATABASE[0] != os.getpid():
            _DATABASE = (os.getpid(), duckdb.connect())
        con = _DATABASE[1].cursor()
    con.execute("SET enable_progress_bar = false")
    return con
