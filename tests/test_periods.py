"""Periods (`--since`, `--until`): what each thing is filtered by, worked out by hand from
reconcile/RULES.md "Periods".

- a billing line is in a period when its billed interval starts in it, whole;
- unbilled time is the held time inside the period that no billed piece covers;
- a job is in a period by its submission (else its first start); a promise by `start_by`.

Lines cost $0.001 a GPU-second (GPU-seconds / 1000).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli import main
from ledger import Store
from reconcile import reconcile_store
from reconcile.engine.figures import parse_time
from reconcile.engine.scope import Period, ScopeError
from tests.reconcile_helpers import Scenario, ingest, when


def two_hours() -> Scenario:
    """8 GPUs held [10:00, 12:30); L1 bills [10:00, 11:00), L2 [11:00, 12:00) (INV-1),
    L3 [12:00, 12:30) on INV-2; a job asked for at 09:55 and one at 11:10, each promised."""
    s = Scenario()
    s.grant("A1", gpus=8, at="10:00")
    s.add("job.submitted", "09:55", {"job_id": "j1"})
    s.add(
        "policy.promise", "09:55", {"promise_id": "P1", "job_id": "j1", "start_by": when("10:05")}
    )
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:01", "10:02")
    s.complete("j1", at="10:30")
    s.add("job.submitted", "11:10", {"job_id": "j2"})
    s.add(
        "policy.promise", "11:10", {"promise_id": "P2", "job_id": "j2", "start_by": when("11:15")}
    )
    s.start("j2", "A1", at="11:20")  # five minutes late: P2 missed
    s.steps("j2", "11:21", "11:22")
    s.complete("j2", at="12:00")
    s.release("A1", at="12:30")
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")
    s.line("L2", "A1", "11:00", "12:00", gpus=8, amount="28.80")
    s.line("L3", "A1", "12:00", "12:15", gpus=8, amount="7.20", invoice="INV-2")
    return s


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    st = Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    st.init()
    ingest(st, two_hours().events)
    return st


def period(since: str | None = None, until: str | None = None) -> Period:
    return Period(
        parse_time(when(since)) if since else None, parse_time(when(until)) if until else None
    )


def figures(store: Store, p: Period) -> tuple[list[str], int, int]:
    doc: dict[str, Any] = reconcile_store(store, period=p).as_json()
    t = doc["tenants"]["acme"] if doc["tenants"] else {}
    return (
        [ln["line_id"] for ln in doc["lines"]],
        t.get("billed_gpu_seconds", 0),
        t.get("unbilled_gpu_seconds", 0),
    )


def test_lines_by_the_start_of_their_billed_interval(store: Store) -> None:
    # all time: billed 8 x (3600 + 3600 + 900) = 64800; held 8 x 9000 = 72000; unbilled 7200
    assert figures(store, Period()) == (["L1", "L2", "L3"], 64800, 7200)
    # [11:00, +inf): L2 and L3 (L1 starts at 10:00); billed 8 x 4500 = 36000;
    # held in the period 8 x [11:00, 12:30) = 43200; unbilled 43200 - 36000 = 7200
    assert figures(store, period("11:00")) == (["L2", "L3"], 36000, 7200)
    # [-inf, 11:00): L1 only; held 8 x [10:00, 11:00) = 28800, all billed
    assert figures(store, period(until="11:00")) == (["L1"], 28800, 0)
    # [10:30, 12:00): L2 only (L1 starts before, L3 at the end, which is outside);
    # a line is whole: its 28800 GPU-s count, not the part inside
    assert figures(store, period("10:30", "12:00"))[:2] == (["L2"], 28800)


def test_the_months_add_up_to_the_whole(store: Store) -> None:
    whole = reconcile_store(store).as_json()["lines"]
    parts = [
        reconcile_store(store, period=p).as_json()["lines"]
        for p in (period(until="11:00"), period("11:00", "12:00"), period("12:00"))
    ]
    assert sorted(ln["line_id"] for part in parts for ln in part) == sorted(
        ln["line_id"] for ln in whole
    )
    # each line's money is the same as in the whole: rounding is per invoice, before the cut
    money = {ln["line_id"]: json.dumps(ln, sort_keys=True) for ln in whole}
    for part in parts:
        for ln in part:
            assert json.dumps(ln, sort_keys=True) == money[ln["line_id"]]


def test_promises_by_their_promised_start(store: Store) -> None:
    runner = CliRunner()
    url = str(store.url)
    args = ["report", "promises", "--db", url, "--format", "json"]
    every = json.loads(runner.invoke(main, args, catch_exceptions=False).output)
    # P1 due 10:05, P2 due 11:15
    assert sorted(p["promise_id"] for p in every["promises"]) == ["P1", "P2"]
    late = json.loads(
        runner.invoke(main, [*args, "--since", when("11:00")], catch_exceptions=False).output
    )
    assert [p["promise_id"] for p in late["promises"]] == ["P2"]
    early = json.loads(
        runner.invoke(main, [*args, "--until", when("11:15")], catch_exceptions=False).output
    )
    assert [p["promise_id"] for p in early["promises"]] == ["P1"]  # until is exclusive


def test_jobs_by_their_submission(store: Store) -> None:
    runner = CliRunner()
    url = str(store.url)
    args = ["report", "outcomes", "--db", url, "--format", "json"]
    every = json.loads(runner.invoke(main, args, catch_exceptions=False).output)
    assert sorted(j["job_id"] for j in every["jobs"]) == ["j1", "j2"]
    # j1 asked for at 09:55, j2 at 11:10: [10:00, +inf) holds j2 only (though j1 runs in it)
    late = json.loads(
        runner.invoke(main, [*args, "--since", when("10:00")], catch_exceptions=False).output
    )
    assert [j["job_id"] for j in late["jobs"]] == ["j2"]


def test_reconcile_command_takes_a_period(store: Store) -> None:
    runner = CliRunner()
    url = str(store.url)
    out = runner.invoke(
        main,
        ["reconcile", "--db", url, "--format", "json", "--since", when("11:00")],
        catch_exceptions=False,
    ).output
    assert [ln["line_id"] for ln in json.loads(out)["lines"]] == ["L2", "L3"]
    empty = runner.invoke(
        main, ["reconcile", "--db", url, "--since", when("11:00"), "--until", when("11:00")]
    )
    assert empty.exit_code == 2
    assert "--since: not before --until" in empty.output
    bad = runner.invoke(main, ["reconcile", "--db", url, "--until", "yesterday"])
    assert bad.exit_code == 2 and "--until: not an RFC 3339 time" in bad.output


def test_an_empty_period_is_an_error_naming_its_parameter() -> None:
    with pytest.raises(ScopeError) as caught:
        Period(5, 5)
    assert caught.value.option == "since"
    assert Period(None, 5).holds(4) and not Period(None, 5).holds(5)
    assert "--" not in str(caught.value)


def test_the_finance_page_says_its_period_and_its_figures_are_the_periods(
    store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "f.html"
    CliRunner().invoke(
        main,
        ["reconcile", "--db", str(store.url), "--format", "html", "--out", str(out)]
        + ["--since", when("11:00")],
        catch_exceptions=False,
    )
    page = out.read_text()
    assert 'data-figure="period">[2026-01-05T11:00:00Z, +∞)<' in page
    # L2 28.80 and L3 7.20 ($0.001 a GPU-second: 8 x 3600 and 8 x 900); L1 is before
    assert 'data-figure="headline/USD/billed">36.00 USD<' in page
