"""The finance page's figures from groups of cells (reconcile/reports/finance_page.py).

The page adds up the same cells many ways: per invoice (`Reconciliation.invoices`), per
currency, invoice and month (`headlines`), per day, tenant and invoice (`charts`), and it
shows the largest findings. Done a cell at a time that is several Python objects and
Fractions a cell: seconds at a month of 80 GPUs, several times the reconciliation. Here a
few queries group the cells in DuckDB (thousands of groups where there are hundreds of
thousands of cells) and the page's own objects (`InvoiceTotal`, `Headline`, `Figures`) are
filled from the groups, with the same integers and Fractions, then shown by the same
code. The per-cell functions stay the definition: `tests/test_finance_figures.py` renders
the page both ways and finds the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import duckdb
import pyarrow as pa

from reconcile.engine.json_text import _labels
from reconcile.engine.result import CELL_COLUMNS, Cell, InvoiceTotal, Reconciliation
from reconcile.engine.scratch import scratch
from reconcile.engine.totals import CELLS as _CELLS
from reconcile.engine.totals import CUR as _CUR
from reconcile.engine.totals import INVOICES, KEYS, invoices_of, numbered
from reconcile.engine.totals import rows as _rows
from reconcile.reports.finance_page import (
    DAY_US,
    LARGEST_FINDINGS,
    OWED_BY,
    UNANSWERED,
    Answers,
    Figures,
    Headline,
    Headlines,
    _day,
    assembled,
    days_of,
)

_OWED = "(" + ", ".join(f"'{bearer}'" for bearer in OWED_BY) + ")"
_DAY = f"(coalesce(c.ps, 0) - ((coalesce(c.ps, 0) % {DAY_US}) + {DAY_US}) % {DAY_US})"
#: A line within one UTC day (or an empty window): on its start's day (`days_of`).
_WITHIN_A_DAY = (
    f"(coalesce(c.pe, 0) <= coalesce(c.ps, 0) OR coalesce(c.pe, 0) <= {_DAY} + {DAY_US})"
)

#: The last cell's minor unit, per currency.
_MINOR = f"SELECT {_CUR}, arg_max(c.minor, c.row_no) FROM cells c GROUP BY ALL"
#: Money per currency and UTC day of the line's start (NULL: no period), by bearer, with
#: the last cell's minor unit and where it is.
_MONTHS = f"""
SELECT {_CUR}, CASE WHEN c.ps IS NULL THEN NULL ELSE {_DAY} END AS day, sum(c.cents),
       sum(CASE WHEN l.bearer = 'provider' THEN c.cents ELSE 0 END),
       sum(CASE WHEN l.bearer = 'disputed' THEN c.cents ELSE 0 END),
       arg_max(c.minor, c.row_no), max(c.row_no)
FROM {_CELLS} GROUP BY ALL
"""
#: GPU-µs and cents per UTC day, currency and category of the lines within a day.
_DAYS = f"""
SELECT {_DAY} AS day, {_CUR}, l.category, sum(c.gpu_us), sum(c.cents)
FROM {_CELLS} WHERE {_WITHIN_A_DAY} GROUP BY ALL
"""
#: The cells of lines spanning days, each spread over its days in Python (`days_of`).
_SPANNING = f"""
SELECT coalesce(c.ps, 0), coalesce(c.pe, 0), {_CUR}, l.category, c.gpu_us, c.cents
FROM {_CELLS} WHERE NOT {_WITHIN_A_DAY}
"""
#: The provider-borne and disputed cells per finding (tenant, invoice, line, category).
_OWED_CELLS = f"""
SELECT {_CUR}, c.tenant, c.invoice_id, c.line_id, l.category, c.minor, count(*)
FROM {_CELLS} WHERE l.bearer IN {_OWED} GROUP BY ALL
"""
_LARGEST = f"""
SELECT c.row_no - 1 FROM {_CELLS} WHERE l.bearer IN {_OWED} AND c.cents > 0
ORDER BY c.cents DESC, c.tenant, c.invoice_id, c.line_id, c.label, c.row_no
LIMIT {LARGEST_FINDINGS}
"""


@dataclass
class PageFigures:
    invoices: list[InvoiceTotal]
    headlines: Headlines
    figures: Figures
    largest: list[Cell]  # the largest findings' cells, in order


def page_figures(result: Reconciliation, answers: Answers | None = None) -> PageFigures:
    """What finance_page's per-cell functions add up, from groups of the cells."""
    table = result.table
    with scratch() as con:
        con.register("cells", numbered(result))
        con.register("labels", _labels())
        keys = _rows(con, KEYS)
        invoices = invoices_of(con, keys)
        headlines = _headlines(con, keys, answers)
        figures = _figures(con, keys)
        largest = [int(row[0]) for row in _rows(con, _LARGEST)]
    picked = table.take(pa.array(largest, pa.int64())).select(list(CELL_COLUMNS))
    columns = [picked.column(name).to_pylist() for name in CELL_COLUMNS]
    return PageFigures(invoices, headlines, figures, [Cell(*row) for row in zip(*columns)])


def _headlines(
    con: duckdb.DuckDBPyConnection, keys: list[tuple[Any, ...]], answers: Answers | None
) -> Headlines:
    """`finance_page.headlines`."""
    per_currency = {
        cur: Headline(cur, cur, int(minor)) for cur, minor in sorted(_rows(con, _MINOR))
    }
    per_invoice: dict[tuple[str, str, str], Headline] = {}
    for tenant, invoice, cur, _, _, last_minor, _ in _rows(con, INVOICES):
        per_invoice[(tenant, invoice, cur)] = Headline(
            invoice, cur, int(last_minor), tenant=tenant, invoice_id=invoice
        )
    for tenant, invoice, cur, _category, bearer, _us, cents, _ in keys:
        for headline in (per_currency[cur], per_invoice[(tenant, invoice, cur)]):
            _count(headline, bearer, int(cents))
    if answers is not None:
        for cur, tenant, invoice, line, category, minor, cells in _rows(con, _OWED_CELLS):
            answer = answers.get((tenant, invoice, line, category), UNANSWERED)
            accepted = int(answer.accepted.scaleb(int(minor))) * int(cells)
            for headline in (per_currency[cur], per_invoice[(tenant, invoice, cur)]):
                headline.answered[answer.state] = headline.answered.get(answer.state, 0) + cells
                headline.accepted += accepted
    return assembled(per_currency, per_invoice, _months(con))


def _count(headline: Headline, bearer: str, cents: int) -> None:
    """`Headline.add`'s money, for cents of one bearer."""
    headline.billed += cents
    if bearer == "provider":
        headline.credit_due += cents
    elif bearer == "disputed":
        headline.in_dispute += cents


def _months(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], Headline]:
    """The month headlines: each day's money added to its month's (a month's minor unit its
    last cell's)."""
    per_month: dict[tuple[str, str], Headline] = {}
    last: dict[tuple[str, str], int] = {}
    for cur, day, billed, credit, dispute, minor, row in _rows(con, _MONTHS):
        month = _day(int(day))[:7] if day is not None else "no period"
        headline = per_month.setdefault((cur, month), Headline(month, cur, int(minor)))
        headline.billed += int(billed)
        headline.credit_due += int(credit)
        headline.in_dispute += int(dispute)
        if int(row) > last.get((cur, month), 0):
            headline.minor, last[(cur, month)] = int(minor), int(row)
    return per_month


def _figures(con: duckdb.DuckDBPyConnection, keys: list[tuple[Any, ...]]) -> Figures:
    """`finance_page.Figures` of every cell."""
    figures = Figures()
    figures.minor.update((cur, int(minor)) for cur, minor in _rows(con, _MINOR))
    for tenant, invoice, cur, category, bearer, us, cents, _ in keys:
        label = f"{tenant} / {invoice}"
        figures.hours_by_tenant[tenant][category] += Fraction(int(us))
        figures.money_by_tenant[(cur, tenant)][category] += Fraction(int(cents))
        figures.money_by_invoice[(cur, label)][category] += Fraction(int(cents))
        if bearer in OWED_BY:
            figures.owed_by_invoice[(cur, label)][category] += Fraction(int(cents))
    spread = [
        (_day(int(day)), cur, category, Fraction(1), int(us), int(cents))
        for day, cur, category, us, cents in _rows(con, _DAYS)
    ]
    for ps, pe, cur, category, us, cents in _rows(con, _SPANNING):
        spread += [
            (day, cur, category, share, int(us), int(cents)) for day, share in days_of(ps, pe)
        ]
    for day, cur, category, share, us, cents in spread:
        figures.hours_by_day[day][category] += share * us
        figures.money_by_day[(cur, day)][category] += share * cents
    return figures
