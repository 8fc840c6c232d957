"""Calm errors: every typo and impossible request is one line on stderr and exit 2, and a
command that fails writes, signs and creates nothing. Through click's CliRunner, with the
exact exit code and message. The ledger is tests/reports_scenario.py's (tenant acme,
invoice INV-1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from cli import _missed_count
from ledger import Store
from ledger.note import write_keypair
from ledger.tables import checkpoints
from tests.conftest import run_cli as run
from tests.reports_scenario import make_store, sqlite_store

NO_TENANT = "Error: --tenant: no tenant 'nosuch' in the ledger (tenants: acme)\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    s = sqlite_store(tmp_path_factory.mktemp("calm"))
    yield s
    s.close()


@pytest.mark.parametrize(
    "args",
    [
        ("reconcile", "--tenant", "nosuch"),
        ("reconcile", "--tenant", "nosuch", "--fail-on-disputed", "0"),
        ("report", "promises", "--tenant", "nosuch"),
        ("report", "capacity", "--tenant", "nosuch"),
        ("report", "outcomes", "--tenant", "nosuch"),
        ("report", "outcomes", "--view", "serving", "--tenant", "nosuch"),
        ("report", "placement", "--tenant", "nosuch"),
        ("export", "--tenant", "nosuch"),
    ],
    ids=" ".join,
)
def test_unknown_tenant(store: Store, args: tuple[str, ...]) -> None:
    assert run(*args, "--db", store.url) == (2, "", NO_TENANT)


def test_unknown_invoice(store: Store) -> None:
    assert run("reconcile", "--db", store.url, "--invoice", "INV-9") == (
        2,
        "",
        "Error: --invoice: no invoice 'INV-9' in the ledger (invoices: INV-1)\n",
    )
    assert run("reconcile", "--db", store.url, "--tenant", "acme", "--invoice", "INV-9") == (
        2,
        "",
        "Error: --invoice: no invoice 'INV-9' of tenant 'acme' in the ledger (invoices: INV-1)\n",
    )


def test_the_scope_check_on_sqlite_and_postgresql(db_url: str) -> None:
    backend = make_store(db_url)
    try:
        assert run("report", "promises", "--db", db_url, "--tenant", "nosuch") == (
            2,
            "",
            NO_TENANT,
        )
        assert run("reconcile", "--db", db_url, "--invoice", "INV-9") == (
            2,
            "",
            "Error: --invoice: no invoice 'INV-9' in the ledger (invoices: INV-1)\n",
        )
        code, out, _ = run(
            "reconcile",
            "--db",
            db_url,
            "--tenant",
            "acme",
            "--invoice",
            "INV-1",
            "--format",
            "json",
        )
        assert code == 0 and list(json.loads(out)["tenants"]) == ["acme"]
    finally:
        backend.close()


def test_unknown_tenant_or_invoice_of_a_dispute_signs_nothing(
    store: Store, tmp_path: Path
) -> None:
    key = tmp_path / "key"
    write_keypair(key, "calm")
    before = _checkpoints(store)
    out = tmp_path / "d.json"
    # the dispute's own check (reconcile/packets/dispute.py), before it signs
    assert run(
        "dispute",
        "--db",
        store.url,
        "--tenant",
        "nosuch",
        "--invoice",
        "INV-1",
        "--key",
        str(key),
        "--out",
        str(out),
    ) == (2, "", "Error: --invoice: tenant 'nosuch' has no billing line on invoice 'INV-1'\n")
    assert run(
        "dispute",
        "--db",
        store.url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-9",
        "--key",
        str(key),
        "--out",
        str(out),
    ) == (2, "", "Error: --invoice: tenant 'acme' has no billing line on invoice 'INV-9'\n")
    assert run(
        "dispute",
        "--db",
        store.url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-1",
        "--key",
        str(key),
        "--out",
        str(tmp_path / "missing" / "d.json"),
    ) == (2, "", f"Error: --out: no folder {tmp_path / 'missing'} (create it first)\n")
    assert not out.exists() and not (tmp_path / "missing").exists()
    assert _checkpoints(store) == before  # nothing signed


def _checkpoints(store: Store) -> int:
    with store.reading() as conn:
        return int(conn.execute(select(func.count()).select_from(checkpoints)).scalar_one())


@pytest.mark.parametrize(
    ("since", "until"),
    [
        ("2026-01-05T11:00:00Z", "2026-01-05T10:00:00Z"),
        ("2026-01-05T10:00:00Z", "2026-01-05T10:00:00Z"),
    ],
)
def test_an_empty_time_range(store: Store, since: str, until: str) -> None:
    assert run("report", "capacity", "--db", store.url, "--since", since, "--until", until) == (
        2,
        "",
        "Error: --since: not before --until: the time range is empty\n",
    )


IN_MEMORY = (
    "Error: --db: sqlite:// is in memory: what is written is lost when the command ends "
    "(give a file, sqlite:///PATH)\n"
)


def test_an_in_memory_store_is_refused_for_writing(tmp_path: Path) -> None:
    events = tmp_path / "e.jsonl"
    events.write_text("")
    assert run("ingest", "--db", "sqlite://", str(events)) == (2, "", IN_MEMORY)
    assert run("init", "--db", "sqlite://") == (2, "", IN_MEMORY)
    # and a reader finds no ledger in it
    assert run("verify", "--db", "sqlite://") == (
        2,
        "",
        "Error: --db: no ledger at sqlite:// (run `gpuledger init` first)\n",
    )


@pytest.mark.parametrize(
    "args",
    [
        ("reconcile", "--format", "json"),
        ("report", "promises"),
        ("report", "capacity", "--format", "csv"),
        ("export",),
    ],
    ids=" ".join,
)
def test_out_into_a_missing_folder(store: Store, tmp_path: Path, args: tuple[str, ...]) -> None:
    out = tmp_path / "missing" / "out.txt"
    assert run(*args, "--db", store.url, "--out", str(out)) == (
        2,
        "",
        f"Error: --out: no folder {tmp_path / 'missing'} (create it first)\n",
    )
    assert not (tmp_path / "missing").exists()


def test_out_that_is_a_folder_or_a_file(store: Store, tmp_path: Path) -> None:
    assert run("report", "promises", "--db", store.url, "--out", str(tmp_path)) == (
        2,
        "",
        f"Error: --out: {tmp_path} is a folder; name a file in it\n",
    )
    taken = tmp_path / "taken"
    taken.write_text("x")
    assert run("packet", "--db", store.url, "--promise", "P2", "--out", str(taken)) == (
        2,
        "",
        f"Error: --out: {taken} is a file, not a folder\n",
    )


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("these are notes, not a database\n")
    url = f"sqlite:///{bad}"
    message = f"Error: --db: cannot open {url}: file is not a database\n"
    for args in (("verify",), ("reconcile",), ("report", "promises"), ("quarantine",)):
        assert run(*args, "--db", url) == (2, "", message), args
    events = tmp_path / "e.jsonl"
    events.write_text("")
    assert run("ingest", "--db", url, str(events)) == (2, "", message)
    assert bad.read_text() == "these are notes, not a database\n"


@pytest.mark.parametrize(
    "args",
    [
        ("verify",),
        ("quarantine",),
        ("export",),
        ("reconcile",),
        ("report", "promises"),
        ("report", "capacity"),
        ("report", "outcomes"),
        ("report", "placement"),
        ("packet", "--promise", "P2", "--out", "{tmp}/p"),
    ],
    ids=" ".join,
)
def test_read_only_commands_never_create_a_store(tmp_path: Path, args: tuple[str, ...]) -> None:
    db = tmp_path / "none.db"
    code, out, err = run(
        *(a.replace("{tmp}", str(tmp_path)) for a in args), "--db", f"sqlite:///{db}"
    )
    assert (code, out, err) == (
        2,
        "",
        f"Error: --db: no ledger at sqlite:///{db} (run `gpuledger init` first)\n",
    )
    assert (
        sorted(p.name for p in tmp_path.iterdir()) == []
    )  # no empty .db, no -wal, no packet folder


def test_tables_use_the_full_width_when_piped(store: Store) -> None:
    code, out, _ = run("report", "capacity", "--db", store.url)
    assert code == 0
    header = next(line for line in out.splitlines() if "class" in line)
    # every column header whole on one line, though the table is wider than 80 columns
    assert len(header) > 80 and "…" not in out
    for name in ("started, no admission needed", "devices admitted", "admitted jobs started"):
        assert name in header
    code, out, _ = run("report", "capacity", "--db", store.url, "--format", "tsv")
    lines = out.splitlines()
    assert code == 0 and lines[0].split("\t")[:3] == [
        "placement_class",
        "devices_discovered",
        "jobs_admitted",
    ]
    # the total row (tests/test_reports.py works it out): 5 devices, 3 admitted, 3 placed, 4
    # started
    assert lines[-1].split("\t")[:5] == ["all", "5", "3", "3", "4"]


def test_click_usage_errors_are_one_line() -> None:
    assert run("report", "capacity", "--format", "nope") == (
        2,
        "",
        (
            "Error: Invalid value for '--format': 'nope' is not one of 'table', 'json', 'csv', "
            "'tsv'. See `main report capacity --help`.\n"
        ),
    )
    assert run("packet", "--out", "x") == (
        2,
        "",
        "Error: Missing option '--promise'. See `main packet --help`.\n",
    )
    assert run("nosuch") == (2, "", "Error: No such command 'nosuch'. See `main --help`.\n")


def test_the_demo_says_how_many_promises_were_missed() -> None:
    assert (
        _missed_count([{}] * 17)
        == "17 missed; the first 5, with the command that writes the packet:"
    )
    assert (
        _missed_count([{}] * 3)
        == "3 missed; the first 3, with the command that writes the packet:"
    )
    assert _missed_count([{}]) == "1 missed; it, with the command that writes the packet:"
    assert _missed_count([]) == "none missed"
