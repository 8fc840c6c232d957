"""The JSON API under /api/v1: the documents the commands write, scoped to the caller.

- `GET /api/v1/whoami`: the caller's role;
- `GET /api/v1/tenants`: the tenants the caller may read, a page at a time;
- `GET /api/v1/reconciliation?tenant=&invoice=`: `reconcile --format json`;
- `GET /api/v1/reports/{name}?tenant=&since=&until=&by=`: `report NAME --format json`;
- `GET /api/v1/entries/{seq}`: one entry as stored, with its inclusion proof;
- `GET /api/v1/lines`, `GET /api/v1/findings`: the reconciled lines and the findings
  (reconcile/serve/finance.py), filtered as the pages are and paginated;
- `GET /api/v1/disputes/{invoice}` or `/api/v1/dispute?invoice=`: the signed packet.

A tenant token reads its own tenant whatever it names (access.tenant_scope), and the
documents are computed from that tenant's entries and the fleet's only, so no other
tenant's identifier can be in them.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import reconcile
from ledger import read
from ledger.tokens import TokenInfo
from reconcile import reports
from reconcile.engine.figures import parse_time
from reconcile.serve.access import caller, tenant_scope

READERS = ("operator", "tenant")
REPORT_NAMES = (*reports.REPORTS, "serving")


class JSON(Response):
    """orjson's bytes: the same numbers and text the commands write, fast."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def _reader(request: Request) -> TokenInfo:
    return caller(request, *READERS)


async def whoami(request: Request) -> Response:
    info = await run_in_threadpool(caller, request, "operator", "tenant", "collector")
    return JSON({"role": str(info.role), "token_id": info.token_id})


def tenants_doc(request: Request) -> dict[str, Any]:
    """The tenants the caller may read, a page at a time (`page`, as every list)."""
    from reconcile.serve import filters

    info = _reader(request)
    f = filters.parse(request, info.role)
    if info.role.tenant is not None:
        names = [info.role.tenant]
    else:
        names = read.tenants(request.app.state.store)
        names = [n for n in names if f.tenant in (None, n)]
    shown, page = f.paginate(request.url.path, names)
    return {"tenants": shown, "page": page}


async def tenants(request: Request) -> Response:
    return JSON(await run_in_threadpool(tenants_doc, request))


def reconciliation_doc(request: Request, info: TokenInfo) -> dict[str, Any]:
    tenant = tenant_scope(info.role, request.query_params.get("tenant"))
    invoice = request.query_params.get("invoice") or None
    return dict(
        request.app.state.documents.get(
            tenant,
            ("reconciliation", tenant, invoice),
            lambda: reconcile.reconcile_store(request.app.state.store, tenant, invoice).as_json(),
        )
    )


async def reconciliation(request: Request) -> Response:
    info = await run_in_threadpool(_reader, request)
    return JSON(await run_in_threadpool(reconciliation_doc, request, info))


def report_doc(request: Request, info: TokenInfo, name: str) -> str:
    """The report's JSON text, as `report NAME --format json` writes it; its own options
    (since, until, by, view) from the query string, checked as the command checks them."""
    spec = reports.report_or_view(name)
    if spec is None:
        raise HTTPException(404, f"no report named {name!r}; reports: {', '.join(REPORT_NAMES)}")
    q = request.query_params
    tenant = tenant_scope(info.role, q.get("tenant"))
    options: dict[str, Any] = {}
    for option in spec.options:
        value = q.get(option.name)
        if not value:
            continue
        if option.choices and value not in option.choices:
            raise HTTPException(400, f"{option.name}: one of {', '.join(option.choices)}")
        options[option.name] = _time(value, option.name) if option.time else value

    def compute() -> str:
        return reports.report_json(
            name, reports.report(request.app.state.store, name, tenant, **options)
        )

    return str(
        request.app.state.documents.get(
            tenant, ("report", name, tenant, tuple(sorted(options.items()))), compute
        )
    )


async def report(request: Request) -> Response:
    info = await run_in_threadpool(_reader, request)
    name = request.path_params["name"]
    text = await run_in_threadpool(report_doc, request, info, name)
    return Response(text, media_type="application/json")


def entry_doc(request: Request, info: TokenInfo, seq: int) -> dict[str, Any]:
    store = request.app.state.store
    found = read.entries(store, seqs=[seq])
    # another tenant's entry is answered as a missing one: its existence is not told
    if not found or (
        info.role.tenant is not None and found[0].tenant not in (None, info.role.tenant)
    ):
        raise HTTPException(404, f"no entry {seq}")
    entry = found[0]
    proof = read.entry_proof(store, seq)
    assert proof is not None
    return {
        "seq": entry.seq,
        "source": entry.source,
        "id": entry.id,
        "type": entry.type,
        "tenant": entry.tenant,
        "event": orjson.loads(entry.event),
        "leaf_hash": base64.b64encode(proof.leaf_hash).decode(),
        "inclusion": {
            "tree_size": proof.size,
            "root": base64.b64encode(proof.root).decode(),
            "proof": [base64.b64encode(h).decode() for h in proof.proof],
        },
    }


async def entry(request: Request) -> Response:
    info = await run_in_threadpool(_reader, request)
    seq = _seq(request.path_params["seq"])
    return JSON(await run_in_threadpool(entry_doc, request, info, seq))


def dispute_packet(
    request: Request, info: TokenInfo, tenant_asked: str | None, invoice: str
) -> dict[str, Any]:
    """The signed dispute packet of one invoice of one tenant (`dispute`'s), signed with
    the server's key (`serve --key`)."""
    from reconcile.packets.dispute import build_dispute

    signer = request.app.state.signer
    if signer is None:
        raise HTTPException(
            404, "this server signs no packets: it was started without a signing key"
        )
    tenant = tenant_scope(info.role, tenant_asked)
    if tenant is None:
        raise HTTPException(400, "tenant: an operator names the tenant of the packet")
    packet: dict[str, Any] = build_dispute(request.app.state.store, tenant, invoice, signer)
    return packet


async def dispute(request: Request) -> Response:
    return await _dispute(request, request.path_params["invoice"])


async def dispute_q(request: Request) -> Response:
    """The packet of `?invoice=…` (any id, `/` included) of `?tenant=…`."""
    invoice = request.query_params.get("invoice")
    if not invoice:
        await run_in_threadpool(_reader, request)
        raise HTTPException(400, "invoice: needed")
    return await _dispute(request, invoice)


async def _dispute(request: Request, invoice: str) -> Response:
    from reconcile.packets.dispute import packet_json

    info = await run_in_threadpool(_reader, request)
    packet = await run_in_threadpool(
        dispute_packet, request, info, request.query_params.get("tenant"), invoice
    )
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in invoice)[:80]
    return Response(
        packet_json(packet),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="dispute-{name}.json"'},
    )


def _listed(request: Request, what: str) -> dict[str, Any]:
    """A list of lines or findings, filtered (reconcile/serve/filters.py) and paginated:
    `items` (a page of them) and `page` (number, size, total, the links either side)."""
    from reconcile.serve import filters, finance

    info = _reader(request)
    f = filters.parse(request, info.role)
    invoice = request.query_params.get("invoice") or None
    rows = (finance.lines if what == "lines" else finance.findings)(request, f, invoice)
    items, page = f.paginate(request.url.path, rows)
    return {"items": items, "page": page}


async def lines(request: Request) -> Response:
    return JSON(await run_in_threadpool(_listed, request, "lines"))


async def findings(request: Request) -> Response:
    return JSON(await run_in_threadpool(_listed, request, "findings"))


def _seq(text: str) -> int:
    if not text.isdigit() or len(text) > 18 or int(text) < 1:
        raise HTTPException(404, f"no entry {text[:40]!r}")
    return int(text)


def _time(text: str | None, name: str) -> int | None:
    if not text:
        return None
    try:
        return parse_time(text)
    except ValueError:
        raise HTTPException(400, f"{name}: not an RFC 3339 time: {text[:60]!r}") from None


def routes() -> list[Route]:
    return [
        Route("/api/v1/whoami", whoami),
        Route("/api/v1/tenants", tenants),
        Route("/api/v1/reconciliation", reconciliation),
        Route("/api/v1/reports/{name}", report),
        Route("/api/v1/entries/{seq}", entry),
        Route("/api/v1/disputes/{invoice}", dispute),
        Route("/api/v1/dispute", dispute_q),
        Route("/api/v1/lines", lines),
        Route("/api/v1/findings", findings),
    ]
