"""The operator's views: misses by cause, the device timeline around a miss, and capacity in
time, each from the engine's relations through the reports (reconcile/reports/promises.py,
capacity.py and capacity_time.py; the device states of reconcile/RULES.md "Causes of a
missed start"). The device timeline shows every tenant's holdings: operators only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from reconcile import reports
from reconcile.engine.causes import BEARER, ORDER
from reconcile.engine.figures import iso, parse_time
from reconcile.engine.rules import INF
from reconcile.reports import capacity_time
from reconcile.serve.filters import Filters

#: how far the device timeline reaches either side of a miss's wait, in µs
AROUND_US = 30 * 60 * 1_000_000
DAY_US = 86_400 * 1_000_000
STATE_ORDER = capacity_time.STATES


def cause_of(request: Request) -> str | None:
    text = request.query_params.get("cause") or None
    if text is not None and text not in ORDER:
        shown = text[:60].encode("unicode_escape").decode("ascii")
        raise HTTPException(400, f"cause: one of {', '.join(ORDER)}, not {shown!r}")
    return text


def class_matches(f: Filters, placement_class: str | None) -> bool:
    """`mig` keeps every MIG profile (`mig:1g.10gb`, ...)."""
    chosen = f.placement_class
    return chosen is None or (placement_class or "whole").split(":")[0] == chosen


def promises_doc(request: Request, tenant: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = request.app.state.documents.get(
        tenant,
        ("promises", tenant),
        lambda: reports.report(request.app.state.store, "promises", tenant),
    )
    return doc


def misses(request: Request, f: Filters, cause: str | None) -> list[dict[str, Any]]:
    """The missed promises in scope that pass the filters (period: the promised start;
    bearer: the cause's)."""
    out = []
    for m in promises_doc(request, f.tenant)["misses"]:
        if not class_matches(f, m["placement_class"]):
            continue
        if cause is not None and m.get("cause") != cause:
            continue
        if not f.keeps("bearer", m.get("cause_bearer")):
            continue
        if not f.keeps_period(m.get("start_by")):
            continue
        out.append(m)
    return out


def by_cause(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The misses grouped by cause, in RULES.md's order: how many each is the cause of, its
    seconds over every miss's wait, and who bears it."""
    out = []
    for cause in ORDER:
        mine = [m for m in rows if m.get("cause") == cause]
        spent = sum(m.get("cause_seconds", {}).get(cause, 0) for m in rows)
        if mine or spent:
            out.append(
                {"cause": cause, "bearer": BEARER[cause], "misses": len(mine), "seconds": spent}
            )
    return out


def one_miss(request: Request, tenant: str, promise: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = promises_doc(request, tenant)["misses"]
    for m in found:
        if m["promise_id"] == promise:
            return m
    raise HTTPException(404, "no missed promise of that id")


def device_timeline(request: Request, miss: dict[str, Any]) -> dict[str, Any]:
    """The fleet's devices of the miss's class, their states from AROUND_US before its wait
    to AROUND_US after, clipped to that window."""
    lo = min(parse_time(miss["promised_at"]), parse_time(miss["start_by"])) - AROUND_US
    end = miss.get("started")
    hi = (parse_time(end) if end else parse_time(miss["start_by"])) + AROUND_US
    cls = (miss.get("placement_class") or "whole").split(":")[0]

    def compute() -> list[tuple[Any, ...]]:
        with reports.loaded(request.app.state.store) as pipe:
            con = pipe.need("device_timeline")
            return con.execute(
                """SELECT node, device, placement_class, fabric_domain, state_from, state_until,
                          state, held_by_tenant, held_by_allocation, fault_code, change_id
                   FROM device_timeline WHERE state_until > $lo AND state_from < $hi
                   ORDER BY node, device, state_from""",
                {"lo": lo, "hi": hi},
            ).fetchall()

    rows = request.app.state.documents.get(None, ("device_timeline", lo, hi), compute)
    devices: dict[tuple[str, str], dict[str, Any]] = {}
    for node, device, dcls, domain, s, e, state, tenant, aid, fault, change in rows:
        if str(dcls or "whole").split(":")[0] != cls:
            continue
        d = devices.setdefault(
            (node, device),
            {"node": node, "device": device, "class": dcls, "domain": domain, "states": []},
        )
        s, e = max(int(s), lo), min(int(e), hi, INF)
        d["states"].append(
            {
                "from": iso(s),
                "until": iso(e),
                "seconds": (e - s) // 1_000_000,
                "state": state,
                "tenant": tenant,
                "allocation": aid,
                "fault": fault,
                "change": change,
            }
        )
    return {"since": iso(lo), "until": iso(hi), "devices": list(devices.values())}


def capacity(request: Request, f: Filters) -> dict[str, Any]:
    """`report capacity` over the period (its in_time: GPU-seconds per class and fabric
    domain in each device state), and the same per UTC day of the period."""
    store = request.app.state.store

    def compute() -> dict[str, Any]:
        with reports.loaded(store) as pipe:
            doc = reports.build_report(pipe, "capacity", None, since=f.since, until=f.until)
            days = []
            whole = doc.get("in_time")
            if whole is not None:
                lo, hi = parse_time(whole["since"]), parse_time(whole["until"])
                day = lo - lo % DAY_US
                while day < hi:
                    part = capacity_time.in_time(pipe, max(day, lo), min(day + DAY_US, hi))
                    if part is not None:
                        for g in part["groups"]:
                            days.append({"day": _day(day), **g})
                    day += DAY_US
            return {"report": doc, "days": days}

    answer: dict[str, Any] = request.app.state.documents.get(
        None, ("capacity", f.since, f.until), compute
    )
    return answer


def kept_groups(f: Filters, groups: list[dict[str, Any]], domain: str | None) -> list[Any]:
    return [
        g
        for g in groups
        if class_matches(f, g["placement_class"]) and domain in (None, g["fabric_domain"] or "")
    ]


def _day(us: int) -> str:
    return datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y-%m-%d")
