"""The ASGI application of `gpuledger serve` (Starlette; uvicorn serves it).

Read-mostly: every GET reads one consistent snapshot of the store through the same
library calls as the commands, so a page, the API and a command never disagree. The one
write path is `POST /api/v1/events` (reconcile/serve/collect.py). Handlers are plain
functions: Starlette runs them in its thread pool, so a long reconciliation never stalls
the event loop.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ingest.http import MalformedBatch, UnsupportedMediaType, mode_of, records_of_body
from ledger import Store, read
from ledger.note import read_signer
from reconcile.serve import api, metrics, openapi, pages
from reconcile.serve.access import caller
from reconcile.serve.cache import DocumentCache
from reconcile.serve.collect import MAX_BODY_BYTES, Writer, caller_rights
from schemas.errors import BadInput, CheckFailed

log = logging.getLogger("gpuledger.serve")

#: No inline script or style, nothing from another origin, never framed.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every response, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def post_events(request: Request) -> Response:
    info = await run_in_threadpool(caller, request, "collector", "operator", cookie=False)
    mode = mode_of(request.headers.get("content-type"))
    body = await _bounded_body(request)
    owner, source = caller_rights(info)
    records = records_of_body(body, mode, f"http:{info.token_id}", owner, source)
    writer: Writer = request.app.state.writer
    answers = await run_in_threadpool(writer.append, records)
    counts = {
        status: sum(a["status"] == status for a in answers)
        for status in ("appended", "duplicate", "quarantined")
    }
    return JSONResponse({"events": answers, **counts})


async def _bounded_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HTTPException(413, f"the body is over {MAX_BODY_BYTES:,} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise HTTPException(413, f"the body is over {MAX_BODY_BYTES:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def healthz(request: Request) -> Response:
    return PlainTextResponse(f"ok {read.head(request.app.state.store)}\n")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if _wants_html(request) and exc.status_code in (401, 403, 404):
        return pages.error_page(request, exc.status_code, exc.detail, headers)
    return JSONResponse({"error": exc.detail}, exc.status_code, headers)


async def _bad_input(request: Request, exc: Exception) -> Response:
    status = 415 if isinstance(exc, UnsupportedMediaType) else 400
    where = getattr(exc, "option", None)
    message = f"{where}: {exc}" if where and not isinstance(exc, MalformedBatch) else str(exc)
    return JSONResponse({"error": message}, status)


async def _check_failed(request: Request, exc: Exception) -> Response:
    """What was checked is wrong (e.g. a packet refused: it would name another tenant)."""
    return JSONResponse({"error": str(exc)}, 409)


async def _server_error(request: Request, exc: Exception) -> Response:
    """Never a traceback to the client: the log has it, the client a one-line answer."""
    log.exception("error serving %s %s", request.method, request.url.path)
    return JSONResponse({"error": "internal error; the server's log has the details"}, 500)


def _wants_html(request: Request) -> bool:
    return not request.url.path.startswith(
        ("/api/", "/metrics")
    ) and "text/html" in request.headers.get("accept", "")


def create_app(store: Store, key: Path | None = None) -> Starlette:
    """The app over `store`; with `key` (the provider's signing key, `keygen`), customers
    download signed dispute packets and read their letters."""
    routes: list[Any] = [
        Route("/healthz", healthz),
        Route("/metrics", metrics.endpoint),
        Route("/api/v1/events", post_events, methods=["POST"]),
        *openapi.routes(),
        *api.routes(),
        *pages.routes(),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders)],
        exception_handlers={
            HTTPException: _http_error,
            BadInput: _bad_input,
            CheckFailed: _check_failed,
            Exception: _server_error,
        },
    )
    app.state.store = store
    app.state.signer = read_signer(key) if key is not None else None
    app.state.verifier = app.state.signer.verifier if key is not None else None
    app.state.writer = Writer(store)
    app.state.metrics_cache = metrics.Cache()
    app.state.documents = DocumentCache(store)
    return app
