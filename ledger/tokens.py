"""API tokens for `gpuledger serve`: who may read and write through the web application.

A token is `gpl_<token_id>_<secret>`: the id is a public handle (shown by `token list`,
named by `token revoke`), the secret 256 random bits. The store keeps only the SHA-256 of
the whole text, so a copy of the database grants nothing; with that much entropy a slow
password hash would add nothing. A token has one role:

- `operator`: every document, page and route;
- `tenant:NAME`: that tenant's own documents, packets and pages, never another's byte;
- `collector:SOURCE`: posts events whose `source` is SOURCE or lies under it
  (`SOURCE/…`), with the rights of its owner (`provider`, or `tenant:NAME`:
  schemas/owners.py); it reads nothing.

A revoked token stays listed, with when it was revoked, and never authenticates again.
"""

from __future__ import annotations

import hmac
import secrets
from datetime import datetime, timezone
from hashlib import sha256
from typing import Literal, NamedTuple

from sqlalchemy import insert, select, update

from ledger.errors import LedgerError
from ledger.store import Store
from ledger.tables import api_tokens
from schemas.owners import Owner
from schemas.types import format_utc

PREFIX = "gpl_"
RoleKind = Literal["operator", "tenant", "collector"]
_MAX_NAME = 256


class TokenError(LedgerError):
    """A role, token id or token text that cannot be used."""


class Role(NamedTuple):
    """What a token may do: `kind` with its tenant or source (`name`; "" for operator)."""

    kind: RoleKind
    name: str = ""

    @classmethod
    def parse(cls, text: str) -> Role:
        if text == "operator":
            return cls("operator")
        kind, sep, name = text.partition(":")
        if not sep or kind not in ("tenant", "collector"):
            raise TokenError(
                f"expected operator, tenant:NAME or collector:SOURCE, found {text!r}",
                option="role",
            )
        if not name.strip() or len(name) > _MAX_NAME or not name.isprintable():
            raise TokenError(
                f"the {kind} of role {text!r} is empty, too long or unprintable", option="role"
            )
        return cls("tenant" if kind == "tenant" else "collector", name)

    def __str__(self) -> str:
        return "operator" if self.kind == "operator" else f"{self.kind}:{self.name}"

    @property
    def tenant(self) -> str | None:
        """The one tenant a tenant token reads; None for the others."""
        return self.name if self.kind == "tenant" else None


class TokenInfo(NamedTuple):
    token_id: str
    role: Role
    owner: Owner
    label: str
    created_at: str
    revoked_at: str | None


PROVIDER_OWNER = Owner()


def create(
    store: Store,
    role: Role,
    owner: Owner = PROVIDER_OWNER,
    label: str = "",
    now: datetime | None = None,
) -> tuple[TokenInfo, str]:
    """A new token: its stored description and the token text, which is shown once."""
    if owner.tenant is not None and role.kind != "collector":
        raise TokenError(
            "only a collector token has an owner other than the provider", option="owner"
        )
    token_id = secrets.token_hex(6)
    text = f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    created_at = format_utc(now or datetime.now(timezone.utc))
    with store.writing() as conn:
        conn.execute(
            insert(api_tokens).values(
                token_id=token_id,
                digest=_digest(text),
                role=str(role),
                owner=str(owner),
                label=label,
                created_at=created_at,
                revoked_at=None,
            )
        )
    return TokenInfo(token_id, role, owner, label, created_at, None), text


def listed(store: Store) -> list[TokenInfo]:
    """Every token ever created, oldest first, revoked ones included."""
    with store.reading() as conn:
        rows = conn.execute(
            select(api_tokens).order_by(api_tokens.c.created_at, api_tokens.c.token_id)
        )
        return [_info(row._mapping) for row in rows]


def revoke(store: Store, token_id: str, now: datetime | None = None) -> TokenInfo:
    """Revoke a token by its id (safe to repeat: the first revocation's time stays)."""
    when = format_utc(now or datetime.now(timezone.utc))
    t = api_tokens.c
    with store.writing() as conn:
        conn.execute(
            update(api_tokens)
            .where(t.token_id == token_id, t.revoked_at.is_(None))
            .values(revoked_at=when)
        )
        row = conn.execute(select(api_tokens).where(t.token_id == token_id)).first()
    if row is None:
        raise TokenError(f"no token has the id {token_id!r}", option="token_id")
    return _info(row._mapping)


def authenticate(store: Store, text: str) -> TokenInfo | None:
    """The live token whose text this is, or None (unknown, malformed, wrong or revoked).
    The digest is compared in constant time, so timing says nothing of the secret."""
    token_id = _token_id(text)
    if token_id is None:
        return None
    with store.reading() as conn:
        row = conn.execute(select(api_tokens).where(api_tokens.c.token_id == token_id)).first()
    if row is None or not hmac.compare_digest(bytes(row.digest), _digest(text)):
        return None
    info = _info(row._mapping)
    return None if info.revoked_at is not None else info


def _token_id(text: str) -> str | None:
    if not text.startswith(PREFIX) or len(text) > 128:
        return None
    token_id, sep, secret = text[len(PREFIX) :].partition("_")
    return token_id if sep and secret and len(token_id) == 12 else None


def _digest(text: str) -> bytes:
    return sha256(text.encode("utf-8", "surrogatepass")).digest()


def _info(row: object) -> TokenInfo:
    m = dict(row)  # type: ignore[call-overload]
    return TokenInfo(
        m["token_id"],
        Role.parse(m["role"]),
        Owner.parse(m["owner"]),
        m["label"],
        m["created_at"],
        m["revoked_at"],
    )
