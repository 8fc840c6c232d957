"""What a command is asked about must exist: a tenant, an invoice (a typo is an error, not
an empty answer that exits 0).

`check_scope(store, tenant, invoice)` raises `ScopeError` with one line that names what
the ledger holds instead. A tenant exists when some entry carries it; an invoice when
some `billing.line` (of the tenant, when one is named) carries its `invoice_id`.
"""

from __future__ import annotations

import orjson

from ledger import Store, read
from schemas.errors import BadInput

SHOWN = 8  # names listed in a message; more are counted


class ScopeError(BadInput, LookupError):
    """An unknown tenant or invoice was asked for."""


def check_scope(store: Store, tenant: str | None = None, invoice: str | None = None) -> None:
    """Raise ScopeError unless `tenant` (when given) and `invoice` (when given, of `tenant`
    when that is given too) are in the ledger."""
    if tenant is not None and not read.has_tenant(store, tenant):
        raise ScopeError(
            f"no tenant {tenant!r} in the ledger ({_listed('tenants', read.tenants(store))})",
            option="tenant",
        )
    if invoice is not None:
        found = invoices(store, tenant)
        if invoice not in found:
            whose = f" of tenant {tenant!r}" if tenant is not None else ""
            raise ScopeError(
                f"no invoice {invoice!r}{whose} in the ledger ({_listed('invoices', found)})",
                option="invoice",
            )


def invoices(store: Store, tenant: str | None = None) -> list[str]:
    """The invoice ids of the billing lines (of `tenant`), sorted."""
    lines = (
        read.entries(store, type="billing.line")
        if tenant is None
        else read.entries(store, type="billing.line", tenant=tenant)
    )
    found = {orjson.loads(entry.event)["data"].get("invoice_id") for entry in lines}
    return sorted(str(i) for i in found if i is not None)


def _listed(kind: str, names: list[str]) -> str:
    if not names:
        return f"it holds no {kind}"
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"{kind}: {', '.join(names[:SHOWN])}{more}"
