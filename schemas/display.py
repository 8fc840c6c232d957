"""Data shown to people: the one place that says how a value from the ledger is made safe
to show on a terminal and in a spreadsheet (docs/reports.md, "Output nobody can spoof").

Any id, tenant, invoice or quarantined record is bytes someone else chose. On a terminal,
a control character (ESC, OSC, a newline), a bidi control (U+202E, U+2066..U+2069) or
another invisible format character could rewrite the screen, add a fake line or reverse
a figure; so `terminal_safe` shows each as a visible escape (`\\x1b`, `\\u202e`, `\\n`).
Rich never parses markup from data: `DataTable` makes every cell, header, title and
caption a `Text`. In a spreadsheet a cell that starts like a formula runs as one;
`spreadsheet_safe` applies OWASP's CSV-injection rule to text cells and leaves figures.

    terminal_safe("INV-\\u202e25.114")  → 'INV-\\\\u202e25.114' (the escape, printed visibly)
    spreadsheet_safe("=HYPERLINK(...)") → "'=HYPERLINK(...)";  spreadsheet_safe("-3.20") → "-3.20"
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from rich.table import Column, Table
from rich.text import Text

#: Unicode categories never shown raw: controls (C0, DEL, C1), format characters (bidi
#: controls, zero-width characters, soft hyphen, tags), surrogates, line and paragraph
#: separators.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible_escape(char: str) -> str:
    """One character as Python writes it in a string literal: `\\n`, `\\x1b`, `\\u202e`."""
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def is_unsafe(char: str) -> bool:
    return unicodedata.category(char) in UNSAFE_CATEGORIES


def terminal_safe(text: str) -> str:
    """`text` with each control, bidi, format or separator character replaced by its
    visible escape: one line, shown as written, whatever the terminal."""
    if text.isprintable():  # every unsafe character is unprintable: the common case is free
        return text
    return "".join(visible_escape(c) if is_unsafe(c) else c for c in text)


def data_text(value: Any) -> Text:
    """A value as a rich `Text`: shown literally (no markup, no emoji codes), escaped."""
    if isinstance(value, Text):
        return value  # built by our code, from text made safe where it was built
    return Text(terminal_safe("" if value is None else str(value)))


class DataTable(Table):
    """A rich table of data: every str header, cell, title and caption becomes a `Text`
    through `terminal_safe`, so no `[/x]` in an id crashes it and no ESC reaches the
    terminal. (A `Table` parses markup in every str it is given.)"""

    def __init__(
        self, *headers: Column | str, title: Any = None, caption: Any = None, **options: Any
    ) -> None:
        columns = [h if isinstance(h, Column) else Column(header=data_text(h)) for h in headers]
        super().__init__(
            *columns,
            title=None if title is None else data_text(title),
            caption=None if caption is None else data_text(caption),
            **options,
        )

    def add_row(self, *cells: Any, **options: Any) -> None:
        super().add_row(*(data_text(c) for c in cells), **options)


# -- spreadsheets ---------------------------------------------------------------------

#: What a spreadsheet reads as the start of a formula (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: A figure: a plain decimal number, which a spreadsheet reads as the number it is (ASCII
#: digits only, so that Python's `re` and Arrow's RE2 read it alike).
FIGURE = r"[+-]?(?:(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_FIGURE = re.compile(FIGURE)
#: The same figure for Arrow's regular expressions (RE2), which match anywhere unless anchored.
FIGURE_RE2 = f"^(?:{FIGURE})$"


def is_figure(cell: str) -> bool:
    return _FIGURE.fullmatch(cell) is not None


def spreadsheet_safe(cell: str) -> str:
    """A text cell that a spreadsheet would run as a formula, prefixed with `'` (shown as
    text); a figure such as `-3.20` is left as the number it is."""
    if cell.startswith(FORMULA_STARTS) and not is_figure(cell):
        return "'" + cell
    return cell
