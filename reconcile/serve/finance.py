"""Finance's drill-down: invoice → line → finding → the cited entries and their proofs.

A **finding** is a claim of reconcile/packets/claims.py: one cell of a line that the
customer does not owe (bearer `provider` or `disputed`), with its time stretches and the
seqs of the ledger entries that decided it, computed by the engine over the tenant's
entries and the fleet's, as a dispute packet's claims are. Lines and findings are named
in query strings (`/line?tenant=…&invoice=…&line=…`), so an id holding `/` or `?` works.

Everything is computed per tenant (the caller's scope, or each tenant for an operator)
and cached by that tenant's head and the fleet's (reconcile/serve/cache.py).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request

import reconcile
from ledger import read
from ledger.tokens import TokenInfo
from reconcile.engine.pipeline import Pipeline
from reconcile.packets.answers import ANSWER_TYPE, derive_answers, short_state, states
from reconcile.packets.claims import claims
from reconcile.serve.filters import Filters


def scope_tenants(request: Request, tenant: str | None) -> list[str]:
    """The tenants a request reads: the one in scope, or (operator, none named) every one."""
    if tenant is not None:
        return [tenant]
    return list(read.tenants(request.app.state.store))


def allocation_classes(request: Request, tenant: str) -> dict[str, str]:
    """Each allocation of the tenant with its placement class (`whole` when none is given)."""

    def compute() -> dict[str, str]:
        found: dict[str, str] = {}
        store = request.app.state.store
        for e in read.entries(store, tenant=tenant, type="allocation.granted"):
            data = orjson.loads(e.event).get("data") or {}
            aid = data.get("allocation_id")
            if isinstance(aid, str) and aid not in found:
                found[aid] = str(data.get("placement_class") or "whole")
        return found

    answer: dict[str, str] = request.app.state.documents.get(tenant, ("classes", tenant), compute)
    return answer


def tenant_lines(request: Request, tenant: str) -> list[dict[str, Any]]:
    """The tenant's reconciled lines (`reconcile --format json`'s), each with its class and
    the seq of its billing entry."""

    def compute() -> list[dict[str, Any]]:
        store = request.app.state.store
        doc = reconcile.reconcile_store(store, tenant).as_json()
        classes = allocation_classes(request, tenant)
        seqs = billing_seqs(request, tenant)
        lines = []
        for line in doc["lines"]:
            if line["tenant"] != tenant:
                continue
            lines.append(
                line
                | {
                    "placement_class": classes.get(line["allocation_id"], "whole"),
                    "seq": seqs.get((line["invoice_id"], line["line_id"])),
                }
            )
        return lines

    answer: list[dict[str, Any]] = request.app.state.documents.get(
        tenant, ("lines", tenant), compute
    )
    return answer


def billing_seqs(request: Request, tenant: str) -> dict[tuple[str, str], int]:
    """(invoice, line) → the seq of its last billing.line entry."""
    found: dict[tuple[str, str], int] = {}
    for e in read.entries(request.app.state.store, tenant=tenant, type="billing.line"):
        data = orjson.loads(e.event).get("data") or {}
        found[(str(data.get("invoice_id")), str(data.get("line_id")))] = e.seq
    return found


def tenant_findings(request: Request, tenant: str) -> list[dict[str, Any]]:
    """Every finding of the tenant's invoices, in invoice then ledger order."""

    def compute() -> list[dict[str, Any]]:
        lines = tenant_lines(request, tenant)
        invoices = list(dict.fromkeys(line["invoice_id"] for line in lines))
        classes = allocation_classes(request, tenant)
        found: list[dict[str, Any]] = []
        answered = read.entries(request.app.state.store, tenant=tenant, type=ANSWER_TYPE)
        with Pipeline.of_store(request.app.state.store, tenant) as pipe:
            for invoice in invoices:
                invoice_claims = claims(pipe, invoice)
                answers = states(derive_answers(answered, invoice, invoice_claims))
                for claim in invoice_claims:
                    found.append(
                        claim
                        | {
                            "tenant": tenant,
                            "invoice_id": invoice,
                            "placement_class": classes.get(claim["allocation_id"], "whole"),
                            "answer": short_state(
                                answers.get((claim["line_id"], claim["category"]))
                            ),
                        }
                    )
        return found

    answer: list[dict[str, Any]] = request.app.state.documents.get(
        tenant, ("findings", tenant), compute
    )
    return answer


def _line_periods(lines: list[dict[str, Any]]) -> dict[tuple[str, str], str | None]:
    return {(line["invoice_id"], line["line_id"]): line.get("period_start") for line in lines}


def lines(request: Request, f: Filters, invoice: str | None = None) -> list[dict[str, Any]]:
    """The lines in scope that pass the filters (a line passes category or bearer when one
    of its categories with time does)."""
    out = []
    for tenant in scope_tenants(request, f.tenant):
        for line in tenant_lines(request, tenant):
            if invoice is not None and line["invoice_id"] != invoice:
                continue
            if not f.keeps_period(line.get("period_start")):
                continue
            if not f.keeps("placement_class", line["placement_class"]):
                continue
            cats = line["categories"]
            if f.category is not None and f.category not in cats:
                continue
            if f.bearer is not None and all(c["bearer"] != f.bearer for c in cats.values()):
                continue
            out.append(line)
    return out


def findings(request: Request, f: Filters, invoice: str | None = None) -> list[dict[str, Any]]:
    """The findings in scope that pass the filters (period: their line's)."""
    out = []
    for tenant in scope_tenants(request, f.tenant):
        periods = _line_periods(tenant_lines(request, tenant))
        for finding in tenant_findings(request, tenant):
            if invoice is not None and finding["invoice_id"] != invoice:
                continue
            if not f.keeps_period(periods.get((finding["invoice_id"], finding["line_id"]))):
                continue
            if not (
                f.keeps("placement_class", finding["placement_class"])
                and f.keeps("category", finding["category"])
                and f.keeps("bearer", finding["bearer"])
            ):
                continue
            out.append(finding)
    return out


def one_line(request: Request, tenant: str, invoice: str, line_id: str) -> dict[str, Any]:
    for line in tenant_lines(request, tenant):
        if line["invoice_id"] == invoice and line["line_id"] == line_id:
            return line
    raise HTTPException(404, "no such line")


def line_findings(
    request: Request, tenant: str, invoice: str, line_id: str
) -> list[dict[str, Any]]:
    return [
        f
        for f in tenant_findings(request, tenant)
        if f["invoice_id"] == invoice and f["line_id"] == line_id
    ]


def one_finding(
    request: Request, tenant: str, invoice: str, line_id: str, category: str
) -> dict[str, Any]:
    for f in line_findings(request, tenant, invoice, line_id):
        if f["category"] == category:
            return f
    raise HTTPException(404, "no such finding")


def cited(request: Request, who: TokenInfo, finding: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries a finding cites, as the caller may read them (its tenant's and the
    fleet's; the finding is the caller's own, so every one is)."""
    found = read.entries(request.app.state.store, seqs=list(finding["cites"]))
    allowed = (None, finding["tenant"])
    return [
        {"seq": e.seq, "type": e.type, "source": e.source, "id": e.id, "tenant": e.tenant}
        for e in found
        if e.tenant in allowed
    ]


def needed(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise HTTPException(400, f"{name}: needed")
    return value


def periods(request: Request, f: Filters) -> list[dict[str, Any]]:
    """The lines in scope by UTC month of their period's start (newest first): invoices,
    lines, the amount billed (exactly as billed, per currency) and the GPU-seconds each
    bearer bears. No amount is rounded here: billed amounts add up exactly."""
    from decimal import Decimal

    months: dict[str, dict[str, Any]] = {}
    for line in lines(request, f):
        month = (line.get("period_start") or "unknown")[:7]
        m = months.setdefault(
            month,
            {
                "period": month,
                "invoices": set(),
                "lines": 0,
                "billed": {},
                "gpu_seconds": {"customer": 0, "provider": 0, "disputed": 0},
            },
        )
        m["invoices"].add((line["tenant"], line["invoice_id"]))
        m["lines"] += 1
        currency = line.get("currency") or ""
        m["billed"][currency] = m["billed"].get(currency, Decimal(0)) + Decimal(
            line["billed_amount"]
        )
        for c in line["categories"].values():
            if c["bearer"] in m["gpu_seconds"]:
                m["gpu_seconds"][c["bearer"]] += c["gpu_seconds"]
    out = []
    for month in sorted(months, reverse=True):
        m = months[month]
        out.append(
            m
            | {
                "invoices": len(m["invoices"]),
                "billed": {k: str(v) for k, v in sorted(m["billed"].items())},
            }
        )
    return out
