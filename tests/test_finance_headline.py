"""The finance page opens with what finance needs first: per currency and per invoice, the
money billed, the credit due (provider-borne) and the amount in dispute, and month over
month; every amount shown to a person is rounded to the cent. Figures worked by hand from
reconcile/RULES.md ($0.001 a GPU-second)."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from cli import main
from ledger import Store
from reconcile.reports.numbers import duration, percent, rate
from tests.reconcile_helpers import Scenario, ingest


def scenario() -> Scenario:
    """INV-1: 8 GPUs billed [10:00, 11:00) on 2026-01-05 for 28.80 where 4 were granted:
    4 x 3600 idle_reserved (customer, 14.40) and 4 x 3600 unallocated (provider, 14.40).
    INV-2: 1 GPU billed [10:00, 11:00) on 2026-02-02 naming an allocation never granted: 3600 GPU-s
    unallocated, 3.60, all provider-borne."""
    s = Scenario()
    s.grant("A1", gpus=4, at="10:00")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")
    s.line(
        "L2",
        "A9",
        "2026-02-02T10:00:00Z",
        "2026-02-02T11:00:00Z",
        gpus=1,
        amount="3.60",
        invoice="INV-2",
    )
    return s


def page(tmp_path: Path) -> str:
    store = Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    store.init()
    ingest(store, scenario().events)
    out = tmp_path / "finance.html"
    result = CliRunner().invoke(
        main,
        ["reconcile", "--db", str(store.url), "--format", "html", "--out", str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return out.read_text()


def figure(html: str, name: str) -> str:
    found = re.findall(rf'data-figure="{re.escape(name)}">([^<]*)<', html)
    assert len(found) == 1, (name, found)
    return str(found[0])


def test_the_first_screen_says_what_to_claim(tmp_path: Path) -> None:
    html = page(tmp_path)
    # billed 28.80 + 3.60 = 32.40; credit due 14.40 + 3.60 = 18.00; nothing disputed
    assert figure(html, "headline/USD/billed") == "32.40 USD"
    assert figure(html, "headline/USD/credit_due") == "18.00 USD"
    assert figure(html, "headline/USD/in_dispute") == "0.00 USD"
    assert figure(html, "headline/USD/share") == "55.56 %"  # 18.00 / 32.40
    # the headline comes before the legend and the long invoice tables
    assert html.index('id="at-a-glance"') < html.index("<h2>Categories</h2>")
    # month over month: January 28.80 billed, 14.40 due; February 3.60, 3.60
    assert figure(html, "month/USD/2026-01/billed") == "28.80"
    assert figure(html, "month/USD/2026-01/credit_due") == "14.40"
    assert figure(html, "month/USD/2026-02/billed") == "3.60"
    assert figure(html, "month/USD/2026-02/credit_due") == "3.60"
    # per invoice, the most to claim first: INV-1 (14.40) before INV-2 (3.60)
    assert figure(html, "headline-invoice/acme/INV-1/USD/credit_due") == "14.40"
    assert figure(html, "headline-invoice/acme/INV-2/USD/credit_due") == "3.60"
    assert html.index("headline-invoice/acme/INV-1/") < html.index("headline-invoice/acme/INV-2/")


def test_billed_is_shown_to_the_cent(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    store.init()
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=1, amount="2468.4564")
    ingest(store, s.events)
    runner = CliRunner()
    table = runner.invoke(main, ["reconcile", "--db", str(store.url)], catch_exceptions=False)
    assert "2,468.46" in table.output and "2,468.4564" not in table.output
    out = tmp_path / "f.html"
    runner.invoke(
        main, ["reconcile", "--db", str(store.url), "--format", "html", "--out", str(out)]
    )
    html = out.read_text()
    assert figure(html, "invoice/acme/INV-1/USD/billed") == "2,468.46"
    assert "2,468.4564" not in html


def test_explain_opens_with_a_plain_sentence_then_the_rule() -> None:
    out = CliRunner().invoke(main, ["explain", "unallocated"]).output
    lines = out.splitlines()
    assert lines[0].startswith("unallocated")
    assert lines[1].strip().startswith("Billed GPU time the customer was never given")
    assert out.index("never given") < out.index("the rule, decided by") < out.index("(g_b")


def test_one_format_per_kind_of_figure() -> None:
    assert percent(0.023444) == "2.34 %"
    assert percent(1) == "100.00 %"
    assert rate(0) == "0.0000" and rate(0.11666) == "0.1167"
    # 128303 s = 1 d (86400) + 11 h (39600) + 38 min 23 s: the two largest units
    assert duration(128303) == "1 d 11 h"
    assert duration(4320) == "1 h 12 min"
    assert duration(3600) == "1 h"
    assert duration(95) == "1 min 35 s"
    assert duration(-300) == "−5 min"
    assert duration(None) == "–"
