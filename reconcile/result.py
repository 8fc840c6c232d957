"""A finished reconciliation: its cells, and the shapes finance and tools read.

`as_json()` is DESIGN.md §6's object, exactly; `frame()` is one row per line and
category (CSV, Parquet). Both are built from the same cells, so they always agree.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from decimal import Decimal
from typing import Any

import pyarrow as pa

from reconcile.intervals import CATEGORY_ORDER, LABEL_BY_CODE, SECOND
from reconcile.money import format_minor

BEARERS = ("provider", "customer", "disputed")
ACCEPTANCE = ("accepted", "rejected", "pending")


CELL_COLUMNS = ("invoice_id", "line_id", "tenant", "allocation_id", "currency", "minor", "label", "gpu_us", "cents")


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

    @property
    def category(self) -> str:
        return LABEL_BY_CODE[self.label].category

    @property
    def bearer(self) -> str:
        return LABEL_BY_CODE[self.label].bearer

    @property
    def acceptance(self) -> str | None:
        return LABEL_BY_CODE[self.label].acceptance


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

    def add(self, cell: Cell) -> None:
        key = (cell.category, cell.bearer)
        self.minor = cell.minor
        self.gpu_us[key] += cell.gpu_us
        self.cents[key] += cell.cents
        if cell.acceptance is not None:
            self.acceptance[cell.acceptance] += cell.gpu_us

    @property
    def billed_us(self) -> int:
        return sum(self.gpu_us.values())

    @property
    def total_cents(self) -> int:
        return sum(self.cents.values())

    def money(self, cents: int) -> str:
        return format_minor(cents, self.minor)

    def categories(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for category in CATEGORY_ORDER:
            keys = [k for k in self.gpu_us if k[0] == category]
            if not keys:
                continue
            entry: dict[str, Any] = {
                "gpu_seconds": gpu_seconds(sum(self.gpu_us[k] for k in keys)),
                "amount": self.money(sum(self.cents[k] for k in keys)),
                "bearer": keys[0][1] if len(keys) == 1 else "mixed",
            }
            if len(keys) > 1:
                entry["by_bearer"] = {k[1]: {"gpu_seconds": gpu_seconds(self.gpu_us[k]), "amount": self.money(self.cents[k])}
                                      for k in sorted(keys, key=lambda k: BEARERS.index(k[1]))}
            out[category] = entry
        return out

    def by_bearer(self) -> dict[str, str]:
        return {b: self.money(sum(c for k, c in self.cents.items() if k[1] == b)) for b in BEARERS}

    def productive_by_acceptance(self) -> dict[str, int | float]:
        return {state: gpu_seconds(us) for state, us in self.acceptance.items()}


@dataclass
class Reconciliation:
    table: pa.Table  # one row per cell, the columns of `Cell`
    unbilled_us: dict[str, int]

    @cached_property
    def cells(self) -> list[Cell]:
        columns = [self.table.column(name).to_pylist() for name in CELL_COLUMNS]
        return [Cell(*row) for row in zip(*columns)]

    def lines(self) -> dict[tuple[str, str, str], tuple[Cell, _Tally]]:
        out: dict[tuple[str, str, str], tuple[Cell, _Tally]] = {}
        for cell in self.cells:
            key = (cell.tenant, cell.invoice_id, cell.line_id)
            if key not in out:
                out[key] = (cell, _Tally())
            out[key][1].add(cell)
        return out

    def tenants(self) -> dict[str, _Tally]:
        out: dict[str, _Tally] = {}
        for cell in self.cells:
            out.setdefault(cell.tenant, _Tally()).add(cell)
        for tenant in self.unbilled_us:
            out.setdefault(tenant, _Tally())
        return dict(sorted(out.items()))

    def disputed_amounts(self) -> dict[str, Decimal]:
        """Provider-borne plus disputed money, per currency."""
        out: dict[str, Decimal] = defaultdict(Decimal)
        for cell in self.cells:
            if cell.bearer in ("provider", "disputed"):
                out[cell.currency or ""] += Decimal(cell.cents).scaleb(-cell.minor)
        return dict(out)

    def as_json(self) -> dict[str, Any]:
        tenants = {
            tenant: {
                "billed_gpu_seconds": gpu_seconds(tally.billed_us),
                "unbilled_gpu_seconds": gpu_seconds(self.unbilled_us.get(tenant, 0)),
                "categories": tally.categories(),
                "by_bearer": tally.by_bearer(),
                "productive_by_acceptance": tally.productive_by_acceptance(),
            }
            for tenant, tally in self.tenants().items()
        }
        lines = [
            {"invoice_id": first.invoice_id, "line_id": first.line_id, "tenant": first.tenant,
             "allocation_id": first.allocation_id, "gpu_seconds": gpu_seconds(tally.billed_us),
             "amount": tally.money(tally.total_cents), "currency": first.currency,
             "categories": tally.categories(), "productive_by_acceptance": tally.productive_by_acceptance()}
            for first, tally in self.lines().values()
        ]
        return {"tenants": tenants, "lines": lines}

    def frame(self) -> pa.Table:
        """One row per line, category, bearer and acceptance: for CSV and Parquet."""
        rows = [
            {"invoice_id": c.invoice_id, "line_id": c.line_id, "tenant": c.tenant, "allocation_id": c.allocation_id,
             "category": c.category, "bearer": c.bearer, "acceptance": c.acceptance,
             "gpu_seconds": c.gpu_us / SECOND if c.gpu_us % SECOND else c.gpu_us // SECOND,
             "amount": format_minor(c.cents, c.minor), "currency": c.currency}
            for c in self.cells
        ]
        schema = pa.schema([
            ("invoice_id", pa.string()), ("line_id", pa.string()), ("tenant", pa.string()),
            ("allocation_id", pa.string()), ("category", pa.string()), ("bearer", pa.string()),
            ("acceptance", pa.string()),
            ("gpu_seconds", pa.float64() if any(c.gpu_us % SECOND for c in self.cells) else pa.int64()),
            ("amount", pa.string()), ("currency", pa.string()),
        ])
        return pa.Table.from_pylist(rows, schema=schema)
