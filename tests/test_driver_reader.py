"""Reading a SQLite store through sqlite3 alone (ledger/driver.py): `gpuledger reconcile`
on a plain `sqlite:///PATH` file never imports SQLAlchemy, and gives what the store read
through SQLAlchemy gives, byte for byte; every other URL, and a file that is not a ledger,
is left to `ledger.Store`, whose errors are unchanged."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli
from ledger import Store
from ledger.driver import sqlite_reader
from ledger.sealed import seal_store
from reconcile import reconcile_store
from reconcile.reports.finance_page import render_page
from tests.test_reconcile_oracle import ledger_of, random_fleet

ROOT = Path(__file__).resolve().parent.parent


def _store_file(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Store(url).init()
    return url


def test_a_plain_file_store_is_read_without_sqlalchemy(tmp_path: Path) -> None:
    url = _store_file(tmp_path)
    reader = sqlite_reader(url)
    assert reader is not None
    assert reader.path == str(tmp_path / "ledger.db")
    assert reader.safe_url == Store(url).safe_url == url


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file:x.db?mode=ro&uri=true",
        "sqlite:///a%20b.db",
        "postgresql://postgres@127.0.0.1:5432/test",
        "not a url",
    ],
)
def test_other_urls_are_left_to_the_store(url: str) -> None:
    assert sqlite_reader(url) is None


def test_files_that_are_not_a_ledger_are_left_to_the_store(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    assert sqlite_reader(f"sqlite:///{missing}") is None
    assert not missing.exists()  # never created by looking
    text = tmp_path / "notes.txt"
    text.write_text("not a database, but long enough to look like one's header\n" * 20)
    assert sqlite_reader(f"sqlite:///{text}") is None
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE other (x)").connection.close()
    assert sqlite_reader(f"sqlite:///{empty}") is None
    assert sqlite_reader(f"sqlite:///{tmp_path}") is None  # a folder


def test_the_reader_gives_the_stores_reconciliation(tmp_path: Path) -> None:
    """A random fleet, sealed in pages of 16 entries with rows after the last page: the
    reconciliation through sqlite3 alone equals the one through SQLAlchemy, document and
    cells, and so does each limit the engine takes (`upto_seq`)."""
    with ledger_of(random_fleet(random.Random(7))) as store:
        store.sealed_entries = 16
        assert seal_store(store, extras=False) >= 2
        reader = sqlite_reader(store.url)
        assert reader is not None
        for upto in (None, 40):
            ours = reconcile_store(reader, upto_seq=upto)
            theirs = reconcile_store(store, upto_seq=upto)
            assert ours.cells == theirs.cells
            assert ours.json_text() == theirs.json_text()


@pytest.mark.parametrize("fmt", ["json", "html"])
def test_the_command_reads_a_plain_file_without_sqlalchemy(tmp_path: Path, fmt: str) -> None:
    """In a fresh interpreter, as a user runs it: the output is the store's (the finance
    page of a ledger that holds no answers too), and SQLAlchemy is never imported."""
    with ledger_of(random_fleet(random.Random(3))) as store:
        result = reconcile_store(store)
        page = render_page(result, store.url, None, {})  # the command names its store
        expected = result.json_text() if fmt == "json" else page
        out = tmp_path / f"r.{fmt}"
        program = (
            "import sys, cli\n"
            "try:\n"
            f"    cli.main(['reconcile', '--db', {store.url!r}, '--format', {fmt!r}, "
            f"'--out', {str(out)!r}])\n"
            "except SystemExit as exc:\n"
            "    assert not exc.code, exc.code\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert out.read_text() == expected


def test_a_file_that_is_not_a_ledger_gets_the_stores_error(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("x" * 4096)
    result = CliRunner().invoke(cli.main, ["reconcile", "--db", f"sqlite:///{text}"])
    assert result.exit_code == 2
    assert "file is not a database" in result.output
    assert "Traceback" not in result.output


def test_tenant_invoice_and_the_page_still_read_through_the_store(tmp_path: Path) -> None:
    """--tenant and --invoice are checked against the ledger (`check_scope`), and the
    finance page shows the provider's answers: both read through `ledger.Store`."""
    with ledger_of(random_fleet(random.Random(3))) as store:
        tenant = json.loads(reconcile_store(store).json_text())["lines"][0]["tenant"]
        result = CliRunner().invoke(
            cli.main, ["reconcile", "--db", store.url, "--tenant", "nobody-here"]
        )
        assert result.exit_code == 2 and "no tenant 'nobody-here'" in result.output
        result = CliRunner().invoke(
            cli.main, ["reconcile", "--db", store.url, "--tenant", tenant, "--format", "json"]
        )
        assert result.exit_code == 0, result.output
        assert all(line["tenant"] == tenant for line in json.loads(result.stdout)["lines"])
