"""`gpuledger reconcile --format html`: one self-contained page for finance.

The page holds its own pictures (inline SVG, no script, nothing fetched): GPU-hours and
money by category per day, per tenant and per invoice, each stacked in RULES.md's
category order, and the largest findings, each with the `gpuledger dispute` command that
writes its packet. Every figure comes from the same cells as `reconcile --format json`,
in integers and Fractions: no amount passes through a float (a bar's length in pixels is
the only thing rounded, and it is never shown as a number).

Days: the engine gives each line's GPU-seconds per category, not per moment, so a line is
placed on the UTC days of its billing period. A line within one day (hourly or daily
billing, as FOCUS exports are) falls wholly on it; a line spanning days is spread over
them in proportion to its time in each, which keeps every day's total exact and leaves
the categories' split inside such a line as the line's own.
"""

from __future__ import annotations

import html
import re
import shlex
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

from reconcile.engine.figures import EPOCH, safe_name
from reconcile.engine.json_text import placement_sums
from reconcile.engine.placement import NOT_AS_SOLD
from reconcile.engine.placement import PLACEMENT_STATES as STATES
from reconcile.engine.result import BEARERS, Cell, InvoiceTotal, Reconciliation
from reconcile.engine.rules import SECOND
from reconcile.reports.explain import BEARER_MEANING, explain, terms
from reconcile.reports.numbers import HOUR_US, hours, number, percent
from reconcile.reports.pages import environment, keyed_labels
from schemas.money import Money

TEMPLATES = Path(__file__).with_name("templates")
DAY_US = 86_400 * SECOND
LARGEST_FINDINGS = 10

#: Bar geometry (SVG user units): label column, plot, room for the total on the right.
LABEL_W, PLOT_W, TOTAL_W, BAR_H, GAP = 210, 540, 170, 18, 6

#: A colour per category, distinct for colour-blind readers: the Okabe–Ito palette (black,
#: vermillion, reddish purple, orange, blue, bluish green, sky blue, yellow) with Paul Tol's
#: wine and teal, and greys for time held idle and money with no GPU time. No two categories
#: share a hue family; each also has its name in the legend, so colour is never the only cue.
COLOURS = {
    "unallocated": "#000000",
    "double_billed": "#D55E00",
    "reclaimed": "#CC79A7",
    "restart_lost": "#E69F00",
    "restart_recovery": "#882255",
    "stalled_fault": "#44AA99",
    "checkpoint": "#0072B2",
    "productive": "#009E73",
    "startup": "#56B4E9",
    "idle_reserved": "#999999",
    "idle_unexplained": "#F0E442",
    "money_only": "#DDDDDD",
}


@dataclass
class Segment:
    category: str
    x: int
    width: int
    title: str


@dataclass
class Bar:
    label: str
    total: str  # the bar's figure as shown
    key: str  # what the figure is, for a reader of the page's DOM (data-figure)
    segments: list[Segment] = field(default_factory=list)
    anchor: str | None = None  # a link to the table row it stands for
    shown: str = ""  # the label as drawn (a long one as its key: pages.keyed_labels)


@dataclass
class Chart:
    title: str
    bars: list[Bar]
    keys: list[tuple[str, str]] = field(default_factory=list)  # (key, whole label) under it

    def __post_init__(self) -> None:
        shown, self.keys = keyed_labels([bar.label for bar in self.bars])
        for bar, text in zip(self.bars, shown, strict=True):
            bar.shown = text

    @property
    def width(self) -> int:
        return LABEL_W + PLOT_W + TOTAL_W

    @property
    def height(self) -> int:
        return len(self.bars) * (BAR_H + GAP) + GAP


@dataclass
class Finding:
    tenant: str
    invoice_id: str
    line_id: str
    category: str
    bearer: str
    hours: str
    amount: str
    currency: str
    command: str
    same_as: int = 0  # the finding (1-based) whose row gives the same command, 0: this one
    answer: str = "open"  # the provider's answer (answers.short_state)


# -- stacking -----------------------------------------------------------------------

Stack = dict[str, Fraction]  # category -> value in the chart's unit (GPU-µs or minor units)


def _bar(
    label: str,
    stack: Stack,
    biggest: Fraction,
    total: str,
    key: str,
    unit: str,
    show: dict[str, str],
    anchor: str | None = None,
) -> Bar:
    """A bar of the categories in RULES.md's order; lengths scale to `biggest`. Only the
    positive parts are drawn (a credit is negative money: it is in the figures, not the bar)."""
    bar, reach = Bar(label, total, key, anchor=anchor), Fraction(0)
    for category in terms():
        value = stack.get(category, Fraction(0))
        if value <= 0:
            continue
        start, reach = _px(reach, biggest), reach + value
        bar.segments.append(
            Segment(
                category,
                LABEL_W + start,
                max(_px(reach, biggest) - start, 1),
                f"{label}: {category} {show[category]} {unit}",
            )
        )
    return bar


def _px(value: Fraction, biggest: Fraction) -> int:
    return 0 if biggest <= 0 else int(value * PLOT_W / biggest)


def _biggest(stacks: list[Stack]) -> Fraction:
    return max(
        (sum((v for v in s.values() if v > 0), Fraction(0)) for s in stacks), default=Fraction(0)
    )


def _hours_chart(
    title: str, rows: dict[str, Stack], anchors: dict[str, str] | None = None
) -> Chart:
    biggest = _biggest(list(rows.values()))
    bars = [
        _bar(
            label,
            stack,
            biggest,
            f"{_hours(sum(stack.values(), Fraction(0)))} GPU-h",
            f"hours/{label}",
            "GPU-h",
            {c: _hours(v) for c, v in stack.items()},
            (anchors or {}).get(label),
        )
        for label, stack in rows.items()
    ]
    return Chart(title, bars)


def _money_chart(
    title: str,
    rows: dict[str, Stack],
    minor: int,
    currency: str,
    anchors: dict[str, str] | None = None,
) -> Chart:
    biggest = _biggest(list(rows.values()))
    bars = [
        _bar(
            label,
            stack,
            biggest,
            f"{Money.of(sum(stack.values(), Fraction(0)), minor).grouped()} {currency}",
            f"money/{currency}/{label}",
            currency,
            {c: Money.of(v, minor).grouped() for c, v in stack.items()},
            (anchors or {}).get(label),
        )
        for label, stack in rows.items()
    ]
    return Chart(title, bars)


def _hours(us: Fraction) -> str:
    return number(_decimal(us / HOUR_US), 2)


def _decimal(value: Fraction) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60  # a quotient only shown, to two or three places
        return Decimal(value.numerator) / Decimal(value.denominator)


# -- the page's figures ------------------------------------------------------------------


def _days(cell: Cell) -> list[tuple[str, Fraction]]:
    """The UTC days of the cell's line period, each with its share of the period."""
    return days_of(cell.ps or 0, cell.pe or 0)


def days_of(ps: int, pe: int) -> list[tuple[str, Fraction]]:
    """The UTC days of a line period [ps, pe) (µs), each with its share of the period."""
    first = ps - ps % DAY_US
    if pe <= ps or pe <= first + DAY_US:  # within one day (or an empty window: its start's)
        return [(_day(first), Fraction(1))]
    return [
        (_day(d), Fraction(min(pe, d + DAY_US) - max(ps, d), pe - ps))
        for d in range(first, pe, DAY_US)
    ]


def _day(us: int) -> str:
    return (EPOCH + timedelta(microseconds=us)).date().isoformat()


def _currency(cell: Cell) -> str:
    return cell.currency or ""


#: The bearers of money the customer may not owe.
OWED_BY = ("provider", "disputed")


@dataclass(frozen=True)
class FindingAnswer:
    """A finding's answer as the page shows it. Made by reconcile/packets/answers.py
    (`cell_answers`), where the answers' rules live; the page only shows it."""

    state: str  # accepted, partly, rejected, or open (no answer, or one to other figures)
    text: str  # as the served pages say it: "partly: 1.20 accepted"
    accepted: Decimal  # the money the answer accepts (0 unless accepted or partly, current)


#: The provider's answers to findings, by (tenant, invoice, line, category)
Answers = dict[tuple[str, str, str, str], FindingAnswer]
#: The event type the provider's answers are stored as.
ANSWER_TYPE = "dispute.answer"
#: The states of a finding the page counts, in this order
ANSWER_ORDER = ("accepted", "partly", "rejected", "open")


UNANSWERED = FindingAnswer("open", "open", Decimal(0))


def _answer(answers: Answers | None, cell: Cell) -> FindingAnswer:
    key = (cell.tenant, cell.invoice_id, cell.line_id, cell.category)
    return (answers or {}).get(key, UNANSWERED)


@dataclass
class Figures:
    hours_by_day: dict[str, Stack] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Fraction))
    )
    money_by_day: dict[tuple[str, str], Stack] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Fraction))
    )
    hours_by_tenant: dict[str, Stack] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Fraction))
    )
    money_by_tenant: dict[tuple[str, str], Stack] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Fraction))
    )
    money_by_invoice: dict[tuple[str, str], Stack] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Fraction))
    )
    owed_by_invoice: dict[tuple[str, str], Stack] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Fraction))
    )
    minor: dict[str, int] = field(default_factory=dict)

    def add(self, cell: Cell) -> None:
        currency = _currency(cell)
        self.minor[currency] = cell.minor
        for day, share in _days(cell):
            self.hours_by_day[day][cell.category] += share * cell.gpu_us
            self.money_by_day[(currency, day)][cell.category] += share * cell.cents
        self.hours_by_tenant[cell.tenant][cell.category] += cell.gpu_us
        self.money_by_tenant[(currency, cell.tenant)][cell.category] += cell.cents
        self.money_by_invoice[(currency, f"{cell.tenant} / {cell.invoice_id}")][cell.category] += (
            cell.cents
        )
        if cell.bearer in OWED_BY:
            self.owed_by_invoice[(currency, f"{cell.tenant} / {cell.invoice_id}")][
                cell.category
            ] += cell.cents


def _by_currency(stacks: dict[tuple[str, str], Stack]) -> dict[str, dict[str, Stack]]:
    out: dict[str, dict[str, Stack]] = defaultdict(dict)
    for (currency, label), stack in sorted(stacks.items()):
        out[currency][label] = stack
    return out


def charts(result: Reconciliation) -> list[Chart]:
    figures = Figures()
    for cell in result.cells:
        figures.add(cell)
    return charts_of(figures)


def charts_of(figures: Figures) -> list[Chart]:
    """The page's charts of figures added up (from the cells one at a time, or from groups
    of them: finance_figures.py)."""
    out = [
        _hours_chart(
            "GPU-hours by category, per day (UTC)", dict(sorted(figures.hours_by_day.items()))
        )
    ]
    for currency, rows in _by_currency(figures.money_by_day).items():
        out.append(
            _money_chart(
                f"Money by category, per day ({currency})", rows, figures.minor[currency], currency
            )
        )
    out.append(
        _hours_chart(
            "GPU-hours by category, per tenant", dict(sorted(figures.hours_by_tenant.items()))
        )
    )
    for currency, rows in _by_currency(figures.money_by_tenant).items():
        out.append(
            _money_chart(
                f"Money by category, per tenant ({currency})",
                rows,
                figures.minor[currency],
                currency,
            )
        )
    for currency, rows in _by_currency(figures.money_by_invoice).items():
        anchors = {
            label: f"#invoice-{safe_name(label.replace(' / ', '-'))}-{safe_name(currency)}"
            for label in rows
        }
        out.append(
            _money_chart(
                f"Money by category, per invoice ({currency})",
                rows,
                figures.minor[currency],
                currency,
                anchors,
            )
        )
        # what finance looks for, drawn on its own scale (beside productive time it is a sliver)
        owed = {label: figures.owed_by_invoice.get((currency, label), {}) for label in rows}
        out.append(
            _money_chart(
                f"Provider-borne and disputed money, per invoice ({currency})",
                owed,
                figures.minor[currency],
                currency,
                anchors,
            )
        )
    return out


def dispute_command(tenant: str, invoice_id: str, db: str | None = None) -> str:
    """The command that writes the customer's dispute packet for this invoice."""
    words = (
        ["gpuledger", "dispute"]
        + (["--db", db] if db else [])
        + [
            "--tenant",
            tenant,
            "--invoice",
            invoice_id,
            "--key",
            "KEY",
            "--out",
            f"dispute-{safe_name(tenant)}-{safe_name(invoice_id)}.json",
        ]
    )
    return " ".join(shlex.quote(w) for w in words)


def largest_findings(
    result: Reconciliation,
    db: str | None = None,
    count: int = LARGEST_FINDINGS,
    answers: Answers | None = None,
) -> list[Finding]:
    """The line categories with the most provider-borne or disputed money, each with the
    provider's answer (`answers`: answers.cell_answers)."""
    cells = sorted(
        (c for c in result.cells if c.bearer in OWED_BY and c.cents > 0),
        key=lambda c: (-c.cents, c.tenant, c.invoice_id, c.line_id, c.label),
    )[:count]
    return findings_of(cells, db, answers)


def findings_of(
    cells: list[Cell], db: str | None = None, answers: Answers | None = None
) -> list[Finding]:
    """The findings of these cells (the largest, in order), each command given once."""
    out: list[Finding] = []
    first: dict[tuple[str, str], int] = {}  # each command is given once, on its first row
    for index, c in enumerate(cells, 1):
        key = (c.tenant, c.invoice_id)
        out.append(
            Finding(
                c.tenant,
                c.invoice_id,
                c.line_id,
                c.category,
                c.bearer,
                hours(c.gpu_us),
                Money.of(c.cents, c.minor).grouped(),
                _currency(c),
                dispute_command(c.tenant, c.invoice_id, db),
                first.get(key, 0),
                _answer(answers, c).text,
            )
        )
        first.setdefault(key, index)
    return out


@dataclass
class TenantRow:
    tenant: str
    currency: str
    billed_hours: str
    unbilled_hours: str
    bearers: dict[str, str]


def tenant_rows(
    result: Reconciliation, invoices: list[InvoiceTotal] | None = None
) -> list[TenantRow]:
    """Per tenant and currency: GPU-hours billed and unbilled, and money per bearer
    (`invoices`: `result.invoices()`, where the caller has them)."""
    rows: dict[tuple[str, str], tuple[int, dict[str, int], int]] = {}
    for invoice in result.invoices() if invoices is None else invoices:
        key = (invoice.tenant, invoice.currency or "")
        us, cents, minor = rows.get(key, (0, dict.fromkeys(BEARERS, 0), invoice.minor))
        for bearer, (_, c) in invoice.bearer_totals().items():
            cents[bearer] += c
        rows[key] = (us + invoice.tally.billed_us, cents, minor)
    return [
        TenantRow(
            tenant,
            currency,
            hours(us),
            hours(result.unbilled_us.get(tenant, 0)),
            {b: Money.of(c, minor).grouped() for b, c in cents.items()},
        )
        for (tenant, currency), (us, cents, minor) in sorted(rows.items())
    ]


@dataclass
class PlacementRow:
    """One tenant's lines by placement state (RULES.md 13), in one currency."""

    tenant: str
    currency: str
    states: dict[str, tuple[str, str]]  # state: (GPU-hours, amount)
    claim: str


def placement_rows(result: Reconciliation) -> list[PlacementRow]:
    """Per tenant and currency with a line not placed as sold: GPU-hours and money per
    placement state, and the claim (placement_credit_share x the customer-borne amount)."""
    rows = []
    groups = placement_sums(result)  # column-wise
    if groups is None:  # from the cells, one at a time
        groups = result.placement_sums()
    for (tenant, currency), sums in groups.items():
        if not (sums.gpu_us[NOT_AS_SOLD] or sums.amount[NOT_AS_SOLD]):
            continue
        states = {s: (hours(sums.gpu_us[s]), sums.money(sums.amount[s]).grouped()) for s in STATES}
        rows.append(PlacementRow(tenant, currency, states, sums.money(sums.claim).grouped()))
    return rows


@dataclass
class Headline:
    """What finance reads first, for one currency (or one invoice, or one month): the money
    billed, the credit due (provider-borne: the provider should not have charged it) and
    the amount in dispute (disputed: the rules cannot say whose), in cents."""

    label: str
    currency: str
    minor: int
    billed: int = 0
    credit_due: int = 0
    in_dispute: int = 0
    tenant: str = ""
    invoice_id: str = ""
    accepted: int = 0  # what the provider's current answers accept, in minor units
    #: the findings (line and category) by their answer's state: accepted, partly,
    #: rejected, open (no answer, or one to other figures)
    answered: dict[str, int] = field(default_factory=dict)

    def add(self, cell: Cell, answers: Answers | None = None) -> None:
        self.minor = cell.minor
        self.billed += cell.cents
        if cell.bearer == "provider":
            self.credit_due += cell.cents
        elif cell.bearer == "disputed":
            self.in_dispute += cell.cents
        if answers is None or cell.bearer not in OWED_BY:
            return
        answer = _answer(answers, cell)
        self.answered[answer.state] = self.answered.get(answer.state, 0) + 1
        self.accepted += int(answer.accepted.scaleb(cell.minor))

    def answered_text(self) -> str:
        """The findings by state, in ANSWER_ORDER: "3 accepted · 1 rejected · 2 open"."""
        return (
            " · ".join(f"{self.answered[s]} {s}" for s in ANSWER_ORDER if self.answered.get(s))
            or "none"
        )

    def shown(self, cents: int) -> str:
        return Money.of(cents, self.minor).grouped()

    @property
    def share(self) -> str:
        """Credit due and in dispute as a share of billed, as a percentage."""
        return percent(Fraction(self.credit_due + self.in_dispute, self.billed or 1))


@dataclass
class Headlines:
    currencies: list[Headline]
    invoices: list[Headline]
    months: dict[str, list[Headline]]  # currency -> its months, oldest first


def headlines(result: Reconciliation, answers: Answers | None = None) -> Headlines:
    """Per currency, per invoice and per month (UTC, of each line's billed interval start):
    billed, credit due and in dispute. Cells' cents add up to each line's rounded amount, so
    these are the invoices' own rounded figures, added."""
    per_currency: dict[str, Headline] = {}
    per_invoice: dict[tuple[str, str, str], Headline] = {}
    per_month: dict[tuple[str, str], Headline] = {}
    for cell in result.cells:
        cur = _currency(cell)
        per_currency.setdefault(cur, Headline(cur, cur, cell.minor)).add(cell, answers)
        key = (cell.tenant, cell.invoice_id, cur)
        per_invoice.setdefault(
            key,
            Headline(
                cell.invoice_id, cur, cell.minor, tenant=cell.tenant, invoice_id=cell.invoice_id
            ),
        ).add(cell, answers)
        month = _day(cell.ps)[:7] if cell.ps is not None else "no period"
        per_month.setdefault((cur, month), Headline(month, cur, cell.minor)).add(cell)
    return assembled(per_currency, per_invoice, per_month)


def assembled(
    per_currency: dict[str, Headline],
    per_invoice: dict[tuple[str, str, str], Headline],
    per_month: dict[tuple[str, str], Headline],
) -> Headlines:
    """The headlines in the page's order: currencies and months by name, invoices by money
    owed (ties by name, then as first met)."""
    months: dict[str, list[Headline]] = defaultdict(list)
    for cur, month in sorted(per_month):
        months[cur].append(per_month[(cur, month)])
    return Headlines(
        [per_currency[c] for c in sorted(per_currency)],
        sorted(per_invoice.values(), key=lambda h: (-(h.credit_due + h.in_dispute), h.label)),
        dict(months),
    )


def rule_html(text: str) -> str:
    """RULES.md text, escaped, with its `code` spans and **bold** as HTML (the template
    marks the result safe: everything from the text itself is escaped here)."""
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", escaped)


def render_page(
    result: Reconciliation,
    db: str | None = None,
    period: str | None = None,
    answers: Answers | None = None,
) -> str:
    """Finance's page; with `answers` (answers.cell_answers of the store's answers), each
    finding's answer, and per currency and invoice the amount the provider accepted."""
    env = environment(TEMPLATES, trim_blocks=True, lstrip_blocks=True)
    env.filters["rule"] = rule_html
    env.globals.update(hours=hours, Money=Money, number=number, safe_name=safe_name)
    # the figures from groups of cells (finance_figures.py): the per-cell functions above
    # are their definition, and the tests render the page both ways
    from reconcile.reports.finance_figures import page_figures

    figures = page_figures(result, answers)
    return env.get_template("finance.html.j2").render(
        headlines=figures.headlines,
        answered=answers is not None,
        period=period,
        invoices=figures.invoices,
        tenants=tenant_rows(result, figures.invoices),
        charts=charts_of(figures.figures),
        placement=placement_rows(result),
        placement_states=STATES,
        findings=findings_of(figures.largest, db, answers),
        colours=COLOURS,
        categories=[t for t in terms() if t in COLOURS],
        meanings={t: explain(t) for t in terms()},
        bearer_meaning=BEARER_MEANING,
        bearers=BEARERS,
        geometry={"label_w": LABEL_W, "plot_w": PLOT_W, "bar_h": BAR_H, "gap": GAP},
    )
