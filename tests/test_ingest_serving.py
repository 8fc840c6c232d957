"""The serving-bench ingestor and the inference.window model: the rules of
ingest/serving_bench.py and docs/serving.md, one test each, and the real outputs' facts.
Expected values are worked out by hand from the bytes and the rules."""

from __future__ import annotations

import tempfile
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cli import main
from ingest import IngestError, choose, extract
from schemas import (
    Accepted,
    Rejected,
    canonical,
    canonical_event,
    event_document,
    validate_event,
    validate_event_json,
)
from tests.conftest import FUZZ_EXAMPLES, REALDATA

BENCH = REALDATA / "inference-bench"
ABSENT_REASON = f"real data not present at {BENCH} (it lives beside the project, not in it)"
needs_realdata = pytest.mark.skipif(not BENCH.is_dir(), reason=ABSENT_REASON)
OPTIONS = {"tenant": "acme", "job": "chat-api", "timezone": "UTC"}
START = "2025-09-02T13:00:00Z"


def records(path: Path, **options: Any) -> list[Accepted | Rejected]:
    return list(extract(path, **{**OPTIONS, **options}))


def windows(path: Path, **options: Any) -> list[dict[str, Any]]:
    """The events of a file that must yield no rejection."""
    found = records(path, **options)
    assert [r for r in found if isinstance(r, Rejected)] == []
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def write(tmp_path: Path, text: str, name: str = "bench.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def vllm_block(*lines: tuple[str, str]) -> str:
    """A result block as `vllm bench serve` prints it: labels padded to 40, values to 10."""
    body = [f"{label:<40} {value:<10}" for label, value in lines]
    return "\n".join(
        ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="), *body, "=" * 50, ""]
    )


NEW_VLLM = vllm_block(
    ("Successful requests:", "998"),
    ("Failed requests:", "2"),
    ("Maximum request concurrency:", "64"),
    ("Request rate configured (RPS):", "20.00"),
    ("Benchmark duration (s):", "50.25"),
    ("Total input tokens:", "102400"),
    ("Total generated tokens:", "127744"),
    ("Request throughput (req/s):", "19.86"),
    ("Output token throughput (tok/s):", "2542.17"),
    ("Peak output token throughput (tok/s):", "3104.00"),
    ("Peak concurrent requests:", "64.00"),
    ("Total Token throughput (tok/s):", "4579.98"),
    ("---------------Time to First Token----------------", ""),
    ("Mean TTFT (ms):", "157.75"),
    ("Median TTFT (ms):", "118.73"),
    ("P90 TTFT (ms):", "332.99"),
    ("P95 TTFT (ms):", "400.04"),
    ("P99 TTFT (ms):", "532.92"),
    ("P99.9 TTFT (ms):", "801.10"),
    ("----------------End-to-end Latency----------------", ""),
    ("Mean E2EL (ms):", "3120.50"),
    ("Median E2EL (ms):", "3001.00"),
    ("P95 E2EL (ms):", "4410.25"),
    ("P99 E2EL (ms):", "5002.75"),
)


# --- the model -----------------------------------------------------------------------


def window_event(**data: Any) -> dict[str, Any]:
    base = {
        "tenant": "t",
        "job_id": "j",
        "window_start": "2026-01-05T10:00:00Z",
        "window_end": "2026-01-05T10:01:00Z",
        "requests": 10,
        "accepted": 9,
    }
    return {
        "specversion": "1.0",
        "id": "w1",
        "source": "serving-bench://t/j",
        "type": "inference.window",
        "time": "2026-01-05T10:01:00Z",
        "data": {**base, **data},
    }


def test_a_window_in_canonical_form_keeps_every_figure_as_text() -> None:
    event = validate_event(
        window_event(
            ttft_ms={"p99": "89.77", "mean": "54.58"},
            request_rate="inf",
            output_throughput="2249.2500",
            concurrency=8,
        )
    )
    assert canonical_event(event) == (
        b'{"data":{"accepted":9,"concurrency":8,"job_id":"j","output_throughput":"2249.2500",'
        b'"request_rate":"inf","requests":10,"tenant":"t","ttft_ms":{"mean":"54.58",'
        b'"p99":"89.77"},"window_end":"2026-01-05T10:01:00Z",'
        b'"window_start":"2026-01-05T10:00:00Z"},"id":"w1","source":"serving-bench://t/j",'
        b'"specversion":"1.0","time":"2026-01-05T10:01:00Z","type":"inference.window"}'
    )


BAD_WINDOWS: dict[str, tuple[dict[str, Any], str, str]] = {
    "a float millisecond": ({"ttft_ms": {"p99": 89.77}}, "data.ttft_ms.p99", "not a float"),
    "a negative millisecond": (
        {"latency_ms": {"mean": "-1"}},
        "data.latency_ms.mean",
        "never negative",
    ),
    "a statistic no tool prints": (
        {"ttft_ms": {"p42": "1"}},
        "data.ttft_ms.p42",
        "Input should be",
    ),
    "an empty distribution": ({"ttft_ms": {}}, "data.ttft_ms", "at least 1"),
    "a float rate": ({"request_rate": 10.0}, "data.request_rate", "not a float"),
    "a measure too large": (
        {"output_throughput": "1" + "0" * 18},
        "data.output_throughput",
        "more than 18 digits before or after the point",
    ),
    "more served than sent": ({"accepted": 11}, "data", "add up to more than the 10 requests"),
    "failures past the requests": ({"failed": 2}, "data", "add up to more than the 10 requests"),
    "a window ending before it starts": (
        {"window_end": "2026-01-05T09:59:59Z"},
        "data",
        "window_end is before",
    ),
    "no accepted count": ({"accepted": None}, "data.accepted", "Input should be a valid integer"),
    "zero concurrency": ({"concurrency": 0}, "data.concurrency", "greater than or equal to 1"),
}


@pytest.mark.parametrize("name", sorted(BAD_WINDOWS))
def test_the_model_refuses(name: str) -> None:
    change, field, reason = BAD_WINDOWS[name]
    with pytest.raises(ValidationError) as caught:
        validate_event(window_event(**change))
    error = caught.value.errors()[0]
    assert ".".join(str(p) for p in error["loc"][1:]).replace(".[key]", "") == field
    assert reason in error["msg"]


# --- the rules, on the project's own samples (as the tools print them) ---------------------


def test_a_newer_vllm_block_gives_failures_concurrency_rate_and_end_to_end_latency(
    tmp_path: Path,
) -> None:
    [event] = windows(write(tmp_path, "$ vllm bench serve ...\n" + NEW_VLLM), window_start=START)
    assert event["id"] == "window@2025-09-02T13:00:00Z"
    assert event["source"] == "serving-bench://acme/chat-api"
    assert event["time"] == "2025-09-02T13:00:50.250000Z"
    data = event["data"]
    assert data == {
        "tenant": "acme",
        "job_id": "chat-api",
        "tool": "vllm bench serve",
        "window_start": "2025-09-02T13:00:00Z",
        "window_end": "2025-09-02T13:00:50.250000Z",
        "requests": 1000,
        "accepted": 998,
        "failed": 2,
        "concurrency": 64,
        "request_rate": "20.00",
        "input_tokens": 102400,
        "output_tokens": 127744,
        "request_throughput": "19.86",
        "output_throughput": "2542.17",
        # P99.9 is none of the statistics an event keeps (docs/serving.md): left out, not rounded
        # into p99
        "ttft_ms": {
            "mean": "157.75",
            "p50": "118.73",
            "p90": "332.99",
            "p95": "400.04",
            "p99": "532.92",
        },
        "latency_ms": {"mean": "3120.50", "p50": "3001.00", "p95": "4410.25", "p99": "5002.75"},
    }


def test_windows_of_one_file_are_laid_end_to_end_from_window_start(tmp_path: Path) -> None:
    second = NEW_VLLM.replace("50.25", "9.75").replace("998", "100")
    path = write(tmp_path, NEW_VLLM + "some log line\n" + second)
    first, later = windows(path, window_start="2025-09-02T15:00:00+02:00", allocation="alloc-7")
    assert (first["data"]["window_start"], first["data"]["window_end"]) == (
        "2025-09-02T13:00:00Z",
        "2025-09-02T13:00:50.250000Z",
    )
    assert (later["data"]["window_start"], later["data"]["window_end"]) == (
        "2025-09-02T13:00:50.250000Z",
        "2025-09-02T13:01:00Z",
    )
    assert (later["data"]["requests"], later["data"]["accepted"]) == (102, 100) and first["data"][
        "allocation_id"
    ] == later["data"]["allocation_id"] == "alloc-7"


def test_an_sglang_block_is_read_by_the_same_labels(tmp_path: Path) -> None:
    block = vllm_block(
        ("Backend:", "sglang"),
        ("Traffic request rate:", "330.0"),
        ("Max request concurrency:", "330"),
        ("Successful requests:", "660"),
        ("Benchmark duration (s):", "55.42"),
        ("Total input tokens:", "675840"),
        ("Total generated tokens:", "675840"),
        ("Total generated tokens (retokenized):", "675679"),
        ("Request throughput (req/s):", "11.91"),
        ("Output token throughput (tok/s):", "12195.89"),
        ("Concurrency:", "315.98"),
        ("Mean E2E Latency (ms):", "26530.12"),
        ("Median E2E Latency (ms):", "26001.41"),
        ("Mean TTFT (ms):", "2533.44"),
        ("Median TTFT (ms):", "2409.87"),
        ("P99 TTFT (ms):", "6002.16"),
    )
    [event] = windows(write(tmp_path, "    " + block.replace("\n", "\n    ")), window_start=START)
    data = event["data"]
    assert (
        data["tool"],
        data["requests"],
        data["accepted"],
        data["concurrency"],
        data["request_rate"],
    ) == ("sglang.bench_serving", 660, 660, 330, "330.0")
    assert data["latency_ms"] == {"mean": "26530.12", "p50": "26001.41"}
    assert data["ttft_ms"] == {"mean": "2533.44", "p50": "2409.87", "p99": "6002.16"}
    assert data["window_end"] == "2025-09-02T13:00:55.420000Z"


def test_rate_and_concurrency_printed_before_an_older_block_count_for_it(tmp_path: Path) -> None:
    text = (
        "Traffic request rate: inf\nMaximum request concurrency: 16\n100%|####| 10/10\n"
        + vllm_block(("Successful requests:", "10"), ("Benchmark duration (s):", "2.00"))
    )
    [event] = windows(write(tmp_path, text), window_start=START)
    assert (event["data"]["request_rate"], event["data"]["concurrency"]) == ("inf", 16)


def test_a_saved_result_after_a_block_stands_for_it_with_its_own_date(tmp_path: Path) -> None:
    saved = (
        '{"date": "20250902-150010", "num_prompts": 12, "completed": 11, "failed": 1, '
        '"duration": 10.5, "request_rate": "inf", "max_concurrency": 4, "mean_ttft_ms": 12.25, '
        '"p99_e2el_ms": 900.0}'
    )
    text = (
        vllm_block(("Successful requests:", "11"), ("Benchmark duration (s):", "10.50"))
        + "<<<RESULT_START>>>\n"
        + saved
        + "\n"
    )
    [event] = windows(
        write(tmp_path, text), timezone="Europe/Berlin"
    )  # no --window-start needed: the result is dated
    data = event["data"]
    assert (data["window_start"], data["window_end"]) == (
        "2025-09-02T12:59:59.500000Z",
        "2025-09-02T13:00:10Z",
    )
    assert (data["requests"], data["accepted"], data["failed"], data["concurrency"]) == (
        12,
        11,
        1,
        4,
    )
    assert data["ttft_ms"] == {"mean": "12.25"} and data["latency_ms"] == {"p99": "900.0"}


def test_a_block_without_a_time_is_quarantined_naming_window_start(tmp_path: Path) -> None:
    path = write(tmp_path, "header\n" + NEW_VLLM)
    [rejected] = records(path)
    assert isinstance(rejected, Rejected)
    assert (rejected.origin.line, rejected.field) == (2, "window_start")
    assert rejected.record.startswith(b"===") and rejected.record.rstrip().endswith(b"=" * 50)


def test_a_value_that_cannot_be_read_quarantines_the_run_with_line_and_label(
    tmp_path: Path,
) -> None:
    bad = NEW_VLLM.replace(
        "P95 TTFT (ms):                           400.04",
        "P95 TTFT (ms):                           n0pe",
    )
    path = write(tmp_path, bad + NEW_VLLM)
    first, second = records(path, window_start=START)
    assert isinstance(first, Rejected) and isinstance(second, Accepted)
    assert (first.origin.line, first.field) == (18, "P95 TTFT (ms)")
    assert "not a number: 'n0pe'" in first.reason


def test_a_json_results_file_bad_line_is_quarantined_alone(tmp_path: Path) -> None:
    good = '{"date": "20250902-130010", "completed": 5, "duration": 10, "mean_ttft_ms": 1.5}'
    path = write(
        tmp_path,
        good + '\n{"completed": 5, "duration": \n' + good.replace("130010", "130020") + "\n",
        "r.json",
    )
    first, broken, last = records(path)
    assert isinstance(first, Accepted) and isinstance(last, Accepted)
    assert isinstance(broken, Rejected) and (broken.origin.line, broken.field) == (2, "(record)")
    assert broken.reason.startswith("not JSON")


def small_block(**changes: str) -> str:
    lines = {
        "Successful requests:": "10",
        "Benchmark duration (s):": "2.00",
        "Mean TTFT (ms):": "1.25",
    }
    return vllm_block(*{**lines, **changes}.items())


#: A text file, and what its quarantine entry says: line, field, reason.
BAD_TEXT: dict[str, tuple[str, int, str, str]] = {
    "a huge duration": (
        small_block(**{"Benchmark duration (s):": "1e30"}),
        3,
        "Benchmark duration (s)",
        "not below 10^18",
    ),
    "a negative duration": (
        small_block(**{"Benchmark duration (s):": "-5"}),
        1,
        "Benchmark duration (s)",
        "a window lasts from 0 to 3155760000 s",
    ),
    "a window past the calendar": (
        small_block(**{"Benchmark duration (s):": "1000000000"}),
        1,
        "Benchmark duration (s)",
        "falls outside the calendar",
    ),
    "a huge count": (
        small_block(**{"Successful requests:": "99999999999999999999"}),
        2,
        "Successful requests",
        "not below 10^18",
    ),
    "a fractional count": (
        small_block(**{"Successful requests:": "10.5"}),
        2,
        "Successful requests",
        "not a whole number",
    ),
    "a NaN latency": (
        small_block(**{"Mean TTFT (ms):": "nan"}),
        4,
        "Mean TTFT (ms)",
        "not a finite number",
    ),
    "no duration": (
        vllm_block(("Successful requests:", "10")),
        1,
        "duration",
        "printed no benchmark duration",
    ),
    "no count": (
        vllm_block(("Benchmark duration (s):", "2.00")),
        1,
        "requests",
        "gives no count of requests served",
    ),
    # the reader's bound is the event's own (below 10^18), so the reader refuses it first
    "a statistic too large for a measure": (
        small_block(**{"Mean TTFT (ms):": "1" + "0" * 18}),
        4,
        "Mean TTFT (ms)",
        "not below 10^18",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_TEXT))
def test_a_bad_text_run_is_quarantined_whole(tmp_path: Path, name: str) -> None:
    text, line, field, reason = BAD_TEXT[name]
    start = "9990-01-01T00:00:00Z" if "calendar" in name else START
    [rejected] = records(write(tmp_path, text), window_start=start)
    assert isinstance(rejected, Rejected)
    assert (rejected.origin.line, rejected.field) == (line, field)
    assert reason in rejected.reason
    assert rejected.record == text.encode()


#: A JSON result line, and what its quarantine entry says: field, reason.
BAD_JSON: dict[str, tuple[str, str, str]] = {
    "a date in another form": (
        '{"date": "2025-09-02 13:00:10", "completed": 5, "duration": 10}',
        "date",
        "not a vLLM result date",
    ),
    "a boolean count": (
        '{"date": "20250902-130010", "completed": true, "duration": 10}',
        "completed",
        "not a number",
    ),
    "NaN for a latency": (
        '{"date": "20250902-130010", "completed": 5, "duration": 10, "p99_ttft_ms": NaN}',
        "p99_ttft_ms",
        "not a finite number",
    ),
    "more completed than sent": (
        '{"date": "20250902-130010", "num_prompts": 5, "completed": 6, "duration": 10}',
        "data",
        "add up to more than the 5 requests",
    ),
    "a list, not a result": (
        '[[1, 2], {"completed": 1, "duration": 1}]',
        "(record)",
        "expected a result object, found list",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_JSON))
def test_a_bad_json_result_is_quarantined_with_its_key(tmp_path: Path, name: str) -> None:
    text, field, reason = BAD_JSON[name]
    rejected = records(write(tmp_path, text + "\n", "r.json"))[0]
    assert isinstance(rejected, Rejected) and (rejected.origin.line, rejected.field) == (1, field)
    assert reason in rejected.reason


def test_a_json_array_of_results_with_a_bom_and_crlf_text(tmp_path: Path) -> None:
    array = (
        '\ufeff[{"date": "20250902-130010", "completed": 5, "duration": 10, "median_ttft_ms": 7},'
        ' {"date": "20250902-130030", "completed": 6, "duration": 10.5}]'
    )
    first, second = windows(write(tmp_path, array, "a.json"))
    assert (first["data"]["ttft_ms"], first["data"]["window_start"]) == (
        {"p50": "7"},
        "2025-09-02T13:00:00Z",
    )
    assert (second["data"]["requests"], second["data"]["window_start"]) == (
        6,
        "2025-09-02T13:00:19.500000Z",
    )
    [event] = windows(
        write(tmp_path, "\ufeff" + small_block().replace("\n", "\r\n")), window_start=START
    )
    assert (event["data"]["accepted"], event["data"]["ttft_ms"]) == (10, {"mean": "1.25"})


def test_tenant_and_job_are_required(tmp_path: Path) -> None:
    path = write(tmp_path, NEW_VLLM)
    with pytest.raises(IngestError, match="required: serving-bench output names no job$"):
        list(extract(path, tenant="acme"))
    with pytest.raises(IngestError, match="required: serving-bench output names no tenant$"):
        list(extract(path, job="j"))
    with pytest.raises(
        IngestError, match=r"required: tenant, job \(serving-bench output names none of them\)$"
    ):
        list(extract(path))
    with pytest.raises(IngestError, match="'2025-09-02T13:00:00' has no zone") as info:
        list(extract(path, tenant="acme", job="j", window_start="2025-09-02T13:00:00"))
    assert info.value.option == "window_start"


def test_a_cloudevents_file_is_not_claimed(tmp_path: Path) -> None:
    event = orjson.dumps(window_event(ttft_ms={"mean": "1"})).decode()
    assert choose(write(tmp_path, event + "\n", "e.jsonl"))[0].name == "cloudevents"


def test_the_cli_appends_once_and_names_the_zone(tmp_path: Path) -> None:
    path = write(tmp_path, NEW_VLLM)
    db = f"sqlite:///{tmp_path / 'l.db'}"
    args = [
        "ingest",
        "--db",
        db,
        "--tenant",
        "acme",
        "--job",
        "chat-api",
        "--window-start",
        START,
        "--timezone",
        "UTC",
        str(path),
    ]
    first, again = CliRunner().invoke(main, args), CliRunner().invoke(main, args)
    assert (first.exit_code, again.exit_code) == (0, 0)
    assert (
        first.stdout
        == f"{path}: read 1 · appended 1 · duplicate 0 · quarantined 0 · times in UTC\n"
    )
    assert (
        again.stdout
        == f"{path}: read 1 · appended 0 · duplicate 1 · quarantined 0 · times in UTC\n"
    )
    missing = CliRunner().invoke(main, ["ingest", "--db", db, "--tenant", "acme", str(path)])
    assert (missing.exit_code, missing.output) == (
        2,
        f"Error: --set job: {path}: required: serving-bench output names no job\n",
    )
    undated = CliRunner().invoke(
        main, ["ingest", "--db", db, "--tenant", "acme", "--job", "other", str(path)]
    )
    assert undated.exit_code == 1
    assert undated.stderr.startswith(
        f"{path}:1: window_start: vllm bench serve names no time for this run"
    )


# --- the real outputs (PROBES facts) ---------------------------------------------------------


def two_places(text: str) -> str:
    return str(Decimal(text).quantize(Decimal("0.01")))


@needs_realdata
@pytest.mark.parametrize("name", sorted(p.name for p in BENCH.iterdir()) if BENCH.is_dir() else [])
def test_every_real_output_is_claimed_by_serving_bench_alone(name: str) -> None:
    assert choose(BENCH / name)[0].name == "serving-bench"


@needs_realdata
def test_dennislee_qwen2_10_prompts() -> None:
    [event] = windows(
        BENCH / "dennislee22-vLLM-benchmarking_README_test1_qwen2-7b_10prompts.txt",
        window_start=START,
    )
    data = event["data"]
    assert (data["requests"], data["accepted"], data["input_tokens"], data["output_tokens"]) == (
        10,
        10,
        10239,
        10240,
    )
    assert (data["request_throughput"], data["output_throughput"]) == ("0.21", "218.04")
    assert data["ttft_ms"] == {"mean": "2111.51", "p50": "2244.91", "p99": "3346.14"}
    assert data["tpot_ms"]["mean"] == "43.77" and data["itl_ms"]["p99"] == "51.04"
    assert data["window_end"] == "2025-09-02T13:00:46.960000Z"  # 46.96 s after the start
    assert "failed" not in data and "concurrency" not in data and "request_rate" not in data


@needs_realdata
def test_dennislee_gpt_oss_500_prompts() -> None:
    [event] = windows(
        BENCH / "dennislee22-vLLM-benchmarking_README_test9_gpt-oss-120b_500prompts.txt",
        window_start=START,
    )
    data = event["data"]
    assert (data["requests"], data["accepted"], data["input_tokens"], data["output_tokens"]) == (
        500,
        500,
        511459,
        113510,
    )
    assert (data["request_throughput"], data["output_throughput"]) == ("0.57", "129.04")
    assert data["ttft_ms"] == {"mean": "91005.74", "p50": "13093.68", "p99": "324563.23"}
    assert data["tpot_ms"]["p99"] == "5521.92"
    assert data["window_end"] == "2025-09-02T13:14:39.630000Z"  # 879.63 s = 14 min 39.63 s


@needs_realdata
def test_nerdalert_log_three_runs_each_read_from_its_saved_result() -> None:
    found = windows(BENCH / "nerdalert-vllm-bench-automation_README_example-output_l40s-x4.txt")
    facts = [
        (
            d["requests"],
            d["request_rate"],
            two_places(d["ttft_ms"]["mean"]),
            two_places(d["request_throughput"]),
        )
        for d in (e["data"] for e in found)
    ]
    assert facts == [
        (300, "10.0", "54.58", "8.33"),
        (900, "30.0", "73.23", "22.18"),
        (900, "inf", "902.25", "43.02"),
    ]
    assert two_places(found[0]["data"]["ttft_ms"]["p99"]) == "89.77"
    assert two_places(found[2]["data"]["ttft_ms"]["p99"]) == "1353.17"
    # date 20250530-203806 (UTC here), duration 36.034275877000255 s → 36.034276 s to the µs
    assert (found[0]["data"]["window_start"], found[0]["data"]["window_end"]) == (
        "2025-05-30T20:37:29.965724Z",
        "2025-05-30T20:38:06Z",
    )
    assert "concurrency" not in found[0]["data"]  # max_concurrency null


@needs_realdata
def test_nerdalert_results_json_lines() -> None:
    found = [
        e["data"]
        for e in windows(
            BENCH / "nerdalert-vllm-bench-automation_vllm-benchmark-graphs_results.json"
        )
    ]
    assert len(found) == 9
    assert [d["request_rate"] for d in found] == ["10.0", "30.0", "inf"] * 3
    assert [d["requests"] for d in found] == [300, 900, 900] * 3
    assert all(d["accepted"] == d["requests"] for d in found)
    assert [two_places(d["ttft_ms"]["mean"]) for d in found[2::3]] == [
        "4386.74",
        "1253.67",
        "884.96",
    ]
    assert (
        found[0]["request_throughput"] == "8.369432347779671"
        and found[0]["ttft_ms"]["p99"] == "98.69780922984769"
    )
    # line 4 is `base` at 10 QPS: 54.592403276680365 (54.5956… is line 1, `no-features`)
    assert (
        found[3]["ttft_ms"]["mean"] == "54.592403276680365"
        and found[0]["ttft_ms"]["mean"] == "54.59561144333596"
    )


@needs_realdata
def test_sglang_online_jsonl() -> None:
    found = [
        e["data"]
        for e in windows(
            BENCH / "datacrunch-h200-benchmarks_sglang_llama_3_3_70b_online_output.jsonl",
            window_start="2025-01-01T00:00:00Z",
        )
    ]
    assert [d["request_rate"] for d in found] == ["1.0", "2.0", "4.0", "8.0", "16.0", "4.0", "8.0"]
    assert [d["accepted"] for d in found] == [300, 600, 1200, 2400, 3200, 1200, 2400]
    assert all(d["tool"] == "sglang.bench_serving" and set(d["ttft_ms"]) == {"p50"} for d in found)
    assert (
        found[0]["ttft_ms"]["p50"] == "85.74514742940664"
        and found[0]["output_throughput"] == "537.4142851849319"
    )
    # duration 298.3675805060193 s → 298.367581 s to the µs; the next window starts there
    assert found[0]["window_end"] == found[1]["window_start"] == "2025-01-01T00:04:58.367581Z"
    assert (two_places(found[4]["ttft_ms"]["p50"]), two_places(found[4]["output_throughput"])) == (
        "614.25",
        "4288.05",
    )


@needs_realdata
def test_sglang_offline_jsonl_with_infinity() -> None:
    found = [
        e["data"]
        for e in windows(
            BENCH / "datacrunch-h200-benchmarks_sglang_llama_3_3_70b_offline_output.jsonl",
            window_start="2025-01-01T00:00:00Z",
        )
    ]
    assert len(found) == 7 and all(d["request_rate"] == "inf" for d in found)
    assert (found[0]["accepted"], found[0]["ttft_ms"]["p50"], found[0]["output_throughput"]) == (
        3000,
        "91282.20983641222",
        "4520.698730654741",
    )


@needs_realdata
def test_genai_perf_table_is_quarantined_for_want_of_a_request_count() -> None:
    [rejected] = records(
        BENCH / "perf_analyzer_genai-perf-docs-tutorial_zephyr-7b-openai-chat.txt",
        window_start=START,
    )
    assert isinstance(rejected, Rejected) and (rejected.origin.line, rejected.field) == (
        1,
        "requests",
    )
    assert "45.85" in rejected.record.decode()  # the whole table kept


@needs_realdata
def test_trtllm_overview_alone_is_quarantined_and_read_whole_after_its_request_details(
    tmp_path: Path,
) -> None:
    real = BENCH / "TensorRT-LLM_docs-perf-overview_trtllm-bench-throughput-example.txt"
    [rejected] = records(real, window_start=START)
    assert isinstance(rejected, Rejected) and (rejected.origin.line, rejected.field) == (
        2,
        "requests",
    )
    # The docs cut the REQUEST DETAILS part that trtllm-bench prints first; put back, the real
    # bytes read as they are.
    details = (
        "=" * 59 + "\n= REQUEST DETAILS\n" + "=" * 59 + "\nNumber of requests:             5000\n"
    )
    path = tmp_path / "trtllm.txt"
    path.write_bytes(details.encode() + real.read_bytes())
    [event] = windows(path, window_start=START)
    data = event["data"]
    assert (data["requests"], data["accepted"], data["tool"]) == (5000, 5000, "trtllm-bench")
    assert (data["request_throughput"], data["output_throughput"]) == ("43.2089", "5530.7382")
    assert data["ttft_ms"] == {
        "mean": "52667.0339",
        "p50": "52269.7072",
        "p90": "96583.7187",
        "p95": "101978.4566",
        "p99": "106563.4497",
        "max": "107501.2487",
    }
    assert data["tpot_ms"]["p50"] == "204.0463" and data["tpot_ms"]["mean"] == "182.9639"
    assert data["latency_ms"]["max"] == "111668.0964"
    assert (
        data["window_end"] == "2025-09-02T13:01:55.716921Z"
    )  # Total Latency 115716.9214 ms → 115.716921 s


# --- fuzzing: whatever the bytes, records or the project's IngestError --------------------

serving_fragments = st.sampled_from(
    [
        b"\n",
        b"\r\n",
        b" ",
        b":",
        b"=" * 50,
        b"============ Serving Benchmark Result ============\n",
        b"= REQUEST DETAILS\n",
        b"= PERFORMANCE OVERVIEW\n",
        b"NVIDIA GenAI-Perf | LLM Metrics\n",
        "┃ │ └".encode(),
        b"Successful requests:",
        b"Failed requests:",
        b"Benchmark duration (s):",
        b"Number of requests:",
        b"Total Latency (ms):",
        b"P99 TTFT (ms):",
        b"Median E2EL (ms):",
        b"[TTFT] P50    :",
        b"Maximum request concurrency:",
        b"Traffic request rate:",
        b"inf",
        b"None",
        b"10",
        b"-3",
        b"1e400",
        b"NaN",
        b"9" * 30,
        b"1,915.41",
        b"12.5",
        b"{",
        b"}",
        b"[",
        b"]",
        b'"completed": ',
        b'"duration": ',
        b'"date": "20250530-203806"',
        b'"date": "x"',
        b'"mean_ttft_ms": ',
        b'"request_rate": ',
        b"Infinity",
        b",",
        b"\xff\xfe",
        b"\x00",
        b"\\ud800",
        b"<<<RESULT_START>>>\n",
    ]
)
serving_noise = st.lists(st.one_of(serving_fragments, st.binary(max_size=12)), max_size=40).map(
    b"".join
)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(
        [
            b"",
            b"============ Serving Benchmark Result ============\n",
            b"= REQUEST DETAILS\n",
            b'{"completed": 1, ',
        ]
    ),
    serving_noise,
    st.sampled_from([None, START]),
)
def test_fuzz_serving_bench(head: bytes, data: bytes, window_start: str | None) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input"
        path.write_bytes(head + data)
        try:
            for record in extract(path, "serving-bench", **OPTIONS, window_start=window_start):
                assert isinstance(record, (Accepted, Rejected))
        except IngestError:
            pass


def test_a_genai_perf_table_with_a_request_count_is_quarantined_for_its_missing_duration(
    tmp_path: Path,
) -> None:
    table = (
        "                                  NVIDIA GenAI-Perf | LLM Metrics\n"
        "┏━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━┓\n"
        "┃                Statistic ┃   avg ┃   p99 ┃\n"
        "┡━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━┩\n"
        "│ Time To First Token (ms) │ 37.99 │ 45.85 │\n"
        "│    Request Count (count) │ 1,200 │   N/A │\n"
        "└──────────────────────────┴───────┴───────┘\n"
    )
    [rejected] = records(write(tmp_path, table), window_start=START)
    assert isinstance(rejected, Rejected) and (rejected.origin.line, rejected.field) == (
        1,
        "duration",
    )
    assert rejected.record == table.encode()


def test_later_commands_process_a_ledger_with_windows(tmp_path: Path) -> None:
    """What ingest accepts, every later command can process (docs/events.md)."""
    samples = Path(__file__).resolve().parent.parent / "fixtures" / "samples"
    db = f"sqlite:///{tmp_path / 'l.db'}"
    runner = CliRunner()
    assert (
        runner.invoke(main, ["ingest", "--db", db, str(samples / "events.jsonl")]).exit_code == 0
    )
    assert (
        runner.invoke(
            main,
            [
                "ingest",
                "--db",
                db,
                "--tenant",
                "acme",
                "--job",
                "chat-api",
                "--window-start",
                START,
                str(samples / "serving_bench.txt"),
            ],
        ).exit_code
        == 0
    )
    for command in (
        ["verify"],
        ["export", "--format", "parquet", "--out", str(tmp_path / "x.parquet")],
        ["reconcile", "--format", "json"],
        ["report", "outcomes"],
    ):
        result = runner.invoke(main, [*command, "--db", db])
        assert result.exit_code == 0, (command, result.output)
    exported = runner.invoke(
        main, ["export", "--db", db, "--type", "inference.window"]
    ).stdout.splitlines()
    assert [orjson.loads(line)["event"]["data"]["concurrency"] for line in exported] == [1, 8, 32]


def test_deeply_nested_json_is_a_quarantined_record_not_a_crash(tmp_path: Path) -> None:
    path = write(
        tmp_path, '{"completed": 1, "duration": 1, "x": ' + "[" * 100_000 + "\n", "deep.json"
    )
    [rejected] = records(path)
    assert isinstance(rejected, Rejected) and (rejected.origin.line, rejected.field) == (
        1,
        "(record)",
    )


# --- canonical bytes of any valid window ----------------------------------------------------

measures = st.builds(
    lambda units, places: str(Decimal(units).scaleb(-places)),
    st.integers(0, 10**15 - 1),
    st.integers(0, 6),
).filter(lambda text: Decimal(text) < 10**15)
distributions = st.dictionaries(
    st.sampled_from(["mean", "p50", "p90", "p95", "p99", "max"]), measures, min_size=1
)


@st.composite
def window_events(draw: st.DrawFn) -> dict[str, Any]:
    requests = draw(st.integers(0, 2**53 - 1))
    accepted = draw(st.integers(0, requests))
    failed = draw(st.none() | st.integers(0, requests - accepted))
    start = draw(
        st.datetimes(
            min_value=datetime(1970, 1, 1),
            max_value=datetime(2026, 1, 1),
            timezones=st.just(timezone.utc),
        )
    )
    end = start + draw(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30)))
    optional = {
        "failed": failed,
        "concurrency": draw(st.none() | st.integers(1, 2**53 - 1)),
        "request_rate": draw(st.none() | st.just("inf") | measures),
        "output_throughput": draw(st.none() | measures),
        "ttft_ms": draw(st.none() | distributions),
        "latency_ms": draw(st.none() | distributions),
        "allocation_id": draw(st.none() | st.just("a1")),
    }
    data = {
        "tenant": "acme",
        "job_id": "j",
        "window_start": start,
        "window_end": end,
        "requests": requests,
        "accepted": accepted,
        **{k: v for k, v in optional.items() if v is not None},
    }
    return {
        "specversion": "1.0",
        "id": "w",
        "source": "serving-bench://acme/j",
        "type": "inference.window",
        "time": end,
        "data": data,
    }


@settings(max_examples=200, deadline=None)
@given(window_events())
def test_any_valid_window_takes_the_reference_bytes_and_reads_back_the_same(
    raw: dict[str, Any],
) -> None:
    event = validate_event(raw)
    body = canonical_event(event)
    assert body == canonical(event_document(event))
    assert canonical_event(validate_event_json(body)) == body


def test_two_trtllm_runs_in_one_log_are_two_windows(tmp_path: Path) -> None:
    def run(requests: int, latency_ms: str, ttft_p99: str) -> str:
        rule = "=" * 59
        return (
            f"{rule}\n= REQUEST DETAILS\n{rule}\nNumber of requests:             "
            f"{requests}\nNumber of concurrent requests:  251.6206\n\n{rule}\n= PERFORMANCE "
            f"OVERVIEW\n{rule}\nRequest Throughput (req/sec):                     0.9765\nTotal "
            f"Latency (ms):                               {latency_ms}\n\n-- Per-Request "
            f"Time-to-First-Token [TTFT] Breakdown (ms)\n\n[TTFT] P99    : {ttft_p99}\n\n"
        )

    text = (
        "[TRT-LLM] [I] Starting benchmark\n"
        + run(256, "2000.5", "12.5")
        + "second run\n"
        + run(512, "1000", "14.25")
    )
    first, second = windows(write(tmp_path, text), window_start=START)
    assert [(e["data"]["requests"], e["data"]["ttft_ms"]) for e in (first, second)] == [
        (256, {"p99": "12.5"}),
        (512, {"p99": "14.25"}),
    ]
    assert (
        first["data"]["window_end"]
        == second["data"]["window_start"]
        == "2025-09-02T13:00:02.000500Z"
    )
    assert second["data"]["window_end"] == "2025-09-02T13:00:03.000500Z"
    assert "concurrency" not in first["data"]  # a measured average, not a stated limit
    back_to_back = windows(
        write(tmp_path, text.replace("second run\n", ""), "b.txt"), window_start=START
    )
    assert [e["data"]["requests"] for e in back_to_back] == [256, 512]
