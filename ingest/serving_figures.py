"""The figures of serving benchmark outputs: which label (text) or key (JSON) holds which
figure of an `inference.window`, and how a value is read exactly (docs/serving.md).

Values stay Decimal from the text the tool wrote (no float in between); padding and
thousands separators are dropped; `None`, `N/A`, `null` and an empty value are absent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from schemas.errors import BadInput

_ABSENT = frozenset({"", "none", "n/a", "null"})
_THOUSANDS = re.compile(r"^\d{1,3}(,\d{3})+(\.\d+)?$")
#: Measures and statistics as the tools name them → the event's names (docs/serving.md).
MEASURES = {
    "ttft": "ttft_ms",
    "tpot": "tpot_ms",
    "itl": "itl_ms",
    "e2el": "latency_ms",
    "e2e latency": "latency_ms",
    "e2e_latency": "latency_ms",
    "latency": "latency_ms",
}
STATISTICS = {
    "mean": "mean",
    "average": "mean",
    "median": "p50",
    "p50": "p50",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "max": "max",
    "maximum": "max",
}
#: A statistic line of the text (vLLM, SGLang), of trtllm-bench, a statistic key of the JSON.
TEXT_STATISTIC = re.compile(
    r"^(?P<stat>mean|median|p[\d.]+|std|min|max) (?P<measure>ttft|tpot|itl|e2el|e2e latency) "
    r"\(ms\)$"
)
TRTLLM_STATISTIC = re.compile(
    r"^\[(?P<measure>ttft|tpot|latency)\] (?P<stat>average|minimum|maximum|p[\d.]+)$"
)
JSON_STATISTIC = re.compile(
    r"^(?P<stat>mean|median|p[\d.]+|std|min|max)_(?P<measure>ttft|tpot|itl|e2el|e2e_latency)_ms$"
)
#: No figure of a benchmark reaches 10**18 (the event's own bound on a measure is below 10**18,
#: on a count 2**53): refusing longer numbers here keeps a hostile file from making us
#: build a huge integer before validation would refuse it anyway.
MEASURE_DIGITS = 18


class Bad(BadInput, ValueError):
    """A value that cannot be read: the line, the label or key, and why."""

    def __init__(self, line: int, label: str, reason: str) -> None:
        super().__init__(f"{label}: {reason}")
        self.line, self.label, self.reason = line, label, reason


def decimal(value: Any, line: int, label: str) -> Decimal | None:
    """A figure as an exact Decimal: text as printed (padding and thousands separators
    dropped), or a JSON number already parsed as Decimal."""
    if isinstance(value, bool):
        raise Bad(line, label, f"not a number: {value!r}")
    if isinstance(value, (int, Decimal)):
        return decimal(str(value), line, label)  # the same bounds as text
    if value is None or str(value).strip().lower() in _ABSENT:
        return None
    text = str(value).strip()
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise Bad(line, label, f"not a number: {text!r}") from None
    if not number.is_finite():
        raise Bad(line, label, f"not a finite number: {text!r}")
    if number and number.adjusted() >= MEASURE_DIGITS:
        raise Bad(line, label, f"{text} is not below 10^{MEASURE_DIGITS}")
    return number


def count(value: Any, line: int, label: str) -> int | None:
    number = decimal(value, line, label)
    if number is None:
        return None
    if number != number.to_integral_value():
        raise Bad(line, label, f"not a whole number: {value!r}")
    return int(number)


def rate(value: Any, line: int, label: str) -> Decimal | str | None:
    """An offered request rate; `inf` (also JSON's Infinity) means all requests at once."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return "inf"
    return decimal(value, line, label)


def seconds_from_ms(value: Any, line: int, label: str) -> Decimal | None:
    number = decimal(value, line, label)
    return None if number is None else number / 1000


Convert = Callable[[Any, int, str], Any]
#: Labels of the text outputs (lower case, spaces collapsed) → (figure, how to read it).
TEXT_LABELS: dict[str, tuple[str, Convert]] = {
    "successful requests": ("accepted", count),
    "failed requests": ("failed", count),
    "maximum request concurrency": ("concurrency", count),
    "max request concurrency": ("concurrency", count),
    "request rate configured (rps)": ("request_rate", rate),
    "traffic request rate": ("request_rate", rate),
    "benchmark duration (s)": ("duration_s", decimal),
    "total input tokens": ("input_tokens", count),
    "total generated tokens": ("output_tokens", count),
    "request throughput (req/s)": ("request_throughput", decimal),
    "output token throughput (tok/s)": ("output_throughput", decimal),
    # trtllm-bench
    "number of requests": ("requests", count),
    "request throughput (req/sec)": ("request_throughput", decimal),
    "total output throughput (tokens/sec)": ("output_throughput", decimal),
    "total latency (ms)": ("duration_s", seconds_from_ms),
}
#: Keys of the JSON results → (figure, how to read it).
JSON_KEYS: dict[str, tuple[str, Convert]] = {
    "num_prompts": ("requests", count),
    "completed": ("accepted", count),
    "failed": ("failed", count),
    "max_concurrency": ("concurrency", count),
    "request_rate": ("request_rate", rate),
    "duration": ("duration_s", decimal),
    "total_input_tokens": ("input_tokens", count),
    "total_output_tokens": ("output_tokens", count),
    "request_throughput": ("request_throughput", decimal),
    "output_throughput": ("output_throughput", decimal),
}
