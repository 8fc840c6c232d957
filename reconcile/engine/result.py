"""A finished reconciliation: its cells, and the shapes finance and tools read.

`as_json()` is docs/cli.md's object, exactly; `frame()` is one row per line and
category (CSV, Parquet). Both are built from the same cells, so they always agree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from reconcile.engine.figures import iso
from reconcile.engine.money import (
    EXACT_LINE_US,
    MoneyOverflow,
    decimal_text_sql,
    exact_shares,
    exact_shares_sql,
    exact_sum,
    exact_text,
    longest_line_sql,
    major_units,
    places_of,
)
from reconcile.engine.placement import NOT_AS_SOLD, UNOBSERVED, share_of
from reconcile.engine.placement import PLACEMENT_STATES as STATES
from reconcile.engine.rules import ACCEPTANCE, BEARERS, CATEGORY_ORDER, INF, LABEL_BY_CODE, SECOND
from reconcile.engine.scope import ALL_TIME, Period
from reconcile.engine.scratch import scratch
from schemas.money import Money

if TYPE_CHECKING:  # imported when a document is asked for (the models take time to build)
    from schemas.documents.reconciliation import ReconciliationDocument

__all__ = [
    "ACCEPTANCE",
    "BEARERS",
    "CATEGORY_ORDER",
    "Cell",
    "InvoiceTotal",
    "Reconciliation",
    "gpu_seconds",
    "placement_claim",
]


def placement_claim(share: str | None, borne: Fraction) -> Fraction:
    """RULES.md 13, the one place it is computed: a not_as_sold line's claim is its
    placement_credit_share (`share`, the terms' text; None: the default) x its
    customer-borne amount, exact. The reconciliation, the dispute's placement claims and
    `verify-packet` all take it from here."""
    return share_of(share) * borne


def customer_borne(exact: dict[tuple[str, str], list[Decimal]] | None) -> Fraction:
    """A line's customer-borne amount (its cells whose bearer is `customer`), exact."""
    return sum(
        (
            Fraction(v)
            for (_c, bearer), values in (exact or {}).items()
            if bearer == "customer"
            for v in values
        ),
        Fraction(0),
    )


CELL_COLUMNS = (
    "invoice_id",
    "line_id",
    "tenant",
    "allocation_id",
    "currency",
    "minor",
    "label",
    "gpu_us",
    "cents",
    "billed_amount",
    "ps",
    "pe",
    "description",
)


@dataclass(frozen=True)
class Cell:
    invoice_id: str
    line_id: str
    tenant: str
    allocation_id: str | None
    currency: str | None
    minor: int
    label: int
    gpu_us: int
    cents: int
    billed_amount: str  # the line's amount exactly as billed (decimal text)
    ps: int | None  # the line's period, µs since the epoch
    pe: int | None
    description: str | None  # what the billing source says the line is

    @property
    def line_key(self) -> tuple[str, str, str]:
        return (self.tenant, self.invoice_id, self.line_id)

    @property
    def exact_places(self) -> int:
        """Exact amounts of this line show at least the billed amount's own places."""
        return max(self.minor, places_of(self.billed_amount))

    @property
    def category(self) -> str:
        return LABEL_BY_CODE[self.label].category

    @property
    def bearer(self) -> str:
        return LABEL_BY_CODE[self.label].bearer

    @property
    def acceptance(self) -> str | None:
        return LABEL_BY_CODE[self.label].acceptance


@lru_cache(maxsize=65_536)
def _iso(us: int | None) -> str | None:
    """A line period's bound as text: hourly lines share a few thousand of them."""
    return iso(us)


def gpu_seconds(gpu_us: int) -> int | float:
    """Whole GPU-seconds as an int; a fraction only when the times had one."""
    whole, rest = divmod(gpu_us, SECOND)
    return whole if rest == 0 else gpu_us / SECOND


@dataclass
class _Tally:
    """GPU-µs and cents by category and bearer, for one line or one tenant."""

    minor: int = 2
    gpu_us: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    cents: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    acceptance: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACCEPTANCE, 0))
    exact: dict[tuple[str, str], list[Decimal]] | None = None  # a line's: its cells' exact amounts
    exact_places: int = 2

    def add(self, cell: Cell, exact: Decimal | None = None) -> None:
        key = (cell.category, cell.bearer)
        self.minor = cell.minor
        self.gpu_us[key] += cell.gpu_us
        self.cents[key] += cell.cents
        if exact is not None:
            self.exact = self.exact if self.exact is not None else defaultdict(list)
            self.exact[key].append(exact)
            self.exact_places = cell.exact_places
        if cell.acceptance is not None:
            self.acceptance[cell.acceptance] += cell.gpu_us

    @property
    def billed_us(self) -> int:
        return sum(self.gpu_us.values())

    @property
    def total_cents(self) -> int:
        return sum(self.cents.values())

    def text(self, cents: int) -> str:
        """`cents` of this tally's currency as a document carries them (`Money`)."""
        return str(Money.of(cents, self.minor))

    def categories(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for category in CATEGORY_ORDER:
            keys = [k for k in self.gpu_us if k[0] == category]
            if not keys:
                continue
            entry: dict[str, Any] = {
                "gpu_seconds": gpu_seconds(sum(self.gpu_us[k] for k in keys)),
                "amount": self.text(sum(self.cents[k] for k in keys)),
                **self._exact(keys),
                "bearer": keys[0][1] if len(keys) == 1 else "mixed",
            }
            if len(keys) > 1:
                entry["by_bearer"] = {
                    k[1]: {
                        "gpu_seconds": gpu_seconds(self.gpu_us[k]),
                        "amount": self.text(self.cents[k]),
                        **self._exact([k]),
                    }
                    for k in sorted(keys, key=lambda k: BEARERS.index(k[1]))
                }
            out[category] = entry
        return out

    def _exact(self, keys: list[tuple[str, str]]) -> dict[str, str]:
        """`amount_exact` of these keys, for a line's tally (a tenant's has none)."""
        if self.exact is None:
            return {}
        return {
            "amount_exact": exact_text(
                exact_sum(v for k in keys for v in self.exact[k]), self.exact_places
            )
        }

    def by_bearer(self) -> dict[str, str]:
        return {b: self.text(sum(c for k, c in self.cents.items() if k[1] == b)) for b in BEARERS}

    def productive_by_acceptance(self) -> dict[str, int | float]:
        return {state: gpu_seconds(us) for state, us in self.acceptance.items()}


#: each line's first cell and its tally, by (tenant, invoice, line)
LineTallies = dict[tuple[str, str, str], tuple[Cell, _Tally]]


@dataclass
class PlacementSums:
    """One tenant's (and currency's) lines by placement state (RULES.md 13), exact."""

    minor: int = 2
    gpu_us: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    amount: dict[str, Fraction] = field(default_factory=lambda: dict.fromkeys(STATES, Fraction(0)))
    claim: Fraction = Fraction(0)

    def __add__(self, other: PlacementSums) -> PlacementSums:
        return PlacementSums(
            self.minor,
            {s: self.gpu_us[s] + other.gpu_us[s] for s in STATES},
            {s: self.amount[s] + other.amount[s] for s in STATES},
            self.claim + other.claim,
        )

    def money(self, value: Fraction) -> Money:
        """An exact amount as reported: rounded half-even to the minor unit."""
        return Money.of(round(value * 10**self.minor), self.minor)

    def as_json(self) -> dict[str, Any]:
        return {
            s: {
                "gpu_seconds": gpu_seconds(self.gpu_us[s]),
                "amount": str(self.money(self.amount[s])),
                **({"claim": str(self.money(self.claim))} if s == NOT_AS_SOLD else {}),
            }
            for s in STATES
        }


@dataclass
class InvoiceTotal:
    """One invoice in one currency: what its lines bill (exactly, and rounded as reported)
    beside what the classification gives each bearer and category."""

    tenant: str
    invoice_id: str
    currency: str | None
    minor: int
    billed_exact: Decimal = Decimal(0)  # the lines' billed amounts added up, unrounded
    tally: _Tally = field(default_factory=_Tally)

    def bearer_totals(self) -> dict[str, tuple[int, int]]:
        """GPU-µs and cents per bearer."""
        return {
            b: (
                sum(us for k, us in self.tally.gpu_us.items() if k[1] == b),
                sum(c for k, c in self.tally.cents.items() if k[1] == b),
            )
            for b in BEARERS
        }

    def category_totals(self) -> list[tuple[str, str, int, int]]:
        """(category, bearer, GPU-µs, cents) in RULES.md's category order."""
        keys = sorted(
            self.tally.gpu_us, key=lambda k: (CATEGORY_ORDER.index(k[0]), BEARERS.index(k[1]))
        )
        return [(k[0], k[1], self.tally.gpu_us[k], self.tally.cents[k]) for k in keys]


def _cells_of(table: pa.Table) -> list[Cell]:
    columns = [table.column(name).to_pylist() for name in CELL_COLUMNS]
    return [Cell(*row) for row in zip(*columns)]


#: Rows of the CSV/Parquet frame made at a time (`frame_batches`): a few hundred MB.
FRAME_ROWS = 500_000


@dataclass
class Reconciliation:
    table: pa.Table  # one row per cell, the columns of `Cell`
    unbilled_us: dict[str, int]
    #: each line's placement state and credit share (RULES.md 13; `line_placement`'s rows)
    placement: pa.Table | None = None
    #: the period whose lines were reconciled (scope.Period; open: every line)
    period: Period = ALL_TIME
    #: the event types the reconciled entries hold (None: not known, as of a cluster's
    #: merged partitions): a caller that would read entries of a type the ledger does not
    #: hold (the finance page's answers) need not read the store for them
    event_types: frozenset[str] | None = None

    @property
    def cell_count(self) -> int:
        """How many cells, without making a Python object of each (`cells` would, and at
        field scale that is millions of them)."""
        return int(self.table.num_rows)

    @cached_property
    def cells(self) -> list[Cell]:
        return _cells_of(self.table)

    def cells_borne_by(self, bearers: tuple[str, ...]) -> list[Cell]:
        """The cells these bearers bear, in order (`cells`, the others left out, without a
        Python object made for them)."""
        codes = [code for code, label in LABEL_BY_CODE.items() if label.bearer in bearers]
        picked = pc.is_in(self.table.column("label"), value_set=pa.array(codes, pa.int32()))
        return _cells_of(self.table.filter(picked))

    @cached_property
    def exact_amounts(self) -> list[Decimal]:
        """Each cell's exact share of its line's billed amount (RULES.md §Money, before any
        rounding), in the order of `cells`: a line's exact amounts add up to its billed amount."""
        by_line: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for index, cell in enumerate(self.cells):
            by_line[cell.line_key].append(index)
        out = [Decimal(0)] * len(self.cells)
        for indices in by_line.values():
            indices.sort(
                key=lambda i: self.cells[i].label
            )  # ties in category order: the label codes'
            first = self.cells[indices[0]]
            shares = exact_shares(
                first.billed_amount, [self.cells[i].gpu_us for i in indices], first.minor
            )
            for index, share in zip(indices, shares):
                out[index] = share
        return out

    def allocation_money(self) -> dict[tuple[str, str, str | None], Fraction]:
        """(tenant, allocation, currency) → the exact minor units of the lines naming that
        allocation, after corrections, credits included (lines naming no allocation are left
        out): the cells' exact shares (RULES.md §Money), so a line billed to the tenth of a cent
        is not first rounded cell by cell."""
        per_alloc: dict[tuple[str, str, str | None], Fraction] = defaultdict(Fraction)
        for cell, exact in zip(self.cells, self.exact_amounts):
            if cell.allocation_id is not None:
                per_alloc[(cell.tenant, cell.allocation_id, cell.currency)] += (
                    Fraction(exact) * 10**cell.minor
                )
        return per_alloc

    def lines(self) -> dict[tuple[str, str, str], tuple[Cell, _Tally]]:
        out: dict[tuple[str, str, str], tuple[Cell, _Tally]] = {}
        for cell, exact in zip(self.cells, self.exact_amounts):
            if cell.line_key not in out:
                out[cell.line_key] = (cell, _Tally())
            out[cell.line_key][1].add(cell, exact)
        return out

    def invoices(self) -> list[InvoiceTotal]:
        """Each invoice per currency, in tenant, invoice and currency order."""
        out: dict[tuple[str, str, str], InvoiceTotal] = {}
        counted: set[tuple[str, str, str]] = set()
        for cell in self.cells:
            key = (cell.tenant, cell.invoice_id, cell.currency or "")
            total = out.setdefault(
                key, InvoiceTotal(cell.tenant, cell.invoice_id, cell.currency, cell.minor)
            )
            total.tally.add(cell)
            if cell.line_key not in counted:  # a line's billed amount counts once, not per cell
                counted.add(cell.line_key)
                total.billed_exact = exact_sum([total.billed_exact, Decimal(cell.billed_amount)])
        return [out[k] for k in sorted(out)]

    def tenants(self) -> dict[str, _Tally]:
        out: dict[str, _Tally] = {}
        for cell in self.cells:
            out.setdefault(cell.tenant, _Tally()).add(cell)
        for tenant in self.unbilled_us:
            out.setdefault(tenant, _Tally())
        return dict(sorted(out.items()))

    def disputed_amounts(self) -> dict[str, Decimal]:
        """Provider-borne plus disputed money, per currency."""
        cents: dict[tuple[str, int], int] = defaultdict(int)
        for cell in self.cells:
            if cell.bearer in ("provider", "disputed"):
                cents[(cell.currency or "", cell.minor)] += cell.cents
        return {currency: major_units(total, minor) for (currency, minor), total in cents.items()}

    def placed(self) -> dict[tuple[str, str, str], tuple[str, str | None]]:
        """(tenant, invoice, line) → its placement state and the share text of the terms
        in force at its period_start (None: the default; given for not_as_sold lines)."""
        if self.placement is None:
            return {}
        columns = [
            self.placement.column(c).to_pylist()
            for c in ("tenant", "invoice_id", "line_id", "state", "share")
        ]
        return {(t, i, line): (state, share) for t, i, line, state, share in zip(*columns)}

    def placement_sums(
        self, lines: LineTallies | None = None
    ) -> dict[tuple[str, str], PlacementSums]:
        """Per (tenant, currency), RULES.md 13: per placement state the lines' billed GPU-µs
        and exact amount, and the exact claim on the not_as_sold ones
        (placement_credit_share x each line's customer-borne amount)."""
        placed = self.placed()
        out: dict[tuple[str, str], PlacementSums] = {}
        for key, (first, tally) in (self.lines() if lines is None else lines).items():
            state, share = placed.get(key, (UNOBSERVED, None))
            sums = out.setdefault((first.tenant, first.currency or ""), PlacementSums(first.minor))
            sums.gpu_us[state] += tally.billed_us
            sums.amount[state] += Fraction(first.billed_amount)
            if state == NOT_AS_SOLD:
                sums.claim += placement_claim(share, customer_borne(tally.exact))
        return dict(sorted(out.items()))

    def placement_states(self, lines: LineTallies | None = None) -> dict[str, dict[str, Any]]:
        """Per tenant, `placement` as `reconcile --format json` gives it (docs/placement.md): the
        placement_sums of its currencies added up (as its by_bearer adds them), each
        rounded half-even to the minor unit as reported."""
        per_tenant: dict[str, PlacementSums] = {}
        for (tenant, _currency), sums in self.placement_sums(lines).items():
            per_tenant[tenant] = per_tenant[tenant] + sums if tenant in per_tenant else sums
        return {
            tenant: per_tenant.get(tenant, PlacementSums()).as_json() for tenant in self.tenants()
        }

    def as_json(self) -> dict[str, Any]:
        by_line = self.lines()
        placement = self.placement_states(by_line)
        tenants = {
            tenant: {
                "billed_gpu_seconds": gpu_seconds(tally.billed_us),
                "unbilled_gpu_seconds": gpu_seconds(self.unbilled_us.get(tenant, 0)),
                "categories": tally.categories(),
                "by_bearer": tally.by_bearer(),
                "productive_by_acceptance": tally.productive_by_acceptance(),
                "placement": placement[tenant],
            }
            for tenant, tally in self.tenants().items()
        }
        lines = [
            {
                "invoice_id": first.invoice_id,
                "line_id": first.line_id,
                "tenant": first.tenant,
                "allocation_id": first.allocation_id,
                "gpu_seconds": gpu_seconds(tally.billed_us),
                "amount": tally.text(tally.total_cents),
                "currency": first.currency,
                "billed_amount": first.billed_amount,
                "period_start": _iso(first.ps),
                "period_end": _iso(first.pe),
                "description": first.description,
                "categories": tally.categories(),
                "productive_by_acceptance": tally.productive_by_acceptance(),
            }
            for first, tally in by_line.values()
        ]
        return {"period": self.period.as_dict(), "tenants": tenants, "lines": lines}

    def document(self) -> ReconciliationDocument:
        """`as_json()` as its document (schemas/documents/reconciliation.py): what
        `reconcile --format json` writes, through `to_json()`."""
        from schemas.documents.reconciliation import ReconciliationDocument

        return ReconciliationDocument.parse(self.as_json())

    def json_text(self) -> str:
        """`document().to_json()`, byte for byte: built column-wise where it can be
        (reconcile/engine/json_text.py), else through the document."""
        return self.json_bytes().decode()

    def json_bytes(self) -> bytes:
        """`json_text()` as UTF-8."""
        return b"".join(self.json_parts())

    def json_parts(self) -> list[bytes | memoryview]:
        """`json_bytes()` in parts, end to end: a file is written from them without a copy
        of the whole document (hundreds of MB at field scale)."""
        from reconcile.engine.json_text import json_parts

        parts = json_parts(self)
        return parts if parts is not None else [self.document().to_json().encode()]

    def frame(self) -> pa.Table:
        """One row per line, category, bearer and acceptance: for CSV and Parquet. Computed
        column-wise in DuckDB over `table` (no Python object per cell), in the order of `cells`."""
        return (
            pa.concat_tables(self.frame_batches())
            if self.table.num_rows
            else self._frame_of(self.table)
        )

    def frame_batches(self, rows: int = FRAME_ROWS) -> Iterator[pa.Table]:
        """`frame()` a part at a time, each of whole lines and about `rows` rows (more when
        one line has more), so a writer holds one part, not the whole frame. The engine
        gives a line's cells together; cells that are not (a table built otherwise) come
        as one part."""
        fractional = bool(
            pc.any(pc.not_equal(pc.remainder(self.table.column("gpu_us"), SECOND), 0)).as_py()
        )
        starts = self._line_starts()
        if starts is None:
            yield self._frame_of(self.table, fractional)
            return
        start = 0
        while start < self.table.num_rows:
            at = int(np.searchsorted(starts, min(start + rows, self.table.num_rows)))
            end = int(starts[at]) if at < len(starts) else self.table.num_rows
            yield self._frame_of(self.table.slice(start, end - start), fractional)
            start = end

    def _line_starts(self) -> np.ndarray | None:
        """The rows at which a new line begins, in order; None unless each line's cells are
        together (as many beginnings as lines)."""
        table = self.table
        changed = np.zeros(max(table.num_rows - 1, 0), dtype=bool)
        for name in ("tenant", "invoice_id", "line_id"):
            column = pc.fill_null(table.column(name), "")
            changed |= pc.not_equal(column.slice(1), column.slice(0, table.num_rows - 1)).to_numpy(
                zero_copy_only=False
            )
        starts = np.flatnonzero(changed) + 1
        # counted by DuckDB: pyarrow's group_by starts Acero, about 0.1 CPU-s the first time
        with scratch() as con:
            con.register("cells", table.select(["tenant", "invoice_id", "line_id"]))
            row = con.execute(
                "SELECT count(*) FROM (SELECT DISTINCT tenant, invoice_id, line_id FROM cells)"
            ).fetchone()
        lines = int(row[0]) if row else 0
        return starts if len(starts) + 1 == lines else None

    def _frame_of(self, table: pa.Table, fractional: bool | None = None) -> pa.Table:
        ones = pa.repeat(pa.scalar(1, pa.int64()), table.num_rows)
        cells = table.append_column(
            "row_no", pc.cumulative_sum(ones)
        )  # the order of `cells`, from 1
        labels = pa.table(
            {
                "code": list(LABEL_BY_CODE),
                "category": [v.category for v in LABEL_BY_CODE.values()],
                "bearer": [v.bearer for v in LABEL_BY_CODE.values()],
                "acceptance": [v.acceptance for v in LABEL_BY_CODE.values()],
            }
        )
        with scratch() as con:
            con.register("cells", cells)
            con.register("labels", labels)
            longest = int(con.execute(longest_line_sql("cells")).fetchall()[0][0])
            if longest >= EXACT_LINE_US:
                raise MoneyOverflow(
                    f"a line of {longest} GPU-µs is too long for exact shares in 128 bits"
                )
            if fractional is None:
                fractional = bool(
                    con.execute(f"SELECT bool_or(gpu_us % {SECOND} <> 0) FROM cells").fetchall()[
                        0
                    ][0]
                )
            # GPU-seconds are time, not money: DuckDB's `/` is true division, as `gpu_seconds` is
            derived = con.sql(
                _FRAME_SQL.format(
                    shares=exact_shares_sql("cells"),
                    gpu_seconds=f"c.gpu_us / {SECOND}" if fractional else f"c.gpu_us // {SECOND}",
                )
            ).to_arrow_table()
        schema = _frame_schema(fractional)
        # what the frame shows as the cells have it comes from `table` as it is, with no copy
        columns = [
            table.column(name) if name in CELL_COLUMNS else derived.column(name)
            for name in schema.names
        ]
        return pa.Table.from_arrays(columns, names=schema.names).cast(schema)


def _period_sql(us: str) -> str:
    """SQL: `_iso` column-wise (None, and +∞, stay NULL)."""
    stamp = f"make_timestamp({us})"
    return (
        f"CASE WHEN {us} IS NULL OR {us} >= {INF} THEN NULL "
        f"WHEN {us} % {SECOND} = 0 THEN strftime({stamp}, '%Y-%m-%dT%H:%M:%SZ') "
        f"ELSE strftime({stamp}, '%Y-%m-%dT%H:%M:%S.%fZ') END"
    )


_FRAME_SQL = f"""
WITH shares AS ({{shares}})
SELECT {_period_sql("c.ps")} AS period_start, {_period_sql("c.pe")} AS period_end, l.category,
       l.bearer, l.acceptance,
       {{gpu_seconds}} AS gpu_seconds, {decimal_text_sql("c.cents", "c.minor", "c.minor")}
           AS amount,
       {decimal_text_sql("s.share_units", "s.share_places", "s.exact_places", "s.negative_zero")}
           AS amount_exact
FROM cells c JOIN labels l ON l.code = c.label JOIN shares s ON s.row_no = c.row_no
ORDER BY c.row_no
"""


def _frame_schema(fractional: bool) -> pa.Schema:
    return pa.schema(
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
            ("gpu_seconds", pa.float64() if fractional else pa.int64()),
            ("amount", pa.string()),
            ("amount_exact", pa.string()),
            ("currency", pa.string()),
        ]
    )
