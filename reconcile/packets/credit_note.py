"""Credit notes: the money a provider accepted in its answers to a dispute, as FinOps FOCUS
1.2 rows a billing system can load (docs/answers.md, "Credit notes").

One row per finding of the invoice whose current answer (reconcile/packets/answers.py, rule
3) is `accepted` (the finding's amount) or `partly` (the amount accepted), in the findings'
order. Each row is a credit that corrects the billed line the finding is on:

- `ChargeCategory` `Credit`, `ChargeClass` `Correction`, `ChargeFrequency` `One-Time`;
- the costs (`BilledCost`, `EffectiveCost`, `ListCost`, `ContractedCost`) negative;
- the invoice, billing and charge periods, description, accounts, provider, region,
  resource and SKU carried over from the source billing line: its FOCUS row when it was
  ingested from FOCUS, else its own fields;
- `x_CreditFor` the finding (`LINE/category`), `x_Corrects` the line, `x_AnswerSeq` the
  answer's seq.

Quantities and unit prices are null: a credit moves money, not usage (FOCUS 1.2,
ConsumedQuantity and PricingQuantity are for usage and purchases).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from ledger import LedgerError, Store, read
from reconcile.packets.answers import ANSWER_TYPE, accepted_amount, derive_answers, finding_key
from reconcile.packets.dispute import current_findings
from schemas.display import spreadsheet_safe

#: FOCUS 1.2 columns a credit row carries, in the order written.
COLUMNS = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingCurrency",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceDetails",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "SubAccountType",
    "Tags",
    "x_CreditFor",
    "x_Corrects",
    "x_AnswerSeq",
)
#: Columns carried over from the source line's FOCUS row when it has them.
CARRIED = (
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeDescription",
    "InvoiceIssuerName",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SubAccountId",
    "SubAccountName",
    "SubAccountType",
)
NULL = ""


@dataclass(frozen=True)
class CreditNote:
    tenant: str
    invoice_id: str
    rows: list[dict[str, str]]
    currency: str
    total: Decimal


def build_credit_note(
    store: Store, tenant: str, invoice: str, provider: str | None = None
) -> CreditNote:
    """The credit rows of `invoice` from the answers in the store as they stand."""
    _, claims, _ = current_findings(store, tenant, invoice)
    answers = derive_answers(read.entries(store, tenant=tenant, type=ANSWER_TYPE), invoice, claims)
    current = {(a["line_id"], a["category"]): a for a in answers if a["status"] == "current"}
    lines = _lines(store, tenant, invoice)
    rows, total, currencies = [], Decimal(0), set()
    for claim in claims:
        answer = current.get((claim["line_id"], claim["category"]))
        amount = Decimal(0) if answer is None else accepted_amount(answer)
        if amount <= 0:
            continue
        source, line = lines[claim["line_id"]]
        rows.append(_row(claim, answer or {}, amount, source, line, provider))
        total += amount
        currencies.add(line.get("currency") or "")
    if len(currencies) > 1:
        raise LedgerError(
            f"invoice {invoice!r} of {tenant!r} credits in {len(currencies)} currencies "
            f"({', '.join(sorted(currencies))}); a credit note is in one"
        )
    return CreditNote(tenant, invoice, rows, next(iter(currencies), ""), total)


def _lines(store: Store, tenant: str, invoice: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each billing line of the invoice by line_id (the last entry of an id), with its source."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for entry in read.each_entry(store, tenant=tenant, type="billing.line"):
        data = json.loads(entry.event)["data"]
        if data.get("invoice_id") == invoice:
            found[data["line_id"]] = (entry.source, data)
    return found


def _row(
    claim: dict[str, Any],
    answer: dict[str, Any],
    amount: Decimal,
    source: str,
    line: dict[str, Any],
    provider: str | None,
) -> dict[str, str]:
    focus = _focus(line)
    issuer = provider or focus.get("InvoiceIssuerName") or _authority(source)
    credit = str(-amount)
    row = dict.fromkeys(COLUMNS, NULL)
    row |= {
        "BillingAccountId": tenant_account(line),
        "BillingAccountName": line["tenant"],
        "BillingCurrency": line.get("currency") or NULL,
        "BillingPeriodStart": line["period_start"],
        "BillingPeriodEnd": line["period_end"],
        "ChargeDescription": f"{claim['category']} on line {claim['line_id']}",
        "ProviderName": issuer,
        "PublisherName": issuer,
        "ResourceId": line.get("allocation_id") or NULL,
        "ServiceCategory": "AI and Machine Learning",
        "ServiceName": "GPU Compute",
        "ServiceSubcategory": "AI Platforms",
        "SubAccountId": line["tenant"],
        "SubAccountName": line["tenant"],
    }
    row |= {name: str(focus[name]) for name in CARRIED if focus.get(name) not in (None, "")}
    row |= {
        "BilledCost": credit,
        "EffectiveCost": credit,
        "ListCost": credit,
        "ContractedCost": credit,
        "ChargeCategory": "Credit",
        "ChargeClass": "Correction",
        "ChargeFrequency": "One-Time",
        "ChargePeriodStart": line["period_start"],
        "ChargePeriodEnd": line["period_end"],
        "InvoiceId": line["invoice_id"],
        "InvoiceIssuerName": issuer,
        "x_CreditFor": finding_key(claim["line_id"], claim["category"]),
        "x_Corrects": claim["line_id"],
        "x_AnswerSeq": str(answer.get("seq", NULL)),
    }
    return row


def _focus(line: dict[str, Any]) -> dict[str, Any]:
    """The FOCUS row a line was ingested from (ingest/focus.py keeps it whole), or none."""
    focus = line.get("focus")
    return focus if isinstance(focus, dict) else {}


def tenant_account(line: dict[str, Any]) -> str:
    focus = _focus(line)
    return str(focus.get("BillingAccountId") or line["tenant"])


def _authority(source: str) -> str:
    """`k8s-a` of `slurm://k8s-a/x`: a source's authority names its provider (docs/envelope.md)."""
    rest = source.split("://", 1)[-1]
    return rest.split("/", 1)[0] or source


def credit_note_csv(note: CreditNote) -> str:
    """The rows as CSV, header first; a text cell a spreadsheet would run as a formula is
    prefixed `'` (figures such as -2.60 stay numbers)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in note.rows:
        writer.writerow([spreadsheet_safe(row[c]) for c in COLUMNS])
    return buffer.getvalue()


def write_credit_note(note: CreditNote, path: Path) -> None:
    try:
        path.write_text(credit_note_csv(note), encoding="utf-8")
    except OSError as exc:
        raise LedgerError(f"cannot write {path}: {exc.strerror}", option="out") from None


__all__ = ["COLUMNS", "CreditNote", "build_credit_note", "credit_note_csv", "write_credit_note"]
