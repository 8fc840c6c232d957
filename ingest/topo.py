"""`nvidia-smi topo -m`: which link joins each pair of GPUs and NICs on one node.

Layout (as the tool prints it, and as people paste it): a header row naming the devices
(`GPU0 … GPU7`, then NICs: `NIC0 …` on newer drivers, the device itself `mlx5_0` on older
ones), then the affinity columns (`CPU Affinity`, `NUMA Affinity`, `GPU NUMA ID`; older
drivers print fewer); one row per device with one link per column (`X` for itself,
`NV<n>`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`, `SOC` on old drivers) and, on GPU rows,
the affinities; then `Legend:` and, with NIC aliases, `NIC Legend:` (`NIC0: mlx5_10`).

Tolerated as seen in real output: tab- or space-aligned columns; shell prompts, an
environment dump or another command's output around the matrix; ANSI underline codes on
the header (with or without their ESC byte); empty tab fields on NIC rows; a link cell
glued to its neighbour where a paste lost a tab (`PXBNODE`: the links are a closed set, so
the split is unambiguous). One file is one capture: the first matrix is read with the
NIC Legend after it; another matrix after it (`nvidia-smi topo -p2p`, say) is not read,
but a second `topo -m` matrix (another node's?) is quarantined rather than dropped.

The matrix becomes one `placement.observed` (docs/probes.md): every GPU with its
affinities, every NIC with its legend device, and one link per pair of devices. A matrix
whose two halves disagree, or with a cell that is no link, goes to the quarantine whole,
with the line and column of the cell.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
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
from ingest.probes import BadLine, probe_options, probe_record, read_output
from schemas import Origin, Record, Rejected

AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_AFFINITY_KEYS = {
    "CPU Affinity": "cpu_affinity",
    "NUMA Affinity": "numa_affinity",
    "GPU NUMA ID": "gpu_numa_id",
}
_KNOWN_COLUMN = re.compile("|".join(re.escape(name) for name in AFFINITY_COLUMNS))
_ANSI = re.compile(r"\x1b?\[[0-9;]*m")
_LINK = re.compile(r"\s*(X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)")  # no separator needed: a lost tab
_CELL = re.compile(r"\s*(\S+)")
_GPU = re.compile(r"GPU\d+")
_HEADER_START = re.compile(
    r"(?:^|\s)GPU0\s"
)  # the header may follow a label (`NVIDIA Topology: `)
_NIC_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*")
_IDENTIFY = re.compile(rb"GPU0[ \t][^\n]*Affinity[^\n]*\r?\n[ \t]*GPU0[ \t]+X\b")
MAX_BYTES = 16 << 20  # a capture is a few KiB; more is not one


@dataclass(frozen=True)
class _Line:
    number: int
    offset: int
    raw: bytes
    text: str  # decoded, ANSI codes removed, line end removed


class TopoOptions(TenantOptions):
    """What nvidia-smi-topo is told beside its file."""

    format = "nvidia-smi-topo"

    tenant: str = required(PROBE_TENANT)
    allocation: str = required(PROBE_ALLOCATION)
    job: Job = option(PROBE_JOB)
    node: str | None = option("The host the output came from (default: the file's stem).")
    scrape_time: ScrapeTime = option(CAPTURE)


class TopoIngestor:
    name = "nvidia-smi-topo"
    options = TopoOptions
    description = "GPU and NIC topology: the matrix of `nvidia-smi topo -m`"
    reads_ledger = True  # its option `recorded` is a function: parsed in the ingesting process

    def identify(self, path: Path, head: bytes) -> bool:
        return (
            _IDENTIFY.search(_ANSI.sub("", head.decode("utf-8", "replace")).encode()) is not None
        )

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        how = probe_options(path, options, self.options)
        node = str(options.get("node") or path.stem)
        lines = _lines(path)
        start = next((i for i, line in enumerate(lines) if _is_header(lines, i)), None)
        if start is None:
            return
        block, end = _block(lines, start)
        raw = b"".join(line.raw for line in lines[start:end])
        first = lines[start]
        try:
            topology = _topology(block)
        except BadLine as bad:
            offset = next((line.offset for line in block if line.number == bad.line), first.offset)
            yield Rejected(Origin(str(path), bad.line, offset), bad.field, bad.reason, raw)
            return
        data = {**how.owner(), "node": node, "topology": topology, "tool": "nvidia-smi topo -m"}
        yield probe_record(
            "placement.observed", data, how, Origin(str(path), first.number, first.offset), raw
        )
        yield from _further_captures(str(path), lines, end)


def _further_captures(name: str, lines: list[_Line], start: int) -> Iterator[Record]:
    """A later `topo -m` matrix (one with affinity columns) is another node's or another
    time's capture: refused, not dropped. Other matrices (`topo -p2p`) are not read."""
    for index in range(start, len(lines)):
        header = _header_text(lines[index].text) if _is_header(lines, index) else None
        if header is not None and "Affinity" in header:
            line = lines[index]
            yield Rejected(
                Origin(name, line.number, line.offset),
                "(capture)",
                "a second `nvidia-smi topo -m` matrix in one file: give each capture its own file "
                "and --node",
                line.raw,
            )


def _lines(path: Path) -> list[_Line]:
    body = read_output(path, "nvidia-smi topo -m", MAX_BYTES)
    out, offset = [], 0
    for number, raw in enumerate(body.splitlines(keepends=True), start=1):
        clean = raw.removeprefix(UTF8_BOM) if number == 1 else raw
        out.append(
            _Line(
                number, offset, raw, _ANSI.sub("", clean.decode("utf-8", "replace")).rstrip("\r\n")
            )
        )
        offset += len(raw)
    return out


def _header_text(text: str) -> str | None:
    """The header from its first device on, or None when the line is no header."""
    start = _HEADER_START.search(text)
    return None if start is None else text[start.start() :].strip()


def _is_header(lines: list[_Line], index: int) -> bool:
    if index + 1 >= len(lines) or _header_text(lines[index].text) is None:
        return False
    following = lines[index + 1].text.split()
    return bool(following) and following[0] == "GPU0"


def _block(lines: list[_Line], start: int) -> tuple[list[_Line], int]:
    """The header, its rows, and the legends after them, up to the next matrix."""
    end = start + 1
    while end < len(lines) and not _is_header(lines, end):
        end += 1
    return lines[start:end], end


def _topology(block: list[_Line]) -> dict[str, Any]:
    devices, affinities = _columns(_header_text(block[0].text) or "")
    rows = [_row(name, line, devices, affinities) for name, line in _matrix_lines(block, devices)]
    aliases = {
        m.group(1): m.group(2)
        for line in block[len(rows) + 1 :]
        if (m := _NIC_LEGEND.fullmatch(line.text))
    }
    links = _links(rows, devices)
    gpus = [{"name": name, **values} for name, _, _, values in rows if _GPU.fullmatch(name)]
    nics = [
        {"name": name, **({"device": aliases[name]} if name in aliases else {})}
        for name in devices
        if not _GPU.fullmatch(name)
    ]
    return {"gpus": gpus, "nics": nics, "links": links}


def _columns(header: str) -> tuple[list[str], list[str]]:
    """The device columns and, from the first affinity column on, the other columns the
    header names, in order. A column nvidia-smi may add later is kept by its name: the
    known names are found as they are, the rest split where the header has a tab or a gap
    of two spaces."""
    first = _KNOWN_COLUMN.search(header)
    if first is None:
        return header.split(), []
    tail, names, at = header[first.start() :], [], 0
    for known in _KNOWN_COLUMN.finditer(tail):
        names += _unknown_names(tail[at : known.start()])
        names.append(known.group())
        at = known.end()
    return header[: first.start()].split(), names + _unknown_names(tail[at:])


def _unknown_names(text: str) -> list[str]:
    return [part.strip() for part in re.split(r"\t| {2,}", text) if part.strip()]


def _affinities(columns: list[str], values: list[str]) -> dict[str, Any]:
    """A GPU row's values by column: the known ones by their keys, others under `other_columns`."""
    known = {_AFFINITY_KEYS[c]: v for c, v in zip(columns, values) if c in _AFFINITY_KEYS}
    other = {c: v for c, v in zip(columns, values) if c not in _AFFINITY_KEYS}
    return {**known, **({"other_columns": other} if other else {})}


def _matrix_lines(block: list[_Line], devices: list[str]) -> list[tuple[str, _Line]]:
    """Each device's row, in header order (rows follow the header's order)."""
    rows = []
    for name, line in zip(devices, block[1:]):
        if not line.text.lstrip().startswith(name):
            raise BadLine(
                line.number,
                name,
                f"expected the row of {name} here, found {line.text.strip()[:40]!r}",
            )
        rows.append((name, line))
    if len(rows) < len(devices):
        last = block[-1].number
        raise BadLine(
            last, devices[len(rows)], f"the matrix ends after {len(rows)} of {len(devices)} rows"
        )
    return rows


Row = tuple[str, int, list[str], dict[str, Any]]  # (device, line, links, affinities)


def _row(name: str, line: _Line, devices: list[str], affinities: list[str]) -> Row:
    """One device's row: its label, one link per device column, then its affinities."""
    text, at, links = line.text, line.text.index(name) + len(name), []
    for column in devices:
        cell = _LINK.match(text, at)
        if cell is None:
            found = _CELL.match(text, at)
            shown = found.group(1) if found else "nothing"
            raise BadLine(line.number, f"{name}/{column}", f"not a link of the legend: {shown!r}")
        links.append(cell.group(1))
        at = cell.end()
    values = text[at:].split()
    if len(values) > len(affinities):
        raise BadLine(
            line.number,
            name,
            f"{len(values)} values after the links, but the header names "
            f"{len(affinities)} affinity columns: {' '.join(values)!r}",
        )
    return name, line.number, links, _affinities(affinities, values)


def _links(rows: list[Row], devices: list[str]) -> list[dict[str, str]]:
    """One link per pair, in matrix order; both halves must agree, the diagonal is X."""
    out = []
    for i, (name, number, links, _) in enumerate(rows):
        if links[i] != "X":
            raise BadLine(
                number, f"{name}/{name}", f"a device's link to itself is X, found {links[i]}"
            )
        for j in range(i + 1, len(devices)):
            other, other_line, mirror = rows[j][0], rows[j][1], rows[j][2][i]
            if links[j] == "X" or links[j] != mirror:
                raise BadLine(
                    other_line,
                    f"{other}/{name}",
                    f"{other}–{name} is {mirror} but {name}–{other} is {links[j]}",
                )
            out.append({"a": name, "b": other, "link": links[j]})
    return out


__all__ = ["TopoIngestor"]
