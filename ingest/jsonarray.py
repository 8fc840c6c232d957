"""Streaming the elements of one top-level JSON array, without holding the file.

The scanner tracks only strings (with escapes), nesting depth and line numbers; each
element's bytes are handed on whole, to be parsed by the caller. Memory is one element
plus one read chunk, whatever the file size.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from schemas.errors import BadInput

_OUTSIDE = re.compile(rb'["\[\]{},\n]')
_INSIDE = re.compile(rb'["\\\n]')
_CHUNK = 1 << 20


class MalformedArray(BadInput, ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Element:
    raw: bytes
    line: int
    offset: int


class _Scanner:
    def __init__(self, stream: BinaryIO, initial: bytes, base: int) -> None:
        self.stream = stream
        self.buf = initial
        self.base = base  # file offset of buf[0]
        self.line = 1

    def more(self) -> bool:
        chunk = self.stream.read(_CHUNK)
        self.buf += chunk
        return bool(chunk)

    def opening_bracket(self) -> int:
        """Index just past the '[' that opens the array."""
        i = 0
        while True:
            if i >= len(self.buf) and not self.more():
                raise MalformedArray(self.line, "expected a JSON array, found an empty file")
            ch = self.buf[i : i + 1]
            if ch == b"[":
                return i + 1
            if ch == b"\n":
                self.line += 1
            elif not ch.isspace():
                raise MalformedArray(self.line, "expected '[' to open a JSON array")
            i += 1

    def element(self, raw_start: int, end: int, line: int) -> Element:
        raw = self.buf[raw_start:end]
        lead = len(raw) - len(raw.lstrip())
        return Element(raw.strip(), line + raw[:lead].count(b"\n"), self.base + raw_start + lead)


def iter_array(stream: BinaryIO, initial: bytes = b"", base: int = 0) -> Iterator[Element]:
    """Elements of the array that opens at the first non-blank byte of initial + stream."""
    s = _Scanner(stream, initial, base)
    i = seg_start = s.opening_bracket()
    seg_line, depth, in_string, count = s.line, 0, False, 0
    while True:
        match = (_INSIDE if in_string else _OUTSIDE).search(s.buf, i)
        if match is None:
            i = len(s.buf)
            if not s.more():
                raise MalformedArray(s.line, "the JSON array is not closed")
            continue
        token, i = match.group(), match.end()
        if token == b"\n":
            s.line += 1
        elif in_string:
            if token == b"\\":
                if i >= len(s.buf):
                    s.more()
                i += 1  # the escaped byte is never a token
            else:
                in_string = False
        elif token == b'"':
            in_string = True
        elif token in (b"[", b"{"):
            depth += 1
        elif depth > 0 and token in (b"]", b"}"):
            depth -= 1
        elif depth == 0 and token in (b",", b"]"):
            element = s.element(seg_start, i - 1, seg_line)
            if element.raw:
                count += 1
                yield element
            elif token == b"," or count:
                raise MalformedArray(s.line, "empty element in the JSON array")
            if token == b"]":
                return
            s.buf, s.base, i = s.buf[i:], s.base + i, 0
            seg_start, seg_line = 0, s.line


_VALUE_TOKENS = re.compile(rb'["\[\]{}\n]')
_NOT_BLANK = re.compile(rb"[^ \t\r\n]")


def iter_values(stream: BinaryIO, initial: bytes = b"", base: int = 0) -> Iterator[Element]:
    """Top-level JSON objects or arrays written one after another, each over any number
    of lines (`jq .` output, a pretty-printed object): each value's bytes whole. The
    window is cut only when more must be read, so many small values cost no copying."""
    s = _Scanner(stream, initial, base)
    i = start = depth = 0
    in_string, start_line = False, 1
    while True:
        if depth == 0:
            blank = _NOT_BLANK.search(s.buf, i)
            if blank is None:
                s.line += s.buf.count(b"\n", i)
                s.buf, s.base, i = b"", s.base + len(s.buf), 0
                if not s.more():
                    return
                continue
            s.line += s.buf.count(b"\n", i, blank.start())
            if s.buf[blank.start() : blank.start() + 1] not in (b"{", b"["):
                raise MalformedArray(s.line, "expected a JSON object")
            start = i = blank.start()
            start_line = s.line
        match = (_INSIDE if in_string else _VALUE_TOKENS).search(s.buf, i)
        if match is None:
            s.buf, s.base, i, start = (
                s.buf[start:],
                s.base + start,
                len(s.buf) - start,
                0,
            )  # keep only this value
            if not s.more():
                raise MalformedArray(start_line, "the file ends inside this JSON object")
            continue
        token, i = match.group(), match.end()
        if token == b"\n":
            s.line += 1
        elif in_string:
            if token == b"\\":
                if i >= len(s.buf):
                    s.more()
                i += 1
            else:
                in_string = False
        elif token == b'"':
            in_string = True
        elif token in (b"[", b"{"):
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                yield Element(s.buf[start:i], start_line, s.base + start)
