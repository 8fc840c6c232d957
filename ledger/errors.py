"""Errors the ledger raises for a user to read; the CLI prints them in one line."""


class LedgerError(Exception):
    """Something a user can act on: a bad URL, a missing store, a bad key file."""


class StoreUnavailable(LedgerError):
    """The database cannot be opened or reached."""
