"""`Reconciliation.frame()` is computed column-wise, in DuckDB; the per-cell Python it
replaced lives on here only as the reference it must equal exactly: schema, row order and
every string (amounts, exact shares, periods) and gpu_seconds int or float as before."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Store
from reconcile import reconcile_store
from reconcile.engine.money import exact_text, minor_unit
from reconcile.engine.result import CELL_COLUMNS, Reconciliation, _iso
from reconcile.engine.rules import INF, LABEL_BY_CODE, SECOND, code
from schemas.money import Money
from tests.reconcile_helpers import ingest
from tests.test_reconcile_properties import Fleet, fleets

MONEY_ONLY = code("money_only")
HOUR = 3600 * SECOND


def reference_frame(result: Reconciliation) -> pa.Table:
    """The frame as it was built before: one dict per cell, from `cells` and `exact_amounts`."""
    rows = [
        {
            "invoice_id": c.invoice_id,
            "line_id": c.line_id,
            "tenant": c.tenant,
            "allocation_id": c.allocation_id,
            "period_start": _iso(c.ps),
            "period_end": _iso(c.pe),
            "description": c.description,
            "billed_amount": c.billed_amount,
            "category": c.category,
            "bearer": c.bearer,
            "acceptance": c.acceptance,
            "gpu_seconds": c.gpu_us / SECOND if c.gpu_us % SECOND else c.gpu_us // SECOND,
            "amount": str(Money.of(c.cents, c.minor)),
            "amount_exact": exact_text(exact, c.exact_places),
            "currency": c.currency,
        }
        for c, exact in zip(result.cells, result.exact_amounts)
    ]
    schema = pa.schema(
        [
            ("invoice_id", pa.string()),
            ("line_id", pa.string()),
            ("tenant", pa.string()),
            ("allocation_id", pa.string()),
            ("period_start", pa.string()),
            ("period_end", pa.string()),
            ("description", pa.string()),
            ("billed_amount", pa.string()),
            ("category", pa.string()),
            ("bearer", pa.string()),
            ("acceptance", pa.string()),
            (
                "gpu_seconds",
                pa.float64() if any(c.gpu_us % SECOND for c in result.cells) else pa.int64(),
            ),
            ("amount", pa.string()),
            ("amount_exact", pa.string()),
            ("currency", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def csv_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def assert_same_frame(result: Reconciliation) -> None:
    new, old = result.frame(), reference_frame(result)
    assert new.schema == old.schema
    assert new.to_pylist() == old.to_pylist()
    assert new.equals(old)
    assert csv_bytes(new) == csv_bytes(old)


def reconciliation(
    lines: list[tuple[str, str | None, list[tuple[int, int, int]]]], **fields: Any
) -> Reconciliation:
    """Cells of lines given as (billed amount, currency, [(label, gpu_us, cents), ...])."""
    rows = []
    for n, (billed, currency, cells) in enumerate(lines):
        for label, gpu_us, cents in cells:
            rows.append(
                {
                    "invoice_id": "INV-1",
                    "line_id": f"L{n}",
                    "tenant": "acme",
                    "allocation_id": "A1",
                    "currency": currency,
                    "minor": minor_unit(currency),
                    "label": label,
                    "gpu_us": gpu_us,
                    "cents": cents,
                    "billed_amount": billed,
                    "ps": 1_767_607_200 * SECOND,
                    "pe": 1_767_607_200 * SECOND + HOUR,
                    "description": "H100 hour",
                    **fields,
                }
            )
    return Reconciliation(pa.Table.from_pylist(rows, schema=CELL_SCHEMA), {})


CELL_SCHEMA = pa.schema(
    [
        ("invoice_id", pa.string()),
        ("line_id", pa.string()),
        ("tenant", pa.string()),
        ("allocation_id", pa.string()),
        ("currency", pa.string()),
        ("minor", pa.int32()),
        ("label", pa.int32()),
        ("gpu_us", pa.int64()),
        ("cents", pa.int64()),
        ("billed_amount", pa.string()),
        ("ps", pa.int64()),
        ("pe", pa.int64()),
        ("description", pa.string()),
    ]
)
assert tuple(CELL_SCHEMA.names) == CELL_COLUMNS


def test_thirds_of_ten_dollars_floor_at_18_places_and_the_leftover_goes_to_the_first() -> None:
    result = reconciliation([("10.00", "USD", [(3, HOUR, 334), (8, HOUR, 333), (12, HOUR, 333)])])
    frame = result.frame()
    # 10 / 3 = 3.333...: floors of 3.333333333333333333 leave 1e-18, the first label (3) takes it
    assert frame.column("amount_exact").to_pylist() == [
        "3.333333333333333334",
        "3.333333333333333333",
        "3.333333333333333333",
    ]
    assert frame.column("amount").to_pylist() == ["3.34", "3.33", "3.33"]
    assert frame.column("category").to_pylist() == ["checkpoint", "productive", "startup"]
    assert frame.column("acceptance").to_pylist() == [None, "accepted", None]
    assert frame.column("gpu_seconds").to_pylist() == [3600, 3600, 3600]
    assert frame.column("period_start").to_pylist() == ["2026-01-05T10:00:00Z"] * 3
    assert_same_frame(result)


def test_yen_and_dinar_halves_and_eighths_show_the_places_they_need() -> None:
    result = reconciliation(
        [
            (
                "1001",
                "JPY",
                [(8, HOUR, 501), (12, HOUR, 500)],
            ),  # 500.5 each: one place beyond the yen's none
            ("1.000", "KWD", [(8, 7 * HOUR, 875), (12, HOUR, 125)]),  # 0.875 and 0.125 dinar
            ("0.01", "KWD", [(8, HOUR, 3), (9, 7 * HOUR, 7)]),  # 0.00125 and 0.00875
        ]
    )
    frame = result.frame()
    assert frame.column("amount_exact").to_pylist() == [
        "500.5",
        "500.5",
        "0.875",
        "0.125",
        "0.00125",
        "0.00875",
    ]
    assert frame.column("amount").to_pylist() == ["501", "500", "0.875", "0.125", "0.003", "0.007"]
    assert_same_frame(result)


def test_money_only_lines_negative_amounts_and_fractional_seconds() -> None:
    result = reconciliation(
        [
            (
                "-12.5",
                "USD",
                [(MONEY_ONLY, 0, -1250)],
            ),  # a credit: all of it, at the currency's two places
            ("-0.00", None, [(MONEY_ONLY, 0, 0)]),
            ("7.1234", "EUR", [(8, 1_500_000, 427), (13, 1_000_001, 286)]),
            ("-1.00", "USD", [(8, HOUR, -34), (12, 2 * HOUR, -66)]),
        ]
    )
    frame = result.frame()
    assert frame.schema.field("gpu_seconds").type == pa.float64()
    assert frame.column("gpu_seconds").to_pylist()[2:] == [1.5, 1.000001, 3600.0, 7200.0]
    assert frame.column("amount_exact").to_pylist()[:2] == ["-12.50", "-0.00"]
    assert frame.column("amount_exact").to_pylist()[4:] == [
        "-0.333333333333333333",
        "-0.666666666666666667",
    ]
    assert_same_frame(result)


def test_open_and_missing_periods_stay_empty_and_microseconds_show() -> None:
    result = reconciliation(
        [("5", "USD", [(8, HOUR, 500)])], ps=1_767_607_200 * SECOND + 7, pe=INF
    )
    frame = result.frame()
    assert frame.column("period_start").to_pylist() == ["2026-01-05T10:00:00.000007Z"]
    assert frame.column("period_end").to_pylist() == [None]
    assert_same_frame(
        reconciliation(
            [("5", "USD", [(8, HOUR, 500)])],
            ps=None,
            pe=None,
            allocation_id=None,
            description=None,
        )
    )


def test_no_cells_is_an_empty_frame_of_the_same_schema() -> None:
    assert_same_frame(reconciliation([]))


# --- random cell tables: every shape of amount, currency, weight and order -----------------------

amounts = st.builds(
    lambda units, places, sign: (
        ("-" if sign else "")
        + (f"{units // 10**places}.{units % 10**places:0{places}d}" if places else str(units))
    ),
    st.integers(0, 10**14),
    st.integers(0, 8),
    st.booleans(),
)
weights = st.one_of(
    st.integers(0, 10), st.integers(0, 10**13), st.sampled_from([HOUR, 2 * HOUR, 7 * HOUR])
)


@st.composite
def cell_tables(draw: st.DrawFn) -> Reconciliation:
    rows = []
    for n in range(draw(st.integers(0, 6))):
        currency = draw(st.sampled_from(["USD", "JPY", "KWD", "CLF", None]))
        billed, tenant = draw(amounts), draw(st.sampled_from(["acme", "beta"]))
        if draw(st.booleans()):
            labels = [(MONEY_ONLY, 0)]
        else:
            codes = draw(
                st.lists(
                    st.sampled_from(sorted(set(LABEL_BY_CODE) - {MONEY_ONLY})),
                    min_size=1,
                    max_size=5,
                    unique=True,
                )
            )
            labels = [(label, draw(weights)) for label in codes]
        ps = draw(st.none() | st.integers(0, 2**50))
        for label, gpu_us in labels:
            rows.append(
                {
                    "invoice_id": f"I{n % 2}",
                    "line_id": f"L{n // 2}",
                    "tenant": tenant,
                    "allocation_id": draw(st.none() | st.just("A1")),
                    "currency": currency,
                    "minor": minor_unit(currency),
                    "label": label,
                    "gpu_us": gpu_us,
                    "cents": draw(st.integers(-(10**12), 10**12)),
                    "billed_amount": billed,
                    "ps": ps,
                    "pe": None if ps is None else ps + draw(st.sampled_from([HOUR, INF - ps])),
                    "description": draw(st.none() | st.text(max_size=5)),
                }
            )
    rows = draw(st.permutations(rows))
    return Reconciliation(pa.Table.from_pylist(rows, schema=CELL_SCHEMA), {})


@settings(max_examples=300, derandomize=True, deadline=None)
@given(cell_tables())
def test_random_cells_give_the_reference_frame(result: Reconciliation) -> None:
    assert_same_frame(result)


@settings(
    max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(fleets())
def test_random_fleets_give_the_reference_frame(f: Fleet) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'ledger.db'}")
        store.init()
        try:
            ingest(store, f.scenario.events)
            assert_same_frame(reconcile_store(store))
        finally:
            store.close()


@settings(max_examples=200, derandomize=True, deadline=None)
@given(cell_tables(), st.integers(1, 7))
def test_the_frame_a_part_at_a_time_is_the_frame(result: Reconciliation, rows: int) -> None:
    """Written a part at a time (reconcile's CSV and Parquet outputs), the frame is the same;
    the engine gives each line's cells together, so sorting the drawn cells by line makes
    them as the engine would; unsorted, they come as one part."""
    grouped = Reconciliation(
        result.table.sort_by(
            [("tenant", "ascending"), ("invoice_id", "ascending"), ("line_id", "ascending")]
        ),
        {},
    )
    for table in (grouped, result):
        parts = list(table.frame_batches(rows))
        whole = table.frame()
        assert pa.concat_tables(parts).equals(whole) if parts else whole.num_rows == 0
        keys = [
            tuple(r[k] for k in ("tenant", "invoice_id", "line_id")) for r in whole.to_pylist()
        ]
        if table is grouped and parts:  # no line is cut in two
            ends = list(itertools.accumulate(p.num_rows for p in parts))[:-1]
            assert all(keys[end] != keys[end - 1] for end in ends)
    assert_same_frame(grouped)
