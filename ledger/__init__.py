"""The ledger: an append-only, hash-chained store of canonical events (docs/ledger-format.md).

It imports only `schemas`; ingestors hand it records, the reconciliation reads from it.
The names below are imported when first read (PEP 562): reading the store (`Store`,
`read`) does not build the event models that appending and verifying need.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger import read
    from ledger.append import Appender, AppendReport, BatchResult, append_stream
    from ledger.driver import DEFAULT_URL, default_url
    from ledger.errors import LedgerError, StoreUnavailable, StoreWriteFailed
    from ledger.export import export_entries, quarantined
    from ledger.store import Store
    from ledger.verify import (
        LedgerTampered,
        Problem,
        VerifyResult,
        require_intact,
        verify_ledger,
    )

#: each lazily imported name -> the module that defines it
_HOME = {
    **dict.fromkeys(("Appender", "AppendReport", "BatchResult", "append_stream"), "ledger.append"),
    **dict.fromkeys(("LedgerError", "StoreUnavailable", "StoreWriteFailed"), "ledger.errors"),
    **dict.fromkeys(("export_entries", "quarantined"), "ledger.export"),
    **dict.fromkeys(("DEFAULT_URL", "default_url"), "ledger.driver"),
    "Store": "ledger.store",
    **dict.fromkeys(
        ("LedgerTampered", "Problem", "VerifyResult", "require_intact", "verify_ledger"),
        "ledger.verify",
    ),
}


def __getattr__(name: str) -> Any:
    if name == "read":
        return import_module("ledger.read")
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'ledger' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


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
