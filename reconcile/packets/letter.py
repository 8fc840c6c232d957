"""The dispute letter: what a customer disputes on one invoice and why, as a self-contained
HTML page and a text summary (docs/dispute-letter.md).

It is written only from a `VerifiedPacket`: the findings and claims the verifier itself
recomputed from the packet's entries, and those entries; nothing is read from the
provider's findings. The rule behind each finding is quoted from reconcile/RULES.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

from ledger import LedgerError
from ledger.note import Verifier
from reconcile.engine.activity import merged_activity
from reconcile.engine.figures import iso, parse_time
from reconcile.engine.rules import CATEGORY_ORDER
from reconcile.engine.rules_text import RulesPageError, category_rules
from reconcile.packets.answers import states
from reconcile.packets.dispute import VerifiedPacket, verify_dispute
from reconcile.reports.pages import environment, keyed_labels
from schemas.display import terminal_safe
from schemas.documents.bundle import Entry
from schemas.money import Money, minor_unit

TEMPLATES = Path(__file__).parent / "templates"

#: The event fields that tell what an entry says, by type (others are left out of the letter).
FIELDS: dict[str, tuple[str, ...]] = {
    "billing.line": (
        "line_id",
        "allocation_id",
        "period_start",
        "period_end",
        "gpus",
        "amount",
        "currency",
        "corrects",
    ),
    "allocation.granted": ("allocation_id", "gpus", "node", "devices", "fabric_domain"),
    "allocation.released": ("allocation_id",),
    "job.started": ("job_id", "allocation_id"),
    "job.completed": ("job_id",),
    "job.failed": ("job_id", "cause", "reason"),
    "job.cancelled": ("job_id", "reason"),
    "job.progress": ("job_id", "step", "units"),
    "checkpoint.saved": ("job_id", "checkpoint_id", "step"),
    "policy.decision": ("decision", "job_id", "allocation_id", "reason"),
    "policy.terms": (
        "warmup_allowance_s",
        "stall_threshold_s",
        "reclaim_notice_s",
        "placement_credit_share",
    ),
    "health.fault": ("code", "severity", "node", "device", "fabric_domain"),
    "health.cleared": ("code", "node", "device", "fabric_domain"),
    "placement.observed": ("allocation_id", "node"),
}

#: Why a category is not the customer's to pay, in plain words (RULES.md's are quoted beside them).
WHY = {
    "unallocated": "Billed for GPUs or time that the allocation did not hold.",
    "double_billed": (
        "These GPU-seconds were already billed on an earlier line of the same allocation."
    ),
    "reclaimed": (
        "The provider preempted, reclaimed or evicted the allocation; the time after the "
        "notice is the provider's."
    ),
    "restart_lost": (
        "Work lost when the job failed for a hardware or fabric cause, or just after a "
        "critical fault on its GPUs, counted back to its last saved checkpoint."
    ),
    "restart_recovery": (
        "Time the job took to get going again after that failure, up to its first progress."
    ),
    "stalled_fault": (
        "The job made no progress for longer than the stall threshold while a critical fault "
        "touched its GPUs."
    ),
    "idle_unexplained": (
        "The job was running but made no progress, and nothing in the ledger explains why."
    ),
}


@dataclass(frozen=True)
class Cited:
    seq: int
    type: str
    time: str
    fields: list[tuple[str, str]]


@dataclass(frozen=True)
class Finding:
    number: int
    line_id: str
    allocation_id: str | None
    category: str
    bearer: str
    amount: str
    currency: str
    gpu_seconds: int | float
    start: str
    end: str
    stretches: list[tuple[str, str, int]]
    rule: str
    rule_place: str
    cited: list[Cited]
    line_ids: tuple[str, ...] = ()  # every line the finding spans (merged across billing hours)
    #: the provider's answer (docs/answers.md): `open`, `accepted`, `rejected` or `partly`
    state: str = "open"
    #: the state in words: "rejected: <reason> (cites seq 4, 9)", "partly: 1.20 USD accepted"
    state_text: str = "open: the provider has not answered"
    #: what the GPU did over a stalled or idle finding (RULES.md 14), as the claim carries it
    activity: dict[str, Any] | None = None

    @property
    def gpu_did(self) -> str:
        """The line on what the GPU did ("SM active 0.2 % over 98 % of the stretch: nothing
        ran"), empty when no device counters cover the finding."""
        return str(self.activity["says"]) if self.activity else ""

    @property
    def lines_text(self) -> str:
        return ", ".join(self.line_ids or (self.line_id,))

    def cited_runs(self) -> list[CitedRun]:
        """The cited entries, each run of consecutive `job.progress` entries of one job
        shown as one row (first and last, with how many): a long stall cites its first and
        last gap, not every step in between."""
        out: list[CitedRun] = []
        for c in self.cited:
            job = dict(c.fields).get("job_id")
            last = out[-1] if out else None
            if (
                c.type == "job.progress"
                and last is not None
                and last.first.type == "job.progress"
                and dict(last.first.fields).get("job_id") == job
            ):
                last.rest.append(c)
            else:
                out.append(CitedRun(c))
        return out

    def rule_parts(self) -> list[tuple[str, str]]:
        """The rule as (kind, text) runs, kind `code`, `strong` or `text`: RULES.md's
        inline Markdown, for the page to set (escaped) without a Markdown library."""
        parts = []
        for run in re.split(r"(`[^`]+`|\*\*[^*]+\*\*)", self.rule):
            if run.startswith("`") and run.endswith("`") and len(run) > 1:
                parts.append(("code", run[1:-1]))
            elif run.startswith("**") and run.endswith("**") and len(run) > 3:
                parts.append(("strong", run[2:-2]))
            elif run:
                parts.append(("text", run))
        return parts


@dataclass(frozen=True)
class PlacementFinding:
    """A line whose placement was not as sold (RULES.md 13), as the verifier recomputed it."""

    line_id: str
    allocation_id: str | None
    share: str
    customer_amount: str
    amount: str
    currency: str
    links: str  # the captures' links between the allocation's GPUs, e.g. "NODE 2 · NV18 4"
    cited: list[Cited]
    amount_exact: str = ""  # the claim before rounding (`amount` is it rounded)


@dataclass(frozen=True)
class PlacementGroup:
    """The placement claims of one allocation (in one currency), one row of the letter's
    summary: its lines are folded under it."""

    allocation_id: str | None
    currency: str
    lines: int
    links: str  # each distinct links text of its lines, "; " between
    shares: str  # each distinct share, ", " between
    customer_amount: Decimal  # the lines' customer-borne amounts, added up exact
    amount: Decimal  # the lines' claims, added up exact (shown rounded once, as the total)


@dataclass(frozen=True)
class CategoryRow:
    """One row of the letter's summary: the findings of one category and bearer in one
    currency, their count and amounts (as shown on each finding) added up."""

    currency: str
    category: str
    bearer: str
    findings: int
    amount: Decimal


@dataclass
class CitedRun:
    """One cited entry, or a run of progress entries of one job shown as one row."""

    first: Cited
    rest: list[Cited] = field(default_factory=list)

    @property
    def last(self) -> Cited:
        return self.rest[-1] if self.rest else self.first


def merge_stretches(findings: list[Finding]) -> list[Finding]:
    """One stall is one finding: findings of one allocation, category, bearer and currency
    whose times touch (one ends where the next begins: a stretch split by the billing hour)
    become one, their amounts, GPU-seconds, stretches, lines and cited entries added up.
    Findings the provider answered differently stay apart. The result is in time order
    (start, then allocation and category), numbered from 1."""
    ordered = sorted(findings, key=lambda f: (f.start, f.allocation_id or "", f.category))
    merged: list[Finding] = []
    for f in ordered:
        into = next(
            (
                m
                for m in reversed(merged)
                if m.end == f.start
                and (m.allocation_id, m.category, m.bearer, m.currency, m.state_text)
                == (f.allocation_id, f.category, f.bearer, f.currency, f.state_text)
            ),
            None,
        )
        if into is None:
            merged.append(replace(f, line_ids=f.line_ids or (f.line_id,)))
            continue
        cited = {c.seq: c for c in [*into.cited, *f.cited]}
        lines = tuple(dict.fromkeys([*into.line_ids, *(f.line_ids or (f.line_id,))]))
        merged[merged.index(into)] = replace(
            into,
            amount=str(Decimal(into.amount) + Decimal(f.amount)),
            gpu_seconds=into.gpu_seconds + f.gpu_seconds,
            end=f.end,
            stretches=_joined_stretches(into.stretches, f.stretches),
            cited=[cited[k] for k in sorted(cited)],
            line_ids=lines,
            line_id=", ".join(lines),
            activity=merged_activity([into.activity, f.activity]),
        )
    return [replace(f, number=n) for n, f in enumerate(merged, 1)]


def _joined_stretches(
    a: list[tuple[str, str, int]], b: list[tuple[str, str, int]]
) -> list[tuple[str, str, int]]:
    """Stretches in order, one that ends where the next (of as many GPUs) begins made one."""
    out: list[tuple[str, str, int]] = []
    for s, e, g in sorted([*a, *b]):
        if out and out[-1][1] == s and out[-1][2] == g:
            out[-1] = (out[-1][0], e, g)
        else:
            out.append((s, e, g))
    return out


#: How many findings the summary lists, the largest first (the rest are folded under it).
LARGEST_SHOWN = 5

#: The timeline is drawn open up to this many rows (allocations); beyond, it is folded under
#: a line that says how many findings on how many allocations over which days (it is
#: printed open either way).
TIMELINE_OPEN_ROWS = 8

#: How long the provider is asked to take to credit the claim, after the invoice's last
#: billed period.
DUE_DAYS = 30


@dataclass
class Totals:
    currency: str
    billed: Decimal = Decimal(0)
    provider: Decimal = Decimal(0)
    disputed: Decimal = Decimal(0)
    accepted: dict[str, Decimal] = field(default_factory=dict)  # customer-borne money by category
    placement: Decimal = Decimal(0)  # claimed for placement not as sold (RULES.md 13)

    @property
    def claimed(self) -> Decimal:
        return self.provider + self.disputed

    def not_disputed(self) -> list[tuple[str, Decimal]]:
        """The customer-borne categories, in the engine's category order."""
        return sorted(self.accepted.items(), key=lambda item: CATEGORY_ORDER.index(item[0]))

    def asked(self) -> str:
        """What the letter asks to be credited in this currency: what it disputes, plus the
        placement claim (RULES.md 13) named apart, each as shown (so the parts add up)."""
        placement = self.rounded(self.placement)
        if not placement:
            return self.text(self.claimed)
        total = self.text(self.claimed + placement)
        if not self.claimed:
            return f"{total} for placement not as sold"
        return (
            f"{total} ({self.text(self.claimed)} disputed below and {self.text(placement)} "
            "for placement not as sold)"
        )

    def rounded(self, value: Decimal) -> Decimal:
        """`value` rounded half-even to the currency's minor unit, as the engine rounds."""
        return value.quantize(Decimal(1).scaleb(-minor_unit(self.currency)), ROUND_HALF_EVEN)

    def text(self, value: Decimal) -> str:
        cents = int(self.rounded(value).scaleb(minor_unit(self.currency)))
        money = Money.of(cents, currency=self.currency)
        return f"{money.grouped()} {self.currency}".strip()  # the pages' one money format


@dataclass
class Letter:
    tenant: str
    invoice_id: str
    signer: str
    tree_size: int
    lines: int
    entries: int
    withheld: int
    totals: list[Totals]
    findings: list[Finding] = field(default_factory=list)
    due: str = ""  # the date the credit is asked for by (DUE_DAYS after the last billed period)

    def request(self) -> str:
        """What the letter asks for: the credit, against which invoice, by when."""
        return "".join(text for _, text in self.request_parts())

    def request_parts(self) -> list[tuple[str, str]]:
        """The request as (kind, text) runs, the invoice id a `data` run (the page isolates
        it, as in the sentence); none when nothing is claimed."""
        asked = [t.asked() for t in self.totals if t.claimed or t.placement]
        if not asked:
            return []
        by = f" by {self.due}" if self.due else ""
        return [
            ("text", f"Please credit {' and '.join(asked)} against invoice "),
            ("data", self.invoice_id),
            ("text", f"{by}, or answer each finding below with the evidence you rely on."),
        ]

    def largest(self) -> list[Finding]:
        """The findings, the largest amount first (ties: in time order)."""
        return sorted(self.findings, key=lambda f: (-Decimal(f.amount), f.number))

    def by_category(self) -> list[CategoryRow]:
        """The summary: per currency, one row per category and bearer, in the engine's
        category order (their amounts add up to the currency's "we dispute")."""
        rows: dict[tuple[str, str, str], CategoryRow] = {}
        for f in self.findings:
            key = (f.currency, f.category, f.bearer)
            row = rows.get(key) or CategoryRow(f.currency, f.category, f.bearer, 0, Decimal(0))
            rows[key] = replace(
                row, findings=row.findings + 1, amount=row.amount + Decimal(f.amount)
            )
        return sorted(
            rows.values(),
            key=lambda r: (r.currency, CATEGORY_ORDER.index(r.category), r.bearer),
        )

    def totals_of(self, currency: str) -> Totals:
        """The totals of `currency` (which formats its amounts)."""
        return next(t for t in self.totals if t.currency == currency)

    def placement_rows_total(self, currency: str) -> Decimal:
        """The summary's rows of `currency` as shown (each rounded once), added up: it can
        differ by a cent or so from the claim, the lines' exact sum rounded once."""
        totals = self.totals_of(currency)
        return sum(
            (totals.rounded(g.amount) for g in self.placement_groups() if g.currency == currency),
            Decimal(0),
        )

    def placement_groups(self) -> list[PlacementGroup]:
        """The placement claims grouped by allocation and currency, in the order of their
        first line (ledger order): the summary's rows, each line folded under its row."""
        groups: dict[tuple[str | None, str], list[PlacementFinding]] = {}
        for p in self.placements:
            groups.setdefault((p.allocation_id, p.currency), []).append(p)
        return [
            PlacementGroup(
                allocation,
                currency,
                len(lines),
                "; ".join(dict.fromkeys(p.links or "none" for p in lines)),
                ", ".join(dict.fromkeys(p.share for p in lines)),
                sum((Decimal(p.customer_amount) for p in lines), Decimal(0)),
                sum((Decimal(p.amount_exact or p.amount) for p in lines), Decimal(0)),
            )
            for (allocation, currency), lines in groups.items()
        ]

    placements: list[PlacementFinding] = field(default_factory=list)
    placement_rule: str = ""  # RULES.md 13's words on the claim

    def sentence(self) -> str:
        """The letter's one sentence: how much of the invoice is disputed, and why in short."""
        return "".join(text for _, text in self.sentence_parts())

    def sentence_parts(self) -> list[tuple[str, str]]:
        """The sentence as (kind, text) runs: `data` for a tenant or an invoice id, which the
        page isolates (`<bdi>`) so that no right-to-left text in an id can reorder the words
        and figures around it; `text` for the letter's own words and figures."""
        tenant, invoice = ("data", self.tenant), ("data", self.invoice_id)
        if not self.findings:
            billed = _joined([("text", t.text(t.billed)) for t in self.totals], " and ")
            return [
                tenant,
                ("text", " disputes nothing on invoice "),
                invoice,
                ("text", ": the ledger puts all "),
                *billed,
                ("text", " on "),
                tenant,
                ("text", "."),
            ]
        counted = f"{len(self.findings)} finding{'s' if len(self.findings) != 1 else ''} below"
        parts = [self._part(t) for t in self.totals if t.claimed]
        return [
            tenant,
            ("text", " disputes "),
            *_joined_runs(parts, "; and "),
            ("text", f" ({counted})."),
        ]

    def _part(self, t: Totals) -> list[tuple[str, str]]:
        provider = " that the provider's own records put on the provider"
        disputed = " billed while its jobs ran idle with nothing in the ledger to explain it"
        why = [
            [("text", t.text(t.provider) + provider)] if t.provider else [],
            [("text", t.text(t.disputed) + disputed)] if t.disputed else [],
        ]
        return [
            ("text", t.text(t.claimed)),
            ("text", " of the "),
            ("text", t.text(t.billed)),
            ("text", " billed on invoice "),
            ("data", self.invoice_id),
            ("text", ": "),
            *_joined_runs([w for w in why if w], " and "),
        ]


def _joined(runs: list[tuple[str, str]], between: str) -> list[tuple[str, str]]:
    """`runs` with a text run `between` each two."""
    return _joined_runs([[run] for run in runs], between)


def _joined_runs(groups: list[list[tuple[str, str]]], between: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for number, group in enumerate(groups):
        out += ([("text", between)] if number else []) + group
    return out


def build_letter(checked: VerifiedPacket, signer: str) -> Letter:
    """The letter of a verified packet, from the verifier's own recomputation; `signer`
    names the key that signed the checkpoint."""
    totals: dict[str, Totals] = {}
    for line in checked.findings["lines"]:
        tally = totals.setdefault(line["currency"] or "", Totals(line["currency"] or ""))
        tally.billed += Decimal(line["amount"])
        for category, amount in _customer_borne(line["categories"]):
            tally.accepted[category] = tally.accepted.get(category, Decimal(0)) + amount
    findings = []
    periods = {
        line["line_id"]: (line["period_start"], line["period_end"])
        for line in checked.findings["lines"]
    }
    answered = states(checked.answers)
    for number, claim in enumerate(checked.claims, 1):
        tally = totals.setdefault(claim["currency"] or "", Totals(claim["currency"] or ""))
        amount = Decimal(claim["amount"])
        tally.provider += amount if claim["bearer"] == "provider" else 0
        tally.disputed += amount if claim["bearer"] == "disputed" else 0
        state, state_text = answer_state(answered.get((claim["line_id"], claim["category"])))
        finding = _finding(number, claim, checked.cited, periods)
        findings.append(replace(finding, state=state, state_text=state_text))
    placements = []
    for placed in checked.placement_claims:
        tally = totals.setdefault(placed["currency"] or "", Totals(placed["currency"] or ""))
        # exact, rounded once when shown: the reconciliation's tenant claim, to the cent
        tally.placement += Decimal(placed["amount_exact"])
        placements.append(_placement(placed, checked.cited))
    ends = [parse_time(e) for _, e in periods.values() if e]
    due = (iso(max(ends) + DUE_DAYS * 86_400_000_000) or "")[:10] if ends else ""
    return Letter(
        checked.tenant,
        checked.invoice_id,
        signer,
        checked.checkpoint.size,
        checked.lines,
        checked.tenant_entries + checked.fleet_entries,
        checked.withheld,
        [totals[c] for c in sorted(totals)],
        merge_stretches(findings),
        due,
        placements,
        PLACEMENT_RULE if placements else "",
    )


def answer_state(answer: dict[str, Any] | None) -> tuple[str, str]:
    """A finding's state, and in words, from its answer that is not superseded (if any)."""
    if answer is None:
        return "open", "open: the provider has not answered"
    if answer["status"] == "stale":
        return "open", (
            f"open: the provider's answer ({answer['state']}, revision {answer['revision']}) "
            f"was to figures that have changed ({answer['finding_amount']} then)"
        )
    currency = f" {answer['currency']}" if answer.get("currency") else ""
    if answer["state"] == "accepted":
        return "accepted", f"accepted by the provider: {answer['finding_amount']}{currency}"
    if answer["state"] == "partly":
        return "partly", (
            f"partly accepted by the provider: {answer['amount']}{currency} of "
            f"{answer['finding_amount']}{currency}"
        )
    cites = answer.get("evidence") or []
    cited = f" (cites seq {', '.join(str(s) for s in cites)})" if cites else ""
    return "rejected", f"rejected by the provider: {answer['reason']}{cited}"


def _customer_borne(categories: dict[str, Any]) -> list[tuple[str, Decimal]]:
    """(category, amount) of a line's categories (Reconciliation.as_json) borne by the customer."""
    out = []
    for category, cell in categories.items():
        if cell["bearer"] == "customer":
            out.append((category, Decimal(cell["amount"])))
        elif "customer" in cell.get("by_bearer", {}):
            out.append((category, Decimal(cell["by_bearer"]["customer"]["amount"])))
    return out


def _finding(
    number: int,
    claim: dict[str, Any],
    entries: dict[int, Entry],
    periods: dict[str, tuple[str, str]],
) -> Finding:
    stretches = [(s, e, g) for s, e, g in claim["stretches"]]
    place, rule = rule_for(claim["category"], claim["bearer"])
    # a claim of no GPU time (a GPU line's empty window, RULES.md §Unallocated) has no
    # stretch: it is dated by its line's period
    start, end = (
        (min(s for s, _, _ in stretches), max(e for _, e, _ in stretches))
        if stretches
        else periods[claim["line_id"]]
    )
    return Finding(
        number,
        claim["line_id"],
        claim["allocation_id"],
        claim["category"],
        claim["bearer"],
        claim["amount"],
        claim["currency"] or "",
        claim["gpu_seconds"],
        start,
        end,
        stretches,
        rule,
        place,
        [_cited(entries[seq]) for seq in claim["cites"]],
        activity=claim.get("device_activity"),
    )


#: RULES.md 13 on a not_as_sold line's claim, in plain words
PLACEMENT_RULE = (
    "RULES.md 13: a line whose allocation was not placed as sold (a pair of its GPUs not "
    "over NVLink, or fewer GPUs seen than granted, in the topology captured on it) is "
    "claimed at placement_credit_share (the terms in force at the line's period start) "
    "times the line's customer-borne amount."
)


def _placement(claim: dict[str, Any], entries: dict[int, Entry]) -> PlacementFinding:
    cited = [entries[seq] for seq in claim["cites"]]
    links: dict[str, int] = {}
    for entry in cited:
        if entry.type != "placement.observed":
            continue
        topology = json.loads(entry.event).get("data", {}).get("topology") or {}
        for link in topology.get("links") or ():
            name = str(link.get("link"))
            links[name] = links.get(name, 0) + 1
    return PlacementFinding(
        claim["line_id"],
        claim["allocation_id"],
        claim["share"],
        claim["customer_amount"],
        claim["amount"],
        claim["currency"] or "",
        " · ".join(f"{name} {count}" for name, count in sorted(links.items())),
        [_cited(entry) for entry in cited],
        claim["amount_exact"],
    )


def _cited(entry: Entry) -> Cited:
    event = json.loads(entry.event)
    data = event.get("data", {})
    shown = [
        (name, _show(data[name]))
        for name in FIELDS.get(entry.type, ())
        if data.get(name) is not None
    ]
    return Cited(entry.seq, entry.type, str(event.get("time", "")), shown)


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# -- RULES.md ------------------------------------------------------------------------


def rule_for(category: str, bearer: str) -> tuple[str, str]:
    """Where RULES.md decides `category`, and its words; for the restart categories, whose
    bearer depends on the failure, the bearer rule too."""
    try:
        rules = category_rules()
    except RulesPageError as exc:
        raise LedgerError(str(exc)) from None
    place, text = rules[category]
    if category.startswith("restart_"):
        return f"{place}; {rules['bearers'][0]}", f"{text} {rules['bearers'][1]}"
    return place, text


# -- output ---------------------------------------------------------------------------


def summary(letter: Letter) -> str:
    """The letter as text: its sentence, totals and one line per finding, each line escaped
    for the terminal (a newline or U+202E in an id adds no line and reverses no figure)."""
    out = [letter.sentence()]
    if letter.request():
        out.append(letter.request())
    for t in letter.totals:
        out.append(
            f"  billed {t.text(t.billed)} · provider-borne {t.text(t.provider)} · disputed "
            f"{t.text(t.disputed)}"
            f" · we dispute {t.text(t.claimed)}"
        )
    for f in letter.findings:
        out.append(
            f"  {f.number}. {f.start} → {f.end}  {f.category} ({f.bearer})  {f.amount} "
            f"{f.currency}  "
            f"line {f.lines_text}, allocation {f.allocation_id}; {f.rule_place}; "
            f"cites seq {', '.join(str(c.seq) for c in f.cited)}; {f.state_text}"
            + (f"; {f.gpu_did}" if f.gpu_did else "")
        )
    for p in letter.placements:
        out.append(
            f"  placement not as sold: line {p.line_id}, allocation {p.allocation_id}: "
            f"{p.share} x {p.customer_amount} = {p.amount} {p.currency}; "
            f"cites seq {', '.join(str(c.seq) for c in p.cited)}"
        )
    return "\n".join(terminal_safe(line) for line in out)


def render_html(letter: Letter) -> str:
    env = environment(TEMPLATES, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("letter.html.j2").render(
        letter=letter, tl=timeline(letter), why=WHY, largest_shown=LARGEST_SHOWN
    )


def write_letter(letter: Letter, path: Path) -> None:
    try:
        path.write_text(render_html(letter), encoding="utf-8")
    except OSError as exc:
        raise LedgerError(f"cannot write the letter {path}: {exc.strerror}") from None


def write_letter_beside(packet: dict[str, Any], verifier: Verifier, packet_path: Path) -> Path:
    """The letter of a packet just built, written beside its file (`acme.json` →
    `acme.letter.html`) from the packet's verification, never from its findings."""
    path = packet_path.with_suffix(".letter.html")
    write_letter(build_letter(verify_dispute(packet, verifier), verifier.name), path)
    return path


# -- timeline -------------------------------------------------------------------------

WIDTH, LEFT, RIGHT, ROW, TOP = 960, 230, 16, 22, 8


def timeline(letter: Letter) -> dict[str, Any]:
    """One row per allocation with findings; each finding's stretches as bars on a common
    time axis, in SVG user units (the page draws them with no script)."""
    if not letter.findings:
        return {"width": WIDTH, "height": 0, "rows": [], "bars": [], "ticks": [], "keys": []}
    t0 = min(parse_time(f.start) for f in letter.findings)
    t1 = max(parse_time(f.end) for f in letter.findings)
    span, plot = max(1, t1 - t0), WIDTH - LEFT - RIGHT
    rows = list(dict.fromkeys(f.allocation_id or "(none)" for f in letter.findings))
    shown, keys = keyed_labels(rows)  # a long id drawn as a key, written out under the chart
    bars = []
    for f in letter.findings:
        y = TOP + rows.index(f.allocation_id or "(none)") * ROW
        for s, e, g in f.stretches:
            x0 = LEFT + (parse_time(s) - t0) / span * plot
            x1 = LEFT + (parse_time(e) - t0) / span * plot
            bars.append(
                {
                    "x": x0,
                    "y": y + 3,
                    "w": max(2.0, x1 - x0),
                    "h": ROW - 6,
                    "number": f.number,
                    "kind": f"{f.category} {f.bearer}",
                    "title": f"finding {f.number}: {f.category}, {s} → {e}, {g} GPU(s)",
                }
            )
    height = TOP + len(rows) * ROW + 24
    ticks = [
        {
            "x": LEFT + plot * i / 4,
            "label": _tick(t0 + span * i // 4),
            "anchor": "start" if i == 0 else "end" if i == 4 else "middle",
        }
        for i in range(5)
    ]
    return {
        "width": WIDTH,
        "height": height,
        "rows": [
            {"label": label, "title": r, "y": TOP + i * ROW + ROW / 2}
            for i, (r, label) in enumerate(zip(rows, shown, strict=True))
        ],
        "keys": keys,
        "bars": bars,
        "ticks": ticks,
        "axis_y": height - 8,
        "open": len(rows) <= TIMELINE_OPEN_ROWS,
        "days": f"{(iso(t0) or '')[:10]} → {(iso(t1) or '')[:10]}",
    }


def _tick(us: int) -> str:
    return (iso(us) or "")[5:16].replace("T", " ")
