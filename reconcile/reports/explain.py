"""`gpuledger explain`: what each category and bearer means, and the rule that decides it.

Nothing here restates a rule. The rules are read from RULES.md (the page the engine
follows, through reconcile/engine/rules_text.py) and the bearers from the engine's own
label table (`rules.LABELS`), so
the explanation cannot drift from what the engine does:

- a term's **rule** is the RULES.md item that starts with the term in backticks
  (`1. \\`double_billed\\`: …`, `- \\`unbilled\\` …`), else every item of the first
  section that names it (`unallocated`, `money_only`);
- its **bearer** is the label table's; for a category borne "by cause" the clauses of
  RULES.md's "Bearers:" paragraph that name it say which cause makes it whose.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from reconcile.engine.rules import CATEGORY_ORDER, LABELS
from reconcile.engine.rules_text import Item, bearers_paragraph, items
from schemas.errors import BadInput

#: What a bearer means to the people reading an invoice (RULES.md says which categories
#: each one bears, not what bearing is).
BEARER_MEANING = {
    "provider": "the provider's cost: time the customer was billed for but should not pay "
    "(the provider's failure, reclaim, double billing or billing beyond the allocation).",
    "customer": (
        "the customer's cost: time it used, spent on its own overhead (startup, checkpoints, "
        "its own failures), or held idle."
    ),
    "disputed": (
        "no one's yet: the evidence names no cause (a job ran but made no progress and nothing "
        "explains why); to be settled between provider and customer."
    ),
}

#: Each term in one sentence a non-specialist can read, said before the rule that decides it.
PLAIN = {
    "unallocated": "Billed GPU time the customer was never given: more GPUs than it was "
    "granted, or time outside its allocation.",
    "double_billed": "GPU time billed twice: an earlier line already bills it.",
    "reclaimed": "GPU time billed after the provider took the GPUs back (a preemption, "
    "reclaim or eviction) and its notice had run out.",
    "checkpoint": "GPU time the job spent saving its checkpoints.",
    "restart_lost": "Work done since the last checkpoint before a failure, lost with it and "
    "done again.",
    "restart_recovery": "GPU time from a failure until the job was working again.",
    "productive": "GPU time the job was making progress: the time the customer pays for.",
    "stalled_fault": "GPU time the job stood still while a critical fault was open on its "
    "GPUs, node or fabric.",
    "startup": "GPU time from the grant to the job's first progress, within the agreed "
    "warm-up allowance.",
    "idle_reserved": "GPU time the customer held with no job running on it.",
    "idle_unexplained": "GPU time a job ran without making progress, with nothing in the "
    "evidence to say why.",
    "money_only": "Money billed on a line that bills no GPU time (a fee or a credit).",
    "unbilled": "GPU time the customer held that no billing line bills: revenue the provider "
    "is missing, not part of any invoice.",
}

#: Terms explained beside the billed categories: time that no line bills.
EXTRA_TERMS = ("unbilled",)


@dataclass(frozen=True)
class Explanation:
    term: str
    bearers: tuple[str, ...]  # empty for a term that is not a billed category
    rule_place: str  # where RULES.md decides it
    rule: tuple[str, ...]  # the rule's text, as RULES.md words it
    bearer_rule: tuple[str, ...]  # the Bearers clauses that name it
    plain: str = ""  # the term in one plain sentence (PLAIN), said first


class UnknownTerm(BadInput, ValueError):
    """Not a category, bearer or term that RULES.md defines."""


def terms() -> tuple[str, ...]:
    """The billed categories in RULES.md's order (the rounding's too), then the extra terms."""
    return CATEGORY_ORDER + EXTRA_TERMS


def explain(term: str, rules_text: str | None = None) -> Explanation:
    """The explanation of one category or term; UnknownTerm for anything else."""
    if term not in terms():
        raise UnknownTerm(
            f"CATEGORY: unknown {term!r}; one of: {', '.join(terms())}, or a bearer: "
            f"{', '.join(BEARER_MEANING)}"
        )
    every = items(rules_text)
    rules = [i for i in every if not i.text.startswith("Bearers:")]
    named = f"`{term}`"
    own = [i for i in rules if i.text.startswith(named)]
    if own:
        chosen = own[:1]
    else:
        first = next((i.section for i in rules if named in i.text), None)
        chosen = [i for i in rules if i.section == first and named in i.text]
    bearers = tuple(dict.fromkeys(label.bearer for label in LABELS if label.category == term))
    return Explanation(
        term,
        bearers,
        _place(chosen),
        tuple(i.text for i in chosen),
        _bearer_clauses(every, named),
        PLAIN.get(term, ""),
    )


def _place(chosen: list[Item]) -> str:
    if not chosen:
        return "RULES.md (not named there)"
    numbers = [i.number for i in chosen if i.number]
    rule = f"rule {', '.join(numbers)} of " if numbers else ""
    return f'{rule}RULES.md, "{chosen[0].section}"'


def _bearer_clauses(every: list[Item], named: str) -> tuple[str, ...]:
    """The clauses of the "Bearers:" paragraph that name the term (a clause runs to the
    next `;` that is followed by another category)."""
    paragraph = bearers_paragraph(every)
    clauses = re.split(r";\s+(?=`)", paragraph.removeprefix("Bearers:").strip())
    return tuple(c.strip() for c in clauses if named in c)


def bearer_categories(bearer: str) -> tuple[str, ...]:
    """The categories a bearer bears, from the label table."""
    return tuple(
        c
        for c in terms()
        if any(label.category == c and label.bearer == bearer for label in LABELS)
    )


def render(term: str | None = None, width: int = 88) -> str:
    """The text `gpuledger explain [TERM]` prints: one term or bearer, else all of them."""
    if term in BEARER_MEANING:
        return _bearer_text(term, width)
    chosen = terms() if term is None else (term,)
    parts = [_term_text(explain(t), width) for t in chosen]
    if term is None:
        parts.append(
            "Bearers (who carries the cost of a category):\n"
            + "\n".join(_bearer_text(b, width) for b in BEARER_MEANING)
        )
    return "\n".join(parts)


def _term_text(e: Explanation, width: int) -> str:
    head = e.term + (
        f"  (bearer: {' or '.join(e.bearers)})" if e.bearers else "  (not billed: no bearer)"
    )
    body = ([e.plain] if e.plain else []) + [f"the rule, decided by {e.rule_place}:"]
    body += [f"  {r}" for r in e.rule]
    if e.bearer_rule:
        body += ["borne by:"] + [f"  {c}" for c in e.bearer_rule]
    wrapped = [
        textwrap.fill(b, width, initial_indent="  ", subsequent_indent="      ") for b in body
    ]
    return "\n".join([head, *wrapped, ""])


def _bearer_text(bearer: str, width: int) -> str:
    text = (
        f"{bearer}: {BEARER_MEANING[bearer]} Categories: {', '.join(bearer_categories(bearer))}."
    )
    return textwrap.fill(text, width, initial_indent="  ", subsequent_indent="    ") + "\n"
