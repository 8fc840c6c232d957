"""What a command is asked about must exist: a tenant, an invoice (a typo is an error, not
an empty answer that exits 0).

`check_scope(store, tenant, invoice)` raises `ScopeError` with one line that names what
the ledger holds instead. A tenant exists when some entry carries it; an invoice when
some `billing.line` (of the tenant, when one is named) carries its `invoice_id`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from schemas.errors import BadInput

if TYPE_CHECKING:  # the checks read through ledger.read (SQLAlchemy), imported where made
    from ledger import Store

SHOWN = 8  # names listed in a message; more are counted


class ScopeError(BadInput, LookupError):
    """An unknown tenant or invoice was asked for."""


def check_scope(store: Store, tenant: str | None = None, invoice: str | None = None) -> None:
    """Raise ScopeError unless `tenant` (when given) and `invoice` (when given, of `tenant`
    when that is given too) are in the ledger."""
    from ledger import read

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
    from ledger import read

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


@dataclass(frozen=True)
class Period:
    """A half-open period [since, until) in µs since the epoch; None is open on that side.

    What falls in a period (RULES.md, "Periods"), each thing by its own time:
    - a billing line by its billed interval: the line is in when its interval starts in the
      period (`period_start` in [since, until)), whole; so a line is in exactly one month
      and the months of a year add up to the year;
    - a job by the time it was asked for: `job.submitted`, else its first start, else its
      first grant; its attempts, step gaps and allocation time come with it;
    - a promise by the start it promised (`start_by`).
    Unbilled time is the held time inside the period that no billed piece covers.
    """

    since: int | None = None
    until: int | None = None

    def __post_init__(self) -> None:
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ScopeError(
                "the period is empty: its start is not before its end", option="since"
            )

    @property
    def open(self) -> bool:
        return self.since is None and self.until is None

    def holds(self, us: int | None) -> bool:
        """Whether the time `us` is in the period (an unknown time is in an open period only)."""
        if us is None:
            return self.open
        return (self.since is None or us >= self.since) and (self.until is None or us < self.until)

    def sql(self, expr: str) -> str:
        """SQL: whether `expr` (µs) is in the period (literals: the bounds are integers)."""
        if self.open:
            return "TRUE"
        parts = [f"{expr} IS NOT NULL"]
        if self.since is not None:
            parts.append(f"{expr} >= {int(self.since)}")
        if self.until is not None:
            parts.append(f"{expr} < {int(self.until)}")
        return " AND ".join(parts)

    def label(self) -> str:
        """The period as people read it: [2026-05-01T00:00:00Z, +∞)."""
        from reconcile.engine.figures import iso

        since = iso(self.since) if self.since is not None else "-∞"
        until = iso(self.until) if self.until is not None else "+∞"
        return f"[{since}, {until})"

    def as_dict(self) -> dict[str, str | None]:
        from reconcile.engine.figures import iso

        return {"since": iso(self.since), "until": iso(self.until)}


#: Every period: nothing filtered.
ALL_TIME = Period()
