"""A reconciliation written out: a terminal table, JSON, CSV or Parquet."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import IO

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from rich.table import Table

from reconcile.intervals import CATEGORY_ORDER
from reconcile.result import Reconciliation

FORMATS = ("table", "json", "csv", "parquet")


def tables(result: Reconciliation) -> list[Table]:
    """One table per tenant: its invoices' billed GPU-hours and money by category."""
    out = []
    invoices: dict[str, dict[str, dict[str, list[Decimal]]]] = {}
    for cell in result.cells:
        per_category = invoices.setdefault(cell.tenant, {}).setdefault(cell.invoice_id, {})
        totals = per_category.setdefault(f"{cell.category}|{cell.bearer}", [Decimal(0), Decimal(0)])
        totals[0] += Decimal(cell.gpu_us) / 3_600_000_000
        totals[1] += Decimal(cell.cents).scaleb(-cell.minor)
    for tenant, tally in result.tenants().items():
        table = Table("invoice", "category", "bearer", "GPU-hours", "amount", title=f"tenant {tenant}",
                      caption=f"billed {tally.billed_us / 3.6e9:,.2f} GPU-h · unbilled "
                              f"{result.unbilled_us.get(tenant, 0) / 3.6e9:,.2f} GPU-h · "
                              + " · ".join(f"{b} {a}" for b, a in tally.by_bearer().items()))
        for invoice, per_category in sorted(invoices.get(tenant, {}).items()):
            for key in sorted(per_category, key=lambda k: (CATEGORY_ORDER.index(k.split("|")[0]), k)):
                category, bearer = key.split("|")
                hours, amount = per_category[key]
                style = {"provider": "red", "disputed": "yellow"}.get(bearer, "")
                table.add_row(invoice, category, bearer, f"{hours:,.2f}", f"{amount:,}", style=style)
        out.append(table)
    return out


def write(result: Reconciliation, fmt: str, out: IO[str] | Path) -> None:
    """JSON to a stream or file; CSV and Parquet (one row per line and category) to a file
    or (CSV) a stream."""
    if fmt == "json":
        text = json.dumps(result.as_json(), indent=2) + "\n"
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
