"""nccl-tests (`all_reduce_perf`, `all_gather_perf`, …): NCCL collectives' bandwidth by size.

Layout (nccl-tests' common.cu): a run opens with `# nThread N nGpus N minBytes … `, then
`# Using devices` and one `#  Rank  r Group g Pid p on <host> device d [bus] <name>` per
rank; a commented column header (`size count type redop root time algbw busbw #wrong`
twice, out-of-place then in-place; older versions have no `root` and name the last
column `error`); one row per message size; `# Out of bounds values : 0 OK` and
`# Avg bus bandwidth    : 68.4048`. Tolerated as seen in real output: several runs in one
file, each after its shell prompt; NCCL INFO or other lines between rows; columns out of
alignment; `N/A` in a column (no check made); trailing spaces; no closing `#` line.

Which test ran: the `<name>_perf` of the command line before the run (or of a `# Collective
test starting: <name>` line). Where nothing names it, the table does when only one
collective fits: a reduction op or `none`, a root or -1, and the factor busbw / algbw,
which nccl-tests fixes per collective (its PERFORMANCE.md: 2(n-1)/n for all_reduce,
(n-1)/n for reduce_scatter, all_gather, alltoall, 1 for broadcast, reduce, sendrecv).

Each run becomes one `probe.result` (docs/probes.md): per row and half, the figures
`time` (us), `algbw` and `busbw` (GB/s) and `wrong` (errors), with the row's size, count,
type, redop and root; and `avg_busbw` from its line. gpus = the ranks listed, nodes = the
hosts they run on. A run that cannot be read goes to the quarantine whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
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

#: `#` is optional throughout: pasted into GitHub markdown, a leading `#` is eaten.
_RUN = re.compile(r"#?\s*nThread\s+\d+\s+nGpus\s+\d+")
_RANK = re.compile(r"#?\s*Rank\s+\d+\b.*?\bon\s+(\S+)\s+device\b")
_COMMAND = re.compile(r"\b([a-z_]+)_perf(?:_mpi)?\b")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\w+)")
_AVG = re.compile(r"#?\s*Avg bus bandwidth\s*:\s*(\S+)")
_ROW = re.compile(r"\s*\d+\s+\d+\s+\w+")
_IDENTIFY = re.compile(
    rb"^(?:\[\d+,\d+\]<stdout>:|\d+: )?#?\s*nThread\s+\d+\s+nGpus\s+\d+", re.MULTILINE
)
MAX_BYTES = 64 << 20
_UNITS = {"time": "us", "algbw": "GB/s", "busbw": "GB/s", "wrong": "errors"}
Factor = Callable[[int], Decimal]
#: nccl-tests' bus bandwidth factor per collective (PERFORMANCE.md), with whether it
#: reduces (a redop other than `none`) and whether it has a root.
COLLECTIVES: dict[str, tuple[bool, bool, Factor]] = {
    "all_reduce_perf": (True, False, lambda n: Decimal(2 * (n - 1)) / n),
    "reduce_scatter_perf": (True, False, lambda n: Decimal(n - 1) / n),
    "reduce_perf": (True, True, lambda n: Decimal(1)),
    "all_gather_perf": (False, False, lambda n: Decimal(n - 1) / n),
    "alltoall_perf": (False, False, lambda n: Decimal(n - 1) / n),
    "broadcast_perf": (False, True, lambda n: Decimal(1)),
    "sendrecv_perf": (False, False, lambda n: Decimal(1)),
}


@dataclass
class _Run:
    line: int
    offset: int
    command: str | None
    raw: list[bytes] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # one per rank
    columns: list[str] | None = None
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    average: tuple[int, str] | None = None


class NcclTestsOptions(TenantOptions):
    """What nccl-tests is told beside its file."""

    format = "nccl-tests"

    tenant: str = required(PROBE_TENANT)
    allocation: str = required(PROBE_ALLOCATION)
    job: Job = option(PROBE_JOB)
    scrape_time: ScrapeTime = option(CAPTURE)


class NcclTestsIngestor:
    name = "nccl-tests"
    options = NcclTestsOptions
    description = (
        "nccl-tests runs (all_reduce_perf, …): bus bandwidth by message size and its average"
    )
    reads_ledger = True  # its option `recorded` is a function: parsed in the ingesting process

    def identify(self, path: Path, head: bytes) -> bool:
        return _IDENTIFY.search(head) is not None

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        how = probe_options(path, options, self.options)
        body = read_output(path, self.name, MAX_BYTES).removeprefix(UTF8_BOM)
        for run in _runs(body):
            yield _record(str(path), run, how)


def _runs(body: bytes) -> Iterator[_Run]:
    run: _Run | None = None
    command: str | None = None
    offset = 0
    for number, raw in enumerate(body.splitlines(keepends=True), start=1):
        here, offset = offset, offset + len(raw)
        text = LAUNCHER_TAG.sub("", raw.decode("utf-8", "replace").rstrip())
        if _RUN.match(text):
            if run is not None:
                yield run
            run, command = _Run(number, here, command), None
        elif (
            not text.startswith("#") and not _ROW.match(text) and (named := _COMMAND.search(text))
        ):
            command = f"{named.group(1)}_perf"  # a prompt or launcher line: names the next run
        elif (starting := _STARTING.match(text)) is not None:
            command = starting.group(1)
            if run is not None:
                run.command = run.command or command
        if run is None:
            continue
        run.raw.append(raw)
        if _read_line(run, number, text):
            yield run
            run = None
    if run is not None:
        yield run


def _read_line(run: _Run, number: int, text: str) -> bool:
    """Take one line into the run; True when its average line closes it."""
    if (rank := _RANK.match(text)) is not None:
        run.hosts.append(rank.group(1))
    elif (average := _AVG.match(text)) is not None:
        run.average = (number, average.group(1))
        return True
    elif (
        "size" in (words := text.lstrip("#").split()) and "count" in words and not _ROW.match(text)
    ):
        run.columns = [word.lstrip("#") for word in words]
    elif run.columns is not None and _ROW.match(text):
        run.rows.append((number, text.split()))
    return False


def _record(name: str, run: _Run, how: ProbeOptions) -> Record:
    raw = b"".join(run.raw)
    try:
        data = _data(run, how)
    except BadLine as bad:
        return Rejected(Origin(name, bad.line, run.offset), bad.field, bad.reason, raw)
    return probe_record("probe.result", data, how, Origin(name, run.line, run.offset), raw)


def _data(run: _Run, how: ProbeOptions) -> dict[str, Any]:
    if run.columns is None:
        raise BadLine(
            run.line, "columns", "no column header (`#  size  count  type  redop …`) in this run"
        )
    if not run.rows:
        raise BadLine(run.line, "rows", "no row of figures in this run")
    figures = [f for number, words in run.rows for f in _row_figures(number, words, run.columns)]
    if run.average is not None:
        figures.append(
            {
                "name": "avg_busbw",
                "value": figure_text(run.average[1], run.average[0], "Avg bus bandwidth"),
                "unit": "GB/s",
            }
        )
    data: dict[str, Any] = {
        **how.owner(),
        "probe": "nccl-tests",
        "test": run.command or _collective(run),
        "figures": figures,
    }
    if run.hosts:
        data["gpus"], data["nodes"] = len(run.hosts), len(set(run.hosts))
    return data


def _row_figures(number: int, words: list[str], columns: list[str]) -> list[dict[str, Any]]:
    """One row's figures: each half's time, algbw, busbw and wrong, with the row's keys."""
    if len(words) != len(columns):
        raise BadLine(
            number, "row", f"{len(words)} values, but the header names {len(columns)} columns"
        )
    keys: dict[str, Any] = {
        "size_bytes": _whole(words[0], number, "size"),
        "count": _whole(words[1], number, "count"),
        "datatype": words[2],
    }
    seen: dict[str, int] = {}
    out = []
    for column, value in list(zip(columns, words))[3:]:
        if column in ("redop", "root"):
            keys[column] = value if column == "redop" else _root(value, number)
            continue
        metric = "wrong" if column in ("wrong", "error") else column
        if metric not in _UNITS:
            raise BadLine(number, column, "not a column nccl-tests prints")
        half = "out-of-place" if seen.setdefault(metric, 0) == 0 else "in-place"
        seen[metric] += 1
        if value != "N/A":
            out.append(
                {
                    "name": metric,
                    "value": figure_text(value, number, f"{half} {column}"),
                    "unit": _UNITS[metric],
                    "placement": half,
                    **keys,
                }
            )
    return out


def _whole(text: str, number: int, column: str) -> int:
    if not text.isdigit() or len(text) > 15:
        raise BadLine(number, column, f"not a count: {text!r}")
    return int(text)


def _root(text: str, number: int) -> int:
    if not re.fullmatch(r"-?\d{1,9}", text):
        raise BadLine(number, "root", f"not a rank: {text!r}")
    return int(text)


def _collective(run: _Run) -> str:
    """The one collective whose redop, root and busbw factor fit the table, if only one does."""
    if not run.hosts:
        raise BadLine(
            run.line,
            "test",
            "no command line names the test, and no Rank lines give the GPUs to infer it",
        )
    n, largest = len(run.hosts), run.rows[-1][1]
    row: dict[str, str] = {}
    for column, value in zip(run.columns or [], largest):
        row.setdefault(column, value)  # the out-of-place half: the first of each name
    algbw, busbw = Decimal(row.get("algbw", "0")), Decimal(row.get("busbw", "0"))
    fits = [
        name
        for name, (reduces, rooted, factor) in COLLECTIVES.items()
        if ("redop" not in row or reduces == (row["redop"] != "none"))
        and ("root" not in row or rooted == (row["root"] != "-1"))
        and algbw > 0
        and abs(busbw - algbw * factor(n)) <= Decimal("0.01") * busbw
    ]
    if len(fits) != 1:
        found = " or ".join(fits) if fits else "none"
        raise BadLine(
            run.line,
            "test",
            f"no command line names the test, and the table fits {found} "
            "(put the command line before the output)",
        )
    return fits[0]


__all__ = ["COLLECTIVES", "NcclTestsIngestor"]
