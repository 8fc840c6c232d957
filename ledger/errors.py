"""Errors the ledger raises for a user to read; the CLI prints them in one line."""

from schemas.errors import BadInput


class LedgerError(BadInput):
    """Something a user can act on: a bad URL, a missing store, a bad key file."""


class StoreUnavailable(LedgerError):
    """The database cannot be opened or reached."""


class StoreWriteFailed(LedgerError):
    """The store refused or failed a write (disk full, read-only, I/O error); the
    transaction was rolled back, so the ledger is as it was before it."""

    def __init__(
        self,
        url: str,
        reason: str,
        where: str = "",
        outcome: str = "the transaction was rolled back",
    ) -> None:
        super().__init__(f"{where}cannot write to {url}: {reason}; {outcome}", option="db")
        self.url, self.reason = url, reason
