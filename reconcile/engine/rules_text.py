"""The one reader of reconcile/RULES.md, for the outputs that quote it (`gpuledger
explain`, the dispute letter): what they show is the page the engine follows, word for
word, never a restatement that could drift from it.

The page is cut into items: a numbered or bulleted list item with its indented
continuation, or a paragraph, each under the `##` section it sits in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from schemas.errors import CheckFailed

RULES = Path(__file__).resolve().parent.parent / "RULES.md"
CATEGORIES = "Categories of a second t in W ∩ H (first that applies)"
UNALLOCATED = "Unallocated"


class RulesPageError(CheckFailed, ValueError):
    """RULES.md lacks a section the outputs quote: it is not the page this engine follows."""


@dataclass(frozen=True)
class Item:
    """One numbered or bulleted item, or paragraph, of RULES.md, whitespace joined."""

    section: str
    number: str | None  # "1" for a numbered item, None for a bullet or paragraph
    text: str


def items(text: str | None = None) -> list[Item]:
    """RULES.md (or `text` in its form) cut into items."""
    if text is None:
        return list(_page_items())
    out: list[Item] = []
    section, number, lines = "", None, []  # type: tuple[str, str | None, list[str]]

    def flush() -> None:
        if lines:
            out.append(Item(section, number, " ".join(line.strip() for line in lines)))
            lines.clear()

    for line in text.splitlines():
        start = re.match(r"(\d+)\.\s|-\s", line)
        if line.startswith("#") or not line.strip() or start:
            flush()
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        elif start:
            number = start.group(1)
            lines.append(line[start.end() :])
        elif line.strip():
            if not lines:
                number = None
            lines.append(line)
    flush()
    return out


@cache
def _page_items() -> tuple[Item, ...]:
    return tuple(items(RULES.read_text(encoding="utf-8")))


def section(title: str, every: list[Item] | None = None) -> list[Item]:
    """The items of one `##` section; RulesPageError when the page has no such section."""
    chosen = [i for i in (items() if every is None else every) if i.section == title]
    if not chosen:
        raise RulesPageError(
            f"{RULES}: no section '## {title}': this RULES.md is not the engine's"
        )
    return chosen


def bearers_paragraph(every: list[Item] | None = None) -> str:
    """The "Bearers: …" paragraph, which says who bears each category."""
    return next(
        (i.text for i in (items() if every is None else every) if i.text.startswith("Bearers:")),
        "",
    )


def category_rules() -> dict[str, tuple[str, str]]:
    """Each category's rule as (where RULES.md decides it, its words), with "bearers"
    for the Bearers paragraph."""
    out: dict[str, tuple[str, str]] = {}
    for item in section(CATEGORIES):
        named = re.match(r"`(\w+)`:", item.text)
        if item.number and named:
            out[named.group(1)] = (f"RULES.md, Categories, rule {item.number}", item.text)
    out["unallocated"] = ("RULES.md, Unallocated", " ".join(i.text for i in section(UNALLOCATED)))
    out["bearers"] = ("RULES.md, Categories, Bearers", bearers_paragraph(section(CATEGORIES)))
    return out
