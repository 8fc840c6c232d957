"""A reconciliation written out: a terminal table, JSON, CSV or Parquet. (Not named
`render`: that is the reports' own renderer, `reconcile.reports.render`.)"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from rich.table import Column, Table

from reconcile.engine.result import InvoiceTotal, Reconciliation
from reconcile.engine.totals import invoice_totals
from reconcile.reports.numbers import hours
from reconcile.reports.numbers import number as grouped
from schemas.display import FIGURE_RE2, FORMULA_STARTS, DataTable
from schemas.errors import BadInput
from schemas.money import Money

FORMATS = ("table", "json", "csv", "parquet", "html")

if TYPE_CHECKING:  # the page's module is imported when a page is asked for
    from reconcile.reports.finance_page import Answers


def tables(result: Reconciliation) -> list[Table]:
    """One table per tenant. Each invoice (per currency) leads with its total exactly as
    billed beside what was classified (its exact total rounded to the minor unit; an
    invoice is one tenant's, so that holds for an InvoiceId that several tenants share),
    then the bearers' totals, then the categories."""
    invoices = invoice_totals(result)  # from groups of cells (`result.invoices()`'s figures)
    billed: dict[str, int] = defaultdict(int)
    for invoice in invoices:
        billed[invoice.tenant] += invoice.tally.billed_us
    out: list[Table] = []
    for tenant in sorted(set(billed) | set(result.unbilled_us)):  # `result.tenants()`
        rows = [
            row
            for invoice in invoices
            if invoice.tenant == tenant
            for row in _invoice_rows(invoice)
        ]
        # figures are never cut short: the number columns are as wide as their widest figure
        # (a narrow terminal folds the names instead)
        widths = [
            max([len(r[0][k]) for r in rows if r[0]] + [len(h)])
            for k, h in ((4, "GPU-hours"), (5, "amount"))
        ]
        table = DataTable(
            Column("invoice", overflow="fold"),
            "currency",
            "",
            "bearer",
            Column("GPU-hours", justify="right", no_wrap=True, min_width=widths[0]),
            Column("amount", justify="right", no_wrap=True, min_width=widths[1]),
            title=f"tenant {tenant}",
            caption=f"billed {hours(billed[tenant])} GPU-h · unbilled (held, billed by no line) "
            f"{hours(result.unbilled_us.get(tenant, 0))} GPU-h · "
            "`gpuledger explain CATEGORY` says what each category and bearer means",
        )
        for cells, style in rows:
            if cells:
                table.add_row(*cells, style=style)
            else:
                table.add_section()
        out.append(table)
    return out


Row = tuple[tuple[str, ...], str]  # the cells and their style; no cells: a section break


def _invoice_rows(invoice: InvoiceTotal) -> list[Row]:
    name, currency, minor = invoice.invoice_id, invoice.currency or "", invoice.minor
    billed_us = invoice.tally.billed_us
    rows: list[Row] = [
        (
            (
                name,
                currency,
                "total billed",
                "",
                hours(billed_us),
                grouped(invoice.billed_exact, minor),
            ),
            "bold",
        ),
        (
            (
                name,
                currency,
                "classified",
                "",
                hours(billed_us),
                Money.of(invoice.tally.total_cents, minor).grouped(),
            ),
            "",
        ),
    ]
    for bearer, (us, cents) in invoice.bearer_totals().items():
        shown = Money.of(cents, minor).grouped()
        row = (name, currency, "bearer total", bearer, hours(us), shown)
        rows.append((row, STYLE.get(bearer, "")))
    for category, bearer, us, cents in invoice.category_totals():
        shown = Money.of(cents, minor).grouped()
        row = (name, currency, f"  {category}", bearer, hours(us), shown)
        rows.append((row, STYLE.get(bearer, "")))
    return rows + [((), "")]


STYLE = {"provider": "red", "disputed": "yellow"}


def write(
    result: Reconciliation,
    fmt: str,
    out: IO[str] | Path,
    db: str | None = None,
    period: str | None = None,
    answers: Answers | None = None,
) -> None:
    """JSON or HTML (finance's page; `db` goes into its commands, `period` (the period's
    label, when one was asked for) into its heading, `answers` (the provider's answers to
    the findings, answers.cell_answers) beside them) to a stream or file; CSV
    and Parquet (one row per line and category) to a file or (CSV) a stream. CSV and
    Parquet are for spreadsheets: a text cell that starts like a formula is prefixed `'`
    (`for_spreadsheets`); JSON is exact."""
    if fmt == "json" and isinstance(out, Path):
        # hundreds of MB at field scale: never decoded to be encoded again, nor joined
        _write_whole(out, result.json_parts())
    elif fmt in ("json", "html"):
        text = result.json_text() if fmt == "json" else _page(result, db, period, answers)
        if isinstance(out, Path):
            out.write_text(text)
        else:
            out.write(text)
    elif fmt == "csv":
        _write_csv(result, out)
    elif fmt == "parquet":
        if not isinstance(out, Path):
            raise BadInput("Parquet needs an output file", option="out")
        _write_parquet(result, out)
    else:
        raise BadInput(f"unknown format {fmt!r}", option="format")


def _write_whole(out: Path, parts: Iterable[bytes | memoryview]) -> None:
    """`parts` to `out`, through a file beside it that takes its name once whole: a
    failure half-way (a full disk) leaves `out` as it was, never a document cut short."""
    if out.exists() and not out.is_file():  # a device or a pipe (/dev/stdout): written to
        with out.open("wb") as file:
            file.writelines(parts)
        return
    # a new name of its own (O_EXCL, random), never a path someone could have laid first
    handle, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    partial = Path(name)
    try:
        with os.fdopen(handle, "wb") as file:
            file.writelines(parts)
        partial.chmod(_created_mode())  # mkstemp's is 0600; a report is made as any file
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)


def _created_mode() -> int:
    """The mode `open` gives a new file: 0666 less the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def for_spreadsheets(part: pa.Table) -> pa.Table:
    """`part` with each text cell that a spreadsheet would run as a formula prefixed `'`
    (OWASP's rule, schemas.display.spreadsheet_safe); figures and number columns as they
    are. Column-wise in Arrow: a scan of each text column's first characters, and the
    figure test only in a column where some cell starts like a formula."""
    for number, column_field in enumerate(part.schema):
        if not (
            pa.types.is_string(column_field.type) or pa.types.is_large_string(column_field.type)
        ):
            continue
        column = part.column(number)
        starts = pc.is_in(
            pc.utf8_slice_codeunits(column, 0, 1), value_set=pa.array(FORMULA_STARTS)
        )
        if not pc.any(starts).as_py():  # the common case: one pass over first characters
            continue
        risky = pc.and_kleene(starts, pc.invert(pc.match_substring_regex(column, FIGURE_RE2)))
        if pc.any(risky).as_py():
            prefixed = pc.utf8_replace_slice(column, start=0, stop=0, replacement="'")
            quoted = pc.if_else(risky, prefixed, column)
            part = part.set_column(number, column_field, quoted)
    return part


def _write_parquet(result: Reconciliation, out: Path) -> None:
    if not result.cell_count:
        pq.write_table(result.frame(), out)  # no cells: the empty frame, with its columns
        return
    _write_parts(result, lambda schema: pq.ParquetWriter(out, schema))


def with_period(part: pa.Table, result: Reconciliation) -> pa.Table:
    """`part` with the period the reconciliation covers as its last two columns,
    `period_since` and `period_until` (empty where open): each CSV row says it."""
    period = result.period.as_dict()
    for key in ("since", "until"):
        column = pa.array([period[key]] * part.num_rows, type=pa.string())
        part = part.append_column(f"period_{key}", column)
    return part


def _write_csv(result: Reconciliation, out: IO[str] | Path) -> None:
    if not result.cell_count:
        frame = with_period(result.frame(), result)
        if isinstance(out, Path):
            pacsv.write_csv(frame, out)
        else:
            out.write(frame.to_pandas().to_csv(index=False))
    elif isinstance(out, Path):
        _write_parts(result, lambda schema: pacsv.CSVWriter(out, schema), period=True)
    else:
        for number, part in enumerate(result.frame_batches()):
            shown = for_spreadsheets(with_period(part, result))
            out.write(shown.to_pandas().to_csv(index=False, header=number == 0))


def _write_parts(
    result: Reconciliation, open_writer: Callable[[pa.Schema], Any], period: bool = False
) -> None:
    """The frame a part at a time (`frame_batches`) through the writer `open_writer` makes
    for the first part's schema: memory holds one part, not millions of rows; with
    `period`, each part ends with the period's columns (`with_period`)."""
    writer = None
    try:
        for batch in result.frame_batches():
            part = with_period(batch, result) if period else batch
            writer = writer or open_writer(part.schema)
            writer.write_table(for_spreadsheets(part))
    finally:
        if writer is not None:
            writer.close()


def _page(
    result: Reconciliation,
    db: str | None,
    period: str | None = None,
    answers: Answers | None = None,
) -> str:
    # imported for the page only: its charts and templates are no part of the other formats
    from reconcile.reports.finance_page import render_page

    return render_page(result, db, period, answers)
