"""NVIDIA DCGM health diagnostics: the text of `dcgmi diag -r N [-i GPUS]`.

Layout (dcgmi's Diag.cpp, DCGM 2.x to 4.x): `Successfully ran diagnostic for group.`, then
a 78-column table, `| Diagnostic | Result |` over `+===+`, cut into sections by bars
(`|-----  Deployment  ---+---|`, `+-----  Hardware  ---+---+`, Integration, Stress) and
closed by a plain border. Each row is `| label | value |`:
- DCGM 4.x: a `Metadata` section (DCGM Version, Driver Version Detected, `GPU Device IDs
  Detected`: PCI device ids, not GPU indexes: not read as devices); a test row per plugin
  (`software`, `memory`, `pcie`, `targeted_stress`, ...) with the test's result (`Pass`,
  `Fail`, `Warn`, `Skip`, `Not Run`), then one line per entity (`GPU0: Pass`, `CPU0: Fail`)
  and its messages, labelled `Warning: GPU0` (or `Warning` for the test as a whole) and,
  verbose, `Info: GPU0`. dcgmi prints an entity that warned as `Fail`: under a test whose
  result is `Warn`, an entity's `Fail` is read as a warning.
- DCGM 2.x/3.x: test rows by display name (`Denylist`, `NVML Library`, `Page Retirement/Row
  Remap`, `GPU Memory`, `Targeted Stress`, ...), Deployment tests with a bare result,
  others `Pass - All` or one line per result `Fail - GPU: 0` / `Pass - GPUs: 1, 2`, with
  messages `Error` (Deployment), `Warning`, `Info`. 3.x prints a warning as `Fail`.
A message longer than 45 characters is cut every 45 characters, words or not, onto lines
with an empty label (`... and row` / ` remappings are pending`): the pieces are joined
again exactly (each piece but the last is 45 characters, its trailing spaces kept).
Detection leaves a file that also holds a `dcgmi stats` report (a Slurm job's stdout with
a diag in its prolog) to dcgm-stats: a job's log is its tenant's text, not the host's.
Lines outside the table (the command, a `kubectl exec` banner, a prompt) are passed over;
a table cut short (no closing border, or a last line that ends mid-row: `|   | ts.`) is
read as far as it goes.

Mapping: fleet events, source `dcgmi-diag://<node>`. dcgmi names no host and prints no
time: option `node` (required), `scrape_time` (when the run ended, RFC 3339; default the
file's modification time), `fabric_domain` (optional).
- a test whose result is `Fail` or `Warn` → one `health.fault` per entity that failed
  (`device` the GPU index), code `diag-<test>` (the test's name in lower case, other
  characters as `-`; names a later DCGM changed are mapped to the later one, `GPU Memory`
  → `diag-memory`, 2.x `Blacklist` → `diag-denylist`), severity `critical` (Fail) or
  `warning` (Warn), detail the test, its result and the messages about that entity or the
  test as a whole. A test with no per-entity result line (3.x Deployment, `Fail - All`)
  names the GPUs its messages name (`GPU 3 has ...`), else the node alone; so does a
  failing CPU or other entity.
- an `Error` or `Warning` row with no test before it in its section (a cut paste) →
  `health.fault` code `diag-error`, severity `critical` (Error) or `warning` (Warning),
  on the GPU its text names (the node alone when it names none or several), detail the
  joined message.
- a pass clears (reconcile/RULES.md §7: a `health.cleared` of the same node, device,
  fabric_domain and code closes a fault): each entity line `GPU0: Pass` (3.x `Pass - GPU:
  0`) clears `diag-<test>` on that GPU; a test that passed as a whole (`Pass`, `Pass - All`,
  every GPU line Pass) clears it on the node too, and a test with no GPU line on every GPU
  the run covered (those other tests' result lines or `-i` name); a skipped GPU is never
  cleared. A run with no Fail, Warn, Error or Warning, and no test in the quarantine,
  clears `diag-error` the same way (not on a GPU that skipped a test). A clearing with
  nothing open is harmless; a fault's clearing needs the `fabric_domain` it was read with.
- ids `<gpu or ->:<code>@<time>` and `<gpu or ->:<code>:cleared@<time>` (`#2`, `#3` for a
  key repeated in one run): the same file read again appends nothing.
`dcgmi diag -j` (JSON) is read into the same tests: root `DCGM GPU Diagnostic` (2.x/3.x:
results by `gpu_id`; Deployment results name a GPU only with an error, written under the
key `warnings`) or `DCGM Diagnostic` (4.x: results by `entity_group`/`entity_id`, the
test's result in `test_summary`, which repeats the test's warnings). dcgmi's JSON prints a
warning as `Fail`, in 3.x and 4.x alike: read from JSON, a warning is a critical fault. A
test is one record, at the line its name is on; bad JSON or a bad field is quarantined
naming the field's path (`DCGM Diagnostic.test_categories[0].tests[2].results[1].status`).
Not read: `Skip`, `Not Run` and `Info` (nothing to record), Metadata beyond the DCGM and
driver versions (carried on each event as `dcgm_version`, `driver_version`).

Bad input: one test (its row and the lines under it) is one record: a result that is no
result, a row cut short (no closing `|`), a line that is not UTF-8 sends the test to the
quarantine naming the line and field. dcgmi's own failure (`Error: Unable to complete
diagnostic ...` with no table) is quarantined saying so; a second table in one file (two
runs need two files and two times) too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ingest.base import UTF8_BOM, event_from_object
from ingest.options import IngestOptions, ScrapeTime, option, required
from ingest.probes import BadLine, _capture_time, read_output
from schemas import Origin, Record, Rejected, format_utc

MAX_BYTES = 16 << 20  # a run's table is a few KiB
CHUNK = 45  # dcgmi's DATA_INFO_TAG_LEN: a message is cut every 45 characters
RESULTS = {"pass": "Pass", "fail": "Fail", "warn": "Warn", "skip": "Skip", "not run": "Not Run"}
SEVERITY = {"Fail": "critical", "Warn": "warning"}
#: display names an earlier DCGM gave a test later ones renamed (2.x Blacklist is 3.x Denylist;
#: 3.x names of plugins 4.x prints by their own name)
RENAMED = {
    "blacklist": "denylist",
    "gpu-memory": "memory",
    "eud-test": "eud",
    "cpu-eud-test": "cpu-eud",
}
_HEADER = re.compile(r"\|\s*Diagnostic\s*\|\s*Result\s*\|")
_IDENTIFY = re.compile(rb"(?m)^\s*\|\s*Diagnostic\s*\|\s*Result\s*\|\s*$")
_SECTION = re.compile(r"[A-Za-z][A-Za-z ]*[A-Za-z]")
_MESSAGE = re.compile(r"(Error|Warning|Info)(?:\s*:\s*([A-Za-z]+)\s*([0-9]{1,9}))?")
_ENTITY = re.compile(r"([A-Za-z]+)\s*([0-9]{1,9})\s*:\s*(.+)")
_INDEXES = r"[0-9]{1,9}(?:\s*,\s*[0-9]{1,9})*"
_GROUPED = re.compile(rf"(Pass|Fail|Warn|Skip)\s*-\s*(?:(All)|GPUs?\s*:\s*({_INDEXES})\s*)")
_CODE_LINE = re.compile(r"Code:\s*\([0-9]+\)")
_NAMED_GPU = re.compile(r"\bGPU\s*([0-9]{1,9})\b")
_GPU_LIST = re.compile(rf"(?:^|\s)(?:-i|--gpuList)[\s=]+({_INDEXES})(?:\s|$)")
_FAILED_RUN = re.compile(r"Error:\s*(.+)")
#: Metadata rows kept on every event (the GPU Device IDs are PCI ids, not GPUs: not kept)
METADATA = {"DCGM Version": "dcgm_version", "Driver Version Detected": "driver_version"}
METADATA_JSON = "Driver Version Detected"
#: the root key of `dcgmi diag -j`: DCGM 2.x/3.x, then 4.x
ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")


@dataclass(frozen=True)
class _Line:
    number: int
    offset: int
    raw: bytes
    text: str  # stripped
    cut: bool = False  # the file's last line with text: a paste may end mid-row


@dataclass
class _Message:
    kind: str  # Error, Warning, Info
    entity: str | None  # `GPU0` from a 4.x label `Warning: GPU0`
    line: int
    pieces: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        joined = "".join(p.ljust(CHUNK) for p in self.pieces[:-1]) + self.pieces[-1]
        return " ".join(joined.split())

    def gpus(self) -> set[int]:
        if self.entity is not None:
            kind, _, index = self.entity.partition(":")
            return {int(index)} if kind == "GPU" else set()
        return {int(m) for m in _NAMED_GPU.findall(self.text)}


@dataclass
class _Test:
    """One test row and what is printed under it; `name` None for messages with no test."""

    name: str | None
    section: str
    line: int
    result: str | None = None
    all_result: str | None = None  # 3.x `Fail - All`
    gpus: dict[int, str] = field(default_factory=dict)  # per-GPU result
    others: dict[str, str] = field(default_factory=dict)  # other entities' results (CPU0)
    messages: list[_Message] = field(default_factory=list)

    @property
    def code(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", (self.name or "").lower()).strip("-")
        return f"diag-{RENAMED.get(slug, slug)}"


@dataclass
class _Block:
    section: str
    lines: list[_Line] = field(default_factory=list)


@dataclass(frozen=True)
class _How:
    node: str
    fabric_domain: str | None
    time: datetime

    @property
    def source(self) -> str:
        return f"dcgmi-diag://{self.node}"


class DcgmiDiagOptions(IngestOptions):
    """What dcgmi-diag is told beside its file."""

    format = "dcgmi-diag"

    node: str = required("The host the diagnostic ran on (dcgmi diag names none).")
    fabric_domain: str | None = option("The fabric domain the node belongs to.")
    scrape_time: ScrapeTime = option(
        "When the diagnostic ran, RFC 3339 (default: the file's modification time)."
    )


class DcgmiDiagIngestor:
    name = "dcgmi-diag"
    options = DcgmiDiagOptions
    description = "NVIDIA DCGM diagnostics: the text of `dcgmi diag -r N`"

    def identify(self, path: Path, head: bytes) -> bool:
        text = head.removeprefix(UTF8_BOM).lstrip()
        if text.startswith(b"{"):  # `dcgmi diag -j`
            return b'"test_categories"' in text and any(f'"{r}"'.encode() in text for r in ROOTS)
        if b"Successfully retrieved statistics for" in head:
            return False  # a job's log with a diag prolog and its dcgmi stats: dcgm-stats'
        return _IDENTIFY.search(head) is not None  # its header row, alone on its line

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        given = DcgmiDiagOptions.of({k: options.get(k) for k in DcgmiDiagOptions.names()}, path)
        how = _How(given.node, given.fabric_domain, _capture_time(path, given.scrape_time))
        body = read_output(path, "dcgmi diag", MAX_BYTES)
        if body.removeprefix(UTF8_BOM).lstrip().startswith(b"{"):
            yield from _json_records(str(path), body.removeprefix(UTF8_BOM), how)
            return
        yield from _records(str(path), _lines(body), how)


def _lines(body: bytes) -> list[_Line]:
    out, offset = [], 0
    for number, raw in enumerate(body.splitlines(keepends=True), start=1):
        clean = raw.removeprefix(UTF8_BOM) if number == 1 else raw
        text = clean.decode("utf-8", "surrogateescape").strip()
        out.append(_Line(number, offset, raw, text))
        offset += len(raw)
    last = next((i for i in range(len(out) - 1, -1, -1) if out[i].text), None)
    if last is not None:
        out[last] = _Line(out[last].number, out[last].offset, out[last].raw, out[last].text, True)
    return out


def _records(name: str, lines: list[_Line], how: _How) -> Iterator[Record]:
    start = next((i for i, line in enumerate(lines) if _HEADER.fullmatch(line.text)), None)
    if start is None:
        yield from _failed_run(name, lines)
        return
    covered = _gpu_list(lines[:start])
    blocks, end = _blocks(lines, start + 1)
    tests: list[tuple[_Block, _Test]] = []
    versions: dict[str, str] = {}
    unread = False  # a test in the quarantine may have failed: the run is not clean
    for block in blocks:
        try:
            test, named = _read_block(block)
        except BadLine as bad:
            unread = True
            first = block.lines[0]
            at = next((x for x in block.lines if x.number == bad.line), first)
            raw = b"".join(x.raw for x in block.lines)
            yield Rejected(Origin(name, bad.line, at.offset), bad.field, bad.reason, raw)
            continue
        versions.update(named)
        if test is not None:
            tests.append((block, test))
    for test in (t for _, t in tests):
        covered |= set(test.gpus)
    clean = not unread and all(_clean(test) for _, test in tests)
    run = _Run(how, versions, sorted(covered), _partial(t for _, t in tests))
    for index, (block, test) in enumerate(tests):
        events = run.faults(test) + run.clears(test)
        if clean and index == len(tests) - 1:
            events += run.clean_run(test.line)
        raw = b"".join(x.raw for x in block.lines)
        offsets = {x.number: x.offset for x in block.lines}
        records = [
            event_from_object(event, Origin(name, line, offsets[line]), raw)
            for line, event in events
        ]
        rejected = [r for r in records if isinstance(r, Rejected)]
        yield from (rejected[:1] if rejected else records)  # a test is one record
    yield from _further_tables(name, lines, end)


def _failed_run(name: str, lines: list[_Line]) -> Iterator[Record]:
    """No table: dcgmi's own `Error: ...` says why the diagnostic did not run."""
    for line in lines:
        failed = _FAILED_RUN.match(line.text)
        if failed is not None:
            reason = f"dcgmi could not run the diagnostic: {failed.group(1)!r} (no result table)"
            yield Rejected(Origin(name, line.number, line.offset), "(run)", reason, line.raw)
            return


def _gpu_list(lines: list[_Line]) -> set[int]:
    """The GPUs a `dcgmi diag -i 0,1` command line before the table names."""
    for line in lines:
        if "dcgmi" in line.text and "diag" in line.text:
            found = _GPU_LIST.search(line.text)
            if found is not None:
                return {int(g) for g in found.group(1).split(",")}
    return set()


def _further_tables(name: str, lines: list[_Line], end: int) -> Iterator[Record]:
    for line in lines[end:]:
        if _HEADER.fullmatch(line.text):
            yield Rejected(
                Origin(name, line.number, line.offset),
                "(run)",
                "a second dcgmi diag table in one file: give each run its own file and time",
                line.raw,
            )
            return


def _blocks(lines: list[_Line], start: int) -> tuple[list[_Block], int]:
    """The table's rows from `start` on, cut into blocks: section bars, then each test
    with the rows under it (messages with no test before them make a block of their own).
    Returns the blocks and the index of the first line after the table."""
    blocks: list[_Block] = []
    current: _Block | None = None
    section = ""
    rows = 0
    index = start
    while index < len(lines):
        line = lines[index]
        text = line.text
        if not text.startswith(("|", "+")):
            break
        index += 1
        if text.startswith(("+", "|-", "|=")):
            bar = _SECTION.search(text)
            if bar is None and text.startswith("+") and "=" not in text and rows:
                break  # the closing border
            section = bar.group() if bar is not None else section
            blocks.append(_Block(section, [line]))  # a section bar: its own block, no events
            current = None
            continue
        rows += 1
        label = text[1:].partition("|")[0].strip()
        starts = label != "" and (_MESSAGE.fullmatch(label) is None or current is None)
        if starts or current is None:
            current = _Block(section, [line])
            blocks.append(current)
        else:
            current.lines.append(line)
    return blocks, index


def _read_block(block: _Block) -> tuple[_Test | None, dict[str, str]]:
    """A block's test (None for a section bar or a Metadata row), and the versions it names."""
    first = block.lines[0]
    if first.text.startswith(("+", "|-", "|=")):
        return None, {}
    label, value, _ = _cells(first)
    if block.section.lower() == "metadata":
        return None, {METADATA[label]: value} if label in METADATA and value else {}
    test = _Test(None, block.section, first.number)
    last: _Message | None = None
    for line in block.lines:
        label, value, cell = _cells(line)
        message = _MESSAGE.fullmatch(label)
        if message is not None:
            entity = f"{message.group(2)}:{message.group(3)}" if message.group(2) else None
            last = _Message(message.group(1), entity, line.number, [_piece(cell)])
            test.messages.append(last)
        elif label:  # the block's first line: a test row (a block holds one)
            test.name = label
            _test_result(test, value, line)
        elif last is not None and not _is_result_line(value):
            last.pieces.append(_piece(cell))
        else:
            last = None
            _entity_result(test, value, line)
    return test, {}


def _cells(line: _Line) -> tuple[str, str, str]:
    """(label, value, the value's cell as printed) of a table row."""
    try:
        line.raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadLine(line.number, "(line)", f"not valid UTF-8 at byte {exc.start}") from None
    text = line.text
    if line.cut and not text.endswith("|") and text.count("|") >= 2:
        text += "|"  # the paste ends mid-row: read the row as far as it goes
    if len(text) < 2 or not text.endswith("|"):
        raise BadLine(line.number, "(line)", "truncated table row: no closing '|'")
    label, bar, cell = text[1:-1].partition("|")
    if not bar:
        raise BadLine(line.number, "(line)", "expected 2 cells, found 1")
    return label.strip(), cell.strip(), cell


def _piece(cell: str) -> str:
    """One piece of a cut message: the cell less the one space dcgmi puts before it."""
    return (cell[1:] if cell.startswith(" ") else cell).rstrip()


def _is_result_line(value: str) -> bool:
    entity = _ENTITY.fullmatch(value)
    return (
        (entity is not None and entity.group(3).lower() in RESULTS)
        or _GROUPED.fullmatch(value) is not None
        or _CODE_LINE.fullmatch(value) is not None
    )


def _result(value: str, line: int, label: str) -> str:
    found = RESULTS.get(" ".join(value.lower().split()))
    if found is None:
        raise BadLine(line, label, f"not a diagnostic result: {value!r}")
    return found


def _test_result(test: _Test, value: str, line: _Line) -> None:
    grouped = _GROUPED.fullmatch(value)
    if grouped is None:
        test.result = _result(value, line.number, test.name or "(test)")
        return
    _grouped(test, grouped)


def _grouped(test: _Test, grouped: re.Match[str]) -> None:
    """3.x `Fail - All`, `Pass - GPUs: 0, 1`: the test's result when it is the first."""
    result, everyone, listed = grouped.group(1), grouped.group(2), grouped.group(3)
    if everyone:
        test.all_result = result
    else:
        for gpu in listed.split(","):
            test.gpus[int(gpu)] = result
    ranks = ["Fail", "Warn", "Pass", "Skip", "Not Run"]
    if test.result is None or ranks.index(result) < ranks.index(test.result):
        test.result = result


def _entity_result(test: _Test, value: str, line: _Line) -> None:
    """A line under a test with an empty label: an entity's result (`GPU0: Pass`)."""
    where = test.name or "(result)"
    if test.name is None:
        raise BadLine(line.number, where, f"a result with no test before it: {value!r}")
    if _CODE_LINE.fullmatch(value):
        return
    grouped = _GROUPED.fullmatch(value)
    if grouped is not None:
        _grouped(test, grouped)
        return
    entity = _ENTITY.fullmatch(value)
    if entity is None:
        raise BadLine(line.number, where, f"not an entity's result (GPU0: Pass): {value!r}")
    result = _result(entity.group(3), line.number, where)
    if entity.group(1) == "GPU":
        test.gpus[int(entity.group(2))] = result
    else:
        test.others[f"{entity.group(1)}{entity.group(2)}"] = result


def _clean(test: _Test) -> bool:
    bad = {"Fail", "Warn"}
    return (
        test.result not in bad
        and test.all_result not in bad
        and not (bad & set(test.gpus.values()))
        and not (bad & set(test.others.values()))
        and not any(m.kind in ("Error", "Warning") for m in test.messages if test.name is None)
    )


def _json_records(name: str, body: bytes, how: _How) -> Iterator[Record]:
    """`dcgmi diag -j`: each test of each category read into the same model as the table's
    (3.x: results by `gpu_id`; 4.x: by `entity_group` and `entity_id`, the test's own
    result in `test_summary`). A test is one record, at the line its name is written on."""
    text = body.decode("utf-8", "replace")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        yield Rejected(
            Origin(name, exc.lineno, exc.pos), "(json)", f"not valid JSON: {exc.msg}", body
        )
        return
    root_name = next((r for r in ROOTS if isinstance(document, dict) and r in document), None)
    root = document.get(root_name) if root_name is not None else None
    categories = root.get("test_categories") if isinstance(root, dict) else None
    if root_name is None or not isinstance(categories, list):
        where = f"{root_name or ROOTS[0]}.test_categories"
        yield Rejected(Origin(name, 1, 0), where, "expected a list of test categories", body)
        return
    metadata = document.get("metadata")
    holder = metadata if isinstance(metadata, dict) else root
    versions = {
        key: value
        for key, value in (
            ("dcgm_version", holder.get("version") if isinstance(holder, dict) else None),
            ("driver_version", holder.get(METADATA_JSON) if isinstance(holder, dict) else None),
        )
        if isinstance(value, str) and value
    }
    tests: list[tuple[Origin, _Test]] = []
    at, unread = 0, False
    for c, category in enumerate(categories):
        section = category.get("category") if isinstance(category, dict) else None
        listed = category.get("tests") if isinstance(category, dict) else None
        for t, entry in enumerate(listed if isinstance(listed, list) else [None]):
            where = f"{root_name}.test_categories[{c}].tests[{t}]"
            named = entry.get("name") if isinstance(entry, dict) else None
            found = text.find(json.dumps(named), at) if isinstance(named, str) else -1
            at = found if found >= 0 else at
            origin = Origin(name, text.count("\n", 0, at) + 1, at)
            try:
                test = _json_test(entry, section, where, origin.line)
            except BadLine as bad:
                unread = True
                yield Rejected(origin, bad.field, bad.reason, body)
                continue
            tests.append((origin, test))
    covered = sorted({gpu for _, test in tests for gpu in test.gpus})
    run = _Run(how, versions, covered, _partial(t for _, t in tests))
    clean = not unread and all(_clean(test) for _, test in tests)
    for index, (origin, test) in enumerate(tests):
        events = run.faults(test) + run.clears(test)
        if clean and index == len(tests) - 1:
            events += run.clean_run(test.line)
        records = [event_from_object(event, origin, body) for _, event in events]
        rejected = [r for r in records if isinstance(r, Rejected)]
        yield from (rejected[:1] if rejected else records)


def _json_test(entry: Any, section: Any, where: str, line: int) -> _Test:
    """One test of `dcgmi diag -j`; raises BadLine naming the field that is wrong."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise BadLine(line, f"{where}.name", "expected a test with a name")
    test = _Test(entry["name"], section if isinstance(section, str) else "", line)
    summary = entry.get("test_summary")
    if isinstance(summary, dict):  # 4.x: the test's own result and its global warnings
        test.result = _json_status(summary.get("status"), line, f"{where}.test_summary.status")
        test.messages += _json_warnings(summary, None, line)
    results = entry.get("results", [])
    if not isinstance(results, list):
        raise BadLine(line, f"{where}.results", "expected a list of results")
    statuses = []
    for r, result in enumerate(results):
        field_at = f"{where}.results[{r}]"
        if not isinstance(result, dict):
            raise BadLine(line, field_at, "expected an object")
        status = _json_status(result.get("status"), line, f"{field_at}.status")
        statuses.append(status)
        entity = _json_entity(result, line, field_at)
        if entity is None:  # a 3.x Deployment test: its one result is the test's
            test.result = status
        elif entity[0] == "GPU":
            test.gpus[entity[1]] = status
        else:
            test.others[f"{entity[0]}{entity[1]}"] = status
        kind = "Error" if entity is None else "Warning"
        test.messages += _json_warnings(result, entity, line, kind)
    if test.result is None:  # 3.x per-GPU tests: the worst of the GPUs' results
        ranks = ["Fail", "Warn", "Pass", "Skip", "Not Run"]
        test.result = min(statuses, key=ranks.index) if statuses else None
    return test


def _json_status(value: Any, line: int, where: str) -> str:
    if not isinstance(value, str):
        raise BadLine(line, where, f"expected a result, found {value!r}")
    return _result(value, line, where)


def _json_entity(result: dict[str, Any], line: int, where: str) -> tuple[str, int] | None:
    """(`GPU`, 0) from 3.x `gpu_id` or 4.x `entity_group`/`entity_id`; None when neither."""
    group, index = result.get("entity_group", "GPU"), result.get("entity_id", result.get("gpu_id"))
    if index is None:
        return None
    text = str(index)
    if not isinstance(group, str) or not re.fullmatch(r"[0-9]{1,9}", text):
        raise BadLine(line, f"{where}.entity_id", f"not an entity index: {index!r}")
    return group, int(text)


def _json_warnings(
    owner: dict[str, Any], entity: tuple[str, int] | None, line: int, kind: str = "Warning"
) -> list[_Message]:
    """The messages of a result: `warnings[i].warning` (3.x Deployment wrote `warnings`)."""
    found = owner.get("warnings")
    out = []
    for item in found if isinstance(found, list) else []:
        text = item.get("warning", item.get("warnings")) if isinstance(item, dict) else item
        if isinstance(text, str) and text.strip():
            label = None if entity is None else f"{entity[0]}:{entity[1]}"
            out.append(_Message(kind, label, line, [" ".join(text.split())]))
    return out


@dataclass
class _Run:
    how: _How
    versions: dict[str, str]  # dcgm_version, driver_version: the Metadata dcgmi printed
    covered: list[int]
    partial: set[int] = field(default_factory=set)  # GPUs that skipped or did not run a test
    seen: dict[str, int] = field(default_factory=dict)

    def _key(self, base: str) -> str:
        self.seen[base] = self.seen.get(base, 0) + 1
        count = self.seen[base]
        return base if count == 1 else f"{base}#{count}"

    def _event(self, kind: str, device: int | None, code: str, extra: dict[str, Any]) -> Any:
        place = "-" if device is None else str(device)
        suffix = "" if kind == "health.fault" else ":cleared"
        key = self._key(f"{place}:{code}{suffix}@{format_utc(self.how.time)}")
        data = {
            "node": self.how.node,
            "device": device,
            "fabric_domain": self.how.fabric_domain,
            "code": code,
            **extra,
            **self.versions,
        }
        return {
            "specversion": "1.0",
            "id": key,
            "source": self.how.source,
            "type": kind,
            "time": format_utc(self.how.time),
            "data": {k: v for k, v in data.items() if v is not None},
        }

    def faults(self, test: _Test) -> list[tuple[int, dict[str, Any]]]:
        if test.name is None:
            return [self._orphan(m) for m in test.messages if m.kind in ("Error", "Warning")]
        overall = test.all_result or test.result
        failing: dict[int | None, str] = {}
        for gpu, result in test.gpus.items():
            if result in SEVERITY:  # 4.x prints a warning entity as Fail under a Warn test
                failing[gpu] = "Warn" if test.result == "Warn" else result
        if any(r in SEVERITY for r in test.others.values()) or (
            overall in SEVERITY and not failing
        ):
            named: list[int | None] = [
                *sorted(set().union(*(m.gpus() for m in test.messages)) - set(test.gpus))
            ]
            for device in named or [None]:
                failing[device] = "Warn" if overall == "Warn" else "Fail"
        out = []
        for device, result in failing.items():
            about = [m.text for m in test.messages if m.kind != "Info" and _about(m, device)]
            about = list(dict.fromkeys(about))  # 4.x -j repeats a GPU's warnings in its summary
            others = [f"{name}: {r}" for name, r in test.others.items() if r in SEVERITY]
            detail = "; ".join([f"{test.name}: {result}", *others, *about])
            extra = {"severity": SEVERITY[result], "detail": detail, "test": test.name}
            if test.section:
                extra["section"] = test.section
            out.append((test.line, self._event("health.fault", device, test.code, extra)))
        return out

    def _orphan(self, message: _Message) -> tuple[int, dict[str, Any]]:
        severity = "critical" if message.kind == "Error" else "warning"
        gpus = sorted(message.gpus())
        device = gpus[0] if len(gpus) == 1 else None
        extra = {"severity": severity, "detail": message.text}
        return message.line, self._event("health.fault", device, "diag-error", extra)

    def clears(self, test: _Test) -> list[tuple[int, dict[str, Any]]]:
        if test.name is None:
            return []
        passed = sorted(g for g, r in test.gpus.items() if r == "Pass")
        whole = test.result == "Pass" and test.all_result in (None, "Pass")
        whole = whole and all(r == "Pass" for r in [*test.gpus.values(), *test.others.values()])
        places: list[int | None] = [*passed]
        if whole:  # every GPU it names passed (a skipped one is not cleared)
            places = [None, *(passed if test.gpus else self.covered)]
        detail = {"detail": f"{test.name}: Pass"}
        return [
            (test.line, self._event("health.cleared", place, test.code, detail))
            for place in places
        ]

    def clean_run(self, line: int) -> list[tuple[int, dict[str, Any]]]:
        """A run with nothing failed or warned clears what no test named (`diag-error`)."""
        detail = {"detail": "a dcgmi diag run with no Fail, Warn, Error or Warning"}
        return [
            (line, self._event("health.cleared", place, "diag-error", detail))
            for place in [None, *(g for g in self.covered if g not in self.partial)]
        ]


def _partial(tests: Iterable[_Test]) -> set[int]:
    """The GPUs a test of the run skipped (or did not run): a clean run does not clear them."""
    return {g for test in tests for g, r in test.gpus.items() if r in ("Skip", "Not Run")}


def _about(message: _Message, device: int | None) -> bool:
    """Whether a message concerns this device: it names it, or it names no GPU."""
    gpus = message.gpus()
    return not gpus or device in gpus


__all__ = ["DcgmiDiagIngestor"]
