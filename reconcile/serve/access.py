"""Who is asking, and what they may see (ledger/tokens.py has the roles).

Every route asks `caller(request)` first, so no route can forget it:
- no credentials, a malformed, unknown or revoked token: 401, and nothing else;
- a valid token whose role may not use the route: 403, and nothing else.

Credentials are `Authorization: Bearer <token>`; pages also take the token from the
`gpuledger_token` cookie that `/login` sets (HttpOnly, SameSite=Strict), since a browser
following a link sends no header. Writes take the header only, so no other site can make
a signed-in browser write.

`tenant_scope` is the one place a request's tenant is decided: a tenant token always
reads its own tenant, whatever the request names; naming another is refused (403), so
a probe learns nothing of which tenants exist.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ledger import Store
from ledger.tokens import Role, TokenInfo, authenticate

COOKIE = "gpuledger_token"


def caller(request: Request, *allowed: str, cookie: bool = True) -> TokenInfo:
    """The token of the request, if its role kind is one of `allowed`; else 401 or 403."""
    text = _credentials(request, cookie)
    store: Store = request.app.state.store
    info = authenticate(store, text) if text else None
    if info is None:
        raise HTTPException(401, "a valid token is needed", {"WWW-Authenticate": "Bearer"})
    if info.role.kind not in allowed:
        raise HTTPException(403, f"the role {info.role.kind} may not use this route")
    return info


def tenant_scope(role: Role, asked: str | None) -> str | None:
    """The tenant a request reads: a tenant token's own; for an operator, the one asked
    (None: every tenant)."""
    if role.kind == "operator":
        return asked or None
    if role.kind == "tenant":
        if asked and asked != role.name:
            raise HTTPException(403, "a tenant token reads its own tenant only")
        return role.name
    raise HTTPException(403, "this role reads nothing")


def _credentials(request: Request, cookie: bool) -> str | None:
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        return token.strip() if scheme.lower() == "bearer" else None
    return request.cookies.get(COOKIE) if cookie else None
