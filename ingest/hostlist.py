"""Slurm's hostlist syntax (`gpu-a[01-02,07]`, `rack[0-63]_blade[0-41]`), expanded to the
node names it stands for, and the reverse: a list of names written as a hostlist.

What sacct's NodeList, `scontrol show hostnames` and slurm.conf's NodeName accept:

- names separated by commas (or whitespace) outside brackets: `a,b`;
- a bracket group of comma-separated numbers and ranges: `n[1-3,7]` is n1 n2 n3 n7;
- zero padding: a range is as wide as its first number (`n[001-010]` is n001 … n010;
  `n[8-10]` is n8 n9 n10), as Slurm prints it;
- several bracket groups in one name, expanded as Slurm does: the first group varies
  slowest (`a[1-2]b[3-4]` is a1b3 a1b4 a2b3 a2b4);
- `None assigned`, `(null)` and an empty text: no nodes.

A hostlist that would expand past MAX_NODES names (the bound of `allocation.granted.nodes`)
is refused before it is expanded, as is any text that is not a hostlist: a ValueError
naming what is wrong, which the caller turns into a quarantined record.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from schemas.types import MAX_NODES

NO_NODES = frozenset({"", "None assigned", "(null)", "None"})
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_SEPARATORS = frozenset(", \t\n")
_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)$", re.DOTALL)


def expand(hostlist: str, limit: int = MAX_NODES) -> list[str]:
    """The node names of a Slurm hostlist, in Slurm's order; ValueError when it is not one
    or when it names more than `limit` nodes."""
    text = hostlist.strip()
    if text in NO_NODES:
        return []
    pieces = [_parse_name(piece) for piece in _top_level(text)]
    total = 0
    for _literals, groups in pieces:
        count = 1
        for group in groups:
            count *= _range_size(group)
            if count > limit:
                break
        total += count
        if total > limit:
            raise ValueError(f"{hostlist[:60]!r} names more than {limit:,} nodes")
    return [name for literals, groups in pieces for name in _names(literals, groups)]


def _top_level(text: str) -> Iterator[str]:
    """The names of the list: split at separators that are not inside brackets."""
    depth, start = 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested '[' at character {index + 1} of {text[:60]!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"']' without '[' at character {index + 1} of {text[:60]!r}")
        elif char in _SEPARATORS and depth == 0:
            if index > start:
                yield text[start:index]
            start = index + 1
    if depth:
        raise ValueError(f"'[' without ']' in {text[:60]!r}")
    if len(text) > start:
        yield text[start:]


#: A bracket group as parsed: its ranges (lo text, hi number), expanded only when asked.
_Ranges = list[tuple[str, int]]


def _parse_name(piece: str) -> tuple[list[str], list[_Ranges]]:
    """`a[1-2]b[3]c` → literals ['a', 'b', 'c'] and the two groups between them."""
    literals: list[str] = []
    groups: list[_Ranges] = []
    rest = piece
    while "[" in rest:
        head, _, tail = rest.partition("[")
        body, _, rest = tail.partition("]")
        literals.append(head)
        groups.append(_parse_group(body, piece))
    literals.append(rest)
    return literals, groups


def _parse_group(body: str, piece: str) -> _Ranges:
    ranges = []
    for item in body.split(","):
        match = _RANGE.fullmatch(item.strip())
        if match is None:
            raise ValueError(f"not a number or range: {item!r} in {piece[:60]!r}")
        lo, hi = match.group(1), match.group(2)
        high = int(hi) if hi is not None else int(lo)
        if high < int(lo):
            raise ValueError(f"range {item!r} runs backwards in {piece[:60]!r}")
        ranges.append((lo, high))
    return ranges


def _range_size(group: _Ranges) -> int:
    return sum(high - int(lo) + 1 for lo, high in group)


def _numbers(group: _Ranges) -> Iterator[str]:
    """Each number of a group as Slurm prints it: as wide as its range's first number."""
    for lo, high in group:
        width = len(lo)
        for number in range(int(lo), high + 1):
            yield str(number).zfill(width)


def _names(literals: list[str], groups: list[_Ranges]) -> Iterator[str]:
    """The cartesian product, the first group varying slowest (Slurm's order)."""
    if not groups:
        yield literals[0]
        return
    for number in _numbers(groups[0]):
        yield from _names([literals[0] + number + literals[1], *literals[2:]], groups[1:])


def compress(names: list[str]) -> str:
    """The names as one hostlist, in their order: runs of names that differ only in a
    trailing number are written as one bracket group (`n1,n2,n3,n7` → `n[1-3,7]`).
    Names must not hold brackets, commas or whitespace; expand(compress(x)) == x."""
    out: list[str] = []
    prefix: str | None = None
    items: list[list[str]] = []  # [first digits, last digits] of each range
    for name in names:
        if not name or any(c in name for c in "[]") or any(c in _SEPARATORS for c in name):
            raise ValueError(f"not a node name a hostlist can hold: {name!r}")
        match = _TRAILING_DIGITS.match(name)
        if match is None or match.group(1) != prefix:
            out.extend(_written(prefix, items))
            prefix, items = (match.group(1), []) if match else (None, [])
            if match is None:
                out.append(name)
                continue
        _add_number(items, match.group(2))
    out.extend(_written(prefix, items))
    return ",".join(out)


def _add_number(items: list[list[str]], digits: str) -> None:
    """Extend the last range when `digits` is its next number as the range prints it."""
    if items:
        first, last = items[-1]
        if int(digits) == int(last) + 1 and str(int(digits)).zfill(len(first)) == digits:
            items[-1][1] = digits
            return
    items.append([digits, digits])


def _written(prefix: str | None, items: list[list[str]]) -> list[str]:
    if prefix is None or not items:
        return []
    if len(items) == 1 and items[0][0] == items[0][1]:
        return [prefix + items[0][0]]
    ranges = [first if first == last else f"{first}-{last}" for first, last in items]
    return [f"{prefix}[{','.join(ranges)}]"]


__all__ = ["NO_NODES", "compress", "expand"]
