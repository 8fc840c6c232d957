"""Each invoice's totals (`Reconciliation.invoices`) from groups of cells in DuckDB: what
the terminal's tables and the finance page show per invoice, without a Python object a cell
(`Reconciliation.invoices` adds them up a cell at a time, and stays their definition:
tests/test_finance_figures.py compares the two)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa

from reconcile.engine.json_text import _labels
from reconcile.engine.money import _amount_int
from reconcile.engine.result import InvoiceTotal, Reconciliation, _Tally
from reconcile.engine.scratch import scratch

CUR = "coalesce(c.currency, '')"
CELLS = "cells c JOIN labels l ON l.code = c.label"

#: GPU-µs and cents per tenant, invoice, currency, category and bearer, with the first cell.
KEYS = f"""
SELECT c.tenant, c.invoice_id, {CUR} AS cur, l.category, l.bearer, sum(c.gpu_us),
       sum(c.cents), min(c.row_no) AS first
FROM {CELLS} GROUP BY ALL ORDER BY first
"""
#: Each invoice (per currency): its first cell's currency (None or text) and minor unit,
#: its last cell's minor unit, where it first appears.
INVOICES = f"""
SELECT c.tenant, c.invoice_id, {CUR} AS cur, arg_min(c.currency IS NULL, c.row_no),
       arg_min(c.minor, c.row_no), arg_max(c.minor, c.row_no), min(c.row_no) AS first
FROM cells c GROUP BY ALL ORDER BY first
"""
_ACCEPTANCE = f"""
SELECT c.tenant, c.invoice_id, {CUR}, l.acceptance, sum(c.gpu_us)
FROM {CELLS} WHERE l.acceptance IS NOT NULL GROUP BY ALL
"""
#: Each invoice's billed amount: its lines' amounts (each line counted once, in the
#: invoice and currency of its first cell) as one integer at the largest scale among them.
_BILLED = f"""
WITH line AS (
    SELECT tenant, invoice_id, arg_min({CUR}, c.row_no) AS cur,
           arg_min(c.billed_amount, c.row_no) AS billed
    FROM cells c GROUP BY tenant, invoice_id, line_id),
scaled AS (
    SELECT *, max(CAST(length(split_part(billed, '.', 2)) AS INTEGER))
               OVER (PARTITION BY tenant, invoice_id, cur) AS scale
    FROM line)
SELECT tenant, invoice_id, cur, any_value(scale),
       CAST(sum({_amount_int("scale", "billed")}) AS VARCHAR)
FROM scaled GROUP BY ALL
"""
Invoice = tuple[str, str, str]


def invoices_of(con: duckdb.DuckDBPyConnection, keys: list[tuple[Any, ...]]) -> list[InvoiceTotal]:
    """`Reconciliation.invoices()`, from `con`'s `cells` (with their `row_no`) and
    `labels`, and the groups `KEYS` gives."""
    out: dict[Invoice, InvoiceTotal] = {}
    for tenant, invoice, cur, no_currency, first_minor, last_minor, _ in rows(con, INVOICES):
        currency = None if no_currency else cur
        total = InvoiceTotal(tenant, invoice, currency, int(first_minor))
        total.tally = _Tally(minor=int(last_minor))
        out[(tenant, invoice, cur)] = total
    for tenant, invoice, cur, category, bearer, us, cents, _ in keys:
        tally = out[(tenant, invoice, cur)].tally
        tally.gpu_us[(category, bearer)] += int(us)
        tally.cents[(category, bearer)] += int(cents)
    for tenant, invoice, cur, state, us in rows(con, _ACCEPTANCE):
        out[(tenant, invoice, cur)].tally.acceptance[state] += int(us)
    for tenant, invoice, cur, scale, units in rows(con, _BILLED):
        # from text: exact at any length (scaleb would round to the context's 28 digits)
        out[(tenant, invoice, cur)].billed_exact = Decimal(f"{units}E-{int(scale)}")
    return [out[key] for key in sorted(out)]


def numbered(result: Reconciliation) -> pa.Table:
    """The cells with their `row_no`, from 1, in order."""
    table = result.table
    return table.append_column("row_no", pa.array(range(1, table.num_rows + 1), pa.int64()))


def invoice_totals(result: Reconciliation) -> list[InvoiceTotal]:
    """`Reconciliation.invoices()`, from groups of cells."""
    with scratch() as con:
        con.register("cells", numbered(result))
        con.register("labels", _labels())
        return invoices_of(con, rows(con, KEYS))


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    return con.execute(sql).fetchall()
