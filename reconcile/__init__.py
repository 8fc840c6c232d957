"""Reconciliation: what every billed GPU-second was, and the outputs built on that answer.

The package is laid out as the flow it implements; imports only go down this list:

    reconcile.engine    entries -> ev -> labelled spans -> cells -> money -> Reconciliation,
                        each a stage of one Pipeline (pipeline.py: the one list of every
                        relation the engine, reports and packets read, with its order rules)
                        (snapshot, intervals, classify, money, result; rules holds the label
                        table, the touches rule and fault windows, written once, and rules_text
                        is the one reader of RULES.md; figures and scope are the small
                        vocabulary every output shares). Imports ledger and schemas.
    reconcile.reports   operator and finance views over the engine: promises, capacity,
                        outcomes, the finance page, terminal/CSV/Parquet rendering.
    reconcile.packets   evidence that leaves the provider: the customer's dispute packet and
                        letter (with isolation from other tenants), the operator's diagnostic
                        packet. May use reports (a packet quotes a report's figures).
    reconcile.demo      the one module that uses all three.

`tests/test_layout.py` checks these directions. The engine's public calls are re-exported
here, so `from reconcile import reconcile_store` is the way in for callers.
"""

from reconcile.engine import (
    MoneyOverflow,
    Reconciliation,
    reconcile_entries,
    reconcile_parquet,
    reconcile_store,
    reconcile_tables,
    run,
)

__all__ = [
    "MoneyOverflow",
    "Reconciliation",
    "reconcile_entries",
    "reconcile_parquet",
    "reconcile_store",
    "reconcile_tables",
    "run",
]
