"""nvbandwidth: copy bandwidth (and latency) between CPU and GPUs and between GPUs.

Text layout (nvbandwidth's own printing): a run opens with `nvbandwidth Version: v0.8`,
the CUDA and driver versions and one `Device N: <name> (<bus id>)` per GPU; then per
testcase `Running <name>.`, the matrix title (`memcpy CE GPU(row) -> GPU(column)
bandwidth (GB/s)`, or `memory latency … (ns)`), a column header of indices, one row per
source (`N/A` where a device meets itself; older versions print `0.00` there), and
`SUM <name> <value>`; `Waived:` for a testcase the machine cannot run; a `NOTE:` trailer.
Tolerated as seen in real output: several runs joined in one file; a hostname line; no
`Running` line (the name is the SUM line's); no SUM line (README examples); row labels
with or without their leading space; anything between testcases.

JSON layout (`nvbandwidth -j`): `{"nvbandwidth": {"version", "git_version", "GPU Device
list", "testcases": [{"name", "status", "bandwidth_description", "bandwidth_matrix"
(cells as strings), "sum" (a number, read as the digits written)}]}}`. A testcase whose
status is not `Passed` measured nothing and yields nothing.

Each testcase becomes one `probe.result` (docs/probes.md): test = its name, the matrix
as printed, and the figures `sum` (the SUM line's, never recomputed: its rounding is the
tool's), `min` and `max` of the measured cells (a GPU's cell to itself is not a
measurement). A testcase that cannot be read goes to the quarantine whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ingest.base import UTF8_BOM
from ingest.options import (
    CAPTURE,
    PROBE_ALLOCATION,
    PROBE_JOB,
    PROBE_TENANT,
    Job,
    ScrapeTime,
    TenantOptions,
    option,
    required,
)
from ingest.probes import (
    LAUNCHER_TAG,
    BadLine,
    ProbeOptions,
    figure_text,
    probe_options,
    probe_record,
    read_output,
)
from schemas import Origin, Record, Rejected

_VERSION = re.compile(r"nvbandwidth Version:\s*(\S+)")
_DEVICE = re.compile(r"Device \d+:")
_RUNNING = re.compile(r"Running (\w+)\.?\s*$")
_TITLE = re.compile(r".*\((?P<unit>[^()]+)\)\s*$")
_SUM = re.compile(r"SUM (\w+) (\S+)\s*$")
_INDEX = re.compile(r"\d{1,6}")
_IDENTIFY = re.compile(
    rb"nvbandwidth Version:|^(?:\[\d+,\d+\]<stdout>:|\d+: )?(?:Running \w+_(?:ce|sm)\.|SUM "
    rb"\w+_(?:ce|sm) )",
    re.MULTILINE,
)
_GPU_BY_GPU = re.compile(r"GPU\(row\).*GPU\(column\)")
MAX_BYTES = 64 << 20


@dataclass
class _Testcase:
    """One testcase's lines as read: its name, matrix and SUM, with where they were."""

    name: str | None
    line: int
    offset: int
    version: str | None
    gpus: int | None
    raw: list[bytes] = field(default_factory=list)
    title: str | None = None
    columns: list[str] | None = None
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    total: tuple[int, str, str] | None = None  # (line, name, value)


class NvbandwidthOptions(TenantOptions):
    """What nvbandwidth is told beside its file."""

    format = "nvbandwidth"

    tenant: str = required(PROBE_TENANT)
    allocation: str = required(PROBE_ALLOCATION)
    job: Job = option(PROBE_JOB)
    scrape_time: ScrapeTime = option(CAPTURE)


class NvbandwidthIngestor:
    name = "nvbandwidth"
    options = NvbandwidthOptions
    description = (
        "nvbandwidth's testcases: bandwidth and latency matrices and their SUM (text or -j JSON)"
    )
    reads_ledger = True  # its option `recorded` is a function: parsed in the ingesting process

    def identify(self, path: Path, head: bytes) -> bool:
        text = head.removeprefix(UTF8_BOM).lstrip()
        if text.startswith(b"{"):
            return b'"nvbandwidth"' in text and b'"testcases"' in text
        return _IDENTIFY.search(head) is not None

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        how = probe_options(path, options, self.options)
        body = read_output(path, self.name, MAX_BYTES).removeprefix(UTF8_BOM)
        if body.lstrip().startswith(b"{"):
            yield from _json_records(str(path), body, how)
            return
        for case in _testcases(body):
            if (record := _record(str(path), case, how)) is not None:
                yield record


def _testcases(body: bytes) -> Iterator[_Testcase]:
    version: str | None = None
    devices = 0
    case: _Testcase | None = None
    offset = 0
    for number, raw in enumerate(body.splitlines(keepends=True), start=1):
        here, offset = offset, offset + len(raw)
        text = LAUNCHER_TAG.sub("", raw.decode("utf-8", "replace")).strip()
        if (found := _VERSION.match(text)) is not None:  # a new run: what was open ends here
            if case is not None:
                yield case
            version, devices, case = found.group(1), 0, None
        elif _DEVICE.match(text):
            devices += 1
        opens = _RUNNING.match(text) or (case is None and _is_title(text))
        if opens:
            if case is not None:
                yield case
            name = found.group(1) if (found := _RUNNING.match(text)) else None
            case = _Testcase(name, number, here, version, devices or None)
        if case is None:
            continue
        case.raw.append(raw)
        if _read_line(case, number, text):
            yield case
            case = None
    if case is not None:
        yield case


def _read_line(case: _Testcase, number: int, text: str) -> bool:
    """Take one line into the testcase; True when its SUM line closes it."""
    words = text.split()
    if (total := _SUM.match(text)) is not None:
        case.total = (number, total.group(1), total.group(2))
        return True
    if case.title is None and _is_title(text):
        case.title = text
    elif (
        case.title is not None
        and case.columns is None
        and words
        and all(_INDEX.fullmatch(w) for w in words)
    ):
        case.columns = words
    elif case.columns is not None and words and _INDEX.fullmatch(words[0]):
        case.rows.append((number, words))
    return False


def _is_title(text: str) -> bool:
    """A matrix's title: names its rows or columns (`CPU(row)`, `GPU(column)`) and ends in its
    unit.
    """
    return ("(row)" in text or "(column)" in text) and _TITLE.match(text) is not None


def _record(name: str, case: _Testcase, how: ProbeOptions) -> Record | None:
    """The testcase's event; None for one that measured nothing (a `Running` line alone)."""
    if case.title is None and case.columns is None and case.total is None:
        return None
    raw = b"".join(case.raw)
    try:
        data = _data(case, how)
    except BadLine as bad:
        return Rejected(Origin(name, bad.line, case.offset), bad.field, bad.reason, raw)
    return probe_record("probe.result", data, how, Origin(name, case.line, case.offset), raw)


def _data(case: _Testcase, how: ProbeOptions) -> dict[str, Any]:
    test = case.name or (case.total[1] if case.total else None)
    if test is None:
        raise BadLine(
            case.line, "test", "no `Running <test>.` line and no SUM line name the testcase"
        )
    if case.total is not None and case.name is not None and case.total[1] != case.name:
        raise BadLine(
            case.total[0], "SUM", f"names {case.total[1]}, but the testcase running is {case.name}"
        )
    if case.title is None or case.columns is None:
        raise BadLine(
            case.line, "matrix", f"{test}: no matrix (title and column header) before its SUM"
        )
    rows = [_cells(number, words, case.columns) for number, words in case.rows]
    unit = _unit(case.title)
    matrix = {
        "title": case.title,
        "unit": unit,
        "rows": [words[0] for _, words in case.rows],
        "columns": case.columns,
        "cells": rows,
    }
    total = None if case.total is None else figure_text(case.total[2], case.total[0], "SUM")
    return _probe(test, matrix, total, unit, case.gpus, case.version, how)


def _cells(number: int, words: list[str], columns: list[str]) -> list[str | None]:
    cells = words[1:]
    if len(cells) != len(columns):
        raise BadLine(
            number,
            f"row {words[0]}",
            f"{len(cells)} cells, but the header names {len(columns)} columns",
        )
    return [
        None if cell == "N/A" else figure_text(cell, number, f"row {words[0]}") for cell in cells
    ]


def _unit(title: str) -> str:
    found = _TITLE.match(title)
    return found.group("unit").strip() if found else "?"


def _probe(
    test: str,
    matrix: dict[str, Any] | None,
    total: str | None,
    unit: str,
    gpus: int | None,
    version: str | None,
    how: ProbeOptions,
) -> dict[str, Any]:
    """The event's data: the SUM as printed, and the least and greatest measured cell."""
    measured = (
        []
        if matrix is None
        else [
            Decimal(cell)
            for i, row in enumerate(matrix["cells"])
            for j, cell in enumerate(row)
            if cell is not None and not (_GPU_BY_GPU.search(matrix["title"]) and i == j)
        ]
    )
    figures = [] if total is None else [{"name": "sum", "value": total, "unit": unit}]
    if measured:
        figures += [
            {"name": "min", "value": format(min(measured), "f"), "unit": unit},
            {"name": "max", "value": format(max(measured), "f"), "unit": unit},
        ]
    data: dict[str, Any] = {
        **how.owner(),
        "probe": "nvbandwidth",
        "test": test,
        "figures": figures,
    }
    if matrix is not None:
        data["matrix"] = matrix
    if not test.startswith(
        "multinode"
    ):  # a multinode testcase spans nodes the output does not count
        data["nodes"] = 1
    if gpus is not None:
        data["gpus"] = gpus
    if version is not None:
        data["tool_version"] = version
    return data


def _json_records(name: str, body: bytes, how: ProbeOptions) -> Iterator[Record]:
    """`nvbandwidth -j`: numbers are read as the digits written (never through a float)."""
    text = body.decode("utf-8", "replace")
    try:
        document = json.loads(text, parse_float=str, parse_int=str)
    except json.JSONDecodeError as exc:
        yield Rejected(
            Origin(name, exc.lineno, exc.pos), "(json)", f"not valid JSON: {exc.msg}", body
        )
        return
    top = document.get("nvbandwidth") if isinstance(document, dict) else None
    cases = top.get("testcases") if isinstance(top, dict) else None
    if not isinstance(top, dict) or not isinstance(cases, list):
        yield Rejected(
            Origin(name, 1, 0), "nvbandwidth.testcases", "expected a list of testcases", body
        )
        return
    gpus = top.get("GPU Device list")
    run = (len(gpus) if isinstance(gpus, list) and gpus else None, top.get("version"))
    at = 0
    for index, case in enumerate(cases):
        at = _position(text, case, at)
        yield from _json_case(
            name, case, index, run, how, Origin(name, text.count("\n", 0, at) + 1, at), body
        )


def _position(text: str, case: Any, after: int) -> int:
    """Where the testcase's name is written (for its line), searching on from the last."""
    named = case.get("name") if isinstance(case, dict) else None
    found = text.find(json.dumps(named), after) if isinstance(named, str) else -1
    return found if found >= 0 else after


def _json_case(
    name: str,
    case: Any,
    index: int,
    run: tuple[int | None, Any],
    how: ProbeOptions,
    origin: Origin,
    body: bytes,
) -> Iterator[Record]:
    where = f"nvbandwidth.testcases[{index}]"
    if not isinstance(case, dict) or not isinstance(case.get("name"), str):
        yield Rejected(origin, f"{where}.name", "expected a testcase with a name", body)
        return
    if case.get("status") != "Passed":
        return  # waived or failed: nothing was measured
    try:
        title = case.get("bandwidth_description")
        if not isinstance(title, str):
            raise BadLine(
                origin.line,
                f"{where}.bandwidth_description",
                "expected the matrix's title (it gives the unit)",
            )
        # a testcase may give its sum alone: the matrix is kept when there is one
        matrix = (
            None
            if case.get("bandwidth_matrix") is None
            else _json_matrix(case, title, where, origin.line)
        )
        total = case.get("sum")
        figure = None if total is None else figure_text(str(total), origin.line, f"{where}.sum")
        version = run[1] if isinstance(run[1], str) else None
        data = _probe(case["name"], matrix, figure, _unit(title), run[0], version, how)
    except BadLine as bad:
        yield Rejected(origin, bad.field, bad.reason, body)
        return
    yield probe_record("probe.result", data, how, origin, body)


def _json_matrix(case: dict[str, Any], title: str, where: str, line: int) -> dict[str, Any]:
    cells = case.get("bandwidth_matrix")
    if not isinstance(cells, list) or not cells or not all(isinstance(row, list) for row in cells):
        raise BadLine(line, f"{where}.bandwidth_matrix", "expected a list of rows")
    width = max(len(row) for row in cells)
    rows = [
        [
            None
            if str(c) == "N/A"
            else figure_text(str(c), line, f"{where}.bandwidth_matrix[{i}]")
            for c in row
        ]
        for i, row in enumerate(cells)
    ]
    if any(len(row) != width for row in rows):
        raise BadLine(line, f"{where}.bandwidth_matrix", "rows of different lengths")
    return {
        "title": title,
        "unit": _unit(title),
        "rows": [str(i) for i in range(len(rows))],
        "columns": [str(j) for j in range(width)],
        "cells": rows,
    }


__all__ = ["NvbandwidthIngestor"]
