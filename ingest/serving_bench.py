"""Serving benchmark results as `inference.window` events (docs/serving.md).

One run of a serving benchmark is one window of the job's own measurements. Read as the
tools write them:
- `vllm bench serve` / `benchmark_serving.py` text: a block from the banner
  `===… Serving Benchmark Result ===…` to the closing rule of `=`, one `label: value` a
  line (values padded with spaces or not, lines indented or not); several blocks a file,
  in any log around them. `Traffic request rate:` and `Maximum request concurrency:`,
  which older versions print before the block, count for the next block. SGLang's
  `bench_serving` prints the same banner with its own labels (`Backend:`, `Max request
  concurrency:`, `Mean E2E Latency (ms)`); both are read by one label table.
- their JSON results (`--save-result`, SGLang `--output-file`): one object, an array, or
  JSON Lines (a `.json` file of several lines is JSON Lines); `Infinity` is taken as the
  rate `inf`. A result object on a line after a text block, before the next block, is
  that run saved: it stands for the block (exact figures, its own date), not beside it.
- `trtllm-bench throughput`: from `= REQUEST DETAILS` (or `= PERFORMANCE OVERVIEW`) to
  the first line that is neither a `label: value`, a rule, a banner, a `-- ` heading nor
  blank.
- genai-perf's console table names no duration (older versions no request count either):
  it is recognised and quarantined (field `requests`, else `duration`), never guessed
  from a rate.

Window times. vLLM's JSON carries `date` (local time, `%Y%m%d-%H%M%S`, written when the
run ended): the window ends then (read in `--timezone`) and starts `duration` earlier.
Nothing else names a time: its windows need `--window-start` (RFC 3339), and are laid end
to end in file order from there, each as long as its duration. Without it they are
quarantined (field `window_start`).

`--tenant` and `--job` are required (the tools know neither; every missing one is named at
once); `--allocation` is kept when given. Ids come from what is fixed about the run (job, window
start), so a re-run appends
nothing twice. A run that cannot be read goes to the quarantine whole, with the line and
label (or JSON key) at fault.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import field_validator

from ingest.base import UTF8_BOM, IngestError, LocalZone, event_from_object, open_source
from ingest.options import RUNTIME, ZONE, TenantOptions, Zone, option, required
from ingest.serving_figures import (
    JSON_KEYS,
    JSON_STATISTIC,
    MEASURES,
    STATISTICS,
    TEXT_LABELS,
    TEXT_STATISTIC,
    TRTLLM_STATISTIC,
    Bad,
    count,
    decimal,
)
from schemas import Origin, Record, Rejected, format_utc
from schemas.types import MAX_DURATION_S

VLLM_BANNER = b"Serving Benchmark Result"
TRTLLM_BANNERS = (b"= REQUEST DETAILS", b"= PERFORMANCE OVERVIEW")
GENAI_PERF_TITLE = b"GenAI-Perf"
_RESULT_MARKERS = (b'"median_ttft_ms"', b'"mean_ttft_ms"')
_RULE = re.compile(r"^=+$")
_LABEL_VALUE = re.compile(r"^(?P<label>[^:]*?)\s*:\s*(?P<value>.*?)\s*$")
_DATE = "%Y%m%d-%H%M%S"


@dataclass
class _Run:
    """What one benchmark run says, read and converted, with where it was read."""

    tool: str
    line: int
    offset: int
    raw: bytes = b""
    figures: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)  # figure -> the label or key it came from
    distributions: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    ended: datetime | None = None
    problem: Bad | None = None

    def put(self, name: str, value: Any, label: str) -> None:
        if value is not None:
            self.figures[name], self.labels[name] = value, label

    def put_statistic(self, measure: str, stat: str, value: Decimal | None) -> None:
        if measure in MEASURES and stat in STATISTICS and value is not None:
            self.distributions.setdefault(MEASURES[measure], {})[STATISTICS[stat]] = value


@dataclass(frozen=True)
class _Options:
    tenant: str
    job: str
    allocation: str | None
    window_start: datetime | None
    zone: LocalZone

    @property
    def source(self) -> str:
        return f"serving-bench://{self.tenant}/{self.job}"


class ServingBenchOptions(TenantOptions):
    """What serving-bench is told beside its file."""

    format = "serving-bench"

    tenant: str = required("The tenant of the serving job (required).")
    job: str = required("The serving job (required).")
    allocation: str | None = option("The allocation the serving job ran on.")
    window_start: str | None = option(
        "The start of the file's first window, RFC 3339 "
        "with a zone, for runs that print no time of their own."
    )
    timezone: Zone = option(ZONE)

    @field_validator("window_start")
    @classmethod
    def _a_time_with_a_zone(cls, value: str | None) -> str | None:
        _window_start(value)
        return value


class ServingBenchIngestor:
    name = "serving-bench"
    options = ServingBenchOptions
    description = (
        "Serving benchmark results: vLLM/SGLang bench serve text and JSON, trtllm-bench, "
        "genai-perf"
    )
    local_times = True  # vLLM's JSON `date` is local time with no zone

    def identify(self, path: Path, head: bytes) -> bool:
        text = head.removeprefix(UTF8_BOM)
        if VLLM_BANNER in text or any(b in text for b in TRTLLM_BANNERS):
            return True
        if GENAI_PERF_TITLE in text and "┃".encode() in text:
            return True
        # a detailed result (`--save-detailed`) may put its metric keys after 64 KiB of
        # per-request arrays; `completed` and `duration` come first
        result_keys = any(k in text for k in _RESULT_MARKERS) or (
            b'"completed"' in text and b'"duration"' in text
        )
        return text.lstrip()[:1] in (b"{", b"[") and b'"specversion"' not in text and result_keys

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        how = _options(path, options)
        cursor = how.window_start
        for run in _runs(path, how.zone):
            record, cursor = _record(str(path), run, how, cursor)
            yield record


def _options(path: Path, options: dict[str, Any]) -> _Options:
    given = ServingBenchOptions.of({k: v for k, v in options.items() if k not in RUNTIME}, path)
    return _Options(
        given.tenant,
        given.job,
        given.allocation or None,
        _window_start(given.window_start),
        LocalZone(given.timezone),
    )


def _window_start(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise IngestError(f"not an RFC 3339 time: {text!r}", option="window_start") from None
    if moment.tzinfo is None:
        raise IngestError(
            f"{text!r} has no zone (RFC 3339 requires Z or an offset)", option="window_start"
        )
    return moment


# --- records -------------------------------------------------------------------------


def _record(
    file: str, run: _Run, how: _Options, cursor: datetime | None
) -> tuple[Record, datetime | None]:
    """The run's event (or its rejection), and where the next dateless window starts."""
    origin = Origin(file, run.line, run.offset)
    try:
        _counted(run)
        start, end, cursor = _window(run, how, cursor)
        data = _data(run, how, start, end)
    except Bad as bad:
        return Rejected(Origin(file, bad.line, run.offset), bad.label, bad.reason, run.raw), cursor
    event = {
        "specversion": "1.0",
        "source": how.source,
        "id": f"window@{format_utc(start)}",
        "type": "inference.window",
        "time": end,
        "data": data,
    }
    return event_from_object(event, origin, run.raw), cursor


def _counted(run: _Run) -> None:
    """The run was read and names how many requests it served."""
    if run.problem is not None:
        raise run.problem
    if "accepted" not in run.figures and "requests" not in run.figures:
        reason = (
            "its table has no Request count row"
            if run.tool == "genai-perf"
            else "no such line or key"
        )
        raise Bad(run.line, "requests", f"{run.tool} gives no count of requests served ({reason})")


def _window(
    run: _Run, how: _Options, cursor: datetime | None
) -> tuple[datetime, datetime, datetime | None]:
    duration = run.figures.get("duration_s")
    if duration is None:
        raise Bad(
            run.line,
            "duration",
            f"{run.tool} printed no benchmark duration: the window has no length",
        )  # genai-perf never does
    if not 0 <= duration <= MAX_DURATION_S:
        raise Bad(
            run.line,
            run.labels["duration_s"],
            f"a window lasts from 0 to {MAX_DURATION_S} s (100 years), not {duration} s",
        )
    span = timedelta(microseconds=int((duration * 10**6).to_integral_value()))
    try:
        if run.ended is not None:
            return run.ended - span, run.ended, cursor
        if cursor is not None:
            return cursor, cursor + span, cursor + span
    except OverflowError:
        raise Bad(
            run.line,
            run.labels["duration_s"],
            f"the window of {duration} s falls outside the calendar",
        ) from None
    raise Bad(
        run.line,
        "window_start",
        f"{run.tool} names no time for this run: give the window start "
        "(RFC 3339), the start of the file's first window",
    )


def _data(run: _Run, how: _Options, start: datetime, end: datetime) -> dict[str, Any]:
    figures = run.figures
    # trtllm-bench reports every request it sent as completed (it has no failure count);
    # vLLM/SGLang count successes, and failures where they print them.
    accepted = figures.get("accepted", figures.get("requests"))
    requests = figures.get("requests", accepted + figures.get("failed", 0))
    data = {
        "tenant": how.tenant,
        "job_id": how.job,
        "allocation_id": how.allocation,
        "window_start": start,
        "window_end": end,
        "requests": requests,
        "accepted": accepted,
        "tool": run.tool,
    }
    for name in (
        "failed",
        "concurrency",
        "request_rate",
        "request_throughput",
        "output_throughput",
        "input_tokens",
        "output_tokens",
    ):
        data[name] = figures.get(name)
    data.update(run.distributions)
    return {k: v for k, v in data.items() if v is not None}


def _read_label(run: _Run, label: str, value: str, line: int) -> None:
    """One `label: value` line of a text block into the run."""
    key = " ".join(label.lower().split())
    if key == "backend":
        run.tool = "sglang.bench_serving"  # vLLM's block has no Backend line; SGLang's does
    if key in TEXT_LABELS:
        name, convert = TEXT_LABELS[key]
        run.put(name, convert(value, line, label), label)
        return
    stat = TEXT_STATISTIC.match(key) or TRTLLM_STATISTIC.match(key)
    if stat:
        run.put_statistic(stat["measure"], stat["stat"], decimal(value, line, label))


def _read_object(run: _Run, obj: dict[str, Any], zone: LocalZone) -> None:
    """One saved result object (vLLM `--save-result`, SGLang `--output-file`) into the run."""
    if "date" not in obj and any("e2e_latency" in key or "retokenized" in key for key in obj):
        run.tool = "sglang.bench_serving"  # SGLang's keys; vLLM's result carries `date`
    for key, value in obj.items():
        if key in JSON_KEYS:
            name, convert = JSON_KEYS[key]
            run.put(name, convert(value, run.line, key), key)
        elif stat := JSON_STATISTIC.match(key):
            run.put_statistic(stat["measure"], stat["stat"], decimal(value, run.line, key))
    if "date" in obj:
        run.ended = _date(obj["date"], run.line, zone)


def _date(value: Any, line: int, zone: LocalZone) -> datetime:
    try:
        return zone.utc(datetime.strptime(str(value), _DATE))
    except ValueError:
        raise Bad(line, "date", f"not a vLLM result date (YYYYMMDD-HHMMSS): {value!r}") from None


# --- reading files -----------------------------------------------------------------------


def _runs(path: Path, zone: LocalZone) -> Iterator[_Run]:
    """A JSON document is read whole (it parses only whole); a text log line by line."""
    with open_source(path) as stream:
        head = stream.read(1 << 16).removeprefix(UTF8_BOM)
        stream.seek(0)
        if head.lstrip()[:1] in (b"{", b"[") and not any(
            b in head for b in (VLLM_BANNER, *TRTLLM_BANNERS)
        ):
            yield from _json_runs(stream.read().removeprefix(UTF8_BOM), zone)
        else:
            yield from _text_runs(stream, zone)


def _json_value(text: bytes) -> Any:
    """JSON with numbers kept exact (Decimal) and `Infinity` kept as the text `inf`."""
    return json.loads(
        text,
        parse_float=Decimal,
        parse_constant=lambda name: "inf" if name == "Infinity" else name,
    )


def _json_runs(body: bytes, zone: LocalZone) -> Iterator[_Run]:
    """One object, an array of them, or JSON Lines (whatever the file's name says)."""
    try:
        whole = _json_value(body)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        yield _object_run(whole, 1, 0, body, zone)
        return
    if isinstance(whole, list):  # an element's own bytes are not at hand: its JSON is kept
        for obj in whole:
            yield _object_run(obj, 1, 0, json.dumps(obj, default=str).encode(), zone)
        return
    offset = 0
    for number, raw in enumerate(body.splitlines(keepends=True), start=1):
        here, offset = offset, offset + len(raw)
        if raw.strip():
            yield _line_run(raw, number, here, zone)


def _line_run(raw: bytes, number: int, offset: int, zone: LocalZone) -> _Run:
    try:
        obj = _json_value(raw)
    except (ValueError, RecursionError) as exc:
        run = _Run("vllm bench serve", number, offset, raw)
        run.problem = Bad(number, "(record)", f"not JSON: {exc}")
        return run
    return _object_run(obj, number, offset, raw, zone)


def _object_run(obj: Any, number: int, offset: int, raw: bytes, zone: LocalZone) -> _Run:
    run = _Run("vllm bench serve", number, offset, raw)
    if not isinstance(obj, dict):
        run.problem = Bad(
            number, "(record)", f"expected a result object, found {type(obj).__name__}"
        )
        return run
    try:
        _read_object(run, obj, zone)
    except Bad as bad:
        run.problem = bad
    return run


@dataclass
class _TextState:
    """Reading a text log: the block being read, the last block (waiting for its saved
    JSON result), and what the log said before the next block."""

    zone: LocalZone
    current: _Run | None = None
    kind: str = ""
    pending: _Run | None = None
    before: list[tuple[str, str, int]] = field(default_factory=list)

    def finish(self) -> Iterator[_Run]:
        """The block being read is done: it waits for a saved result, the one before it is out."""
        if self.pending is not None:
            yield self.pending
        self.pending, self.current = self.current, None

    def flush(self) -> Iterator[_Run]:
        """Every run held back (a new block starts, or the file ends)."""
        yield from self.finish()
        yield from self.finish()

    def start(self, kind: str, tool: str, number: int, offset: int) -> Iterator[_Run]:
        yield from self.flush()
        self.current, self.kind = _Run(tool, number, offset), kind
        for label, value, line in self.before:
            _safe(self.current, label, value, line)
        self.before = []


def _text_runs(lines: Iterable[bytes], zone: LocalZone) -> Iterator[_Run]:
    state = _TextState(zone)
    offset = 0
    for number, raw in enumerate(lines, start=1):
        here, offset = offset, offset + len(raw)
        text = (
            (raw.removeprefix(UTF8_BOM) if number == 1 else raw).decode("utf-8", "replace").strip()
        )
        if state.current is not None and not _inside(state, text):
            yield from state.finish()
        if state.current is not None:
            state.current.raw += raw
            if (state.kind == "vllm" and _RULE.match(text)) or (
                state.kind == "genai-perf" and text.startswith("└")
            ):
                yield from state.finish()
            elif state.kind == "genai-perf":
                _genai_perf_row(state.current, text, number)
            elif found := _LABEL_VALUE.match(text):
                _safe(state.current, found["label"], found["value"], number)
            continue
        yield from _outside(state, text, raw, number, here)
    yield from state.flush()


def _inside(state: _TextState, text: str) -> bool:
    """Whether a line still belongs to the block being read."""
    if state.kind == "vllm":
        return VLLM_BANNER.decode() not in text
    if state.kind == "genai-perf":
        return text[:1] in ("┏", "┃", "┡", "│", "└")
    if text.startswith("= REQUEST DETAILS") and "duration_s" in (
        state.current.figures if state.current else {}
    ):
        return False  # the next run's details
    return (
        not text or bool(_RULE.match(text)) or text.startswith(("= ", "-- ", "[")) or ":" in text
    ) and not text.startswith("{")


def _outside(state: _TextState, text: str, raw: bytes, number: int, offset: int) -> Iterator[_Run]:
    if VLLM_BANNER.decode() in text:
        yield from state.start("vllm", "vllm bench serve", number, offset)
    elif any(text.startswith(b.decode()) for b in TRTLLM_BANNERS):
        yield from state.start("trtllm", "trtllm-bench", number, offset)
    elif GENAI_PERF_TITLE.decode() in text:
        yield from state.start("genai-perf", "genai-perf", number, offset)
    elif text.startswith("{") and any(
        k.decode() in text for k in (*_RESULT_MARKERS, b'"completed"')
    ):
        yield _saved_result(state, raw, number, offset)
        return
    elif found := _LABEL_VALUE.match(text):
        if " ".join(found["label"].lower().split()) in (
            "traffic request rate",
            "maximum request concurrency",
        ):
            state.before.append((found["label"], found["value"], number))
        return
    else:
        return
    if state.current is not None:
        state.current.raw += raw


def _saved_result(state: _TextState, raw: bytes, number: int, offset: int) -> _Run:
    """A result object in a log: the saved form of the block just read, or a run of its own."""
    run = _line_run(raw, number, offset, state.zone)
    if state.pending is not None:
        run.raw = state.pending.raw + raw
        state.pending = None
    return run


def _genai_perf_row(run: _Run, text: str, line: int) -> None:
    """genai-perf's `Request count` row (printed since late 2024), the one figure of its
    table an event could use: the table has no duration, so it is quarantined anyway, but
    for that reason and not a wrong one."""
    cells = [cell.strip() for cell in text.strip("│ ").split("│")]
    if len(cells) > 1 and cells[0].lower().startswith("request count"):
        try:
            run.put("accepted", count(cells[1], line, cells[0]), cells[0])
        except Bad as bad:
            run.problem = run.problem or bad


def _safe(run: _Run, label: str, value: str, line: int) -> None:
    """Read one line into the run; the first value that cannot be read spoils the run."""
    try:
        _read_label(run, label, value, line)
    except Bad as bad:
        run.problem = run.problem or bad
