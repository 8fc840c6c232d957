"""What the GPU did over a stalled or idle claim (RULES.md 14): the figures the claims stage
sums (reconcile/engine/sql/claims.sql, `claim_activity`) and the one sentence they give.

The sums add across claims (the letter merges a stall split by the billing hour), so the
mean and the coverage are always computed here, from the sums, never averaged twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from typing import Any

#: RULES.md 14: under this mean SM active, nothing ran; from COMPUTED_FROM up, the job
#: computed; a stretch sampled over less than ENOUGH_COVERAGE of its time says neither.
NOTHING_RAN_BELOW = Decimal("0.05")
COMPUTED_FROM = Decimal("0.5")
ENOUGH_COVERAGE = Decimal("0.5")
#: The additive members of a claim's `device_activity` (seconds as exact decimal strings).
SUMS = ("seconds", "covered_seconds", "sampled_seconds", "sm_active_seconds")
_MICRO = Decimal(1_000_000)
_PLACES = Decimal("0.0001")


def _seconds(us: Decimal | int) -> str:
    value = (Decimal(us) / _MICRO).normalize()
    return format(value, "f") if value else "0"


def activity_of_sums(
    samples: int, span_us: int, covered_us: int, sampled_us: int, sm_us: Decimal
) -> dict[str, Any]:
    """A claim's `device_activity` from the claims stage's sums (µs)."""
    return activity(
        {
            "samples": samples,
            "seconds": _seconds(span_us),
            "covered_seconds": _seconds(covered_us),
            "sampled_seconds": _seconds(sampled_us),
            "sm_active_seconds": _seconds(sm_us),
        }
    )


def merged_activity(parts: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """The activity of claims taken together (their sums added), None when none has one."""
    present = [p for p in parts if p]
    if not present:
        return None
    total: dict[str, Any] = {"samples": sum(int(p["samples"]) for p in present)}
    for name in SUMS:
        value = sum((Decimal(p[name]) for p in present), Decimal(0)).normalize()
        total[name] = format(value, "f") if value else "0"
    return activity(total)


def activity(sums: Mapping[str, Any]) -> dict[str, Any]:
    """The sums with their mean SM active, coverage and sentence (RULES.md 14)."""
    seconds, covered = Decimal(sums["seconds"]), Decimal(sums["covered_seconds"])
    sampled, weighted = Decimal(sums["sampled_seconds"]), Decimal(sums["sm_active_seconds"])
    coverage = covered / seconds if seconds else Decimal(0)
    mean = weighted / sampled if sampled else None
    out = dict(sums)
    out["coverage"] = _ratio(coverage)
    if mean is not None:
        out["sm_active"] = _ratio(mean)
    out["says"] = sentence(mean, coverage)
    return out


def _ratio(value: Decimal) -> str:
    text = format(value.quantize(_PLACES, rounding=ROUND_HALF_EVEN).normalize(), "f")
    return "0" if Decimal(text) == 0 else text


def percent(value: Decimal) -> str:
    """A ratio as people read a percentage: one decimal under 10 %, else whole."""
    p = value * 100
    places = Decimal("0.1") if p < 10 else Decimal(1)
    return format(p.quantize(places, rounding=ROUND_HALF_EVEN), "f")


def sentence(mean: Decimal | None, coverage: Decimal) -> str:
    """RULES.md 14's words for a stretch with mean SM active `mean` over `coverage` of it."""
    covered = format((coverage * 100).quantize(Decimal(1), rounding=ROUND_FLOOR), "f")
    if mean is None:
        return f"the device counters over {covered} % of the stretch carry no SM active figure"
    head = f"SM active {percent(mean)} % over {covered} % of the stretch"
    if coverage < ENOUGH_COVERAGE:
        return f"{head}: too little of it sampled to say what the GPU did"
    if mean < NOTHING_RAN_BELOW:
        return f"{head}: nothing ran"
    if mean >= COMPUTED_FROM:
        return f"{head}: the job computed but reported no progress"
    return f"{head}: the GPU was partly busy"


__all__ = [
    "COMPUTED_FROM",
    "ENOUGH_COVERAGE",
    "NOTHING_RAN_BELOW",
    "activity",
    "activity_of_sums",
    "merged_activity",
    "percent",
    "sentence",
]
