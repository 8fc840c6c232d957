"""Sealing as entries arrive: after an ingest, the complete runs of entries it finished
are sealed (ledger/sealed.py) in a process of its own, so a reconciliation reads them as
columns with no checkpoint first, and the ingest's memory stays what it was (this module
imports no Arrow: the child does).
"""

from __future__ import annotations

import subprocess
import sys

from sqlalchemy import Connection, func, select

from ledger.errors import StoreWriteFailed
from ledger.store import Store, head_seq
from ledger.tables import sealed_pages


def last_sealed_seq(conn: Connection) -> int:
    """The last seq the sealed pages cover (0 for none)."""
    return int(
        conn.execute(select(func.coalesce(func.max(sealed_pages.c.last_seq), 0))).scalar_one()
    )


def unsealed_run(store: Store) -> bool:
    """Whether a complete run of entries waits to be sealed (two indexed lookups)."""
    with store.reading() as conn:
        return head_seq(conn) - last_sealed_seq(conn) >= store.sealed_entries


def seal_in_child(store: Store) -> int:
    """`seal_store` in a process of its own (`python -m ledger.sealed`), when a complete
    run waits. Returns the pages written; a store that refused a page raises
    StoreWriteFailed with the child's reason. The URL goes over a pipe, never on a
    command line that `ps` shows."""
    if not unsealed_run(store):
        return 0
    done = subprocess.run(
        [sys.executable, "-m", "ledger.sealed", str(store.sealed_entries)],
        input=store.url,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise StoreWriteFailed(store.safe_url, lines[-1] if lines else f"exit {done.returncode}")
    return int(done.stdout.strip() or 0)
