"""The pages of `gpuledger serve`: rendered on the server from the package's templates and
one stylesheet; no script, no build step, nothing from another origin.

Every page asks access.caller first. Data is escaped as on every page of gpuledger
(reconcile/reports/pages.py: autoescape, control characters shown, ids in `<bdi>`).
Lists paginate (`?page=N`, PAGE_SIZE rows), and every filter is a query parameter, so a
link can be shared: the one who opens it sees what their own token allows.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

import reconcile
from ledger import read
from ledger.tokens import TokenInfo, authenticate
from reconcile import reports
from reconcile.reports.pages import environment
from reconcile.serve.access import COOKIE, caller, tenant_scope
from reconcile.serve.api import dispute_packet, entry_doc
from schemas.money import Money

PAGE_SIZE = 50
#: The letter, the envelope and a promise's story are self-contained pages with their style
#: inline (they are also written as files): styles, never script.
LETTER_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HERE = Path(str(resources.files("reconcile.serve")))
_ENV = environment(_HERE / "templates")
_CSS = (_HERE / "static" / "app.css").read_bytes()


def _page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_ENV.get_template(template).render(**context), status)


def error_page(request: Request, status: int, detail: str, headers: dict[str, str]) -> Response:
    body = _ENV.get_template("error.html.j2").render(who=None, status=status, detail=detail)
    return HTMLResponse(body, status, headers)


def stylesheet(request: Request) -> Response:
    return Response(_CSS, media_type="text/css")


def login_form(request: Request) -> Response:
    return _page("login.html.j2", who=None, problem=None)


async def login(request: Request) -> Response:
    form = parse_qs((await request.body())[:4096].decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    info = await run_in_threadpool(authenticate, request.app.state.store, token)
    if info is None or info.role.kind == "collector":
        return _page("login.html.j2", 401, who=None, problem="That token is not valid here.")
    response = RedirectResponse("/", 303)
    response.set_cookie(
        COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )
    return response


def logout(request: Request) -> Response:
    response = RedirectResponse("/login", 303)
    response.delete_cookie(COOKIE)
    return response


def home(request: Request) -> Response:
    who = caller(request, "operator", "tenant")
    invoices = _invoice_rows(request, who, None)
    totals: dict[str, dict[str, int]] = {}
    for row in invoices:
        t = totals.setdefault(
            row["currency"], {"provider": 0, "disputed": 0, "minor": row["minor"]}
        )
        t["provider"] += row["cents"]["provider"]
        t["disputed"] += row["cents"]["disputed"]
    cards = [{"label": "invoices", "value": len(invoices), "kind": ""}]
    for currency, t in sorted(totals.items()):
        cards.append(
            {
                "label": f"credit due ({currency})",
                "kind": "provider",
                "value": str(Money.of(t["provider"], t["minor"])),
            }
        )
        cards.append(
            {
                "label": f"in dispute ({currency})",
                "kind": "disputed",
                "value": str(Money.of(t["disputed"], t["minor"])),
            }
        )
    return _page("home.html.j2", who=who, cards=cards)


def invoices(request: Request) -> Response:
    who = caller(request, "operator", "tenant")
    tenant = tenant_scope(who.role, request.query_params.get("tenant"))
    rows = _invoice_rows(request, who, tenant)
    shown, page = _paginate(request, rows)
    return _page("invoices.html.j2", who=who, rows=shown, page=page, tenant=tenant)


def invoice(request: Request) -> Response:
    who = caller(request, "operator", "tenant")
    tenant = tenant_scope(who.role, request.path_params["tenant"])
    assert tenant is not None
    invoice_id = request.path_params["invoice"]
    store = request.app.state.store
    doc = reconcile.reconcile_store(store, tenant, invoice_id).as_json()
    lines = [line for line in doc["lines"] if line["tenant"] == tenant]
    if not lines:
        raise HTTPException(404, "no such invoice")
    seqs = _billing_seqs(request, tenant, invoice_id)
    for line in lines:
        line["seq"] = seqs.get(line["line_id"])
    signs = request.app.state.signer is not None
    return _page(
        "invoice.html.j2",
        who=who,
        tenant=tenant,
        invoice_id=invoice_id,
        lines=lines,
        signs=signs,
        key_name=request.app.state.verifier.name if signs else "",
    )


def letter(request: Request) -> Response:
    """The dispute letter of an invoice, from its signed packet's verification (as
    `dispute` writes it beside the packet); its own inline styles, no script."""
    from reconcile.packets.dispute import verify_dispute
    from reconcile.packets.letter import build_letter, render_html

    who = caller(request, "operator", "tenant")
    packet = dispute_packet(
        request, who, request.path_params["tenant"], request.path_params["invoice"]
    )
    verifier = request.app.state.verifier
    html = render_html(build_letter(verify_dispute(packet, verifier), verifier.name))
    return HTMLResponse(html, headers={"Content-Security-Policy": LETTER_CSP})


def promises(request: Request) -> Response:
    """Promises by tenant and class, and the misses, each (for an operator) with its story."""
    who = caller(request, "operator", "tenant")
    tenant = tenant_scope(who.role, request.query_params.get("tenant"))
    doc = request.app.state.documents.get(
        ("promises", tenant), lambda: reports.report(request.app.state.store, "promises", tenant)
    )
    chosen = request.query_params.get("class") or None
    classes = sorted({s["placement_class"] for s in doc["summary"]})
    summary = [s for s in doc["summary"] if chosen in (None, s["placement_class"])]
    misses = [
        m | {"what": _what_missed(m)}
        for m in doc["misses"]
        if chosen in (None, m["placement_class"])
    ]
    shown, page = _paginate(request, misses)
    return _page(
        "promises.html.j2",
        who=who,
        tenant=tenant,
        summary=summary,
        rows=shown,
        page=page,
        classes=classes,
        chosen_class=chosen,
    )


def story(request: Request) -> Response:
    """A missed promise's diagnostic packet page (`packet`'s): operators only, since it
    shows the fleet around the job."""
    from reconcile.packets.diagnostic import build_packet, render_html

    caller(request, "operator")
    packet = build_packet(
        request.app.state.store, request.path_params["promise"], request.path_params["tenant"]
    )
    return HTMLResponse(render_html(packet), headers={"Content-Security-Policy": LETTER_CSP})


def envelope(request: Request) -> Response:
    """The buyer's view: each provider and class against its promises (`report envelope`'s
    page)."""
    from reconcile.reports.envelope_page import html

    who = caller(request, "operator", "tenant")
    tenant = tenant_scope(who.role, request.query_params.get("tenant"))
    by = request.query_params.get("by") or "both"
    if by not in ("both", "source", "placement_class"):
        raise HTTPException(400, "by: one of both, source, placement_class")
    doc = reports.report(request.app.state.store, "envelope", tenant, by=by)
    return HTMLResponse(html(doc), headers={"Content-Security-Policy": LETTER_CSP})


def _what_missed(m: dict[str, Any]) -> str:
    parts = []
    if m["start_status"] == "late":
        parts.append(f"start {m['start_delay_s']} s late")
    elif m["start_status"] == "not_started":
        parts.append("never started")
    if m["completion_status"] == "late":
        parts.append(f"completion {m['completion_delay_s']} s late")
    elif m["completion_status"] == "not_completed":
        parts.append("never completed")
    return ", ".join(parts)


def entry(request: Request) -> Response:
    who = caller(request, "operator", "tenant")
    text = request.path_params["seq"]
    if not text.isdigit() or len(text) > 18:
        raise HTTPException(404, "no such entry")
    doc = entry_doc(request, who, int(text))
    event_text = orjson.dumps(doc["event"], option=orjson.OPT_INDENT_2).decode()
    return _page("entry.html.j2", who=who, e=doc, event_text=event_text)


def _invoice_rows(request: Request, who: TokenInfo, tenant: str | None) -> list[dict[str, Any]]:
    tenant = tenant if tenant is not None else who.role.tenant
    result = request.app.state.documents.get(
        ("reconciled", tenant), lambda: reconcile.reconcile_store(request.app.state.store, tenant)
    )
    rows = []
    for total in result.invoices():
        bearers = {b: cents for b, (_, cents) in total.bearer_totals().items()}
        rows.append(
            {
                "tenant": total.tenant,
                "invoice_id": total.invoice_id,
                "currency": total.currency or "",
                "minor": total.minor,
                "cents": bearers,
                "billed": str(Money.of(sum(bearers.values()), total.minor)),
                **{b: str(Money.of(c, total.minor)) for b, c in bearers.items()},
            }
        )
    return rows


def _billing_seqs(request: Request, tenant: str, invoice_id: str) -> dict[str, int]:
    """Each line id of the invoice with the seq of its (last) billing.line entry."""
    found: dict[str, int] = {}
    for e in read.entries(request.app.state.store, tenant=tenant, type="billing.line"):
        data = orjson.loads(e.event).get("data") or {}
        if data.get("invoice_id") == invoice_id:
            found[str(data.get("line_id"))] = e.seq
    return found


def _paginate(
    request: Request, rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    text = request.query_params.get("page", "1")
    number = int(text) if text.isdigit() and 0 < int(text) < 10**9 else 1
    start = (number - 1) * PAGE_SIZE
    params = dict(request.query_params)

    def link(n: int) -> str:
        return f"{request.url.path}?{urlencode(params | {'page': str(n)})}"

    return rows[start : start + PAGE_SIZE], {
        "first": min(start + 1, len(rows)),
        "last": min(start + PAGE_SIZE, len(rows)),
        "total": len(rows),
        "previous": link(number - 1) if number > 1 else None,
        "next": link(number + 1) if start + PAGE_SIZE < len(rows) else None,
    }


def _sync(handler: Any) -> Any:
    """A page handler run in the thread pool (it reads the store and reconciles)."""

    async def endpoint(request: Request) -> Response:
        response: Response = await run_in_threadpool(handler, request)
        return response

    return endpoint


def routes() -> list[Route]:
    return [
        Route("/static/app.css", stylesheet),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", _sync(home)),
        Route("/invoices", _sync(invoices)),
        Route("/invoices/{tenant}/{invoice}", _sync(invoice)),
        Route("/invoices/{tenant}/{invoice}/letter", _sync(letter)),
        Route("/entries/{seq}", _sync(entry)),
        Route("/promises", _sync(promises)),
        Route("/promises/{tenant}/{promise}", _sync(story)),
        Route("/envelope", _sync(envelope)),
    ]
