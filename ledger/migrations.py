"""Upgrades `gpuledger init` applies to a store made by an older version: each is
idempotent (a store already upgraded is left alone), runs in init's transaction, and
changes no row, so every hash stays as it was.

- The idempotency key. Stores made before tenants were kept apart have a unique
  constraint `entries_event_key` on (source, id): it lets any tenant make another's event
  a duplicate or a conflict by claiming its source and id first. It is replaced by the
  two indexes of ledger/tables.py ((source, id, tenant), and (source, id) where tenant is
  null). PostgreSQL drops the constraint; SQLite cannot drop a table's constraint, so the
  entries table is copied, row for row, into one made without it (its triggers are made
  again by init right after).
"""

from __future__ import annotations

import re

from sqlalchemy import Connection, inspect
from sqlalchemy.schema import CreateTable

from ledger.tables import entries

_OLD_KEY = "entries_event_key"


def has_sealed_extras(conn: Connection) -> bool:
    """Whether the store has the `sealed_extras` table (`gpuledger init` makes it in a
    store made before it)."""
    return bool(inspect(conn).has_table("sealed_extras"))


def upgrade_event_key(conn: Connection) -> None:
    """Replace the (source, id) constraint of an older store by the tenant-aware key."""
    if conn.dialect.name == "postgresql":
        # an index and a constraint share one namespace: the new index takes the name
        # only once the constraint (and the index behind it) is gone
        conn.exec_driver_sql(f"ALTER TABLE entries DROP CONSTRAINT IF EXISTS {_OLD_KEY}")
    elif _sqlite_has_old_key(conn):
        _rebuild_sqlite_entries(conn)
    for index in entries.indexes:
        index.create(conn, checkfirst=True)


def _sqlite_has_old_key(conn: Connection) -> bool:
    sql = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'entries'"
    ).scalar()
    return (
        sql is not None and re.search(rf"CONSTRAINT\s+{_OLD_KEY}\s+UNIQUE", str(sql)) is not None
    )


def _rebuild_sqlite_entries(conn: Connection) -> None:
    """The SQLite way to drop a constraint (sqlite.org/lang_altertable.html, "other
    kinds of table schema changes"): make the new table, copy, drop, rename. Dropping a
    table deletes no row one by one, so the append-only triggers do not fire; they go
    with the table and init makes them again."""
    create = str(CreateTable(entries).compile(dialect=conn.dialect)).strip()
    conn.exec_driver_sql(
        create.replace("CREATE TABLE entries ", "CREATE TABLE entries_rebuilt ", 1)
    )
    columns = ", ".join(c.name for c in entries.columns)
    conn.exec_driver_sql(
        f"INSERT INTO entries_rebuilt ({columns}) SELECT {columns} FROM entries ORDER BY seq"
    )
    conn.exec_driver_sql("DROP TABLE entries")
    conn.exec_driver_sql("ALTER TABLE entries_rebuilt RENAME TO entries")
