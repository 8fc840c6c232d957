"""`gpuledger report envelope --format html`: the envelope as one self-contained page.

Bar charts are inline SVG drawn by templates/envelope.html.j2 (no script, nothing
fetched): per group, the promised figure beside the observed one where promises exist.
Only a bar's length in pixels is rounded; every figure shown is the report's own text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from reconcile.reports.pages import environment

TEMPLATES = Path(__file__).with_name("templates")

#: Chart geometry (SVG user units): label column, plot, room for the figure on the right.
LABEL_W, PLOT_W, VALUE_W, BAR_H, GAP = 260, 420, 140, 14, 10


@dataclass
class Bar:
    kind: str  # "promised" or "observed"
    text: str
    width: int


@dataclass
class Row:
    label: str
    bars: list[Bar]


@dataclass
class Chart:
    title: str
    unit: str
    rows: list[Row] = field(default_factory=list)

    @property
    def width(self) -> int:
        return LABEL_W + PLOT_W + VALUE_W

    @property
    def height(self) -> int:
        return sum(len(r.bars) * BAR_H + GAP for r in self.rows) + GAP


def _label(doc: dict[str, Any], group: dict[str, Any]) -> str:
    return " · ".join(str(group[k]) for k in doc["by"])


def _chart(title: str, unit: str, rows: list[tuple[str, list[tuple[str, Any]]]]) -> Chart:
    """Bars scaled to the largest value of the chart; a value of None has no bar (and no row if
    all its values are None); negative values draw as an empty bar with their figure."""
    values = [Fraction(str(v)) for _, bars in rows for _, v in bars if v is not None]
    biggest = max([v for v in values if v > 0], default=Fraction(0))
    chart = Chart(title, unit)
    for label, bars in rows:
        drawn = [
            Bar(kind, str(v), _px(Fraction(str(v)), biggest)) for kind, v in bars if v is not None
        ]
        if drawn:
            chart.rows.append(Row(label, drawn))
    return chart


def _px(value: Fraction, biggest: Fraction) -> int:
    return 0 if biggest <= 0 or value <= 0 else max(int(value * PLOT_W / biggest), 1)


def charts(doc: dict[str, Any]) -> list[Chart]:
    groups = doc["groups"]
    made = [(g, g["promises"]) for g in groups if g["promises"]]
    out = [
        _chart(
            "Start, p95: from the promise to the job's first start",
            "s",
            [
                (
                    _label(doc, g),
                    [
                        ("promised", p["promised_start_s"]["p95"]),
                        ("observed", p["observed_start_s"]["p95"]),
                    ],
                )
                for g, p in made
            ],
        ),
        _chart(
            "Completion, p95: from the promise to the job's first completion",
            "s",
            [
                (
                    _label(doc, g),
                    [
                        ("promised", p["promised_completion_s"]["p95"]),
                        ("observed", p["observed_completion_s"]["p95"]),
                    ],
                )
                for g, p in made
            ],
        ),
        _chart(
            "Start wait, p95: submission to first start (every job)",
            "s",
            [(_label(doc, g), [("observed", g["start_wait_s"]["p95"])]) for g in groups],
        ),
        _chart(
            "Restart rate: restarts per started job",
            "",
            [(_label(doc, g), [("observed", g["restart_rate"])]) for g in groups],
        ),
        _chart(
            "Checkpoint overhead: checkpoint GPU-seconds ÷ billed",
            "",
            [(_label(doc, g), [("observed", g["checkpoint_overhead"]["ratio"])]) for g in groups],
        ),
    ]
    for currency in sorted({c for g in groups for c in g["cost"]}):
        for name, title in (
            ("cost_per_completed_run", "Cost per completed run"),
            ("cost_per_accepted_result", "Cost per accepted result"),
        ):
            out.append(
                _chart(
                    f"{title} ({currency or 'no currency'})",
                    currency,
                    [
                        (_label(doc, g), [("observed", (g["cost"].get(currency) or {}).get(name))])
                        for g in groups
                    ],
                )
            )
    return [c for c in out if c.rows]


def html(doc: dict[str, Any]) -> str:
    env = environment(TEMPLATES)
    geometry = {"label_w": LABEL_W, "plot_w": PLOT_W, "bar_h": BAR_H, "gap": GAP}
    return env.get_template("envelope.html.j2").render(
        doc=doc, charts=charts(doc), geometry=geometry
    )
