"""One number format per kind of figure (docs/reports.md, "Number formats"): the same
figure read back from the terminal table, the JSON, the CSV and the page of one report,
each in its documented form, and compared.

- money: JSON and CSV carry the amount at its minor unit ("1440.00"); people read it
  thousands separated ("1,440.00");
- a ratio (checkpoint overhead, a miss rate): JSON and CSV a ratio 0 to 1 in a field named
  `ratio` / `checkpoint_ratio`, or the counts it divides; people read a percentage with two
  decimals ("2.50 %");
- a rate (restarts per started job): JSON and CSV a ratio rounded to 4 places
  (`restart_rate`); people read four fixed decimals ("0.0000", never "0.0");
- a duration: JSON and CSV whole seconds (`*_s`); the terminal keeps seconds (its header
  says `s`); pages show the two largest units ("20 min").

The ledgers are hand-worked: the envelope's is tests/test_envelope.py's two providers (its
comments work out every figure); the reconciliation's is worked below. Every expected
text here is written by hand from those figures and the rules above."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.reconcile_helpers import Scenario, ingest
from tests.test_envelope import PA, PB, ledger, two_providers


def _wide(*args: str) -> str:
    """The terminal table, wide enough that rich wraps no cell."""
    code, out, err = run_cli(*args)
    assert code == 0, err
    return out


def _text_of(page: str) -> str:
    """The page's visible text, tags dropped and entities read, spaces collapsed."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


@pytest.fixture(scope="module")
def envelope(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: Any) -> dict[str, Any]:
    url = ledger(tmp_path_factory.mktemp("formats"), two_providers())
    out: dict[str, Any] = {}
    for fmt in ("json", "csv", "html", "table"):
        out[fmt] = _wide("report", "envelope", "--db", url, "--format", fmt)
    return out


@pytest.fixture(scope="module")
def monkeypatch_module() -> Any:
    """A wide terminal for rich (COLUMNS), for the whole module."""
    mp = pytest.MonkeyPatch()
    mp.setenv("COLUMNS", "400")
    yield mp
    mp.undo()


#: Per group (source, class), by hand (tests/test_envelope.py's comments):
#: restarts/started, checkpoint s/billed s, missed/decided (None: no promise),
#: start wait p95 s, cost per completed run.
GROUPS = {
    # one restart of 4 started; 180 of 7200 s checkpointing; A4 missed of 4; waits
    # 120 240 360 1200 → p95 1200 s; 3.00 per run
    (PA, "whole"): ((1, 4), (180, 7200), (1, 4), 1200, "3.00"),
    # B3: no restart of 1; no checkpoint of 1800 s; no promise; 900 s wait; 1.00
    (PB, "timeslice"): ((0, 1), (0, 1800), None, 900, "1.00"),
    # B1 and B2 each restarted once; no checkpoint of 3600 s; both met; 60 180 → 180 s; 2.00
    (PB, "whole"): ((2, 2), (0, 3600), (0, 2), 180, "2.00"),
}

#: The same figures as people read them (percent: two decimals; rate: four; the page's
#: durations: two largest units), written by hand.
PEOPLE = {
    (PA, "whole"): ("0.2500", "2.50 %", "25.00 % (1 of 4)", "20 min", "3.00 USD"),
    (PB, "timeslice"): ("0.0000", "0.00 %", None, "15 min", "1.00 USD"),
    (PB, "whole"): ("1.0000", "0.00 %", "0.00 % (0 of 2)", "3 min", "2.00 USD"),
}


def test_json_keeps_ratios_rates_seconds_and_minor_units(envelope: dict[str, Any]) -> None:
    groups = {
        (g["source"], g["placement_class"]): g for g in json.loads(envelope["json"])["groups"]
    }
    assert list(groups) == list(GROUPS)
    for key, (restarts, ckpt, missed, wait, cost) in GROUPS.items():
        g = groups[key]
        assert (g["restarts"], g["started"]) == restarts
        assert g["restart_rate"] == restarts[0] / restarts[1]  # 0.25, 0.0, 1.0: exact here
        assert g["checkpoint_overhead"] == {
            "checkpoint_gpu_seconds": ckpt[0],
            "billed_gpu_seconds": ckpt[1],
            "ratio": ckpt[0] / ckpt[1],  # 0.025, 0.0, 0.0
        }
        if missed is None:
            assert g["promises"] is None
        else:
            p = g["promises"]
            assert (p["missed"], p["met"] + p["missed"]) == missed
        assert g["start_wait_s"]["p95"] == wait  # whole seconds
        assert g["cost"]["USD"]["cost_per_completed_run"] == cost  # minor unit, no separator


def test_csv_has_the_json_s_figures_under_their_ratio_and_seconds_names(
    envelope: dict[str, Any],
) -> None:
    rows = {
        (r["source"], r["placement_class"]): r
        for r in csv.DictReader(io.StringIO(envelope["csv"]))
    }
    assert list(rows) == list(GROUPS)
    for key, (restarts, ckpt, missed, wait, cost) in GROUPS.items():
        r = rows[key]
        assert float(r["restart_rate"]) == restarts[0] / restarts[1]
        assert float(r["checkpoint_ratio"]) == ckpt[0] / ckpt[1]
        assert (int(r["checkpoint_gpu_seconds"]), int(r["billed_gpu_seconds"])) == ckpt
        if missed is not None:
            decided = int(r["promise_met"]) + int(r["promise_missed"])
            assert (int(r["promise_missed"]), decided) == missed
        assert r["start_wait_s_p95"] == str(wait)
        assert r["cost_per_completed_run"] == cost


def _terminal_rows(table: str) -> dict[tuple[str, str], list[str]]:
    """The envelope table's rows by (source, class), cells split on rich's │."""
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) > 2 and (cells[0], cells[1]) in GROUPS:
            rows[(cells[0], cells[1])] = cells
    return rows


def test_the_terminal_shows_percent_rate_and_seconds(envelope: dict[str, Any]) -> None:
    rows = _terminal_rows(envelope["table"])
    assert list(rows) == list(GROUPS)
    # columns: source, class, jobs, start wait p95 s, start p95, completion p95, missed,
    # misses by cause, restarts/started, checkpoint overhead, cost / run, cost / result
    for key, (rate, ckpt, missed, _, cost) in PEOPLE.items():
        cells = rows[key]
        restarts = GROUPS[key][0]
        assert cells[8] == f"{rate} ({restarts[0]}/{restarts[1]})"
        assert cells[9] == ckpt
        assert cells[6] == (missed or "–")
        assert cells[3] == str(GROUPS[key][3])  # the header says s: seconds
        assert cells[10] == cost


def test_the_page_shows_percent_rate_and_durations(envelope: dict[str, Any]) -> None:
    text = _text_of(envelope["html"])
    for rate, ckpt, missed, wait, cost in PEOPLE.values():
        for shown in (rate, ckpt, wait, cost, *([missed] if missed else [])):
            assert shown in text, shown
    # no figure in another kind's format: no bare ratio, no "0.0" rate, no raw seconds (an
    # axis tick such as "0.0 %" is a percentage, rounded to the axis' step)
    assert not re.search(r"(?<![\d.,])0\.0(?![\d]| %)", text)
    assert "0.025" not in text and "1200 s" not in text and "1,200 s" not in text


# -- money: the reconciliation in the terminal, JSON, CSV and on the finance page --------


def money_scenario() -> Scenario:
    """INV-1: 8 GPUs billed [10:00, 11:00) for 2,880.00 ($0.10 a GPU-second) where 4 were
    granted: 4 × 3600 unallocated (provider, 1,440.00). Of the 4 held from 10:00: startup
    from the grant for the default 600 s warm-up allowance, 4 × 600 (customer, 240.00); no
    attempt running [10:10, 10:20) and [10:50, 11:00), 4 × 1200 idle_reserved (customer,
    480.00); j1 runs [10:20, 10:50) with no progress, 4 × 1800 idle_unexplained (disputed,
    720.00). 14,400 + 2,400 + 4,800 + 7,200 = 28,800 GPU-seconds billed."""
    s = Scenario()
    s.add("job.submitted", "09:50", {"job_id": "j1"})
    s.grant("A1", gpus=4, at="10:00")
    s.start("j1", "A1", at="10:20")
    s.complete("j1", at="10:50")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="2880.00")
    return s


#: category: (GPU-seconds, the JSON's amount, as people read it)
MONEY = {
    "unallocated": (14_400, "1440.00", "1,440.00"),
    "startup": (2_400, "240.00", "240.00"),
    "idle_reserved": (4_800, "480.00", "480.00"),
    "idle_unexplained": (7_200, "720.00", "720.00"),
}


@pytest.fixture(scope="module")
def finance(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: Any) -> dict[str, Any]:
    from ledger import Store

    tmp: Path = tmp_path_factory.mktemp("money")
    store = Store(f"sqlite:///{tmp / 'ledger.db'}")
    store.init()
    ingest(store, money_scenario().events)
    url = str(store.url)
    return {
        fmt: _wide("reconcile", "--db", url, "--format", fmt)
        for fmt in ("json", "csv", "html", "table")
    }


def test_money_is_one_figure_in_every_output(finance: dict[str, Any]) -> None:
    doc = json.loads(finance["json"])
    categories = doc["tenants"]["acme"]["categories"]
    for name, (gpu_s, amount, _) in MONEY.items():
        assert (categories[name]["gpu_seconds"], categories[name]["amount"]) == (gpu_s, amount)
    rows = list(csv.DictReader(io.StringIO(finance["csv"])))
    by_category: dict[str, str] = {}
    for r in rows:
        by_category[r["category"]] = r["amount"]
    for name, (_, amount, _) in MONEY.items():
        assert by_category[name] == amount  # machine: no separator
    table, page = finance["table"], _text_of(finance["html"])
    for _, _, people in MONEY.values():
        assert people in table and people in page
    # people never read 1440.00 nor 2880.00 without the separator
    for shown in (table, page):
        assert "1440.00" not in shown and "2880.00" not in shown
        assert "2,880.00" in shown
