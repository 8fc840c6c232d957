"""`gpuledger report envelope --format html`: the envelope as one self-contained page.

What a buyer asks first comes first: how often each provider missed its promises (the
miss rate) and by how much (the signed start delay: late is positive, early negative),
then the waits, restarts, checkpoint overhead and costs. Bar charts are inline SVG drawn
by templates/envelope.html.j2 (no script, nothing fetched), each with an axis, its ticks
and its unit, and narrow enough (CHART_W) to be read at 420 px without shrinking its text.

A figure over a small sample (a p95 or a rate over fewer than SMALL_SAMPLE promises or
jobs) carries the caveat marker CAVEAT, on the chart and in the table, with the reason.
Durations are shown as people read them (numbers.duration), ratios as percentages; only a
bar's length in pixels is rounded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from reconcile.reports.envelope import miss_ratio, missed_text
from reconcile.reports.numbers import duration, money, percent, rate
from reconcile.reports.pages import environment

TEMPLATES = Path(__file__).with_name("templates")

#: Chart geometry (SVG user units = CSS px): a row's label sits above its bars, so the chart
#: is only as wide as its plot and the figure beside the longest bar.
CHART_W, PLOT_X, PLOT_W, LABEL_H, BAR_H, GAP, AXIS_H = 400, 8, 250, 16, 16, 8, 40

#: Fewer promises (or jobs) than this, and a p95 or a rate is flagged as a small sample.
SMALL_SAMPLE = 20
CAVEAT = "†"


@dataclass
class Bar:
    kind: str  # "observed", "promised" or "missed"
    text: str  # the figure as shown
    x: int
    width: int
    small: bool = False  # over a small sample: flagged with CAVEAT


@dataclass
class Row:
    label: str
    bars: list[Bar]


@dataclass
class Tick:
    x: int
    text: str


@dataclass
class Chart:
    key: str  # what the chart shows, for a reader of the page's DOM (data-chart)
    title: str
    axis: str  # the axis's title, with its unit
    rows: list[Row] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    zero: int = PLOT_X

    width: int = CHART_W
    label_h: int = LABEL_H
    bar_h: int = BAR_H
    gap: int = GAP

    @property
    def plot_top(self) -> int:
        return GAP

    @property
    def axis_y(self) -> int:
        return GAP + sum(LABEL_H + len(r.bars) * BAR_H + GAP for r in self.rows)

    @property
    def height(self) -> int:
        return self.axis_y + AXIS_H

    def row_y(self, index: int) -> int:
        """The top of row `index` (its label's line)."""
        return GAP + sum(LABEL_H + len(r.bars) * BAR_H + GAP for r in self.rows[:index])


Value = tuple[str, Fraction | None, str, bool]  # kind, value, its text, small sample


def _label(doc: dict[str, Any], group: dict[str, Any]) -> str:
    return " · ".join(str(group[k]) for k in doc["by"])


def _chart(
    key: str,
    title: str,
    axis: str,
    rows: list[tuple[str, list[Value]]],
    shown: Callable[[Fraction], str],
) -> Chart:
    """Bars on one scale from min(0, lowest) to max(0, highest), each from zero to its value
    (a negative one to the left of the zero line); a row whose values are all None is left
    out. The axis has ticks at its ends and at zero, in the chart's own format."""
    values = [v for _, bars in rows for _, v, _, _ in bars if v is not None]
    lo, hi = min([Fraction(0), *values]), max([Fraction(0), *values])
    span = hi - lo or Fraction(1)

    def px(v: Fraction) -> int:
        return PLOT_X + round((v - lo) * PLOT_W / span)

    zero = px(Fraction(0))
    chart = Chart(key, title, axis, zero=zero)
    for label, bars in rows:
        drawn = []
        for kind, v, text, small in bars:
            if v is None:
                continue
            end = px(v)
            x, width = min(zero, end), abs(end - zero)
            drawn.append(Bar(kind, text, x, max(width, 1) if v != 0 else 0, small))
        if drawn:
            chart.rows.append(Row(label, drawn))
    ends = sorted({lo, Fraction(0), hi})
    chart.ticks = [Tick(px(v), shown(v)) for v in ends]
    return chart


def _f(value: Any) -> Fraction | None:
    return None if value is None else Fraction(str(value))


def _dur(value: Fraction) -> str:
    return duration(value)


miss_rate = miss_ratio


def _cost(group: dict[str, Any], currency: str, name: str) -> str | None:
    value: str | None = (group["cost"].get(currency) or {}).get(name)
    return value


def _bar(
    doc: dict[str, Any], g: dict[str, Any], kind: str, value: Any, text: str, small: bool
) -> tuple[str, list[Value]]:
    """A group's row of one bar: every envelope chart draws one figure per group."""
    return (_label(doc, g), [(kind, _f(value), text, small)])


def _p95(doc: dict[str, Any], g: dict[str, Any], stats: dict[str, Any]) -> tuple[str, list[Value]]:
    """A group's p95 duration (a delay or a wait), flagged when taken over few jobs."""
    return _bar(
        doc, g, "observed", stats["p95"], duration(stats["p95"]), stats["n"] < SMALL_SAMPLE
    )


def charts(doc: dict[str, Any]) -> list[Chart]:
    groups = doc["groups"]
    made = [(g, g["promises"]) for g in groups if g["promises"]]
    delay_axis = "delay (d, h, min, s; negative: early)"
    out = [
        _chart(
            "miss_rate",
            "Promises missed: missed ÷ (met + missed)",
            "share of promises missed (%)",
            [
                _bar(doc, g, "missed", miss_rate(p), missed_text(p), p["promises"] < SMALL_SAMPLE)
                for g, p in made
            ],
            lambda v: percent(v, 0),
        ),
        _chart(
            "start_delay",
            "Start delay, p95: the job's first start minus the promised start (late is positive)",
            delay_axis,
            [_p95(doc, g, p["start_delay_s"]) for g, p in made],
            _dur,
        ),
        _chart(
            "completion_delay",
            "Completion delay, p95: first completion minus the promised one (late is positive)",
            delay_axis,
            [_p95(doc, g, p["completion_delay_s"]) for g, p in made],
            _dur,
        ),
        _chart(
            "start_wait",
            "Start wait, p95: submission to first start (every job)",
            "wait (d, h, min, s)",
            [_p95(doc, g, g["start_wait_s"]) for g in groups],
            _dur,
        ),
        _chart(
            "restart_rate",
            "Restart rate: restarts per started job",
            "restarts per started job",
            [
                _bar(
                    doc,
                    g,
                    "observed",
                    g["restart_rate"],
                    rate(g["restart_rate"]),
                    g["started"] < SMALL_SAMPLE,
                )  # fmt: skip
                for g in groups
            ],
            lambda v: rate(v, 2),
        ),
        _chart(
            "checkpoint_overhead",
            "Checkpoint overhead: checkpoint GPU-seconds ÷ billed GPU-seconds",
            "share of billed GPU time (%)",
            [
                _bar(doc, g, "observed", ratio, percent(ratio), False)
                for g in groups
                for ratio in [g["checkpoint_overhead"]["ratio"]]
            ],
            lambda v: percent(v, 1),
        ),
    ]
    for currency in sorted({c for g in groups for c in g["cost"]}):
        for name, title in (
            ("cost_per_completed_run", "Cost per completed run"),
            ("cost_per_accepted_result", "Cost per accepted result"),
        ):
            unit = currency or "no currency"
            out.append(
                _chart(
                    f"{name}/{currency}",
                    f"{title} ({unit})",
                    f"amount ({unit})",
                    [
                        _bar(doc, g, "observed", cost, f"{money(cost)} {currency}", False)
                        for g in groups
                        for cost in [_cost(g, currency, name)]
                    ],
                    lambda v: f"{v.numerator // v.denominator:,}",
                )
            )
    return [c for c in out if c.rows]


def html(doc: dict[str, Any]) -> str:
    env = environment(TEMPLATES)
    env.globals.update(
        duration=duration,
        percent=percent,
        rate=rate,
        miss_rate=miss_rate,
        small=SMALL_SAMPLE,
        caveat=CAVEAT,
        group_label=_label,
        group_key=lambda doc, g: "/".join(str(g[k]) for k in doc["by"]),
    )
    return env.get_template("envelope.html.j2").render(doc=doc, charts=charts(doc))
