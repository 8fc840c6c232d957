"""The pages of `gpuledger serve`: rendered on the server from the package's templates and
one stylesheet; no script, no build step, nothing from another origin.

Every page asks access.caller first. Data is escaped as on every page of gpuledger
(reconcile/reports/pages.py: autoescape, control characters shown, ids in `<bdi>`).
Lists paginate (`?page=N`, PAGE_SIZE rows), and every filter is a query parameter, so a
link can be shared: the one who opens it sees what their own token allows.
"""

from __future__ import annotations

from dataclasses import replace
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
from ledger.tokens import TokenInfo, authenticate
from reconcile import reports
from reconcile.engine.rules import BEARERS, CATEGORY_ORDER
from reconcile.engine.scope import ALL_TIME, Period
from reconcile.reports.pages import environment
from reconcile.serve import filters, finance, operator
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


def href(path: str, **params: Any) -> str:
    """`path` with `params` in its query string, each escaped (an id may hold `/`, `?`, `&`)."""
    given = {k: str(v) for k, v in params.items() if v is not None and v != ""}
    return f"{path}?{urlencode(given)}" if given else path


_ENV.globals["href"] = href


def _page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_ENV.get_template(template).render(**context), status)


def _filter_form(
    action: str, f: filters.Filters, fields: tuple[str, ...], **hidden: str | None
) -> dict[str, Any]:
    """What filters.html.j2 needs: the form's action, its fields and the values chosen."""
    return {
        "action": action,
        "f": f,
        "fields": fields,
        "classes": filters.CLASSES,
        "categories": CATEGORY_ORDER,
        "bearers": BEARERS,
        "hidden": [(k, v) for k, v in hidden.items() if v],
    }


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
    """The finance headline, of the period asked for (`?period=YYYY-MM` or `?since=`,
    `?until=`; none: every line)."""
    who = caller(request, "operator", "tenant")
    f = filters.parse(request, who.role)
    period = _period(f)
    invoices = _invoice_rows(request, who, f.tenant, period)
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
    return _page(
        "home.html.j2", who=who, cards=cards, period=None if period.open else period.label()
    )


def invoices(request: Request) -> Response:
    who = caller(request, "operator", "tenant")
    f = filters.parse(request, who.role)
    rows = _invoice_rows(request, who, f.tenant, _period(f))
    if f.placement_class or f.category or f.bearer:
        kept = {(line["tenant"], line["invoice_id"]) for line in finance.lines(request, f)}
        rows = [r for r in rows if (r["tenant"], r["invoice_id"]) in kept]
    shown, page = f.paginate("/invoices", rows)
    form = _filter_form("/invoices", f, ("class", "category", "bearer"))
    return _page("invoices.html.j2", who=who, rows=shown, page=page, tenant=f.tenant, **form)


def periods(request: Request) -> Response:
    """The lines in scope by month: a month's link opens its invoices."""
    who = caller(request, "operator", "tenant")
    f = filters.parse(request, who.role)
    shown, page = f.paginate("/periods", finance.periods(request, f))
    form = _filter_form("/periods", f, ("class",))
    return _page("periods.html.j2", who=who, rows=shown, page=page, **form)


def invoice_q(request: Request) -> Response:
    """An invoice named in the query string (`?tenant=…&invoice=…`): any id works."""
    return _invoice(
        request, request.query_params.get("tenant"), finance.needed(request, "invoice")
    )


def invoice(request: Request) -> Response:
    return _invoice(request, request.path_params["tenant"], request.path_params["invoice"])


def _invoice(request: Request, tenant_asked: str | None, invoice_id: str) -> Response:
    who = caller(request, "operator", "tenant")
    tenant = tenant_scope(who.role, tenant_asked)
    if tenant is None:
        raise HTTPException(400, "tenant: an operator names the invoice's tenant")
    if not any(line["invoice_id"] == invoice_id for line in finance.tenant_lines(request, tenant)):
        raise HTTPException(404, "no such invoice")
    # the invoice's lines, filtered and a page at a time (an invoice may hold thousands)
    f = replace(filters.parse(request, who.role), tenant=tenant)
    shown, page = f.paginate(request.url.path, finance.lines(request, f, invoice_id))
    signs = request.app.state.signer is not None
    form = _filter_form(
        request.url.path,
        f,
        ("class", "category", "bearer"),
        **({"invoice": invoice_id} if request.url.path == "/invoice" else {}),
    )
    return _page(
        "invoice.html.j2",
        who=who,
        tenant=tenant,
        invoice_id=invoice_id,
        lines=shown,
        page=page,
        signs=signs,
        key_name=request.app.state.verifier.name if signs else "",
        **form,
    )


def letter(request: Request) -> Response:
    return _letter(request, request.path_params["tenant"], request.path_params["invoice"])


def letter_q(request: Request) -> Response:
    return _letter(request, request.query_params.get("tenant"), finance.needed(request, "invoice"))


def _letter(request: Request, tenant: str | None, invoice_id: str) -> Response:
    """The dispute letter of an invoice, from its signed packet's verification (as
    `dispute` writes it beside the packet); its own inline styles, no script."""
    from reconcile.packets.dispute import verify_dispute
    from reconcile.packets.letter import build_letter, render_html

    who = caller(request, "operator", "tenant")
    packet = dispute_packet(request, who, tenant, invoice_id)
    verifier = request.app.state.verifier
    html = render_html(build_letter(verify_dispute(packet, verifier), verifier.name))
    return HTMLResponse(html, headers={"Content-Security-Policy": LETTER_CSP})


def findings_page(request: Request) -> Response:
    """Every finding in scope, filtered; `invoice=` keeps one invoice's."""
    who = caller(request, "operator", "tenant")
    f = filters.parse(request, who.role)
    invoice_id = request.query_params.get("invoice") or None
    shown, page = f.paginate("/findings", finance.findings(request, f, invoice_id))
    form = _filter_form("/findings", f, ("class", "category", "bearer"), invoice=invoice_id)
    return _page("findings.html.j2", who=who, rows=shown, page=page, **form)


def line_page(request: Request) -> Response:
    """One line: what each of its GPU-seconds was, its billing entry, and its findings."""
    who = caller(request, "operator", "tenant")
    tenant = _named_tenant(who, request)
    invoice_id, line_id = finance.needed(request, "invoice"), finance.needed(request, "line")
    line = finance.one_line(request, tenant, invoice_id, line_id)
    found = finance.line_findings(request, tenant, invoice_id, line_id)
    return _page("line.html.j2", who=who, tenant=tenant, line=line, findings=found)


def finding_page(request: Request) -> Response:
    """One finding: its stretches, and the entries it cites, each linking to its proof."""
    from reconcile.packets.letter import WHY

    who = caller(request, "operator", "tenant")
    tenant = _named_tenant(who, request)
    category = finance.needed(request, "category")
    x = finance.one_finding(
        request,
        tenant,
        finance.needed(request, "invoice"),
        finance.needed(request, "line"),
        category,
    )
    entries = finance.cited(request, who, x)
    return _page(
        "finding.html.j2", who=who, tenant=tenant, x=x, entries=entries, why=WHY.get(category)
    )


def _named_tenant(who: TokenInfo, request: Request) -> str:
    tenant = tenant_scope(who.role, request.query_params.get("tenant"))
    if tenant is None:
        raise HTTPException(400, "tenant: an operator names the tenant")
    return tenant


def promises(request: Request) -> Response:
    """Promises by tenant and class; the misses grouped by cause, then listed (`cause=`
    keeps one cause's), each (for an operator) with its story and device timeline."""
    who = caller(request, "operator", "tenant")
    f = filters.parse(request, who.role)
    cause = operator.cause_of(request)
    doc = operator.promises_doc(request, f.tenant)
    summary = [s for s in doc["summary"] if operator.class_matches(f, s["placement_class"])]
    kept = operator.misses(request, f, None)
    rows = [m | {"what": _what_missed(m)} for m in kept if cause in (None, m.get("cause"))]
    shown, page = f.paginate("/promises", rows)
    form = _filter_form("/promises", f, ("class", "bearer"), cause=cause)
    return _page(
        "promises.html.j2",
        who=who,
        summary=summary,
        causes=operator.by_cause(kept),
        cause=cause,
        rows=shown,
        page=page,
        **form,
    )


def story(request: Request) -> Response:
    return _story(request, request.path_params["tenant"], request.path_params["promise"])


def story_q(request: Request) -> Response:
    return _story(request, finance.needed(request, "tenant"), finance.needed(request, "promise"))


def _story(request: Request, tenant: str, promise: str) -> Response:
    """A missed promise's diagnostic packet page (`packet`'s): operators only, since it
    shows the fleet around the job."""
    from reconcile.packets.diagnostic import build_packet, render_html

    caller(request, "operator")
    packet = build_packet(request.app.state.store, promise, tenant)
    return HTMLResponse(render_html(packet), headers={"Content-Security-Policy": LETTER_CSP})


def devices(request: Request) -> Response:
    return _devices(request, request.path_params["tenant"], request.path_params["promise"])


def devices_q(request: Request) -> Response:
    return _devices(request, finance.needed(request, "tenant"), finance.needed(request, "promise"))


def _devices(request: Request, tenant: str, promise: str) -> Response:
    """The device timeline around a missed start: operators only (every tenant's grants)."""
    who = caller(request, "operator")
    miss = operator.one_miss(request, tenant, promise)
    timeline = operator.device_timeline(request, miss)
    return _page("devices.html.j2", who=who, miss=miss, timeline=timeline)


def capacity(request: Request) -> Response:
    """Capacity in time per class and fabric domain over the period, and day by day:
    operators only (it is the fleet's)."""
    who = caller(request, "operator")
    f = filters.parse(request, who.role)
    domain = request.query_params.get("domain") or None
    answer = operator.capacity(request, f)
    doc = answer["report"]
    in_time = doc.get("in_time") or {"since": "–", "until": "–", "groups": []}
    rows, page = f.paginate("/capacity", operator.kept_groups(f, answer["days"], domain))
    return _page(
        "capacity.html.j2",
        who=who,
        f=f,
        report=doc,
        since=in_time["since"],
        until=in_time["until"],
        groups=operator.kept_groups(f, in_time["groups"], domain),
        rows=rows,
        page=page,
        domain=domain,
        classes=filters.CLASSES,
        states=operator.STATE_ORDER,
        request_since=request.query_params.get("since", ""),
        request_until=request.query_params.get("until", ""),
    )


def envelope(request: Request) -> Response:
    """The buyer's view: each provider and class against its promises (`report envelope`'s
    page)."""
    from reconcile.reports.envelope_page import html

    who = caller(request, "operator", "tenant")
    f = filters.parse(request, who.role)  # its tenant (scoped) and period
    by = request.query_params.get("by") or "both"
    if by not in ("both", "source", "placement_class"):
        raise HTTPException(400, "by: one of both, source, placement_class")
    doc = reports.report(request.app.state.store, "envelope", f.tenant, _period(f), by=by)
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


def _period(f: filters.Filters) -> Period:
    """The request's period (filters.parse checked it: not empty)."""
    return Period(f.since, f.until)


def _invoice_rows(
    request: Request, who: TokenInfo, tenant: str | None, period: Period = ALL_TIME
) -> list[dict[str, Any]]:
    """Each invoice's totals over the lines of `period` (an invoice with none is left out)."""
    tenant = tenant if tenant is not None else who.role.tenant
    result = request.app.state.documents.get(
        tenant,
        ("reconciled", tenant, period.since, period.until),
        lambda: reconcile.reconcile_store(request.app.state.store, tenant, period=period),
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
        Route("/periods", _sync(periods)),
        Route("/invoices/{tenant}/{invoice}", _sync(invoice)),
        Route("/invoices/{tenant}/{invoice}/letter", _sync(letter)),
        Route("/invoice", _sync(invoice_q)),
        Route("/letter", _sync(letter_q)),
        Route("/findings", _sync(findings_page)),
        Route("/line", _sync(line_page)),
        Route("/finding", _sync(finding_page)),
        Route("/entries/{seq}", _sync(entry)),
        Route("/promises", _sync(promises)),
        Route("/promises/{tenant}/{promise}", _sync(story)),
        Route("/promises/{tenant}/{promise}/devices", _sync(devices)),
        Route("/story", _sync(story_q)),
        Route("/devices", _sync(devices_q)),
        Route("/capacity", _sync(capacity)),
        Route("/envelope", _sync(envelope)),
    ]
