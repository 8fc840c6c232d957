"""The finance page's figures from groups of cells (reconcile/reports/finance_figures.py)
equal the page's per-cell definitions (reconcile/reports/finance_page.py and
`Reconciliation.invoices`): invoices, headlines with the provider's answers, the charts'
figures (lines spread over the days they span) and the largest findings, on random fleets
and on the demo's."""

from __future__ import annotations

import dataclasses
import random
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import ledger
from fixtures.sim import SimConfig, simulate
from reconcile import Reconciliation, reconcile_store
from reconcile.engine.result import Cell
from reconcile.engine.totals import invoice_totals
from reconcile.reports import finance_page
from reconcile.reports.finance_figures import page_figures
from reconcile.reports.finance_page import DAY_US, OWED_BY, Answers, Figures, FindingAnswer
from reconcile.reports.numbers import hours
from reconcile.reports.output import tables
from tests.test_reconcile_oracle import ledger_of, random_fleet
from tests.test_reconcile_truth import _ingest_fleet as ingest_fleet

LARGEST = finance_page.LARGEST_FINDINGS
HOUR = 3_600_000_000


def _answers(result: Reconciliation, seed: int) -> Answers:
    """Answers to some of the provider-borne and disputed findings, in every state, with
    accepted amounts of more places than the minor unit (the page truncates them a cell)."""
    chooser = random.Random(seed)
    states = [
        FindingAnswer("accepted", "accepted", Decimal("12.345")),
        FindingAnswer("partly", "partly: 1.20 accepted", Decimal("1.2")),
        FindingAnswer("rejected", "rejected", Decimal(0)),
        FindingAnswer("open", "open (stale)", Decimal(0)),
    ]
    owed = [c for c in result.cells if c.bearer in OWED_BY]
    return {
        (c.tenant, c.invoice_id, c.line_id, c.category): chooser.choice(states)
        for c in chooser.sample(owed, len(owed) // 2)
    }


def _per_cell_figures(result: Reconciliation) -> Figures:
    figures = Figures()
    for cell in result.cells:
        figures.add(cell)
    return figures


def _largest(result: Reconciliation) -> list[Cell]:
    return sorted(
        (c for c in result.cells if c.bearer in OWED_BY and c.cents > 0),
        key=lambda c: (-c.cents, c.tenant, c.invoice_id, c.line_id, c.label),
    )[:LARGEST]


def _check(result: Reconciliation, answers: Answers | None) -> None:
    got = page_figures(result, answers)
    assert got.invoices == result.invoices() == invoice_totals(result)
    assert got.headlines == finance_page.headlines(result, answers)
    assert got.figures == _per_cell_figures(result)
    assert got.largest == _largest(result)


def test_random_fleets_with_and_without_answers() -> None:
    answered = 0
    for seed in range(12):
        with ledger_of(random_fleet(random.Random(seed))) as store:
            result = reconcile_store(store)
        answers = _answers(result, seed)
        answered += len(answers)
        for given in (None, {}, answers):
            _check(result, given)
    assert answered > 0  # answers were there to compare


def _moved(result: Reconciliation, seed: int) -> Reconciliation:
    """The cells' line periods moved: some spanning days (from before 1970 too), some
    empty or reversed, some with no start."""
    chooser = random.Random(seed)
    starts, ends = [], []
    for ps, pe in zip(
        result.table.column("ps").to_pylist(), result.table.column("pe").to_pylist()
    ):
        kind = chooser.randrange(6)
        if kind == 0:  # across two or three days
            pe = ps + chooser.choice([2, 5, 11]) * DAY_US // 4 + 17
        elif kind == 1:  # before 1970, across midnight
            ps = -(3 * DAY_US + 5 * HOUR)
            pe = ps + chooser.choice([1, 30, 80]) * HOUR
        elif kind == 2:  # empty or reversed
            pe = ps - chooser.choice([0, HOUR])
        elif kind == 3:
            ps = None
        starts.append(ps)
        ends.append(pe)
    table = result.table
    table = table.set_column(
        table.schema.get_field_index("ps"), "ps", pa.array(starts, pa.int64())
    )
    table = table.set_column(table.schema.get_field_index("pe"), "pe", pa.array(ends, pa.int64()))
    return dataclasses.replace(result, table=table)


def test_lines_spanning_days_and_no_period() -> None:
    for seed in range(6):
        with ledger_of(random_fleet(random.Random(seed))) as store:
            result = _moved(reconcile_store(store), seed)
        assert any(len(finance_page._days(cell)) > 1 for cell in result.cells)
        _check(result, _answers(result, seed))


def test_the_demo_fleet(tmp_path: Path) -> None:
    simulate(SimConfig(), tmp_path)
    store = ledger.Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    store.init()
    ingest_fleet(tmp_path, store)
    result = reconcile_store(store)
    store.close()
    assert result.cell_count > 1000
    _check(result, _answers(result, 1))
    page = finance_page.render_page(result, "sqlite:///x.db", answers={})
    assert "what to claim" in page


def test_a_reconciliation_of_no_lines() -> None:
    with ledger_of([]) as store:
        result = reconcile_store(store)
    assert result.cell_count == 0
    _check(result, {})


@pytest.mark.parametrize("seed", [3])
def test_the_page_is_the_same_from_either(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole page: rendered from the groups, and from the per-cell figures."""
    with ledger_of(random_fleet(random.Random(seed))) as store:
        result = reconcile_store(store)
    answers = _answers(result, seed)
    grouped = finance_page.render_page(result, "sqlite:///x.db", "2026-11", answers)

    def per_cell(result: Reconciliation, answers: Answers | None = None) -> object:
        from reconcile.reports.finance_figures import PageFigures

        return PageFigures(
            result.invoices(),
            finance_page.headlines(result, answers),
            _per_cell_figures(result),
            _largest(result),
        )

    monkeypatch.setattr("reconcile.reports.finance_figures.page_figures", per_cell)
    assert finance_page.render_page(result, "sqlite:///x.db", "2026-11", answers) == grouped


def test_the_reconciliation_knows_the_event_types_of_its_entries() -> None:
    """`event_types` (what lets the page skip reading answers a ledger does not hold): the
    distinct types of the stored entries, read from the table itself."""
    for seed in (0, 4):
        with ledger_of(random_fleet(random.Random(seed))) as store:
            result = reconcile_store(store)
            with store.reading() as conn:
                stored = {t for (t,) in conn.exec_driver_sql("SELECT DISTINCT type FROM entries")}
        assert result.event_types == frozenset(stored)
        assert "job.progress" in stored and "billing.line" in stored


def test_the_terminal_tables_tenants_and_billed_hours_from_the_invoices() -> None:
    """`reconcile`'s tables list `result.tenants()` (billed or only unbilled), each with its
    billed GPU-hours: the tables take both from the invoices' totals."""
    for seed in range(6):
        with ledger_of(random_fleet(random.Random(seed))) as store:
            result = reconcile_store(store)
        titles = [str(table.title) for table in tables(result)]
        assert titles == [f"tenant {tenant}" for tenant in result.tenants()]
        for table, tally in zip(tables(result), result.tenants().values(), strict=True):
            assert str(table.caption).startswith(f"billed {hours(tally.billed_us)} GPU-h")
