"""The authorization matrix of `gpuledger serve`: every route of the app × 7 credentials ×
two tenants' objects, on a real uvicorn over loopback.

The routes are read from the app itself (`create_app(...).routes`), and
`test_every_route_has_examples` fails when one has no example here: a new route cannot
escape the matrix. Each example is a URL and the tenant owning what it names (None: no
tenant's object). Expected statuses follow docs/serve.md and reconcile/serve/access.py:
- public routes (health, the stylesheet, sign-in, the OpenAPI document and its schemas):
  200 for anyone;
- no token, a wrong one, a revoked one: 401, and nothing else;
- a collector: whoami and posting events only (403 elsewhere);
- the fleet's pages (metrics, a promise's story and device timeline, capacity): the
  operator only;
- a tenant's object: the operator and that tenant; the other tenant gets 403 (404 for a
  ledger entry: its existence is not told).
And no response to a tenant holds any identifier of the other tenant (its name, its ids,
its events' ids), even escaped in HTML or in a URL.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlencode

import orjson
import pytest

from ledger import Store, read
from reconcile.serve import create_app
from tests.serve_helpers import ID_FIELDS, Served, make_key, make_store, make_tokens, serving

WHO = ("none", "wrong", "revoked", "operator", "acme", "bravo", "collector")
PUBLIC = {
    "/healthz",
    "/static/app.css",
    "/api/v1/openapi.json",
    "/api/v1/schemas/{name}",
}
FLEET = {
    "/metrics",
    "/story",
    "/devices",
    "/capacity",
    "/promises/{tenant}/{promise}",
    "/promises/{tenant}/{promise}/devices",
}
BATCH = "application/cloudevents-batch+json"

Example = tuple[str, str | None]  # the URL, and the tenant owning what it names


def _q(path: str, **params: str) -> str:
    return f"{path}?{urlencode(params)}"


def _prefix(tenant: str) -> str:
    return "" if tenant == "acme" else "bravo-"


def examples(store: Store) -> dict[tuple[str, str], list[Example]]:
    """(method, route path) -> the URLs that exercise it, each with its owner."""

    def billing_seq(tenant: str) -> int:
        return read.entries(store, tenant=tenant, type="billing.line")[0].seq

    per_tenant: dict[tuple[str, str], list[Example]] = {}

    def owned(method: str, path: str, make: object) -> None:
        assert callable(make)
        per_tenant[(method, path)] = [(make(t, _prefix(t)), t) for t in ("acme", "bravo")]

    owned("GET", "/api/v1/entries/{seq}", lambda t, p: f"/api/v1/entries/{billing_seq(t)}")
    owned("GET", "/entries/{seq}", lambda t, p: f"/entries/{billing_seq(t)}")
    owned(
        "GET",
        "/api/v1/disputes/{invoice}",
        lambda t, p: _q(f"/api/v1/disputes/{p}INV-2026-01", tenant=t),
    )
    owned(
        "GET",
        "/api/v1/dispute",
        lambda t, p: _q("/api/v1/dispute", tenant=t, invoice=f"{p}INV-2026-01"),
    )
    owned("GET", "/invoices/{tenant}/{invoice}", lambda t, p: f"/invoices/{t}/{p}INV-2026-01")
    owned(
        "GET",
        "/invoices/{tenant}/{invoice}/letter",
        lambda t, p: f"/invoices/{t}/{p}INV-2026-01/letter",
    )
    owned("GET", "/invoice", lambda t, p: _q("/invoice", tenant=t, invoice=f"{p}INV-2026-01"))
    owned("GET", "/letter", lambda t, p: _q("/letter", tenant=t, invoice=f"{p}INV-2026-01"))
    owned(
        "GET",
        "/line",
        lambda t, p: _q(
            "/line", tenant=t, invoice=f"{p}INV-2026-01", line=f"{p}INV-2026-01:A-100"
        ),
    )
    owned(
        "GET",
        "/finding",
        lambda t, p: _q(
            "/finding",
            tenant=t,
            invoice=f"{p}INV-2026-01",
            line=f"{p}INV-2026-01:A-100",
            category="restart_lost",
        ),
    )
    owned("GET", "/story", lambda t, p: _q("/story", tenant=t, promise=f"{p}promise-j-200"))
    owned("GET", "/devices", lambda t, p: _q("/devices", tenant=t, promise=f"{p}promise-j-200"))
    owned("GET", "/promises/{tenant}/{promise}", lambda t, p: f"/promises/{t}/{p}promise-j-200")
    owned(
        "GET",
        "/promises/{tenant}/{promise}/devices",
        lambda t, p: f"/promises/{t}/{p}promise-j-200/devices",
    )

    def listed(path: str) -> list[Example]:
        """A list: everything in scope, and each tenant's named in the query string."""
        return [
            (path, None),
            (_q(path, tenant="acme"), "acme"),
            (_q(path, tenant="bravo"), "bravo"),
        ]

    reports = ("promises", "capacity", "outcomes", "serving", "placement", "envelope")
    return per_tenant | {
        ("GET", "/healthz"): [("/healthz", None)],
        ("GET", "/static/app.css"): [("/static/app.css", None)],
        ("GET", "/api/v1/openapi.json"): [("/api/v1/openapi.json", None)],
        ("GET", "/api/v1/schemas/{name}"): [("/api/v1/schemas/reconciliation.json", None)],
        ("GET", "/login"): [("/login", None)],
        ("POST", "/login"): [("/login", None)],
        ("POST", "/logout"): [("/logout", None)],
        ("POST", "/api/v1/events"): [("/api/v1/events", None)],
        ("GET", "/metrics"): [("/metrics", None)],
        ("GET", "/api/v1/whoami"): [("/api/v1/whoami", None)],
        ("GET", "/api/v1/tenants"): [("/api/v1/tenants", None)],
        ("GET", "/api/v1/reconciliation"): listed("/api/v1/reconciliation"),
        ("GET", "/api/v1/reports/{name}"): [
            example for name in reports for example in listed(f"/api/v1/reports/{name}")
        ],
        ("GET", "/api/v1/lines"): listed("/api/v1/lines"),
        ("GET", "/api/v1/findings"): listed("/api/v1/findings"),
        ("GET", "/"): [("/", None)],
        ("GET", "/invoices"): listed("/invoices"),
        ("GET", "/periods"): listed("/periods"),
        ("GET", "/findings"): listed("/findings"),
        ("GET", "/promises"): listed("/promises"),
        ("GET", "/envelope"): listed("/envelope"),
        ("GET", "/capacity"): [("/capacity", None), ("/capacity?period=2026-01", None)],
    }


def app_routes(store: Store, key: Path) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, read from the app (HEAD goes with GET)."""
    found = set()
    for route in create_app(store, key).routes:
        methods = getattr(route, "methods", None) or {"GET"}
        for method in methods - {"HEAD"}:
            found.add((method, route.path))  # type: ignore[attr-defined]
    return found


def expected(method: str, path: str, owner: str | None, who: str) -> int:
    if path in PUBLIC or (method, path) == ("GET", "/login"):
        return 200
    if (method, path) == ("POST", "/login"):
        return 401  # an empty form: no token to sign in with, whoever asks
    if (method, path) == ("POST", "/logout"):
        return 200  # 303 to the sign-in page, which is public
    if who in ("none", "wrong", "revoked"):
        return 401
    if path == "/api/v1/whoami":
        return 200
    if path == "/api/v1/events":
        return 200 if who in ("operator", "collector") else 403
    if who == "collector":
        return 403
    if path in FLEET:
        return 200 if who == "operator" else 403
    if owner is not None and who not in ("operator", owner):
        return 404 if path.endswith("/{seq}") else 403
    return 200


# -- the store, and what names each tenant ------------------------------------------------


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    tmp = tmp_path_factory.mktemp("matrix")
    store = make_store(f"sqlite:///{tmp / 'ledger.db'}", tmp, late=True)
    tokens = make_tokens(store)
    key = make_key(tmp)
    with serving(store, key) as base:
        yield Served(base, store, tokens, key), key
    store.close()


def identifiers(store: Store, tenant: str) -> list[str]:
    """The tenant's name, every id its events carry, and its events' own ids; longest first."""
    found = {tenant}
    for e in read.entries(store, tenant=tenant):
        found.add(e.id)
        data = orjson.loads(e.event).get("data") or {}
        found.update(str(data[name]) for name in ID_FIELDS if isinstance(data.get(name), str))
    return sorted(found, key=len, reverse=True)


def leaked(store: Store, body: bytes, reader: str) -> list[str]:
    """The other tenant's identifiers found in what `reader` received: the body read as
    text, HTML entities and URL escapes undone, the reader's own identifiers taken out
    first (bravo's ids are acme's with a `bravo-` prefix)."""
    other = "bravo" if reader == "acme" else "acme"
    text = unquote(html.unescape(body.decode("utf-8", "replace")))
    for own in identifiers(store, reader):
        text = text.replace(own, "\0")
    return [
        name
        for name in identifiers(store, other)
        if re.search(rf"(?<!bravo-){re.escape(name)}", text)
    ]


# -- the tests ------------------------------------------------------------------------------


def test_every_route_has_examples(setup: tuple[Served, Path]) -> None:
    served, key = setup
    assert set(examples(served.store)) == app_routes(served.store, key)


def _cases() -> list[tuple[str, str]]:
    """Parametrized by (method, path) only: the URLs are made from the store."""
    return [
        ("GET", p)
        for p in [
            "/healthz",
            "/metrics",
            "/api/v1/openapi.json",
            "/api/v1/schemas/{name}",
            "/api/v1/whoami",
            "/api/v1/tenants",
            "/api/v1/reconciliation",
            "/api/v1/reports/{name}",
            "/api/v1/entries/{seq}",
            "/api/v1/disputes/{invoice}",
            "/api/v1/dispute",
            "/api/v1/lines",
            "/api/v1/findings",
            "/static/app.css",
            "/login",
            "/",
            "/invoices",
            "/periods",
            "/invoices/{tenant}/{invoice}",
            "/invoices/{tenant}/{invoice}/letter",
            "/invoice",
            "/letter",
            "/findings",
            "/line",
            "/finding",
            "/entries/{seq}",
            "/promises",
            "/promises/{tenant}/{promise}",
            "/promises/{tenant}/{promise}/devices",
            "/story",
            "/devices",
            "/capacity",
            "/envelope",
        ]
    ] + [("POST", "/api/v1/events"), ("POST", "/login"), ("POST", "/logout")]


def test_the_parametrized_cases_are_the_apps_routes(setup: tuple[Served, Path]) -> None:
    served, key = setup
    assert set(_cases()) == app_routes(served.store, key)


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize(("method", "path"), _cases())
def test_authorization_matrix(
    setup: tuple[Served, Path], method: str, path: str, who: str
) -> None:
    served, _ = setup
    token = {"none": None, "wrong": "gpl_000000000000_not-a-real-secret"}.get(
        who, served.tokens.get(who)
    )
    for url, owner in examples(served.store)[(method, path)]:
        body = b"[]" if path == "/api/v1/events" else (b"" if method == "POST" else None)
        content_type = BATCH if path == "/api/v1/events" else None
        if path == "/login" and method == "POST":
            content_type = "application/x-www-form-urlencoded"
        status, headers, answer = served.call(url, token, method, body, content_type)
        want = expected(method, path, owner, who)
        assert status == want, (url, who, status, answer[:200])
        if status in (401, 403, 404) and not path.startswith("/login"):
            assert json.loads(answer).keys() == {"error"}, (url, who)
        if who in ("acme", "bravo"):
            assert leaked(served.store, answer, who) == [], (url, who)
        assert headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in headers["content-security-policy"]


def test_the_leak_check_sees_a_leak(setup: tuple[Served, Path]) -> None:
    """The check itself: another tenant's id is found, plain, in HTML or in a URL; the
    reader's own ids (acme's with a prefix) are not taken for acme's."""
    store = setup[0].store
    assert leaked(store, b'{"line": "bravo-INV-2026-01:A-100"}', "bravo") == []
    assert "A-100" in leaked(store, b"<td>A-100</td>", "bravo")
    assert "INV-2026-01:A-100" in leaked(store, b'href="/line?line=INV-2026-01%3AA-100"', "bravo")
    assert "bravo" in leaked(store, b"<bdi>bravo</bdi>", "acme")
    assert "bravo" in leaked(store, b"bravo&#45;j-100", "acme")  # every bravo id holds "bravo"
