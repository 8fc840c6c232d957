"""The serving view of `report outcomes`: how a serving job answered, per tenant and
concurrency level, from its `inference.window` events (docs/serving.md), and what each
accepted response cost.

Rules (docs/placement.md, "The serving view of `report outcomes`", gives them with an example):
- A **level** is the windows of a tenant with one stated `concurrency` (`null`: windows
  whose load was set by a rate alone); the row `all` is every window of the tenant.
- **Seconds** = Σ (window_end − window_start). **Request rate** = Σ requests ÷ seconds;
  **output tokens/s** = Σ output_tokens ÷ the seconds of the windows that count them.
- **TTFT and latency p50/p95/p99**: the windows' own figures, never recomputed (a
  percentile of several windows cannot be had from their percentiles). The row shows the
  worst window's: the highest of the windows that printed that statistic, a ceiling on
  the pooled percentile (exactly so for nearest-rank percentiles; see docs/placement.md
  for the tools' interpolated ones), not an estimate.
- **Cancelled** = Σ cancelled of the windows that report it (none report it: null).
- **Allocation** of a window: its own `allocation_id`, else that of the latest
  `job.started` of its job at or before window_start.
- **Cost**: the reconciliation's money of the lines naming the allocation (as the outcomes
  report takes it) is shared among the windows on that allocation by their length (all
  equally when every window is empty); a level's cost is the sum of its windows' shares,
  and **cost per accepted response** = that cost ÷ Σ accepted, per currency, exact until
  shown. Money of an allocation with no window is no serving level's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from reconcile.engine.figures import seconds
from reconcile.engine.intervals import SECOND
from reconcile.engine.pipeline import Pipeline
from schemas.money import Money

STATISTICS = ("p50", "p95", "p99")
DISTRIBUTIONS = ("ttft_ms", "latency_ms")
#: places of the rates as shown
RATE_PLACES = 3

WINDOWS = """
WITH w AS (
    SELECT seq, tenant, data, data->>'job_id' AS job_id,
           epoch_us(CAST(data->>'window_start' AS TIMESTAMPTZ)) AS ws,
           epoch_us(CAST(data->>'window_end' AS TIMESTAMPTZ)) AS we
    FROM evidence WHERE type = 'inference.window' AND ($tenant IS NULL OR tenant = $tenant)),
starts AS (SELECT tenant, job_id, t, allocation_id FROM ev WHERE type = 'job.started')
SELECT w.tenant, w.job_id, coalesce(w.data->>'allocation_id', s.allocation_id) AS allocation_id,
       w.ws, w.we, CAST(w.data AS VARCHAR)
FROM w ASOF LEFT JOIN starts s ON s.tenant = w.tenant AND s.job_id = w.job_id AND w.ws >= s.t
ORDER BY w.tenant, w.ws, w.seq
"""


def view(pipe: Pipeline, tenant: str | None = None) -> list[dict[str, Any]]:
    """One row per tenant and concurrency level, then the tenant's `all` row."""
    windows = [
        _window(*row)
        for row in pipe.need("events").execute(WINDOWS, {"tenant": tenant}).fetchall()
    ]
    _share_money(windows, pipe.recon.allocation_money())
    levels: dict[str, dict[int | None, list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for w in windows:
        levels[w["tenant"]][w["concurrency"]].append(w)
    out = []
    for name, by_level in sorted(levels.items()):
        order = sorted(by_level, key=lambda c: (c is None, c or 0))
        out += [_level(name, c, by_level[c]) for c in order]
        out.append(_level(name, "all", [w for c in order for w in by_level[c]]))
    return out


def _window(
    tenant: str, job_id: str, allocation_id: str | None, ws: int, we: int, text: str
) -> dict[str, Any]:
    data = json.loads(text)
    return {
        "tenant": tenant,
        "job_id": job_id,
        "allocation_id": allocation_id,
        "us": we - ws,
        "concurrency": data.get("concurrency"),
        "data": data,
        "money": {},
    }


def _share_money(
    windows: list[dict[str, Any]], per_alloc: dict[tuple[str, str, str | None], Fraction]
) -> None:
    """Each window's share of its allocation's money, by length (see the module docstring)."""
    on: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for w in windows:
        if w["allocation_id"] is not None:
            on[(w["tenant"], w["allocation_id"])].append(w)
    for (tenant, allocation_id, currency), value in per_alloc.items():
        for_alloc = on.get((tenant, allocation_id), [])
        total = sum(w["us"] for w in for_alloc)
        for w in for_alloc:
            share = Fraction(w["us"], total) if total else Fraction(1, len(for_alloc))
            w["money"][currency or ""] = (
                w["money"].get(currency or "", Fraction(0)) + value * share
            )


def _level(
    tenant: str, concurrency: int | str | None, windows: list[dict[str, Any]]
) -> dict[str, Any]:
    data = [w["data"] for w in windows]
    us = sum(w["us"] for w in windows)
    accepted = sum(d["accepted"] for d in data)
    requests = sum(d["requests"] for d in data)
    counted = [w for w in windows if w["data"].get("output_tokens") is not None]
    token_us = sum(w["us"] for w in counted)
    cancelled = [d["cancelled"] for d in data if d.get("cancelled") is not None]
    failed = [d["failed"] for d in data if d.get("failed") is not None]
    cost: dict[str, Fraction] = defaultdict(Fraction)
    for w in windows:
        for currency, value in w["money"].items():
            cost[currency] += value
    return {
        "tenant": tenant,
        "concurrency": concurrency,
        "windows": len(windows),
        "jobs": sorted({w["job_id"] for w in windows}),
        "seconds": seconds(us),
        "requests": requests,
        "accepted": accepted,
        "failed": sum(failed) if failed else None,
        "cancelled": sum(cancelled) if cancelled else None,
        "request_rate_per_s": rate(Fraction(requests * SECOND, us)) if us else None,
        "output_tokens_per_s": (
            rate(Fraction(sum(w["data"]["output_tokens"] for w in counted) * SECOND, token_us))
            if token_us
            else None
        ),
        **{name: worst(data, name) for name in DISTRIBUTIONS},
        "cost": {
            c: {
                "cost": str(Money.of(v, currency=c)),
                "cost_per_accepted_response": (
                    str(Money.of(v / accepted, currency=c)) if accepted else None
                ),
            }
            for c, v in sorted(cost.items())
        },
    }


def worst(data: list[dict[str, Any]], name: str) -> dict[str, str | None]:
    """Per statistic, the highest figure any window printed (as it printed it)."""
    out: dict[str, str | None] = {}
    for stat in STATISTICS:
        figures = [d[name][stat] for d in data if d.get(name) and d[name].get(stat) is not None]
        out[stat] = max(figures, key=Decimal) if figures else None
    return out


def rate(value: Fraction, places: int = RATE_PLACES) -> str:
    """An exact rate as decimal text, rounded half-even to `places`."""
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    return str(exact.quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN))
