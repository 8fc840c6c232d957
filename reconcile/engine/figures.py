"""Small shared pieces of the reports and packets: percentiles, placement classes, times.

Percentiles are **nearest-rank**: the p-th percentile of n values sorted ascending is the
value at 1-based rank ⌈p × n / 100⌉ (so p50 of 1..4 is 2, p95 of 1..20 is 19, p95 of
1..10 is 10). It is always one of the values, never an interpolation, and it is computed
in integers (no floating-point rank).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from reconcile.engine.rules import INF, SECOND
from schemas import format_utc

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
PERCENTILES = (50, 95)
T = TypeVar("T")


def nearest_rank(expr: str, pct: int) -> str:
    """SQL aggregate: the nearest-rank `pct`-th percentile of `expr` (NULLs left out)."""
    values = f"list_sort(list({expr}) FILTER (WHERE {expr} IS NOT NULL))"
    return (
        f"CASE WHEN count({expr}) = 0 THEN NULL ELSE {values}[({pct} * count({expr}) + "
        "99) // 100] END"
    )


def nearest_rank_of(values: Sequence[T], pct: int) -> T | None:
    """The nearest-rank `pct`-th percentile of `values` (sorted here), None when empty: the
    same rank as `nearest_rank` in SQL, for values SQL cannot order exactly (fractions)."""
    ordered = sorted(values)  # type: ignore[type-var]
    return ordered[(pct * len(ordered) + 99) // 100 - 1] if ordered else None


def percentiles_sql(expr: str, name: str) -> str:
    """`count`, p50 and p95 of `expr` as columns `<name>_n`, `<name>_p50`, `<name>_p95`."""
    columns = [f"count({expr}) AS {name}_n"]
    columns += [f"{nearest_rank(expr, p)} AS {name}_p{p}" for p in PERCENTILES]
    return ", ".join(columns)


def placement_sql(cls: str, profile: str) -> str:
    """SQL: the placement class key: `whole`, `mig:<profile>` (`mig` when the profile is
    unknown), `timeslice`, or `unknown`."""
    return (
        f"CASE WHEN {cls} IS NULL THEN 'unknown' "
        f"WHEN {cls} = 'mig' AND {profile} IS NOT NULL THEN 'mig:' || {profile} ELSE {cls} END"
    )


def iso(us: int | None) -> str | None:
    """Integer µs since the epoch as RFC 3339 UTC text; None (or +∞) stays None."""
    if us is None or us >= INF:
        return None
    return format_utc(EPOCH + timedelta(microseconds=int(us)))


def parse_time(text: str) -> int:
    """RFC 3339 text (a naive time is UTC) as integer µs since the epoch; ValueError if not."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def seconds(us: int | None) -> int | float | None:
    """µs as whole seconds (an int), or a float only when the times had a fraction."""
    if us is None:
        return None
    whole, rest = divmod(int(us), SECOND)
    return whole if rest == 0 else int(us) / SECOND


def safe_name(text: str) -> str:
    """A file or folder name made from an id: anything but letters, digits, '.', '_' and
    '-' becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text) or "_"
