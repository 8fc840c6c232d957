"""The pages gpuledger writes (finance's page, the envelope, the dispute letter) in Debian's
headless Chromium, driven by Selenium through Debian's chromedriver (nothing downloads a
browser or a driver), at 420 px (a phone) and 1366 px (a laptop):

- the page never scrolls sideways (a wide table or chart scrolls in its own box);
- the headline figures are shown on the first screen and equal the JSON's, worked by hand;
- chart text stays readable (at least 9 px high on screen), and ids do not wrap one
  character per line.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli import main
from ledger import Store
from tests.reconcile_helpers import Scenario, ingest

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium or chromedriver is not on PATH (Debian packages `chromium` and "
    "`chromium-driver`)",
)

WIDTHS = (420, 1366)


def scenario() -> Scenario:
    """INV-1: 8 GPUs billed [10:00, 11:00) for 28.80 ($0.001 a GPU-second) where 4 were
    granted: 4 x 3600 unallocated (provider, 14.40); of the 4 held, the job j1 runs
    [10:20, 10:50) with no progress and no terms (no warm-up allowed): 4 x 1800
    idle_unexplained (disputed, 7.20), the rest idle_reserved (customer, 7.20). INV-2
    (February): 1 GPU on an allocation never granted, 3.60, all unallocated. P1 promised
    j1 a start by 10:05; it started at 10:20: missed."""
    s = Scenario()
    s.add("job.submitted", "09:50", {"job_id": "j1"})
    s.add(
        "policy.promise",
        "09:50",
        {"promise_id": "P1", "job_id": "j1", "start_by": "2026-01-05T10:05:00Z"},
    )
    s.grant("A1", gpus=4, at="10:00")
    s.start("j1", "A1", at="10:20")
    s.complete("j1", at="10:50")
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


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("pages")
    store = Store(f"sqlite:///{tmp / 'ledger.db'}")
    store.init()
    ingest(store, scenario().events)
    url = str(store.url)
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    run("reconcile", "--db", url, "--format", "html", "--out", str(tmp / "finance.html"))
    recon = json.loads(run("reconcile", "--db", url, "--format", "json"))
    run("report", "envelope", "--db", url, "--format", "html", "--out", str(tmp / "env.html"))
    envelope = json.loads(run("report", "envelope", "--db", url, "--format", "json"))
    run("keygen", "--out", str(tmp / "key"))
    run(
        "dispute",
        "--db",
        url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-1",
        "--key",
        str(tmp / "key"),
        "--out",
        str(tmp / "acme.json"),
    )
    store.close()
    return {
        "finance": tmp / "finance.html",
        "envelope": tmp / "env.html",
        "letter": tmp / "acme.letter.html",
        "recon": recon,
        "envelope_doc": envelope,
    }


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tmp_path_factory.mktemp("profile")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=Service(executable_path=str(DRIVER)))
    browser.implicitly_wait(10)  # an element the page brings is waited for, not missed
    try:
        yield browser
    finally:
        browser.quit()


def _open(driver: Any, page: Path, width: int) -> None:
    driver.set_window_size(width, 900)
    driver.get(page.as_uri())


def _no_sideways_scroll(driver: Any) -> None:
    wide, inner = driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert wide <= inner, f"the page scrolls sideways: {wide} > {inner}"


def _figure(driver: Any, name: str) -> str:
    from selenium.webdriver.common.by import By

    element = driver.find_element(By.CSS_SELECTOR, f'[data-figure="{name}"]')
    assert element.is_displayed(), name
    return str(element.text)


def _smallest_svg_text(driver: Any) -> float:
    """The height on screen of the smallest text drawn in an SVG chart, in CSS px."""
    heights = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg text'))"
        ".filter(t => t.textContent.trim()).map(t => t.getBoundingClientRect().height)"
    )
    return float(min(heights)) if heights else 99.0


def _ids_one_char_wide(driver: Any) -> list[str]:
    """Ids (class id) drawn narrower than two characters while holding more: wrapped one
    character per line."""
    found: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll('.id')).filter(e => "
        "e.textContent.trim().length > 2 && e.getClientRects().length && "
        "e.getBoundingClientRect().width < 2 * parseFloat(getComputedStyle(e).fontSize))"
        ".map(e => e.textContent)"
    )
    return found


@pytest.mark.parametrize("width", WIDTHS)
def test_finance_first_screen(pages: dict[str, Any], driver: Any, width: int) -> None:
    _open(driver, pages["finance"], width)
    _no_sideways_scroll(driver)
    # by hand: billed 28.80 + 3.60; credit due 14.40 + 3.60; in dispute 7.20
    assert _figure(driver, "headline/USD/billed") == "32.40 USD"
    assert _figure(driver, "headline/USD/credit_due") == "18.00 USD"
    assert _figure(driver, "headline/USD/in_dispute") == "7.20 USD"
    # and the JSON says the same: provider-borne and disputed amounts of every line
    borne = {"provider": Decimal(0), "disputed": Decimal(0)}
    for line in pages["recon"]["lines"]:
        for cell in line["categories"].values():
            if cell["bearer"] in borne:
                borne[cell["bearer"]] += Decimal(cell["amount"])
    assert f"{borne['provider']:.2f} USD" == _figure(driver, "headline/USD/credit_due")
    assert f"{borne['disputed']:.2f} USD" == _figure(driver, "headline/USD/in_dispute")
    # the credit due is on the first screen (900 px high), not below the tables
    top = driver.execute_script(
        "return document.querySelector('[data-figure=\"headline/USD/credit_due\"]')"
        ".getBoundingClientRect().top"
    )
    assert top < 900
    assert _smallest_svg_text(driver) >= 9
    assert _ids_one_char_wide(driver) == []


@pytest.mark.parametrize("width", WIDTHS)
def test_envelope_first_screen(pages: dict[str, Any], driver: Any, width: int) -> None:
    _open(driver, pages["envelope"], width)
    _no_sideways_scroll(driver)
    # P1 promised a start by 10:05; j1 started 10:20: 1 of 1 missed, on provider `scenario`
    # (the source test://scenario cut to its authority), with the small-sample caveat
    group = pages["envelope_doc"]["groups"][0]
    assert (group["source"], group["promises"]["missed"]) == ("scenario", 1)
    key = f"missed/scenario/{group['placement_class']}"
    assert _figure(driver, key) == "1 of 1"
    assert "† 1 promises" in driver.page_source
    assert _smallest_svg_text(driver) >= 9


@pytest.mark.parametrize("width", WIDTHS)
def test_letter_first_screen(pages: dict[str, Any], driver: Any, width: int) -> None:
    from selenium.webdriver.common.by import By

    _open(driver, pages["letter"], width)
    _no_sideways_scroll(driver)
    request = driver.find_element(By.ID, "request")
    assert request.is_displayed()
    # INV-1: 14.40 provider-borne + 7.20 disputed; L1 ends 2026-01-05T11:00Z, 30 days on
    assert request.text.startswith("Please credit 21.60 USD against invoice INV-1 by 2026-02-04")
    assert _figure(driver, "claimed") == "21.60 USD"
    assert request.rect["y"] < 900
    assert _smallest_svg_text(driver) >= 9  # the timeline keeps its drawn size, and scrolls


#: Elements whose content is cut in print: a box that hides or scrolls what overflows it
#: (a table in a scroll box), and a folded part whose content is not drawn.
_CUT_IN_PRINT = """
const cut = [];
for (const e of document.querySelectorAll('body *')) {
  const style = getComputedStyle(e);
  if (!e.getClientRects().length || style.display === 'none') continue;
  const clips = ['auto', 'scroll', 'hidden'].includes(style.overflowX)
    || ['auto', 'scroll', 'hidden'].includes(style.overflowY);
  if (clips && (e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1)
      && e.tagName !== 'svg' && !e.closest('svg'))
    cut.push(e.tagName + '.' + e.className + ': ' + e.scrollWidth + '>' + e.clientWidth);
}
for (const d of document.querySelectorAll('details')) {
  for (const child of d.children) {
    if (child.tagName === 'SUMMARY') continue;
    if (!child.checkVisibility() || child.getBoundingClientRect().height === 0)
      cut.push('folded: ' + (d.id || d.className || 'details'));
  }
}
return cut;
"""


@pytest.mark.parametrize("name", ["finance", "envelope", "letter"])
def test_on_paper_nothing_is_cut(pages: dict[str, Any], driver: Any, name: str) -> None:
    """Print media emulated (CDP Emulation.setEmulatedMedia) at an A4 page's width (210 mm
    less 2 × 10 mm margins at 96 px an inch: about 718 px): no table or chart is left in a
    box that scrolls or hides, every folded part is drawn unfolded, and the page is no wider
    than the paper. No information is only in a hover title: every title="…" attribute is
    gone from these pages (an SVG <title> repeats a figure drawn beside it)."""
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        _open(driver, pages[name], 718)
        assert driver.execute_script("return matchMedia('print').matches") is True
        assert driver.execute_script(_CUT_IN_PRINT) == []
        _no_sideways_scroll(driver)
        assert driver.execute_script("return document.querySelectorAll('[title]').length") == 0
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


# -- the letter of a demo-sized dispute -------------------------------------------------

#: How tall the letter of the demo's disputes may be at 1366 px, in screens (the window's
#: inner height). The first screen answers the customer's question (the sentence, the
#: request, the totals); the second the summary (per category, the five largest); the rest is
#: one line per finding (acme: 47, about 27 px each) and one row per allocation of the
#: placement claims (acme: 8 rows for 43 lines), everything else folded. Before the folds,
#: acme's letter was 16,599 px: 22 screens of 757 px.
LETTER_SCREENS = 4


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`gpuledger demo`, then acme's dispute of its January invoice (the README's): two
    letters of demo size, acme's (open findings, placement claims on 43 lines) and the one
    the demo writes for deltaml (with the provider's answers)."""
    out = tmp_path_factory.mktemp("demo")
    runner = CliRunner()
    for args in (
        ["demo", "--out", str(out)],
        [
            "dispute",
            "--db",
            f"sqlite:///{out / 'gpuledger.db'}",
            "--tenant",
            "acme",
            "--invoice",
            "INV-202601-acme",
            "--key",
            str(out / "demo-key"),
            "--out",
            str(out / "acme.json"),
        ],
    ):
        result = runner.invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    [deltaml] = out.glob("dispute-deltaml-*.json")
    return {"acme": out / "acme.json", "deltaml": deltaml}


def _usd(amount: Decimal) -> str:
    """Money as the pages write it: cents, half-even, thousands grouped."""
    return f"{amount.quantize(Decimal('0.01'), rounding='ROUND_HALF_EVEN'):,.2f} USD"


def _asked(packet: dict[str, Any]) -> tuple[str, str, str, str]:
    """By hand from the packet's JSON: what the letter asks (the claims added up, the
    placement claims added up exact and rounded once, both) and by when (30 days after the
    invoice's last billed period ends)."""
    from datetime import datetime, timedelta

    claimed = sum((Decimal(c["amount"]) for c in packet["claims"]), Decimal(0))
    placed = sum((Decimal(p["amount_exact"]) for p in packet["placement_claims"]), Decimal(0))
    last = max(line["period_end"] for line in packet["findings"]["lines"])
    due = datetime.fromisoformat(last.replace("Z", "+00:00")) + timedelta(days=30)
    return _usd(claimed + placed), _usd(claimed), _usd(placed), due.date().isoformat()


@pytest.mark.parametrize("tenant", ["acme", "deltaml"])
@pytest.mark.parametrize("width", WIDTHS)
def test_a_demo_sized_letter_is_short_and_says_it_first(
    demo: dict[str, Path], driver: Any, tenant: str, width: int
) -> None:
    from selenium.webdriver.common.by import By

    packet = json.loads(demo[tenant].read_text())
    _open(driver, demo[tenant].with_suffix(".letter.html"), width)
    _no_sideways_scroll(driver)
    assert driver.execute_script(_OVERFLOWING) == []
    assert _ids_one_char_wide(driver) == []
    screen = driver.execute_script("return window.innerHeight")
    # the request, its figures the packet's, on the first screen at either width
    total, claimed, placed, due = _asked(packet)
    request = driver.find_element(By.ID, "request")
    assert request.rect["y"] + request.rect["height"] <= screen
    assert " ".join(request.text.split()) == (
        f"Please credit {total} ({claimed} disputed below and {placed} for placement not as "
        f"sold) against invoice {packet['invoice_id']} by {due}, or answer each finding below "
        "with the evidence you rely on."
    )
    if width < 1366:
        return
    height = driver.execute_script("return document.documentElement.scrollHeight")
    assert height <= LETTER_SCREENS * screen, f"{height} px > {LETTER_SCREENS} x {screen}"
    figures = driver.find_element(By.ID, "totals")
    assert figures.rect["y"] + figures.rect["height"] <= screen
    assert (_figure(driver, "claimed"), _figure(driver, "placement")) == (claimed, placed)
    # the summary: per category and bearer, the packet's claims added up
    by_category: dict[str, Decimal] = {}
    for c in packet["claims"]:
        key = f"USD/{c['category']}/{c['bearer']}"
        by_category[key] = by_category.get(key, Decimal(0)) + Decimal(c["amount"])
    shown = driver.execute_script(
        "return Object.fromEntries(Array.from(document.querySelectorAll("
        "'[data-category-amount]')).map(e => [e.dataset.categoryAmount, e.textContent]))"
    )
    assert shown == {key: _usd(amount) for key, amount in by_category.items()}
    # every finding is one line, folded, and all of them add up to the claims
    amounts = driver.execute_script(
        "return Array.from(document.querySelectorAll('details.finding'))"
        ".map(d => [d.dataset.amount, d.open, d.querySelector('summary').offsetHeight])"
    )
    assert sum(Decimal(a) for a, _, _ in amounts) == sum(
        Decimal(c["amount"]) for c in packet["claims"]
    )
    assert not any(opened for _, opened, _ in amounts)
    assert max(tall for _, _, tall in amounts) < 2 * 24  # one line of 15 px text
    # the placement claims, one row per allocation: its lines' exact claims, rounded once
    groups: dict[str, Decimal] = {}
    for p in packet["placement_claims"]:
        groups[p["allocation_id"]] = groups.get(p["allocation_id"], Decimal(0)) + Decimal(
            p["amount_exact"]
        )
    rows = driver.execute_script(
        "return Object.fromEntries(Array.from(document.querySelectorAll("
        "'[data-placement-group]')).map(e => [e.dataset.placementGroup, e.textContent]))"
    )
    assert rows == {allocation: _usd(amount) for allocation, amount in groups.items()}
    # a link from the summary opens the finding it names (no script: the browser reveals it)
    link = driver.find_element(By.CSS_SELECTOR, "#largest a")
    number = link.text
    link.click()
    assert driver.execute_script(f"return document.getElementById('finding-{number}').open")


#: Every element whose content is wider than its box, other than a scroll box on purpose
#: (page.css: a table, a chart) and SVG's insides.
_OVERFLOWING = """
return Array.from(document.querySelectorAll('body *')).filter(e => {
  if (e.closest('svg') || e.clientWidth === 0) return false;
  const x = getComputedStyle(e).overflowX;
  return x !== 'auto' && x !== 'scroll' && e.scrollWidth > e.clientWidth + 1;
}).map(e => e.tagName + '.' + e.className + ' ' + e.scrollWidth + '>' + e.clientWidth);
"""


@pytest.mark.parametrize("tenant", ["acme", "deltaml"])
def test_a_demo_sized_letter_on_paper_prints_every_fold(
    demo: dict[str, Path], driver: Any, tenant: str
) -> None:
    """As test_on_paper_nothing_is_cut, on the demo's letters: every finding, rule, piece of
    evidence and placement line is drawn, none only in a hover title."""
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        _open(driver, demo[tenant].with_suffix(".letter.html"), 718)
        assert driver.execute_script(_CUT_IN_PRINT) == []
        _no_sideways_scroll(driver)
        assert driver.execute_script("return document.querySelectorAll('[title]').length") == 0
        lines = driver.execute_script(
            "return Array.from(document.querySelectorAll('tr.placement'))"
            ".filter(r => r.getBoundingClientRect().height > 0).length"
        )
        assert lines == len(json.loads(demo[tenant].read_text())["placement_claims"])
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


# -- chart labels: a long one is a key, written out under its chart ------------------------

LONG_INVOICE = "INV-2026-01-acme-research-cluster-east"


@pytest.fixture(scope="module")
def long_labels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 1-GPU hour billed 3.60 on an invoice whose chart label, `acme / ` and its id,
    is 45 characters: more than a chart's label column holds (30)."""
    tmp = tmp_path_factory.mktemp("long")
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=1, amount="3.60", invoice=LONG_INVOICE)
    store = Store(f"sqlite:///{tmp / 'ledger.db'}")
    store.init()
    ingest(store, s.events)
    url = str(store.url)
    store.close()
    args = ["reconcile", "--db", url, "--format", "html", "--out", str(tmp / "finance.html")]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return tmp / "finance.html"


@pytest.mark.parametrize(("media", "width"), [("screen", 420), ("screen", 1366), ("print", 718)])
def test_a_long_chart_label_is_written_out_under_its_chart(
    long_labels: Path, driver: Any, width: int, media: str
) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"media": "" if media == "screen" else "print"}
    )
    try:
        _open(driver, long_labels, width)
        _no_sideways_scroll(driver)
        labels = driver.execute_script(
            "return Array.from(document.querySelectorAll('svg.bars .bar-label'))"
            ".map(t => t.childNodes[0].textContent)"
        )
        # by hand: "[1] " and the label's first 25 characters and "…": 30 characters
        label = f"acme / {LONG_INVOICE}"
        assert f"[1] {label[:25]}…" in labels and all(len(text) <= 30 for text in labels)
        keys = driver.execute_script(
            "return Array.from(document.querySelectorAll('ul.chart-keys li'))"
            ".filter(li => li.getBoundingClientRect().height > 0).map(li => li.textContent)"
        )
        # the per-invoice charts (money, and provider-borne and disputed) each have its key
        assert keys == [f"[1] {label}", f"[1] {label}"]
        assert driver.execute_script(_OVERFLOWING) == []
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
