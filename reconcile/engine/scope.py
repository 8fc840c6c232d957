"""What a command is asked about must exist: a tenant, an invoice (a typo is an error, not
an empty answer that exits 0).

`check_scope(store, tenant, invoice)` raises `ScopeError` with one line that names what
the ledger holds instead. A tenant exists when some entry carries it; an invoice when
some `billing.line` (of the tenant, when one is named) carries its `invoice_id`.
"""

from __future__ import annotations

import orjson
from sqlalchemy import Connection, func, select

from ledger import Store
from ledger.tables import entries
from schemas.errors import BadInput

SHOWN = 8  # names listed in a message; more are counted


class ScopeError(BadInput, LookupError):
    """An unknown tenant or invoice was asked for."""


def check_scope(store: Store, tenant: str | None = None, invoice: str | None = None) -> None:
    """Raise ScopeError unless `tenant` (when given) and `invoice` (when given, of `tenant`
    when that is given too) are in the ledger."""
    if tenant is None and invoice is None:
        return
    with store.reading() as conn:
        if tenant is not None and conn.execute(
                select(entries.c.seq).where(entries.c.tenant == tenant).limit(1)).first() is None:
            raise ScopeError(f"no tenant {tenant!r} in the ledger ({_listed('tenants', tenants(conn))})", option="tenant")
        if invoice is not None:
            found = invoices(conn, tenant)
            if invoice not in found:
                whose = f" of tenant {tenant!r}" if tenant is not None else ""
                raise ScopeError(f"no invoice {invoice!r}{whose} in the ledger ({_listed('invoices', found)})", option="invoice")


def tenants(conn: Connection) -> list[str]:
    """Every tenant, walking the (tenant, tenant_seq) index one tenant at a time."""
    found = []
    tenant = conn.execute(select(func.min(entries.c.tenant))).scalar()
    while tenant is not None:
        found.append(str(tenant))
        tenant = conn.execute(select(func.min(entries.c.tenant)).where(entries.c.tenant > tenant)).scalar()
    return found


def invoices(conn: Connection, tenant: str | None = None) -> list[str]:
    """The invoice ids of the billing lines (of `tenant`), sorted."""
    query = select(entries.c.event).where(entries.c.type == "billing.line")
    if tenant is not None:
        query = query.where(entries.c.tenant == tenant)
    found = {orjson.loads(event)["data"].get("invoice_id") for (event,) in conn.execute(query)}
    return sorted(str(i) for i in found if i is not None)


def _listed(kind: str, names: list[str]) -> str:
    if not names:
        return f"it holds no {kind}"
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"{kind}: {', '.join(names[:SHOWN])}{more}"
