"""A reconciliation written out: a terminal table, JSON, CSV or Parquet."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import IO

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from rich.table import Column, Table

from reconcile.money import places_of
from reconcile.result import InvoiceTotal, Reconciliation

FORMATS = ("table", "json", "csv", "parquet", "html")


#: GPU-µs in a GPU-hour.
HOUR_US = 3_600 * 1_000_000


def number(value: Decimal, places: int) -> str:
    """The one number format of finance's views: thousands separated, `places` decimals,
    rounded half-even (GPU-hours; amounts are already whole minor units)."""
    return format(value.quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN), f",.{places}f")


def exact_number(value: Decimal, minor: int) -> str:
    """An exact amount in the same format: the minor unit's places, more only where it has them."""
    return number(value, max(minor, places_of(format(value, "f"))))


def hours(gpu_us: int) -> str:
    return number(Decimal(gpu_us) / HOUR_US, 2)


def money(cents: int, minor: int) -> str:
    return number(Decimal(cents).scaleb(-minor), minor)


def tables(result: Reconciliation) -> list[Table]:
    """One table per tenant. Each invoice (per currency) leads with its total exactly as
    billed beside what was classified (rounded to the minor unit: an invoice shared by
    tenants is rounded whole, so a tenant's part may differ from its exact total by a
    cent), then the bearers' totals, then the categories."""
    invoices = result.invoices()
    out = []
    for tenant, tally in result.tenants().items():
        table = Table("invoice", "currency", "", "bearer", Column("GPU-hours", justify="right"),
                      Column("amount", justify="right"), title=f"tenant {tenant}",
                      caption=f"billed {hours(tally.billed_us)} GPU-h · unbilled (held, billed by no line) "
                              f"{hours(result.unbilled_us.get(tenant, 0))} GPU-h · "
                              "`gpuledger explain CATEGORY` says what each category and bearer means")
        for invoice in (i for i in invoices if i.tenant == tenant):
            _invoice_rows(table, invoice)
        out.append(table)
    return out


def _invoice_rows(table: Table, invoice: InvoiceTotal) -> None:
    name, currency, minor = invoice.invoice_id, invoice.currency or "", invoice.minor
    billed_us = invoice.tally.billed_us
    table.add_row(name, currency, "total billed", "", hours(billed_us), exact_number(invoice.billed_exact, minor), style="bold")
    table.add_row(name, currency, "classified", "", hours(billed_us), money(invoice.tally.total_cents, minor))
    for bearer, (us, cents) in invoice.bearer_totals().items():
        table.add_row(name, currency, "bearer total", bearer, hours(us), money(cents, minor), style=STYLE.get(bearer, ""))
    for category, bearer, us, cents in invoice.category_totals():
        table.add_row(name, currency, f"  {category}", bearer, hours(us), money(cents, minor), style=STYLE.get(bearer, ""))
    table.add_section()


STYLE = {"provider": "red", "disputed": "yellow"}


def write(result: Reconciliation, fmt: str, out: IO[str] | Path, db: str | None = None) -> None:
    """JSON or HTML (finance's page; `db` goes into its commands) to a stream or file; CSV
    and Parquet (one row per line and category) to a file or (CSV) a stream."""
    if fmt in ("json", "html"):
        text = json.dumps(result.as_json(), indent=2) + "\n" if fmt == "json" else _page(result, db)
        if isinstance(out, Path):
            out.write_text(text)
        else:
            out.write(text)
    elif fmt == "csv":
        frame = result.frame()
        if isinstance(out, Path):
            pacsv.write_csv(frame, out)
        else:
            out.write(frame.to_pandas().to_csv(index=False))
    elif fmt == "parquet":
        if not isinstance(out, Path):
            raise ValueError("--out: Parquet needs an output file")
        pq.write_table(result.frame(), out)
    else:
        raise ValueError(f"--format: unknown format {fmt!r}")


def _page(result: Reconciliation, db: str | None) -> str:
    from reconcile.finance_page import render_page  # it draws on this module's number format

    return render_page(result, db)
