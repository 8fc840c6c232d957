"""The lists of `gpuledger serve`'s API (reconcile/serve/api.py), one page at a time:

    GET /api/v1/lines      serve.lines: reconciled lines (reconciliation.json's lines), each
                           with its allocation's placement class and its billing entry's seq
    GET /api/v1/findings   serve.findings: findings (dispute-packet.json's claims), each with
                           its tenant, invoice and placement class

Each is `{"items": [...], "page": {...}}`: the page's number and size, the first and last
item shown (1-based), the total, and the links to the pages either side (null at an end)
with the request's filters kept."""

from __future__ import annotations

from pydantic import Field

from schemas.documents.base import Document, OptInt, OptStr, Str
from schemas.documents.bundle import LedgerInt
from schemas.documents.dispute import Claim
from schemas.documents.reconciliation import LineFigures


class Page(Document):
    """Where a page stands in its list."""

    number: LedgerInt
    size: LedgerInt
    first: LedgerInt
    last: LedgerInt
    total: LedgerInt
    previous: OptStr
    next: OptStr


class ServedLine(LineFigures):
    """A reconciled line, with its allocation's placement class and the seq of its
    billing.line entry (null when none is stored: a line read from elsewhere)."""

    placement_class: Str
    seq: OptInt


class Finding(Claim):
    """A finding: a provider-borne or disputed cell of a line, with its tenant, invoice and
    the placement class of its allocation."""

    tenant: Str
    invoice_id: Str
    placement_class: Str
    answer: Str = Field(
        default="open",
        description="the provider's current answer: accepted, rejected, partly (with the "
        "amount accepted), or open",
    )


class LinesPage(Document):
    ROOT = "lines"

    items: list[ServedLine]
    page: Page


class FindingsPage(Document):
    ROOT = "findings"

    items: list[Finding]
    page: Page
