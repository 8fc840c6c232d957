"""Reading the store through its database driver alone, and a SQLite store without
SQLAlchemy.

The store's read path (its entries as Arrow pages, `ledger.pages`; its sealed pages,
`ledger.sealed_read`) talks to the database driver's own cursor and asks SQLAlchemy's
connection for three things only: the dialect's name, the driver connection under it, and
a statement run as the driver takes it. `ReadConnection` names those three, so the same
code reads through a SQLAlchemy connection or through `SQLiteSnapshot`, a plain `sqlite3`
connection in a read transaction.

Why: importing SQLAlchemy costs a process about 0.2 s of CPU (its modules, and the
PostgreSQL dialect the tables' indexes name), about a seventh of reconciling a month of
80 GPUs. `gpuledger reconcile` on a SQLite file reads through `sqlite_reader` and never
imports it; every other command, and a store this module does not recognise, opens
`ledger.Store` as before.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

#: How long a SQLite reader or writer waits for another's lock before giving up.
SQLITE_BUSY_TIMEOUT_S = 120

DEFAULT_URL = "sqlite:///gpuledger.db"


def default_url() -> str:
    """The store a command uses when given no `--db`: $GPULEDGER_DB, else DEFAULT_URL."""
    return os.environ.get("GPULEDGER_DB") or DEFAULT_URL


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _DriverHolder(Protocol):
    @property
    def driver_connection(self) -> Any: ...


class _Scalar(Protocol):
    def scalar(self) -> Any: ...


class ReadConnection(Protocol):
    """What the store's read path asks of a connection (SQLAlchemy's `Connection` has it)."""

    @property
    def dialect(self) -> _Named: ...

    @property
    def connection(self) -> _DriverHolder: ...

    def exec_driver_sql(self, statement: str, parameters: Any = None) -> _Scalar: ...


def head_seq(conn: ReadConnection) -> int:
    """The last seq in `conn`'s snapshot (0 for an empty store)."""
    head = conn.exec_driver_sql("SELECT coalesce(max(seq), 0) FROM entries").scalar()
    return int(head or 0)


@dataclass(frozen=True)
class _Dialect:
    name: str


@dataclass(frozen=True)
class _Holder:
    driver_connection: sqlite3.Connection


@dataclass(frozen=True)
class _Result:
    cursor: sqlite3.Cursor

    def scalar(self) -> Any:
        row = self.cursor.fetchone()
        self.cursor.close()
        return None if row is None else row[0]


class SQLiteSnapshot:
    """A `sqlite3` connection in a read transaction (`BEGIN`, as `Store.reading` begins
    one): one consistent snapshot of the file, no lock held against writers in WAL mode.
    Made by `SQLiteReader.reading`."""

    def __init__(self, driver: sqlite3.Connection) -> None:
        self.dialect = _Dialect("sqlite")
        self.connection = _Holder(driver)

    def exec_driver_sql(self, statement: str, parameters: Any = None) -> _Result:
        return _Result(self.connection.driver_connection.execute(statement, parameters or ()))


@dataclass(frozen=True)
class SQLiteReader:
    """A SQLite file store, opened for reading only through `sqlite3` (`sqlite_reader`)."""

    path: str
    safe_url: str

    @contextmanager
    def reading(self) -> Iterator[SQLiteSnapshot]:
        """A read transaction: one consistent snapshot, as `Store.reading` gives one. The
        connection may be read from another thread (the read-ahead of the entries)."""
        driver = sqlite3.connect(
            self.path,
            timeout=SQLITE_BUSY_TIMEOUT_S,
            isolation_level=None,  # the transaction is begun here, as the store's is
            check_same_thread=False,
        )
        try:
            driver.execute("BEGIN")
            yield SQLiteSnapshot(driver)
        finally:
            driver.close()  # a read transaction: closing ends it, nothing to keep


#: The one form of URL read this way: `sqlite:///PATH`, PATH a file and nothing more (no
#: query, no URI filename, no percent-escapes: SQLAlchemy reads those, and they are left to it).
_PLAIN_PREFIX = "sqlite:///"
_NOT_PLAIN = set("?#%")


def sqlite_reader(url: str) -> SQLiteReader | None:
    """`url`'s store to read without SQLAlchemy, or None: where the URL is not a plain
    `sqlite:///PATH`, the file is missing or in memory, or it does not open as a ledger
    (no `entries` table, not a database, unreadable). The caller then opens `ledger.Store`,
    which says what is wrong in the store's own words."""
    if not url.startswith(_PLAIN_PREFIX):
        return None
    path = url[len(_PLAIN_PREFIX) :]
    if not path or path == ":memory:" or _NOT_PLAIN & set(path) or not os.path.isfile(path):
        return None
    reader = SQLiteReader(path, url)
    try:
        return reader if _holds_ledger(reader) else None
    except sqlite3.Error:
        return None


def _holds_ledger(reader: SQLiteReader) -> bool:
    """Whether `reader`'s file holds the ledger's entries table."""
    with reader.reading() as conn:
        row = conn.connection.driver_connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'entries'"
        ).fetchone()
    return row is not None


class ReadableStore(Protocol):
    """A store to read: `ledger.Store`, or a `SQLiteReader`."""

    @property
    def safe_url(self) -> str: ...

    def reading(self) -> AbstractContextManager[ReadConnection]: ...
