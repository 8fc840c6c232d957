"""The reconciliation result: `gpuledger reconcile --format json`, and the findings of a
dispute packet (docs/cli.md's object). Money is decimal text at the currency's minor unit
(`amount`), or exact (`amount_exact`, a line's share of its billed amount unrounded);
GPU-seconds are whole numbers unless the times had a fraction."""

from __future__ import annotations

from pydantic import Field

from schemas.documents.base import Document, Number, OptPeriod, OptStr, Str


class BearerFigures(Document):
    """One bearer's part of a category that several bearers share."""

    gpu_seconds: Number
    amount: Str
    amount_exact: Str = Field(default="", description="a line's only: the exact share")


class CategoryFigures(Document):
    """The time and money of one category (RULES.md's), and who bears it."""

    gpu_seconds: Number
    amount: Str
    amount_exact: Str = Field(default="", description="a line's only: the exact share")
    bearer: Str = Field(description="customer, provider, disputed, or mixed")
    by_bearer: dict[str, BearerFigures] = Field(
        default_factory=dict, description="only when the category is mixed"
    )


class PlacementFigures(Document):
    """One placement state's lines (RULES.md 13): billed GPU-seconds and amount."""

    gpu_seconds: Number
    amount: Str


class NotAsSoldFigures(PlacementFigures):
    """Lines whose allocation was not placed as sold, and the claim on them."""

    claim: Str = Field(description="placement_credit_share x the customer-borne amount")


class PlacementStates(Document):
    """A tenant's lines by placement state (RULES.md 13); it changes no category."""

    as_sold: PlacementFigures
    not_as_sold: NotAsSoldFigures
    unobserved: PlacementFigures


class TenantFigures(Document):
    billed_gpu_seconds: Number
    unbilled_gpu_seconds: Number
    categories: dict[str, CategoryFigures]
    by_bearer: dict[str, Str]
    productive_by_acceptance: dict[str, Number]
    placement: PlacementStates | None = Field(
        default=None, description="the lines by placement state (RULES.md 13)"
    )


class LineFigures(Document):
    """One billing line: as billed, and its categories."""

    invoice_id: Str
    line_id: Str
    tenant: Str
    allocation_id: OptStr
    gpu_seconds: Number
    amount: Str
    currency: OptStr
    billed_amount: Str
    period_start: OptStr
    period_end: OptStr
    description: OptStr
    categories: dict[str, CategoryFigures]
    productive_by_acceptance: dict[str, Number]


class ReconciliationDocument(Document):
    """Every tenant's totals, then every line, in the engine's order."""

    ROOT = "reconciliation"

    period: OptPeriod = Field(default=None, description="the period of the lines reconciled")
    tenants: dict[str, TenantFigures]
    lines: list[LineFigures]
