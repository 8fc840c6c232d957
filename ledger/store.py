"""The store: one SQLAlchemy engine on SQLite (the default) or PostgreSQL.

Writing rule: every write happens inside `Store.writing()`, the one transaction helper.
Its outermost level takes the append lock (SQLite `BEGIN IMMEDIATE`, PostgreSQL a
transaction-level advisory lock), so concurrent ingest processes serialise on the chain
head and the result is one linear chain; inner levels are savepoints.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, InternalError, OperationalError

from ledger.driver import DEFAULT_URL as DEFAULT_URL
from ledger.driver import SQLITE_BUSY_TIMEOUT_S, default_url
from ledger.driver import head_seq as head_seq  # where the store's callers have found it
from ledger.errors import StoreUnavailable, StoreWriteFailed
from ledger.migrations import upgrade_event_key
from ledger.tables import APPEND_ONLY, metadata

_APPEND_LOCK_KEY = 0x6770_756C_6564  # "gpuled": one advisory lock for the whole ledger


#: Entries a sealed page holds by default (ledger/sealed.py): 2^16, a few MB of Parquet.
SEALED_ENTRIES = 65_536


class Store:
    """A ledger database. Cheap to open; `init()` creates the schema (safe to repeat)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        try:
            parsed = make_url(self.url)
        except ArgumentError as exc:
            raise StoreUnavailable(f"not a database URL: {self.url!r}", option="db") from exc
        self.dialect = parsed.get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise StoreUnavailable(
                f"unsupported database {self.dialect!r} (sqlite or postgresql)", option="db"
            )
        self.engine = self._make_engine()
        self._local = threading.local()
        #: Entries a sealed page holds (ledger/sealed.py); tests make it small.
        self.sealed_entries = SEALED_ENTRIES

    def _make_engine(self) -> Engine:
        if self.dialect == "sqlite":
            engine = create_engine(self.url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
            event.listen(engine, "connect", _sqlite_on_connect)
            event.listen(engine, "begin", _sqlite_on_begin)
            return engine
        return create_engine(self.url, pool_pre_ping=True)

    def close(self) -> None:
        self.engine.dispose()

    # -- transactions -------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        """A write transaction holding the append lock; nested calls become savepoints."""
        active: Connection | None = getattr(self._local, "conn", None)
        if active is not None:
            with active.begin_nested():
                yield active
            return
        try:
            with self._connect() as conn:
                conn = conn.execution_options(gpuledger_write=True)
                with conn.begin():
                    if self.dialect == "postgresql":
                        conn.execute(
                            text("SELECT pg_advisory_xact_lock(:k)"), {"k": _APPEND_LOCK_KEY}
                        )
                    self._local.conn = conn
                    try:
                        yield conn
                    finally:
                        self._local.conn = None
        except Exception as exc:
            if not self._is_write_failure(exc):
                raise
            raise StoreWriteFailed(self.safe_url, _write_reason(exc)) from exc

    def _is_write_failure(self, exc: Exception) -> bool:
        """The store refused or failed a write (disk full, read-only, I/O error, lost
        server), as SQLAlchemy reports it or as the driver raises it to the bulk path."""
        dbapi = self.engine.dialect.loaded_dbapi
        return isinstance(
            exc, (OperationalError, InternalError, dbapi.OperationalError, dbapi.InternalError)
        )

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read transaction: one consistent snapshot, no lock held against writers."""
        with self._connect() as conn:
            with conn.begin():
                if self.dialect == "postgresql":
                    conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"))
                yield conn

    @contextmanager
    def _connect(self) -> Iterator[Connection]:
        try:
            conn = self.engine.connect()
        except (
            DatabaseError
        ) as exc:  # OperationalError among them; also SQLite's "file is not a database"
            raise StoreUnavailable(
                f"cannot open {self.safe_url}: {first_line(exc)}", option="db"
            ) from exc
        with conn:
            yield conn

    @property
    def safe_url(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)

    # -- schema ---------------------------------------------------------------------

    def init(self) -> None:
        """Create the tables and the append-only triggers; safe to repeat, and to race."""
        # imported here: the quarantine's module reads the event models (pydantic), which a
        # command that only reads the store does not need
        from ledger.quarantine import add_chain_column

        with self.writing() as conn:
            metadata.create_all(conn)
            add_chain_column(conn)  # stores made before the quarantine was chained
            upgrade_event_key(conn)  # stores made before the key named the tenant
            for statement in _trigger_ddl(self.dialect):
                conn.exec_driver_sql(statement)

    @property
    def in_memory(self) -> bool:
        """SQLite in memory (`sqlite://`): it lasts as long as the process, so what is
        written to it is lost and a reader finds nothing."""
        database = make_url(self.url).database or ""
        return self.dialect == "sqlite" and (
            database in ("", ":memory:") or "mode=memory" in self.url
        )

    def file_missing(self) -> bool:
        """A SQLite file store whose file does not exist: connecting would create it, empty."""
        database = make_url(self.url).database or ""
        return self.dialect == "sqlite" and not self.in_memory and not os.path.exists(database)

    def is_initialised(self) -> bool:
        with self.reading() as conn:
            return conn.dialect.has_table(conn, "entries")


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # transactions are begun by _sqlite_on_begin
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")  # durable: an fsync per commit
    cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    write = conn.get_execution_options().get("gpuledger_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _trigger_ddl(dialect: str) -> list[str]:
    if dialect == "sqlite":
        return [
            f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table} "
            f"BEGIN SELECT RAISE(ABORT, 'gpuledger: {table} is append-only ({op} refused)'); END"
            for table in APPEND_ONLY
            for op in ("UPDATE", "DELETE")
        ]
    function = (
        "CREATE OR REPLACE FUNCTION gpuledger_append_only() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        "RAISE EXCEPTION 'gpuledger: %% is append-only (%% refused)', TG_TABLE_NAME, TG_OP; "
        "END $$"
    )
    rows = [
        f"CREATE OR REPLACE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION gpuledger_append_only()"
        for table in APPEND_ONLY
    ]
    truncate = [
        f"CREATE OR REPLACE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION gpuledger_append_only()"
        for table in APPEND_ONLY
    ]
    return [function, *rows, *truncate]


def _write_reason(exc: BaseException) -> str:
    """The driver's one-line reason, with SQLite's extended code where its text is vague
    ("disk I/O error" is a full disk under a file-size limit, or a failing device)."""
    orig = getattr(exc, "orig", None) or exc
    name = getattr(orig, "sqlite_errorname", None)
    reason = first_line(exc)
    return (
        f"{reason} ({name})"
        if name and name not in ("SQLITE_ERROR", "SQLITE_FULL", "SQLITE_READONLY")
        else reason
    )


def first_line(exc: BaseException) -> str:
    """An error as one line: the first of its message (a database error's own, without
    the SQL and links SQLAlchemy adds), else its type's name."""
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
