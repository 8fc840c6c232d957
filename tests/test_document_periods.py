"""JSON and CSV documents say the period they cover (issue 30): `period: {since, until}` in
the reconciliation's and every report's JSON (null where open), `period_since` and
`period_until` on every CSV row; a document written before periods (no `period`) still
reads, and writes back unchanged.

The ledger is tests/test_number_formats.py's: one line, INV-1, billed [10:00, 11:00) on
2026-01-05, the job j1 submitted 09:50 that day."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from ledger import Store
from schemas.documents.reconciliation import ReconciliationDocument
from schemas.documents.reports import EnvelopeReport, OutcomesReport
from tests.conftest import run_cli
from tests.reconcile_helpers import ingest
from tests.test_number_formats import money_scenario

JAN5, JAN6 = "2026-01-05T00:00:00Z", "2026-01-06T00:00:00Z"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp: Path = tmp_path_factory.mktemp("periods")
    store = Store(f"sqlite:///{tmp / 'ledger.db'}")
    store.init()
    ingest(store, money_scenario().events)
    return str(store.url)


def _out(*args: str) -> str:
    code, out, err = run_cli(*args)
    assert code == 0, err
    return out


def test_the_reconciliation_says_its_period(url: str) -> None:
    day = json.loads(
        _out("reconcile", "--db", url, "--since", JAN5, "--until", JAN6, "--format", "json")
    )
    assert day["period"] == {"since": JAN5, "until": JAN6}
    assert [line["line_id"] for line in day["lines"]] == ["L1"]  # 10:00 is in the day
    later = json.loads(_out("reconcile", "--db", url, "--since", JAN6, "--format", "json"))
    assert later["period"] == {"since": JAN6, "until": None} and later["lines"] == []
    every = json.loads(_out("reconcile", "--db", url, "--format", "json"))
    assert every["period"] == {"since": None, "until": None}
    assert list(every) == ["period", "tenants", "lines"]  # what it covers, first


def test_every_reconciliation_csv_row_says_its_period(url: str) -> None:
    rows = list(
        csv.DictReader(
            io.StringIO(_out("reconcile", "--db", url, "--since", JAN5, "--format", "csv"))
        )
    )
    # L1's four categories (unallocated, startup, idle_reserved, idle_unexplained)
    assert len(rows) == 4
    assert {(r["period_since"], r["period_until"]) for r in rows} == {(JAN5, "")}


@pytest.mark.parametrize("name", ["envelope", "outcomes", "promises", "placement"])
def test_every_report_says_its_period(url: str, name: str) -> None:
    doc = json.loads(
        _out("report", name, "--db", url, "--since", JAN5, "--until", JAN6, "--format", "json")
    )
    assert doc["period"] == {"since": JAN5, "until": JAN6}
    doc = json.loads(_out("report", name, "--db", url, "--format", "json"))
    assert doc["period"] == {"since": None, "until": None}


def test_capacity_s_period_is_its_window(url: str) -> None:
    doc = json.loads(
        _out(
            "report", "capacity", "--db", url, "--since", JAN5, "--until", JAN6, "--format", "json"
        )
    )
    assert doc["period"] == doc["window"] == {"since": JAN5, "until": JAN6}


def test_every_report_csv_row_says_its_period(url: str) -> None:
    text = _out("report", "envelope", "--db", url, "--since", JAN5, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    # one group: the ledger's one source and its one (unnamed) class, in USD
    assert len(rows) == 1
    assert (rows[0]["period_since"], rows[0]["period_until"]) == (JAN5, "")


def test_a_document_written_before_periods_reads_and_writes_back_unchanged(url: str) -> None:
    for args, model in (
        (("reconcile",), ReconciliationDocument),
        (("report", "envelope"), EnvelopeReport),
        (("report", "outcomes"), OutcomesReport),
    ):
        doc = json.loads(_out(*args, "--db", url, "--format", "json"))
        del doc["period"]
        old = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        assert model.from_json(old).to_json() == old
