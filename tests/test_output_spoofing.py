"""Output nobody can spoof (issue 28, docs/reports.md "Output nobody can spoof"): ids,
tenants, invoices and quarantined records chosen by an adversary, shown by every command.

The ledger (hand-built, both backends): tenant `acme[/x]` holds ALLOC (2 GPUs on n1)
10:00-10:10; job JOB runs 10:00-10:05 under promise PROMISE (start by 09:00: missed);
the invoice INVOICE has one line LINE, 10:10-10:20 on 2 GPUs, 411.52 USD. The line is
after the release, so it is all unallocated: 20 GPU-minutes (0.33 GPU-hours) and
411.52 USD, the provider's. Each id carries what would spoof a terminal or a page: rich
markup, U+202E (which would show "411.52 USD" as "DSU 25.114"), an OSC hyperlink, a
screen clear, a newline that would add a forged finding line.

The spreadsheet ledger: FOCUS rows whose tenant, invoice, line id and description start
like formulas (`=HYPERLINK(...)`, `=cmd|' /C calc'!A0`, `@SUM(1)`, `-2+3+cmd|...`), one
a usage line of 24.00 USD, one a credit of -2.50 USD.
"""

from __future__ import annotations

import csv
import io
import json
import re
import unicodedata
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from reconcile.reports.pages import bdi, shown
from schemas.display import (
    UNSAFE_CATEGORIES,
    DataTable,
    is_figure,
    spreadsheet_safe,
    terminal_safe,
)
from tests.conftest import event, write_jsonl
from tests.conftest import run_cli as run

TENANT = "acme[/x]"
INVOICE = "INV-\u202e<script>[bold red]"
LINE = "L1\n  2. forged finding [/x]"
ALLOC = "A1\x1b]8;;http://evil\x07"
JOB = "J1\x1b[2J"
PROMISE = "P[/x]\u2066"
# as a terminal shows them: each control, bidi or format character as its escape
INVOICE_SHOWN = "INV-\\u202e<script>[bold red]"
LINE_SHOWN = "L1\\n  2. forged finding [/x]"
ALLOC_SHOWN = "A1\\x1b]8;;http://evil\\x07"
PROMISE_SHOWN = "P[/x]\\u2066"
#: The invoice id on a page: escaped, isolated, its U+202E a marked escape.
INVOICE_ON_A_PAGE = '<bdi>INV-<span class="ctl">\\u202e</span>&lt;script&gt;[bold red]</bdi>'
#: The characters planted in the ids: none may reach a terminal or a page raw.
PLANTED = {"\u202e", "\u2066", "\x1b", "\x07"}


def at(clock: str) -> str:
    return f"2026-01-05T{clock}Z"


def acme(type_: str, id_: str, clock: str, **data: Any) -> dict[str, Any]:
    return event(type_, id_, {"tenant": TENANT, **data}, source="slurm://acme", time=at(clock))


EVENTS = [
    acme(
        "policy.promise",
        "promise",
        "09:00:00",
        promise_id=PROMISE,
        job_id=JOB,
        start_by=at("09:00:00"),
    ),
    acme(
        "allocation.granted",
        "grant",
        "10:00:00",
        allocation_id=ALLOC,
        gpus=2,
        node="n1",
        devices=[0, 1],
    ),
    acme("job.started", "start", "10:00:00", job_id=JOB, allocation_id=ALLOC),
    acme("job.completed", "done", "10:05:00", job_id=JOB),
    acme("allocation.released", "release", "10:10:00", allocation_id=ALLOC),
    acme(
        "billing.line",
        "line",
        "10:20:00",
        invoice_id=INVOICE,
        line_id=LINE,
        allocation_id=ALLOC,
        period_start=at("10:10:00"),
        period_end=at("10:20:00"),
        gpus=2,
        amount="411.52",
        currency="USD",
    ),
]
#: A good event, then a record with a raw ESC (not JSON, so quarantined as read), in a file
#: whose name is markup too (rich would hide it).
BAD_LINES = (
    orjson.dumps(acme("job.progress", "p1", "10:01:00", job_id="J9", step=1))
    + b"\n"
    + b'{"id":"bad[/x] \x1b[2J [bold red]"}\n'
)


def raw_unsafe(text: str) -> list[str]:
    """The unsafe characters in `text` other than its own line breaks."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in UNSAFE_CATEGORIES]


@pytest.fixture
def spoofed(db_url: str, tmp_path: Path) -> str:
    assert run("ingest", "--db", db_url, str(write_jsonl(tmp_path / "e.jsonl", EVENTS)))[0] == 0
    return db_url


# -- the helpers, by hand ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown_as"),
    [
        (
            "\x1b]8;;http://evil\x07click\x1b]8;;\x07",
            "\\x1b]8;;http://evil\\x07click\\x1b]8;;\\x07",
        ),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x00\x7f\x85\x9b", "\\x00\\x7f\\x85\\x9b"),  # NUL, DEL, C1 NEL and CSI
        ("\u202a\u202b\u202c\u202d\u202e", "\\u202a\\u202b\\u202c\\u202d\\u202e"),
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),
        ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),
        ("zero\u200bwidth\ufeff\u00ad", "zero\\u200bwidth\\ufeff\\xad"),
        ("\u2028\u2029", "\\u2028\\u2029"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("\ud800", "\\ud800"),  # a lone surrogate would not even encode
        ("[/x] [bold red]acme", "[/x] [bold red]acme"),  # markup is text: Text shows it as is
        ("Zürich 東京 ٣ שלום", "Zürich 東京 ٣ שלום"),
    ],
)
def test_terminal_safe_shows_each_unsafe_character_as_its_escape(text: str, shown_as: str) -> None:
    assert terminal_safe(text) == shown_as


@settings(max_examples=50, deadline=None)
@given(st.text())
def test_terminal_safe_leaves_nothing_unsafe_and_nothing_else_changed(text: str) -> None:
    safe = terminal_safe(text)
    assert raw_unsafe(safe) == [] and "\n" not in safe
    assert terminal_safe(safe) == safe
    if not raw_unsafe(text) and "\n" not in text:
        assert safe == text


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.sampled_from("[]/=bold red#@:x\x1b\n\u202e "), max_size=12),
        min_size=1,
        max_size=3,
    )
)
def test_a_data_table_never_parses_markup_even_on_a_console_that_would(cells: list[str]) -> None:
    """On rich's default console (markup on): no MarkupError, every cell shown as written."""
    table = DataTable(*(f"h{i}" for i in range(len(cells))), title=cells[0], caption=cells[-1])
    table.add_row(*cells)
    console = Console(file=io.StringIO(), width=10_000)
    console.print(table)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert raw_unsafe(out) == []
    for cell in cells:
        assert all(part in out for part in terminal_safe(cell).split())


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ('=HYPERLINK("http://x","y")', '\'=HYPERLINK("http://x","y")'),
        ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"),
        ("@SUM(1)", "'@SUM(1)"),
        ("+1+cmd", "'+1+cmd"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("-", "'-"),
        ("-3.20", "-3.20"),  # figures stay the numbers they are
        ("+4", "+4"),
        ("-1,234.50", "-1,234.50"),
        ("-1e5", "-1e5"),
        ("-0.00", "-0.00"),
        ("INV-1", "INV-1"),
        ("a=b", "a=b"),
    ],
)
def test_spreadsheet_safe_is_owasps_rule_and_leaves_figures(cell: str, written: str) -> None:
    assert spreadsheet_safe(cell) == written


def test_a_page_shows_data_escaped_isolated_and_visible() -> None:
    assert str(bdi(INVOICE)) == INVOICE_ON_A_PAGE
    assert shown("x\u202ey") == "x\\u202ey"  # in a title, SVG or attribute: the escape as text
    assert shown(3) == 3


# -- terminals ----------------------------------------------------------------------------


def test_ingest_and_quarantine_show_markup_literally(spoofed: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad[bold red].jsonl"
    bad.write_bytes(BAD_LINES)
    code, out, err = run("ingest", "--db", spoofed, str(bad))
    assert code == 1 and out == f"{bad}: read 2 · appended 1 · duplicate 0 · quarantined 1\n"
    assert err.startswith(f"{bad}:2: ") and raw_unsafe(err) == [] and len(err.splitlines()) == 1
    code, out, err = run("quarantine", "--db", spoofed)
    assert (code, err) == (0, "")
    assert raw_unsafe(out) == []
    [row] = [line for line in out.splitlines() if "bad[bold red].jsonl:2" in line]
    assert '{"id":"bad[/x] \\x1b[2J [bold red]"}' in row
    # JSON is exact: the record as stored (JSON's own \u001b escape, decoded, is the raw ESC)
    code, out, _ = run("quarantine", "--db", spoofed, "--format", "json")
    record = json.loads(out)[0]["record"]
    assert code == 0 and record.startswith('{"id":"bad[/x] \x1b[2J [bold red]"}')


def test_an_error_naming_a_file_shows_its_name_escaped(tmp_path: Path) -> None:
    path = tmp_path / "x\x1b[2J\u202e.jsonl"
    path.write_bytes(b"not a format\n")
    code, out, err = run("ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", str(path))
    assert (code, out) == (2, "")
    assert err.startswith(
        f"Error: --format: {tmp_path}/x\\x1b[2J\\u202e.jsonl: no format recognises"
    )
    assert raw_unsafe(err) == [] and len(err.splitlines()) == 1


def test_csv_shown_on_a_terminal_is_escaped_line_by_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cli import _for_terminal, _TerminalText

    text = 'INV,"L1\x1b[2J"\nINV-\u202e,x\n'
    assert _for_terminal(text) == 'INV,"L1\\x1b[2J"\nINV-\\u202e,x\n'
    _TerminalText().write(text)
    assert capsys.readouterr().out == 'INV,"L1\\x1b[2J"\nINV-\\u202e,x\n'


def test_reconcile_table_shows_ids_literally(spoofed: str) -> None:
    code, out, err = run("reconcile", "--db", spoofed)
    assert (code, err) == (0, "")
    assert raw_unsafe(out) == [] and "tenant acme[/x]" in out
    # 2 GPUs × 10 minutes = 0.33 GPU-hours, billed 411.52, all unallocated and the provider's
    [total] = [line for line in out.splitlines() if "total billed" in line]
    assert re.search(re.escape(INVOICE_SHOWN) + r".*USD.*total billed.*0\.33.*411\.52", total)
    [category] = [line for line in out.splitlines() if "unallocated" in line]
    assert re.search(r"unallocated.*provider.*0\.33.*411\.52", category)


@pytest.mark.parametrize(
    ("report", "shows"),
    [
        ("promises", PROMISE_SHOWN),
        ("capacity", "whole"),
        ("outcomes", TENANT),
        ("placement", ALLOC_SHOWN),
        ("envelope", "acme"),  # the provider: slurm://acme's authority (docs/envelope.md)
    ],
)
def test_every_report_table_shows_ids_literally(spoofed: str, report: str, shows: str) -> None:
    code, out, err = run("report", report, "--db", spoofed)
    assert (code, err) == (0, "")
    assert raw_unsafe(out) == [] and shows in out


def test_verify_packet_adds_no_line_and_reverses_no_figure(spoofed: str, tmp_path: Path) -> None:
    assert run("keygen", "--out", str(tmp_path / "key"))[0] == 0
    code, out, err = run(
        "dispute",
        "--db",
        spoofed,
        "--tenant",
        TENANT,
        "--invoice",
        INVOICE,
        "--key",
        str(tmp_path / "key"),
        "--out",
        str(tmp_path / "d.json"),
    )
    assert code == 0, err
    assert raw_unsafe(out) == [] and f"invoice {INVOICE_SHOWN} of {TENANT}, 1 lines" in out
    code, out, err = run(
        "verify-packet", str(tmp_path / "d.json"), "--pubkey", str(tmp_path / "key.pub")
    )
    assert (code, err) == (0, "") and raw_unsafe(out) == []
    said = out.splitlines()
    # ok, the sentence, the request, the totals, the one finding: no forged line
    assert len(said) == 5
    assert said[2].startswith(f"Please credit 411.52 USD against invoice {INVOICE_SHOWN} by ")
    said = said[:2] + said[3:]
    assert said[0].startswith(f"ok: invoice {INVOICE_SHOWN} of {TENANT}, 1 lines;")
    assert said[1] == (
        f"{TENANT} disputes 411.52 USD of the 411.52 USD billed on invoice "
        f"{INVOICE_SHOWN}: 411.52 USD that the provider's own records put on the "
        "provider (1 finding below)."
    )
    assert said[2] == (
        "  billed 411.52 USD · provider-borne 411.52 USD · disputed 0.00 USD · "
        "we dispute 411.52 USD"
    )
    assert said[3].startswith(
        "  1. 2026-01-05T10:10:00Z → 2026-01-05T10:20:00Z  "
        "unallocated (provider)  411.52 USD  "
        f"line {LINE_SHOWN}, allocation {ALLOC_SHOWN}; "
    )
    page = (tmp_path / "d.letter.html").read_text()
    _assert_page_isolates(page)
    assert f'<h1>Dispute of invoice <span class="mono">{INVOICE_ON_A_PAGE}</span>' in page
    line = '<bdi>L1<span class="ctl">\\n</span>  2. forged finding [/x]</bdi>'
    assert f'<span class="mono">{line}</span>' in page
    claim = re.search(r'<p class="claim" id="claim">(.*?)</p>', page, re.S)
    assert claim is not None
    assert claim.group(1).startswith("<bdi>acme[/x]</bdi> disputes 411.52 USD of the 411.52 USD")


def _assert_page_isolates(page: str) -> None:
    """No planted character raw, `<script>` only escaped, the invoice id inside `<bdi>`."""
    assert not PLANTED & set(page)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert INVOICE_ON_A_PAGE in page


def test_the_finance_page_isolates_ids(spoofed: str, tmp_path: Path) -> None:
    code, _, err = run(
        "reconcile", "--db", spoofed, "--format", "html", "--out", str(tmp_path / "f.html")
    )
    assert code == 0, err
    _assert_page_isolates((tmp_path / "f.html").read_text())


def test_the_envelope_and_diagnostic_pages_isolate_ids(spoofed: str, tmp_path: Path) -> None:
    code, out, err = run(
        "report", "envelope", "--db", spoofed, "--tenant", TENANT, "--format", "html"
    )
    assert code == 0, err
    assert not PLANTED & set(out) and '<span class="id"><bdi>acme[/x]</bdi></span>' in out
    code, out, err = run(
        "packet", "--db", spoofed, "--promise", PROMISE, "--out", str(tmp_path / "p")
    )
    assert code == 0, err
    page = (tmp_path / "p" / "packet.html").read_text()
    assert not PLANTED & set(page) and "<script>" not in page
    assert "<title>Diagnostic packet: promise P[/x]\\u2066</title>" in page
    assert '<span class="mono"><bdi>P[/x]<span class="ctl">\\u2066</span></bdi></span>' in page


# -- spreadsheets ---------------------------------------------------------------------------

FOCUS_HEADER = [
    "BilledCost",
    "BillingAccountId",
    "SubAccountId",
    "BillingCurrency",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "PricingQuantity",
    "PricingUnit",
    "ListUnitPrice",
    "ResourceId",
    "ProviderName",
    "InvoiceId",
    "Id",
    "ChargeDescription",
]
F_TENANT = '=HYPERLINK("http://x","y")'
F_INVOICE = "=cmd|' /C calc'!A0"
F_DESCRIPTION = "-2+3+cmd|' /C calc'!A0"
F_ALLOCATION = "@A1"
FOCUS_ROWS = [
    [
        "24.00",
        "BA1",
        F_TENANT,
        "USD",
        "2026-01-01 00:00:00",
        "Usage",
        "",
        "2026-01-05 10:00:00",
        "2026-01-05 13:00:00",
        "24",
        "GPU-Hours",
        "1.00",
        F_ALLOCATION,
        "Neo",
        F_INVOICE,
        "@SUM(1)",
        F_DESCRIPTION,
    ],
    [
        "-2.50",
        "BA1",
        F_TENANT,
        "USD",
        "2026-01-01 00:00:00",
        "Credit",
        "",
        "2026-01-05 00:00:00",
        "2026-01-06 00:00:00",
        "",
        "",
        "",
        "",
        "Neo",
        F_INVOICE,
        "-L2",
        F_DESCRIPTION,
    ],
]
#: (line id, billed) as a spreadsheet must get them; a line's categories add up to its billed.
FOCUS_LINES = {("'@SUM(1)", "24.00"), ("'-L2", "-2.50")}


@pytest.fixture
def formulas(db_url: str, tmp_path: Path) -> str:
    path = tmp_path / "focus.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([FOCUS_HEADER, *FOCUS_ROWS])
    assert run("ingest", "--db", db_url, "--format", "focus", str(path))[0] == 0
    grant = event(
        "allocation.granted",
        "g",
        {"tenant": F_TENANT, "allocation_id": F_ALLOCATION, "gpus": 8, "node": "n1"},
        source="k8s://c",
        time=at("10:00:00"),
    )
    job = event(
        "job.started",
        "s",
        {"tenant": F_TENANT, "job_id": "=J1", "allocation_id": F_ALLOCATION},
        source="k8s://c",
        time=at("10:00:00"),
    )
    jobs = write_jsonl(tmp_path / "g.jsonl", [grant, job])
    assert run("ingest", "--db", db_url, str(jobs))[0] == 0
    return db_url


def _check_spreadsheet_rows(rows: list[dict[str, Any]]) -> None:
    assert rows
    for row in rows:
        assert (row["tenant"], row["invoice_id"], row["description"]) == (
            "'" + F_TENANT,
            "'" + F_INVOICE,
            "'" + F_DESCRIPTION,
        )
        assert row["allocation_id"] in ("'" + F_ALLOCATION, None, "")
    assert {(r["line_id"], r["billed_amount"]) for r in rows} == FOCUS_LINES
    for line_id, billed in FOCUS_LINES:
        amounts = [r["amount"] for r in rows if r["line_id"] == line_id]
        assert all(is_figure(a) for a in amounts) and sum(map(Decimal, amounts)) == Decimal(billed)


def test_reconcile_csv_and_parquet_neutralise_formulas(formulas: str, tmp_path: Path) -> None:
    code, out, err = run("reconcile", "--db", formulas, "--format", "csv")
    assert (code, err) == (0, "")
    _check_spreadsheet_rows(list(csv.DictReader(io.StringIO(out))))
    code, _, _ = run(
        "reconcile", "--db", formulas, "--format", "csv", "--out", str(tmp_path / "r.csv")
    )
    assert code == 0
    _check_spreadsheet_rows(list(csv.DictReader((tmp_path / "r.csv").open(newline=""))))
    code, _, _ = run(
        "reconcile", "--db", formulas, "--format", "parquet", "--out", str(tmp_path / "r.parquet")
    )
    assert code == 0
    _check_spreadsheet_rows(pq.read_table(tmp_path / "r.parquet").to_pylist())
    # JSON is exact: the tenant as the source wrote it
    code, out, _ = run("reconcile", "--db", formulas, "--format", "json")
    strings = _strings(json.loads(out))
    assert code == 0 and F_TENANT in strings and "'" + F_TENANT not in strings


def test_report_csv_and_tsv_neutralise_formulas(formulas: str) -> None:
    for fmt, delimiter in (("csv", ","), ("tsv", "\t")):
        code, out, err = run("report", "outcomes", "--db", formulas, "--format", fmt)
        assert (code, err) == (0, "")
        [job] = list(csv.DictReader(io.StringIO(out), delimiter=delimiter))
        assert (job["tenant"], job["job_id"]) == ("'" + F_TENANT, "'=J1")
        code, out, err = run("report", "placement", "--db", formulas, "--format", fmt)
        assert (code, err) == (0, "")
        [allocation] = list(csv.DictReader(io.StringIO(out), delimiter=delimiter))
        assert (allocation["tenant"], allocation["allocation_id"]) == (
            "'" + F_TENANT,
            "'" + F_ALLOCATION,
        )


def _strings(doc: Any) -> set[str]:
    if isinstance(doc, dict):
        return set().union(*map(_strings, doc.values())) | set(doc)
    if isinstance(doc, list):
        return set().union(*map(_strings, doc)) if doc else set()
    return {doc} if isinstance(doc, str) else set()
