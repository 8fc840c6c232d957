"""Kubernetes objects as `kubectl` prints them: JSON or YAML, one object, a list, or many.

A file holds JSON when its first non-blank byte is `{` or `[`, else YAML. Either way it
yields one `K8sObject` per object, each with the line it starts on and its own bytes:
- JSON: one or more top-level values (`kubectl get -w -o json` writes them one after
  another); an array, or an object with an `items` array (`kind: List`, `WorkloadList`,
  `EventList`), stands for its elements. Each element is parsed alone, so one broken
  element is one rejection and its neighbours still count. Items of a typed list as the
  API and `kubectl cluster-info dump` write it (`EventList`, `WorkloadList`) carry no
  `kind` or `apiVersion`: they take the list's (EventList → Event), read from the list's
  header, which those writers put before `items`.
- YAML: a stream of documents split at `---` lines; a document that is a mapping with an
  `items` sequence, or a sequence, stands for its elements (items without `kind` take
  the list's, as in JSON). A document that is not valid UTF-8 or not valid YAML is one
  rejection, and the next document is read as usual.
  Timestamps stay text (as in JSON), so one time parser serves both; YAML aliases are
  expanded, within a size limit.

Errors point at a field (`ingest/k8sfields.py`): a rejection's line is the line of the
field's key in YAML (its node's start mark) and the object's first line in JSON.

The file is streamed, so memory stays flat whatever its size: JSON is read in chunks
of a MiB and only the element being cut (or, outside a list, the top-level value being
read) is held; YAML is read line by line and only the document being parsed is held. A
single YAML document is parsed whole, so one huge document that is a `List` stays in
memory whole (with its node tree): split it into documents, or use JSON, for big dumps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import orjson
import yaml

from ingest.base import UTF8_BOM, open_source
from ingest.k8sfields import FieldPath, ObjectError, dotted, json_type
from schemas import Origin, Rejected, format_utc
from schemas.errors import BadInput

MAX_DEPTH = 64  # far beyond any Kubernetes object; bounds recursion on hostile input
MAX_VALUES = 1_000_000  # per object, after YAML aliases are expanded
_CHUNK = 1 << 20  # bytes read at a time
_KIND = re.compile(rb'"?\bkind"?\s*:\s*"?([A-Za-z][A-Za-z0-9]*)')
_HEADER_KEYS = {b'"kind"': "kind", b'"apiVersion"': "apiVersion"}

#: The `kind` and `apiVersion` of the list an item came from, as (name, value) pairs.
ListHeader = tuple[tuple[str, str], ...]

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """The safe loader, with timestamps left as text."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


class _Locator(Protocol):
    def line(self, path: FieldPath) -> int: ...


@dataclass(frozen=True)
class K8sObject:
    body: dict[str, Any]
    origin: Origin
    raw: bytes
    locator: _Locator

    def rejected(self, error: ObjectError) -> Rejected:
        origin = Origin(self.origin.file, self.locator.line(error.path), self.origin.offset)
        return Rejected(origin, dotted(error.path), error.reason, self.raw)


def kinds_in(head: bytes) -> set[str]:
    """The `kind` values that appear in the first bytes of a JSON or YAML file."""
    return {m.decode() for m in _KIND.findall(head)}


def read_objects(path: Path) -> Iterator[K8sObject | Rejected]:
    """The file's objects in file order, or a rejection for each part that cannot be read."""
    with open_source(path) as stream:
        head = b""
        while True:  # read on to the first non-blank byte after any BOM, or to the end
            more = stream.read(_CHUNK)
            head += more
            start = len(UTF8_BOM) if head.startswith(UTF8_BOM) else 0
            if not more or (len(head) >= len(UTF8_BOM) and head[start:].strip()):
                break
        if head[start:].lstrip()[:1] in (b"{", b"["):
            yield from _json_objects(str(path), _Source(stream, head[start:], start))
        else:
            yield from _yaml_objects(str(path), _lines(head[start:], stream), start)


# --- JSON ------------------------------------------------------------------------------

# A whole string (escapes and all), a bracket, a comma; or a quote no string pattern closes.
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{},]|"', re.DOTALL)
_INNER_TOKEN = re.compile(
    rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]|"', re.DOTALL
)  # inside an element, commas do not matter
_CLOSER = {b"{": b"}", b"[": b"]"}
_BLANK = re.compile(rb"\s*")


@dataclass(frozen=True)
class _Span:
    raw: bytes
    offset: int
    line: int
    header: ListHeader = ()


class _Malformed(BadInput, ValueError):
    """The JSON cannot be cut into objects from `offset` on (`raw`: the bytes held from there)."""

    def __init__(self, line: int, message: str, offset: int, raw: bytes) -> None:
        super().__init__(message)
        self.line, self.offset, self.raw = line, offset, raw


class _Source:
    """A window on the file: `buf` holds its bytes from offset `base` on."""

    def __init__(self, stream: BinaryIO, held: bytes, base: int) -> None:
        self.stream, self.buf, self.base = stream, held, base

    def more(self, keep: int) -> bool:
        """Read on, dropping the bytes before `keep`; False (and nothing dropped) at the end."""
        chunk = self.stream.read(
            max(_CHUNK, len(self.buf) - keep)
        )  # doubling: a long value costs linear time
        if not chunk:
            return False
        self.buf, self.base = self.buf[keep:] + chunk, self.base + keep
        return True


class _FixedLine:
    def __init__(self, line: int) -> None:
        self._line = line

    def line(self, path: FieldPath) -> int:
        return self._line


def _json_objects(name: str, source: _Source) -> Iterator[K8sObject | Rejected]:
    try:
        for span in _json_spans(source):
            origin = Origin(name, span.line, span.offset)
            try:
                body = orjson.loads(span.raw)
            except orjson.JSONDecodeError as exc:
                yield _json_rejection(exc, span.raw, origin)
                continue
            yield _checked(body, origin, span.raw, _FixedLine(span.line), span.header)
    except _Malformed as exc:
        yield Rejected(Origin(name, exc.line, exc.offset), "(file)", str(exc), exc.raw)


def _json_rejection(exc: orjson.JSONDecodeError, raw: bytes, origin: Origin) -> Rejected:
    """Where in the file the element's JSON broke, and why, without orjson's relative position."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        line = origin.line + raw.count(b"\n", 0, bad.start)
        return Rejected(
            Origin(origin.file, line, origin.offset),
            "(object)",
            f"not valid UTF-8 at byte {origin.offset + bad.start}",
            raw,
        )
    line = origin.line + max(exc.lineno - 1, 0)
    return Rejected(
        Origin(origin.file, line, origin.offset), "(object)", f"not valid JSON: {exc.msg}", raw
    )


def _json_spans(source: _Source) -> Iterator[_Span]:
    """Each top-level value, or each element of its list, as bytes with their line."""
    line, i = 1, 0
    while True:
        gap = _BLANK.match(source.buf, i)
        assert gap is not None
        line += gap.group().count(b"\n")
        i = gap.end()
        if i >= len(source.buf):
            if not source.more(i):
                return
            i = 0
            continue
        if source.buf[i : i + 1] not in (b"{", b"["):
            raise _Malformed(
                line, "expected a JSON object or array", source.base + i, source.buf[i:]
            )
        scan = _ValueScan(source, i, line)
        yield from scan.spans()
        i, line = scan.i, scan.line_at(scan.i)


class _ValueScan:
    """One top-level JSON value: tracks strings, nesting and lines, never parses.

    A string is one regex match, so the Python loop runs once per bracket, comma or string;
    lines are counted only where a position is reported. Positions are indexes into the
    source's window, shifted whenever it drops what is behind the element being cut."""

    def __init__(self, source: _Source, start: int, line: int) -> None:
        self.source, self.start, self.first_line = source, start, line
        self.i, self._line, self._line_pos = start, line, start
        self.stack: list[bytes] = []
        self.collect: int | None = None  # depth of the array whose elements are the objects
        self.seg_start, self.seg_line, self.found = 0, 0, 0
        self.last_key_end, self.last_key = -1, b""
        self.header: dict[str, str] = {}  # the top-level kind and apiVersion read so far

    def line_at(self, pos: int) -> int:
        """The line of `pos`, which never moves backwards."""
        self._line += self.source.buf.count(b"\n", self._line_pos, pos)
        self._line_pos = pos
        return self._line

    def spans(self) -> Iterator[_Span]:
        outer, inner = _TOKEN.search, _INNER_TOKEN.search
        while True:
            deep = self.collect is not None and 0 < self.collect < len(self.stack)
            match = (inner if deep else outer)(self.source.buf, self.i)
            if match is None or match.end() - match.start() == 1 == match.group().count(b'"'):
                # no token, or a string the window cuts short: read on and look again
                self.i = len(self.source.buf) if match is None else match.start()
                if self._read_on():
                    continue
                if match is None:
                    raise self._broken("the file ends inside this JSON object")
            token, at, self.i = match.group(), match.start(), match.end()
            if token[:1] == b'"':
                self._string(token, at)
            elif token in (b"{", b"["):
                self._open(token)
            elif token == b",":
                yield from self._separator(at, closing=False)
            else:
                yield from self._separator(at, closing=True)
                self._close(token, at)
                if not self.stack:
                    if self.collect is None:
                        yield _Span(
                            self.source.buf[self.start : self.i],
                            self.source.base + self.start,
                            self.first_line,
                        )
                    return

    def _read_on(self) -> bool:
        """Read more of the file, keeping the element being cut (in a list), else the value."""
        keep = self.start if self.collect is None else self.seg_start
        if self._line_pos < keep:
            self.line_at(keep)
        if not self.source.more(keep):
            return False
        self.start -= (
            keep  # below 0 once the value's head is dropped: only its offset is used then
        )
        self.i -= keep
        self._line_pos -= keep
        self.seg_start -= keep
        self.last_key_end -= keep
        return True

    def _string(self, token: bytes, at: int) -> None:
        if len(token) == 1:  # a quote the string pattern could not close
            raise self._broken("the file ends inside a string of this JSON object")
        if len(self.stack) == 1 and self.stack[0] == b"{":
            name = _HEADER_KEYS.get(self.last_key)
            if (
                name
                and self.last_key_end >= 0
                and self.source.buf[self.last_key_end : at].strip() == b":"
            ):
                try:
                    self.header[name] = orjson.loads(token)
                except orjson.JSONDecodeError:
                    pass  # a broken string names no kind; the object's own parse reports it
            self.last_key, self.last_key_end = token, self.i

    def _open(self, token: bytes) -> None:
        top_is_items = (
            token == b"["
            and self.stack == [b"{"]
            and self.last_key == b'"items"'
            and self.source.buf[self.last_key_end : self.i - 1].strip() == b":"
        )
        self.stack.append(token)
        if self.collect is None and (top_is_items or self.stack == [b"["]):
            self.collect = len(self.stack)
            self.seg_start, self.seg_line = self.i, self.line_at(self.i)

    def _broken(self, message: str) -> _Malformed:
        """The element being read (in a list), else the whole value, is where it broke."""
        buf, base = self.source.buf, self.source.base
        if self.collect is not None and self.collect > 0 and len(self.stack) > self.collect:
            lead = _BLANK.match(buf, self.seg_start)
            assert lead is not None
            line = self.seg_line + buf.count(b"\n", self.seg_start, lead.end())
            return _Malformed(line, message, base + lead.end(), buf[lead.end() :])
        return _Malformed(self.first_line, message, base + self.start, buf[max(self.start, 0) :])

    def _close(self, token: bytes, at: int) -> None:
        if not self.stack or _CLOSER[self.stack[-1]] != token:
            raise self._broken(f"unexpected {token.decode()!r} at line {self.line_at(at)}")
        self.stack.pop()

    def _separator(self, at: int, closing: bool) -> Iterator[_Span]:
        if self.collect is None or len(self.stack) != self.collect:
            return
        buf = self.source.buf
        lead = _BLANK.match(buf, self.seg_start, at)
        assert lead is not None
        if lead.end() < at:
            self.found += 1
            line = self.seg_line + buf.count(b"\n", self.seg_start, lead.end())
            yield _Span(
                buf[lead.end() : at].rstrip(),
                self.source.base + lead.end(),
                line,
                tuple(self.header.items()),
            )
        elif not closing or self.found:
            raise _Malformed(
                self.line_at(at), "empty element in a JSON array", self.source.base + at, buf[at:]
            )
        if closing:
            self.collect = -1  # the list is done; nothing after it is an object of ours
        self.seg_start, self.seg_line = self.i, self.line_at(self.i)


# --- YAML ------------------------------------------------------------------------------

_DOCUMENT_START = re.compile(rb"^---(?=[ \t\r\n]|$)", re.MULTILINE)
_DIRECTIVES_ONLY = re.compile(rb"(?:[ \t]*(?:[%#][^\n]*)?\r?\n)*")


class _NodeLocator:
    def __init__(self, node: yaml.Node, first_line: int) -> None:
        self.node, self.first_line = node, first_line

    def line(self, path: FieldPath) -> int:
        """The line of the field's key (of the item, in a list), as far as the path goes."""
        node, line = self.node, self.node.start_mark.line
        for part in path:
            found = _entry(node, part)
            if found is None:
                break
            node, line = found[1], found[0].start_mark.line
        return self.first_line + line


def _entry(node: yaml.Node, part: str | int) -> tuple[yaml.Node, yaml.Node] | None:
    """(key or item, value) for one step of a field path."""
    if isinstance(node, yaml.MappingNode):
        return next(
            ((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part),
            None,
        )
    if (
        isinstance(node, yaml.SequenceNode)
        and isinstance(part, int)
        and 0 <= part < len(node.value)
    ):
        return node.value[part], node.value[part]
    return None


def _child(node: yaml.Node, part: str | int) -> yaml.Node | None:
    found = _entry(node, part)
    return None if found is None else found[1]


def _lines(head: bytes, stream: BinaryIO) -> Iterator[bytes]:
    """The lines (cut after each newline) of `head` and then of the rest of the stream."""
    *whole, partial = head.split(b"\n")
    for line in whole:
        yield line + b"\n"
    partial += stream.readline()
    if partial:
        yield partial
    yield from stream


def _chunks(lines: Iterator[bytes], start: int) -> Iterator[tuple[bytes, int, int]]:
    """The stream cut before each `---` line: (bytes, first line, byte offset); one piece is
    held at a time. A piece of only directives (`%YAML 1.1`), comments and blank lines stays
    with the next one."""
    piece: list[bytes] = []
    line, begin = 1, start
    for text in lines:
        if piece and _DOCUMENT_START.match(text):
            held = b"".join(piece)
            if not _DIRECTIVES_ONLY.fullmatch(held):
                yield held, line, begin
                line, begin, piece = line + held.count(b"\n"), begin + len(held), []
        piece.append(text)
    yield b"".join(piece), line, begin


def _yaml_objects(name: str, lines: Iterator[bytes], start: int) -> Iterator[K8sObject | Rejected]:
    for chunk, first_line, offset in _chunks(lines, start):
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = first_line + chunk.count(b"\n", 0, exc.start)
            yield Rejected(
                Origin(name, line, offset),
                "(document)",
                f"not valid UTF-8 at byte {offset + exc.start}",
                chunk,
            )
            continue
        yield from _yaml_chunk(name, text, first_line, offset)


def _yaml_chunk(
    name: str, text: str, first_line: int, offset: int
) -> Iterator[K8sObject | Rejected]:
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            items, header = _yaml_items(node)
            for item in items:
                origin = Origin(
                    name, first_line + item.start_mark.line, offset + item.start_mark.index
                )
                yield _yaml_object(loader, item, text, origin, header)
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = first_line + (mark.line if mark is not None else 0)
        reason = f"not valid YAML: {_yaml_reason(exc)}"
        yield Rejected(Origin(name, line, offset), "(document)", reason, text.encode())
    finally:
        loader.dispose()


def _yaml_items(node: yaml.Node) -> tuple[Sequence[yaml.Node], ListHeader]:
    """The objects a document stands for, and the header of the list holding them."""
    if isinstance(node, yaml.SequenceNode):
        return list(node.value), ()
    items = _child(node, "items")
    if isinstance(items, yaml.SequenceNode):
        header = tuple(
            (key, value.value)
            for key in ("kind", "apiVersion")
            if isinstance(value := _child(node, key), yaml.ScalarNode)
            and isinstance(value.value, str)
        )
        return list(items.value), header
    return [node], ()


def _yaml_object(
    loader: _Loader, node: yaml.Node, text: str, origin: Origin, header: ListHeader
) -> K8sObject | Rejected:
    raw = text[node.start_mark.index : node.end_mark.index].strip().encode()
    try:
        body = loader.construct_document(node)
    except (yaml.YAMLError, RecursionError) as exc:
        return Rejected(origin, "(object)", f"not valid YAML: {_yaml_reason(exc)}", raw)
    return _checked(
        body, origin, raw, _NodeLocator(node, origin.line - node.start_mark.line), header
    )


def _yaml_reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    return " ".join(str(p) for p in (context, problem) if p) or str(exc).splitlines()[0]


# --- both ------------------------------------------------------------------------------


def _checked(
    body: Any, origin: Origin, raw: bytes, locator: _Locator, header: ListHeader = ()
) -> K8sObject | Rejected:
    if not isinstance(body, dict):
        found = "nothing" if body is None else json_type(body)
        return Rejected(
            origin, "(object)", f"expected a Kubernetes object (a mapping), found {found}", raw
        )
    try:
        plain = _Plain().value(body, ())
    except ObjectError as exc:
        return Rejected(
            Origin(origin.file, locator.line(exc.path), origin.offset),
            dotted(exc.path),
            exc.reason,
            raw,
        )
    return K8sObject(_inherit(plain, dict(header)), origin, raw, locator)


def _inherit(body: dict[str, Any], header: dict[str, str]) -> dict[str, Any]:
    """An item of a typed list (`EventList`, `WorkloadList`) as the API writes it, with no
    `kind` or `apiVersion` of its own: it is of the list's item kind and version. The items
    of a plain `List` carry their own (kubectl writes them), so nothing is taken from it."""
    list_kind = header.get("kind", "")
    if not isinstance(list_kind, str) or not list_kind.endswith("List") or list_kind == "List":
        return body
    inherited = {"kind": list_kind.removesuffix("List"), "apiVersion": header.get("apiVersion")}
    missing = {k: v for k, v in inherited.items() if v and body.get(k) is None}
    return {**body, **missing} if missing else body


class _Plain:
    """A copy in JSON's own types; YAML's extras (bytes, sets, odd keys) are refused."""

    def __init__(self) -> None:
        self.budget = MAX_VALUES

    def value(self, value: Any, path: FieldPath) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise ObjectError((), f"more than {MAX_VALUES} values (YAML aliases expanded)")
        if len(path) > MAX_DEPTH:
            raise ObjectError(path[:3], f"nested deeper than {MAX_DEPTH} levels")
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, datetime):  # an explicit !!timestamp tag
            return format_utc(value if value.tzinfo else value.replace(tzinfo=timezone.utc))
        if isinstance(value, date):
            return value.isoformat()
        if isinstance(value, list):
            return [self.value(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ObjectError(path, f"key {key!r} is not a string")
                out[key] = self.value(item, (*path, key))
            return out
        raise ObjectError(path, f"a YAML {type(value).__name__} has no JSON form")


__all__ = ["K8sObject", "kinds_in", "read_objects"]
