"""Finance's views of a reconciliation: each line's billed amount, period, description and
exact amounts (JSON, CSV, Parquet), the table that leads with each invoice's total,
`gpuledger explain`, and the HTML page, rendered in headless Chromium.

Every expected figure is worked by hand from reconcile/RULES.md. The two scenarios:

**Cents** (one invoice, INV-1, USD). acme holds A1 (4 GPUs) 10:00–11:00 and runs j1 on it
from 10:00: progress every 5 minutes from 10:10 to 10:50, complete at 10:50.
  L1 bills A1 4 GPUs 10:00–11:00 for 0.735 (14,400 GPU-s):
    startup        [10:00, 10:10)  2,400 GPU-s → 0.735 × 2400/14400 = 0.1225
    productive     [10:10, 10:50)  9,600 GPU-s → 0.735 × 9600/14400 = 0.49
    idle_reserved  [10:50, 11:00)  2,400 GPU-s → 0.1225
  L2 is money only (no allocation, 0 GPUs) for 0.735.
  Invoice: 0.735 + 0.735 = 1.470 → 1.47. Each line rounds half-even to 0.74 (73.5 cents
  → 74), 1.48 in all: one cent comes back from the lines that rounded up, equal
  remainders, so from the earlier line, L1: L1 0.73, L2 0.74. L1's cells floor to
  12 + 49 + 12 = 73 cents: nothing left over, so 0.12, 0.49, 0.12, which add up to 0.73,
  while their exact amounts 0.1225 + 0.490 + 0.1225 add up to 0.735 as billed.

**Findings** (two tenants, one day, USD).
  acme: A1 as above, but L1 bills 6 GPUs 10:00–11:00 for 21.60 (21,600 GPU-s, 3.60 a GPU-h):
    unallocated (6 − 4) × 3600 = 7,200 GPU-s → 7.20 (provider); startup 2,400 → 2.40;
    productive 9,600 → 9.60; idle_reserved 2,400 → 2.40. Invoice INV-1: 21.60.
  beta: B1 (2 GPUs) 10:00–12:00, job k1 started at 10:00, never progresses; L2 bills
    2 GPUs 10:00–12:00 for 14.40 (14,400 GPU-s), invoice INV-2:
    startup [10:00, 10:10) 1,200 GPU-s → 1.20; idle_unexplained [10:10, 12:00)
    13,200 GPU-s → 13.20 (disputed).
  The day: 6 + 4 = 10.00 GPU-h and 36.00 USD. Largest findings: beta's 13.20
  idle_unexplained, then acme's 7.20 unallocated.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli import main
from ledger import Appender, Store
from reconcile.engine.money import exact_shares
from schemas import Accepted, Origin, canonical
from tests.reconcile_helpers import Scenario, ingest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium")


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def _job_on_a1(s: Scenario) -> None:
    s.grant("A1", gpus=4, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:10", "10:15", "10:20", "10:25", "10:30", "10:35", "10:40", "10:45", "10:50")
    s.complete("j1", at="10:50")
    s.release("A1", at="11:00")


def _url(tmp_path: Path, s: Scenario) -> str:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    store = Store(url)
    store.init()
    ingest(store, s.events)
    store.close()
    return url


def _older_url(tmp_path: Path, s: Scenario) -> str:
    """A ledger written before ingest bounded amounts (docs/canonical-and-bounds.md: at most
    11 places, below 10^7): such lines are still stored, so they go in past the validators."""
    url = f"sqlite:///{tmp_path / 'older.db'}"
    store = Store(url)
    store.init()
    Appender(store).append(
        [
            Accepted(
                e["source"],
                e["id"],
                e["type"],
                e["data"]["tenant"],
                canonical(e),
                Origin("older", n),
            )
            for n, e in enumerate(s.events, start=1)
        ]
    )
    store.close()
    return url


@pytest.fixture
def cents(tmp_path: Path) -> str:
    s = Scenario()
    _job_on_a1(s)
    s.line("L1", "A1", "10:00", "11:00", gpus=4, amount="0.735")
    s.events[-1]["data"]["description"] = "4 x H100 on A1"
    s.line("L2", None, "10:00", "11:00", gpus=0, amount="0.735", category="adjustment")
    return _url(tmp_path, s)


@pytest.fixture
def findings(tmp_path: Path) -> str:
    s = Scenario()
    _job_on_a1(s)
    s.line("L1", "A1", "10:00", "11:00", gpus=6, amount="21.60")
    s.grant("B1", gpus=2, at="10:00", node="n2", tenant="beta")
    s.start("k1", "B1", at="10:00", tenant="beta")
    s.release("B1", at="12:00", tenant="beta")
    s.line("L2", "B1", "10:00", "12:00", gpus=2, amount="14.40", invoice="INV-2", tenant="beta")
    return _url(tmp_path, s)


# -- each line's billed amount, period, description and exact amounts ---------------------


def test_json_lines_carry_billed_amount_period_description_and_exact_amounts(cents: str) -> None:
    code, out, _ = invoke("reconcile", "--db", cents, "--format", "json")
    assert code == 0
    lines = {line["line_id"]: line for line in json.loads(out)["lines"]}
    l1, l2 = lines["L1"], lines["L2"]
    assert (l1["billed_amount"], l1["amount"], l2["billed_amount"], l2["amount"]) == (
        "0.735",
        "0.73",
        "0.735",
        "0.74",
    )
    assert (l1["period_start"], l1["period_end"]) == (
        "2026-01-05T10:00:00Z",
        "2026-01-05T11:00:00Z",
    )
    assert (l1["description"], l2["description"]) == ("4 x H100 on A1", None)
    got = {c: (v["amount"], v["amount_exact"]) for c, v in l1["categories"].items()}
    assert got == {
        "startup": ("0.12", "0.1225"),
        "productive": ("0.49", "0.490"),
        "idle_reserved": ("0.12", "0.1225"),
    }
    assert l2["categories"] == {
        "money_only": {
            "gpu_seconds": 0,
            "amount": "0.74",
            "amount_exact": "0.735",
            "bearer": "customer",
        }
    }
    # rounded amounts add up to the line as rounded within
    # the invoice, exact ones to the line as billed
    assert sum(Decimal(v["amount"]) for v in l1["categories"].values()) == Decimal("0.73")
    assert sum(Decimal(v["amount_exact"]) for v in l1["categories"].values()) == Decimal("0.735")


def test_csv_rows_carry_the_line_and_its_exact_amount(cents: str) -> None:
    code, out, _ = invoke("reconcile", "--db", cents, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    got = {
        (r["line_id"], r["category"]): (
            r["billed_amount"],
            r["period_start"],
            r["period_end"],
            r["description"],
            r["amount"],
            r["amount_exact"],
        )
        for r in rows
    }
    period = ("2026-01-05T10:00:00Z", "2026-01-05T11:00:00Z")
    assert got == {
        ("L1", "startup"): ("0.735", *period, "4 x H100 on A1", "0.12", "0.1225"),
        ("L1", "productive"): ("0.735", *period, "4 x H100 on A1", "0.49", "0.490"),
        ("L1", "idle_reserved"): ("0.735", *period, "4 x H100 on A1", "0.12", "0.1225"),
        ("L2", "money_only"): ("0.735", *period, "", "0.74", "0.735"),
    }


def test_parquet_rows_carry_the_same(cents: str, tmp_path: Path) -> None:
    target = tmp_path / "out.parquet"
    code, _, _ = invoke("reconcile", "--db", cents, "--format", "parquet", "--out", str(target))
    assert code == 0
    got = {
        (r["line_id"], r["category"]): (r["billed_amount"], r["description"], r["amount_exact"])
        for r in pq.read_table(target).to_pylist()
    }
    assert got == {
        ("L1", "startup"): ("0.735", "4 x H100 on A1", "0.1225"),
        ("L1", "productive"): ("0.735", "4 x H100 on A1", "0.490"),
        ("L1", "idle_reserved"): ("0.735", "4 x H100 on A1", "0.1225"),
        ("L2", "money_only"): ("0.735", None, "0.735"),
    }


def test_a_focus_line_is_described_by_its_charge_description(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    sample = ROOT / "fixtures" / "samples" / "focus.csv"
    code, _, err = invoke("ingest", "--db", url, "--format", "focus", str(sample))
    assert code == 0, err
    code, out, _ = invoke("reconcile", "--db", url, "--format", "json")
    assert code == 0
    with sample.open(newline="") as handle:
        expected = sorted(
            (row["ChargePeriodStart"], row["BilledCost"], row["ChargeDescription"])
            for row in csv.DictReader(handle)
        )
    got = sorted(
        (line["period_start"], line["billed_amount"], line["description"])
        for line in json.loads(out)["lines"]
    )
    assert got == expected and len(got) == 5


@pytest.mark.parametrize(
    ("billed", "weights", "minor", "expected"),
    [
        # 0.735 × 1/6, 4/6, 1/6: exact at four places
        ("0.735", [2400, 9600, 2400], 2, ["0.1225", "0.4900", "0.1225"]),
        # thirds never end: floored at 18 places, the one unit left to the first of the tied
        # remainders
        (
            "1.00",
            [1, 1, 1],
            2,
            ["0.333333333333333334", "0.333333333333333333", "0.333333333333333333"],
        ),
        # a credit (negative) on a money-only line is all of itself
        ("-5.5", [0], 2, ["-5.5"]),
        # yen have no minor unit; 100 × 1/4, 3/4
        ("100", [1, 3], 0, ["25", "75"]),
        # -1 × 1/3, 2/3: floors -0.333…334 (2/3 of a unit above it) and -0.666…667 (1/3 above)
        # leave one unit, to the larger remainder (the first)
        ("-1", [1, 2], 2, ["-0.333333333333333333", "-0.666666666666666667"]),
    ],
)
def test_exact_shares_add_up_to_the_billed_amount(
    billed: str, weights: list[int], minor: int, expected: list[str]
) -> None:
    shares = exact_shares(billed, weights, minor)
    assert [str(s) for s in shares] == expected
    assert sum(shares) == Decimal(billed)


# -- the table ---------------------------------------------------------------------------


def test_table_leads_with_each_invoice_total_then_bearers_then_categories(findings: str) -> None:
    code, out, _ = invoke("reconcile", "--db", findings)
    assert code == 0
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    ]
    acme = [r[2:] for r in rows if r[0] == "INV-1"]
    assert acme == [
        ["total billed", "", "6.00", "21.60"],
        ["classified", "", "6.00", "21.60"],
        ["bearer total", "provider", "2.00", "7.20"],
        ["bearer total", "customer", "4.00", "14.40"],
        ["bearer total", "disputed", "0.00", "0.00"],
        ["unallocated", "provider", "2.00", "7.20"],
        ["productive", "customer", "2.67", "9.60"],
        ["startup", "customer", "0.67", "2.40"],
        ["idle_reserved", "customer", "0.67", "2.40"],
    ]
    beta = [r[2:] for r in rows if r[0] == "INV-2"]
    assert beta[0] == ["total billed", "", "4.00", "14.40"] and beta[-1] == [
        "idle_unexplained",
        "disputed",
        "3.67",
        "13.20",
    ]
    assert all(r[1] == "USD" for r in rows if r[0])


def test_table_numbers_have_one_format(tmp_path: Path) -> None:
    """Thousands separated, two places for hours, the minor unit for money, everywhere."""
    s = Scenario()
    _job_on_a1(s)
    s.line("L1", "A1", "10:00", "11:00", gpus=4, amount="12345.675")
    code, out, _ = invoke("reconcile", "--db", _url(tmp_path, s))
    assert code == 0
    # billed exactly 12,345.675, shown to the cent as people read it (issue 30: never
    # "12,345.675" beside "12,345.68"): 67.5 cents → 68, half-even, billed and classified
    # alike (JSON keeps the exact amount); productive
    # is 4/6 of it: 8,230.45; startup and idle_reserved 2,057.6125 each, and the one cent
    # their floors leave goes to startup (equal remainders: RULES.md's order)
    rows = [
        [cell.strip() for cell in line.split("│")[3:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    ]
    assert rows == [
        ["total billed", "", "4.00", "12,345.68"],
        ["classified", "", "4.00", "12,345.68"],
        ["bearer total", "provider", "0.00", "0.00"],
        ["bearer total", "customer", "4.00", "12,345.68"],
        ["bearer total", "disputed", "0.00", "0.00"],
        ["productive", "customer", "2.67", "8,230.45"],
        ["startup", "customer", "0.67", "2,057.62"],
        ["idle_reserved", "customer", "0.67", "2,057.61"],
    ]
    numbers = re.findall(r"(?<![\w.])\d[\d,]*\.\d+", out)
    assert numbers and all(
        re.fullmatch(r"\d{1,3}(,\d{3})*\.\d\d", n) for n in numbers if n != "12,345.675"
    ), numbers


def test_an_invoice_id_two_tenants_use_is_rounded_per_tenant(tmp_path: Path) -> None:
    """acme and beta each bill 0.004 on INV-S. An invoice is one tenant's invoice id
    (RULES.md, Money), so each rounds alone: 0.004 rounds to 0.00 for each, and no cent
    moves from one tenant's line to the other's (pooled, 0.008 would round to 0.01 and
    give a cent to one of them)."""
    s = Scenario()
    s.line(
        "M1",
        None,
        "10:00",
        "11:00",
        gpus=0,
        amount="0.004",
        invoice="INV-S",
        category="adjustment",
    )
    s.line(
        "M2",
        None,
        "10:00",
        "11:00",
        gpus=0,
        amount="0.004",
        invoice="INV-S",
        category="adjustment",
        tenant="beta",
    )
    code, out, _ = invoke("reconcile", "--db", _url(tmp_path, s))
    assert code == 0
    acme, beta = out.split("tenant beta")
    for part in (acme, beta):
        # 0.004 billed shows as 0.00: people read amounts to the cent (JSON keeps 0.004)
        assert re.search(r"total billed .* 0\.00 │", part) and re.search(
            r"classified .* 0\.00 │", part
        )
        assert not re.search(r"classified .* 0\.01 │", part)


def test_total_billed_is_shown_to_the_cent(tmp_path: Path) -> None:
    """Billed 0.123400 and 1.000000 (six places, as some exports write): 1.1234 in all, shown
    to the cent as 1.12 beside the classified 1.12 (issue 30)."""
    s = Scenario()
    s.line("M1", None, "10:00", "11:00", gpus=0, amount="0.123400", category="adjustment")
    s.line("M2", None, "10:00", "11:00", gpus=0, amount="1.000000", category="adjustment")
    code, out, _ = invoke("reconcile", "--db", _url(tmp_path, s))
    assert code == 0
    rows = [
        [cell.strip() for cell in line.split("│")[3:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    ]
    assert rows[0][-1] == "1.12" and rows[1][-1] == "1.12"


# -- explain --------------------------------------------------------------------------


def test_explain_quotes_the_rule_that_decides_each_category(cents: str) -> None:
    rules = (ROOT / "reconcile" / "RULES.md").read_text()
    code, out, _ = invoke("explain", "idle_unexplained")
    assert code == 0
    assert out.startswith("idle_unexplained  (bearer: disputed)")
    assert (
        "decided by rule 10 of RULES.md" in out
        and "anything else" in out
        and "anything else" in rules
    )
    code, out, _ = invoke("explain", "double_billed")
    assert (
        code == 0
        and "(bearer: provider)" in out
        and "decided by rule 1 of RULES.md" in out
        and "earlier line" in out
    )
    code, out, _ = invoke("explain", "restart_recovery")
    assert (
        code == 0 and "(bearer: provider or customer)" in out and "`hardware` or `fabric`" in out
    )
    code, out, _ = invoke("explain", "unbilled")
    assert code == 0 and "not billed" in out and "horizon" in out


def test_explain_names_what_each_bearer_bears() -> None:
    # RULES.md, "Bearers": unallocated, double_billed, reclaimed, stalled_fault are the
    # provider's, and the restart categories when the cause is the provider's
    code, out, _ = invoke("explain", "provider")
    assert code == 0
    assert (
        "Categories: unallocated, double_billed, reclaimed, restart_lost, "
        "restart_recovery, stalled_fault." in " ".join(out.split())
    )
    code, out, _ = invoke("explain", "disputed")
    assert code == 0 and "Categories: idle_unexplained." in " ".join(out.split())


def test_explain_covers_every_category_the_json_can_hold_and_refuses_others(findings: str) -> None:
    code, out, _ = invoke("explain")
    assert code == 0
    categories = out.split("\nBearers")[0]
    heads = [
        line.split()[0] for line in categories.splitlines() if line and not line.startswith(" ")
    ]
    assert heads == [
        "unallocated",
        "double_billed",
        "reclaimed",
        "checkpoint",
        "restart_lost",
        "restart_recovery",
        "productive",
        "stalled_fault",
        "startup",
        "idle_reserved",
        "idle_unexplained",
        "money_only",
        "unbilled",
    ]
    code, _, err = invoke("explain", "idle")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "CATEGORY: unknown 'idle'" in err


# -- the page ---------------------------------------------------------------------------


def _page(url: str, tmp_path: Path) -> Path:
    target = tmp_path / "finance.html"
    code, _, err = invoke("reconcile", "--db", url, "--format", "html", "--out", str(target))
    assert code == 0, err
    return target


def test_page_is_self_contained(findings: str, tmp_path: Path) -> None:
    html = _page(findings, tmp_path).read_text()
    assert "<svg" in html
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\(", html, re.I)
    assert not re.search(r"(src|href)=\"(https?:)?//", html)


def test_page_says_what_each_category_means_in_rules_md_words(
    findings: str, tmp_path: Path
) -> None:
    html = _page(findings, tmp_path).read_text()
    # RULES.md rule 10, its code spans as HTML
    # a plain sentence first, then the rule
    assert (
        '<dd><span class="plain">GPU time a job ran without making progress, with nothing in the '
        'evidence to say why.</span> <span class="note">The rule:</span> '
        "<code>idle_unexplained</code>: anything else: a job running with no progress" in html
    )
    assert '<dt>idle_unexplained <span class="note">bearer: disputed · rule 10 of RULES.md' in html


def test_page_links_each_finding_to_its_dispute_command(findings: str, tmp_path: Path) -> None:
    html = _page(findings, tmp_path).read_text()
    commands = re.findall(r'<code class="command">(.*?)</code>', html)
    assert commands == [
        f"gpuledger dispute --db {findings} --tenant beta --invoice INV-2 --key KEY --out "
        "dispute-beta-INV-2.json",
        f"gpuledger dispute --db {findings} --tenant acme --invoice INV-1 --key KEY --out "
        "dispute-acme-INV-1.json",
    ]


class _Figures(HTMLParser):
    """Text of every element with a data-figure attribute, and the overflow report."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, str] = {}
        self._open: list[tuple[str | None, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "meta", "rect", "line"):
            return
        self._open.append((dict(attrs).get("data-figure") or dict(attrs).get("id"), []))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("br", "meta", "rect", "line") or not self._open:
            return
        key, parts = self._open.pop()
        text = "".join(parts)
        if key is not None:
            self.figures[key] = text.strip()
        if self._open:
            self._open[-1][1].append(text)

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1][1].append(data)


#: Run by Chromium on the rendered page: every box whose content is wider than the box
#: (text, a table or a picture sticking out), and the page wider than the window.
OVERFLOW_CHECK = """<script>
window.addEventListener('load', () => {
  const over = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1
        && getComputedStyle(el).overflowX !== 'auto')
      over.push(el.tagName
                + (el.className && el.className.baseVal === undefined ? '.' + el.className : '')
                + ' ' + el.scrollWidth + '>' + el.clientWidth);
  }
  if (document.documentElement.scrollWidth > window.innerWidth)
    over.push('page ' + document.documentElement.scrollWidth + '>' + window.innerWidth);
  const out = document.createElement('pre');
  out.id = 'overflow';
  out.textContent = over.length ? over.join('\\n') : 'none';
  document.body.appendChild(out);
});
</script>"""


def _chromium_dom(page: Path, profile: Path, width: int) -> str:
    assert CHROMIUM is not None
    args = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--window-size={width},900",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _plain(text: str) -> Decimal:
    """A figure as shown ("1,234.50 USD", "10.00 GPU-h") as a Decimal."""
    return Decimal(text.split()[0].replace(",", ""))


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not on PATH (Debian package `chromium`; .ci/run installs it)",
)
@pytest.mark.parametrize("width", [1280, 800])
def test_page_as_chromium_renders_it_shows_the_json_figures_and_nothing_overflows(
    findings: str, tmp_path: Path, width: int
) -> None:
    page = _page(findings, tmp_path)
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text().replace("</body>", OVERFLOW_CHECK + "</body>"))
    parser = _Figures()
    parser.feed(_chromium_dom(checked, tmp_path / "profile", width))
    shown = parser.figures
    assert shown["overflow"] == "none"

    code, out, _ = invoke("reconcile", "--db", findings, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    # the tenants' bearer totals and each invoice's categories are the JSON's, figure for figure
    for tenant, node in doc["tenants"].items():
        for bearer, amount in node["by_bearer"].items():
            assert _plain(shown[f"tenant/{tenant}/USD/bearer/{bearer}"]) == Decimal(amount), (
                tenant,
                bearer,
            )
        assert (
            _plain(shown[f"tenant/{tenant}/USD/billed_hours"])
            == Decimal(node["billed_gpu_seconds"]) / 3600
        )
    for line in doc["lines"]:
        figure = f"invoice/{line['tenant']}/{line['invoice_id']}/USD"
        assert _plain(shown[f"{figure}/classified"]) == Decimal(
            line["amount"]
        )  # one line an invoice here
        assert _plain(shown[f"{figure}/billed"]) == Decimal(line["billed_amount"])
        for category, entry in line["categories"].items():
            assert _plain(shown[f"{figure}/category/{category}/{entry['bearer']}"]) == Decimal(
                entry["amount"]
            )

    # and the figures worked by hand
    assert shown["invoice/acme/INV-1/USD/bearer/provider"] == "7.20"
    assert shown["invoice/beta/INV-2/USD/category/idle_unexplained/disputed"] == "13.20"
    assert shown["hours/2026-01-05"] == "10.00 GPU-h"
    assert shown["money/USD/2026-01-05"] == "36.00 USD"
    assert (shown["hours/acme"], shown["hours/beta"]) == ("6.00 GPU-h", "4.00 GPU-h")
    assert (shown["finding/1/amount"], shown["finding/2/amount"]) == ("13.20 USD", "7.20 USD")
    assert (shown["finding/1/hours"], shown["finding/2/hours"]) == ("3.67", "2.00")


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not on PATH (Debian package `chromium`; .ci/run installs it)",
)
def test_the_overflow_check_sees_a_box_that_overflows(findings: str, tmp_path: Path) -> None:
    """The check above can fail: a command that may not wrap, in a box 100 px wide."""
    wide = (
        '<div style="width:100px"><code style="white-space:nowrap">gpuledger dispute --tenant '
        "acme</code></div>"
    )
    checked = tmp_path / "checked.html"
    checked.write_text(
        _page(findings, tmp_path).read_text().replace("</body>", wide + OVERFLOW_CHECK + "</body>")
    )
    parser = _Figures()
    parser.feed(_chromium_dom(checked, tmp_path / "profile", 1280))
    assert re.fullmatch(r"DIV \d+>100", parser.figures["overflow"]), parser.figures["overflow"]


def test_which_line_gives_back_a_cent_is_decided_exactly(tmp_path: Path) -> None:
    """Two money-only lines of 0.00500000000000000002 and …01 (20 places): each is half a cent
    and a little more, so each rounds up to 0.01, but the invoice's exact total
    0.01000000000000000003 rounds to 0.01: one cent comes back, from the line whose rounding
    was the least deserved, L2 (a remainder smaller by 10^-18 of a cent, which a double
    cannot tell apart: it would take it from the earlier line, L1)."""
    s = Scenario()
    s.line(
        "L1",
        None,
        "10:00",
        "11:00",
        gpus=0,
        amount="0.00500000000000000002",
        category="adjustment",
    )
    s.line(
        "L2",
        None,
        "10:00",
        "11:00",
        gpus=0,
        amount="0.00500000000000000001",
        category="adjustment",
    )
    code, out, _ = invoke("reconcile", "--db", _older_url(tmp_path, s), "--format", "json")
    assert code == 0
    got = {
        line["line_id"]: (line["amount"], line["categories"]["money_only"]["amount_exact"])
        for line in json.loads(out)["lines"]
    }
    assert got == {
        "L1": ("0.01", "0.00500000000000000002"),
        "L2": ("0.00", "0.00500000000000000001"),
    }


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not on PATH (Debian package `chromium`; .ci/run installs it)",
)
def test_long_ids_wrap_inside_their_boxes(tmp_path: Path) -> None:
    """Ids as real exports have them (an Azure subscription path as the tenant, a FOCUS
    period as the invoice, an ARN as the line) in an 800 px window."""
    tenant = "/subscriptions/64e355d7-997c-491d-b0c1-8414dccfcf42"
    s = Scenario(tenant=tenant)
    s.grant("A1", gpus=4, at="10:00")
    s.release("A1", at="11:00")
    s.line(
        "arn:aws:ec2:us-west-2:347410479675:instance/i-032a64f2065481b12-with-a-long-tail",
        "A1",
        "10:00",
        "12:00",
        gpus=8,
        amount="1234567.89",
        invoice="period-2024-09-01T00:00:00Z-billing-account-0001",
    )
    checked = tmp_path / "checked.html"
    checked.write_text(
        _page(_url(tmp_path, s), tmp_path)
        .read_text()
        .replace("</body>", OVERFLOW_CHECK + "</body>")
    )
    parser = _Figures()
    parser.feed(_chromium_dom(checked, tmp_path / "profile", 800))
    assert parser.figures["overflow"] == "none"
    # 8 GPUs for 2 h on an allocation of 4 for 1 h: 12 of the 16 GPU-h are unallocated, so
    # 1,234,567.89 × 12/16 = 925,925.9175 → 925,925.92 (provider)
    assert (
        parser.figures[
            f"invoice/{tenant}/period-2024-09-01T00:00:00Z-billing-account-0001"
            "/USD/bearer/provider"
        ]
        == "925,925.92"
    )


def test_amounts_past_28_digits_are_shown_whole(tmp_path: Path) -> None:
    """Python's default Decimal context keeps 28 digits; an amount the engine accepts may
    have more (15 whole digits and 14 places here). A money-only line: all of it is money_only."""
    s = Scenario()
    s.line(
        "M1",
        None,
        "10:00",
        "11:00",
        gpus=0,
        amount="123456789012345.12345678901234",
        category="adjustment",
    )
    url = _older_url(tmp_path, s)
    code, out, _ = invoke("reconcile", "--db", url)
    assert code == 0
    rows = [
        [cell.strip() for cell in line.split("│")[3:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    ]
    amounts = [
        r[-1] for r in rows if r[-1]
    ]  # (at 80 columns the labels wrap; the figures may not)
    # billed and classified alike to the cent in the table (JSON keeps the exact amount)
    assert amounts[:2] == ["123,456,789,012,345.12", "123,456,789,012,345.12"]
    code, out, _ = invoke("reconcile", "--db", url, "--format", "json")
    assert json.loads(out)["lines"][0]["categories"]["money_only"] == {
        "gpu_seconds": 0,
        "amount": "123456789012345.12",
        "amount_exact": "123456789012345.12345678901234",
        "bearer": "customer",
    }


def test_an_amount_too_large_to_report_in_cents_is_refused_in_one_line(tmp_path: Path) -> None:
    """2^62 ÷ 10^4 (the largest minor unit) = 461,168,601,842,738 and 79/100: past it a
    line's cents would not fit the engine's 64-bit cells."""
    s = Scenario()
    s.line(
        "M1",
        None,
        "10:00",
        "11:00",
        gpus=0,
        amount="1234567890123456789.01",
        category="adjustment",
    )
    code, out, err = invoke("reconcile", "--db", _older_url(tmp_path, s))
    assert code == 2 and out == ""
    assert err.strip() == (
        "Error: an amount of 1234567890123456789.01 is too large to report in minor units "
        "(at most 461,168,601,842,738 in any currency)"
    )


def _figures(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-figure="([^"]+)">([^<]*)<', html))


def test_page_shows_the_claim_on_placements_not_as_sold(tmp_path: Path) -> None:
    """tests/multinode_scenarios.py's placements, worked by hand in
    tests/test_multinode_rules.py: per tenant 6 GPU-hours per state; not_as_sold 21.60
    billed less the 1.00 credit; the claim is placement_credit_share x 13.40."""
    from tests import multinode_scenarios as sc

    url = f"sqlite:///{tmp_path / 'l.db'}"
    store = Store(url)
    store.init()
    ingest(store, sc.placements())
    store.close()
    figures = _figures(_page(url, tmp_path).read_text())
    for tenant, claim in (("zero", "0.00"), ("half", "6.70"), ("one", "13.40")):
        assert figures[f"placement/{tenant}/USD/claim"] == claim
        assert figures[f"placement/{tenant}/USD/not_as_sold/amount"] == "20.60"
        assert figures[f"placement/{tenant}/USD/as_sold/hours"] == "6.00"
        assert figures[f"placement/{tenant}/USD/unobserved/amount"] == "21.60"


def test_page_has_no_placement_table_without_a_line_not_as_sold(
    findings: str, tmp_path: Path
) -> None:
    assert 'id="placement"' not in _page(findings, tmp_path).read_text()
