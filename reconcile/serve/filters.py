"""The filters of the pages and the API lists, read from the query string (so a link holds
its whole state and can be shared), each checked in one place:

    period    YYYY-MM (a UTC calendar month), or since / until (RFC 3339; since included,
              until excluded): a line belongs by its period's start
    tenant    operators only: a tenant token always reads its own (access.tenant_scope)
    class     a placement class: whole, mig or timeslice
    category  a category of reconcile/RULES.md
    bearer    provider, customer or disputed
    page      1, 2, ...: every list shows PAGE_SIZE rows a page

A bad value is answered 400 with a message naming the parameter and what it takes, never
an empty list that looks like an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, get_args
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ledger.tokens import Role
from reconcile.engine.figures import parse_time
from reconcile.engine.rules import BEARERS, CATEGORY_ORDER
from reconcile.serve.access import tenant_scope
from schemas.events import PlacementClass

PAGE_SIZE = 50
CLASSES: tuple[str, ...] = get_args(PlacementClass)
_MONTH = re.compile(r"(\d{4})-(\d{2})")
_MAX_PAGE = 10**9


def _bad(name: str, text: str, takes: str) -> HTTPException:
    shown = text[:60].encode("unicode_escape").decode("ascii")
    return HTTPException(400, f"{name}: {takes}, not {shown!r}")


@dataclass(frozen=True)
class Filters:
    """One request's filters; `None` is "any"."""

    tenant: str | None = None
    period: str | None = None
    since: int | None = None  # µs since the epoch
    until: int | None = None
    placement_class: str | None = None
    category: str | None = None
    bearer: str | None = None
    page: int = 1
    #: the query string's own text, for links (the parameters as given, checked)
    given: tuple[tuple[str, str], ...] = ()

    def keeps_period(self, period_start: str | None) -> bool:
        """Whether a line whose period starts at `period_start` (RFC 3339) is in the period."""
        if self.since is None and self.until is None:
            return True
        if not period_start:
            return False
        start = parse_time(period_start)
        return (self.since is None or start >= self.since) and (
            self.until is None or start < self.until
        )

    def keeps(self, field: str, value: str | None) -> bool:
        chosen = getattr(self, field)
        return chosen is None or chosen == value

    def link(self, path: str, **changes: str | int | None) -> str:
        """`path` with these filters, some changed (None removes one): a shareable link."""
        params = dict(self.given)
        for name, value in changes.items():
            params.pop(name, None)
            if value is not None:
                params[name] = str(value)
        return f"{path}?{urlencode(params)}" if params else path

    def paginate(self, path: str, rows: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """The page's rows and the pager: first, last, total and the links either side."""
        start = (self.page - 1) * PAGE_SIZE
        return rows[start : start + PAGE_SIZE], {
            "number": self.page,
            "size": PAGE_SIZE,
            "first": min(start + 1, len(rows)),
            "last": min(start + PAGE_SIZE, len(rows)),
            "total": len(rows),
            "previous": self.link(path, page=self.page - 1) if self.page > 1 else None,
            "next": self.link(path, page=self.page + 1) if start + PAGE_SIZE < len(rows) else None,
        }

    def with_page(self, page: int) -> Filters:
        return replace(self, page=page)


def parse(request: Request, role: Role) -> Filters:
    """The request's filters, checked: HTTPException 400 naming the first bad one, 403 for
    a tenant token naming another tenant."""
    q = request.query_params
    tenant = tenant_scope(role, q.get("tenant"))
    since = _time(q.get("since"), "since")
    until = _time(q.get("until"), "until")
    period = q.get("period") or None
    if period is not None:
        if since is not None or until is not None:
            raise HTTPException(400, "period: give a period or since and until, not both")
        since, until = _month(period)
    if since is not None and until is not None and until <= since:
        raise HTTPException(400, "until: must be after since")
    placement_class = _choice(q.get("class"), "class", CLASSES)
    category = _choice(q.get("category"), "category", CATEGORY_ORDER)
    bearer = _choice(q.get("bearer"), "bearer", BEARERS)
    page_text = q.get("page") or "1"
    if not page_text.isdigit() or not 0 < int(page_text[:12]) < _MAX_PAGE:
        raise _bad("page", page_text, "a page number, 1 or more")
    given = tuple((k, v) for k, v in q.multi_items() if v)
    return Filters(
        tenant=tenant,
        period=period,
        since=since,
        until=until,
        placement_class=placement_class,
        category=category,
        bearer=bearer,
        page=int(page_text),
        given=given,
    )


def _choice(text: str | None, name: str, choices: tuple[str, ...]) -> str | None:
    if not text:
        return None
    if text not in choices:
        raise _bad(name, text, f"one of {', '.join(choices)}")
    return text


def _time(text: str | None, name: str) -> int | None:
    if not text:
        return None
    try:
        return parse_time(text)
    except ValueError:
        raise _bad(name, text, "an RFC 3339 time") from None


def _month(text: str) -> tuple[int, int]:
    found = _MONTH.fullmatch(text)
    if found is None or not 1 <= int(found[2]) <= 12 or int(found[1]) < 1970:
        raise _bad("period", text, "a month as YYYY-MM")
    year, month = int(found[1]), int(found[2])
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return _us(start), _us(end)


def _us(moment: datetime) -> int:
    return int((moment - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 1_000_000
