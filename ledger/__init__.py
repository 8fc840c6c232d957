"""The ledger: an append-only, hash-chained store of canonical events (docs/ledger-format.md).

It imports only `schemas`; ingestors hand it records, the reconciliation reads from it.
"""

from ledger import read
from ledger.append import Appender, AppendReport, BatchResult, append_stream
from ledger.errors import LedgerError, StoreUnavailable, StoreWriteFailed
from ledger.export import export_entries, quarantined
from ledger.store import DEFAULT_URL, Store, default_url
from ledger.verify import LedgerTampered, Problem, VerifyResult, require_intact, verify_ledger

__all__ = [
    "DEFAULT_URL",
    "AppendReport",
    "Appender",
    "BatchResult",
    "LedgerError",
    "LedgerTampered",
    "Problem",
    "Store",
    "StoreUnavailable",
    "StoreWriteFailed",
    "VerifyResult",
    "append_stream",
    "default_url",
    "export_entries",
    "quarantined",
    "read",
    "require_intact",
    "verify_ledger",
]
