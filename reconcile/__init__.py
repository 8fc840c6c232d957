"""Reconciliation (DESIGN.md §4): DuckDB over an Arrow snapshot of the ledger's entries.

It reads the ledger and never writes to it. The engine is issue 6's work and is not
here yet; nothing in this package claims to reconcile anything.
"""
