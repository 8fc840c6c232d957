"""`gpuledger reconcile` as finance uses it: every output format of one small invoice,
worked by hand, and the usage errors.

The scenario: acme holds A1 (4 GPUs) 10:00–11:00 and runs j1 on it from 10:00, with
progress every 5 minutes from 10:10 to 10:50, then completes at 10:50. Line L1 bills
4 GPUs 10:00–11:00 for 14.40 USD (3.60 per GPU-hour).
  startup        [10:00, 10:10)  600 s × 4 = 2400 GPU-s  → 14.40 × 2400/14400 = 2.40
  productive     [10:10, 10:50) 2400 s × 4 = 9600 GPU-s  → 9.60 (pending: no result)
  idle_reserved  [10:50, 11:00)  600 s × 4 = 2400 GPU-s  → 2.40
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli import main
from ledger import Store
from tests.reconcile_helpers import Scenario, ingest

EXPECTED = {
    ("startup", "customer", ""): (2400, "2.40"),
    ("productive", "customer", "pending"): (9600, "9.60"),
    ("idle_reserved", "customer", ""): (2400, "2.40"),
}


def _store(tmp_path: Path) -> str:
    s = Scenario()
    s.grant("A1", gpus=4, at="10:00")
    s.start("j1", "A1", at="10:00")
    s.steps("j1", "10:10", "10:15", "10:20", "10:25", "10:30", "10:35", "10:40", "10:45", "10:50")
    s.complete("j1", at="10:50")
    s.release("A1", at="11:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=4, amount="14.40")
    url = f"sqlite:///{tmp_path / 'l.db'}"
    store = Store(url)
    store.init()
    ingest(store, s.events)
    return url


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_csv_one_row_per_line_category_bearer_and_acceptance(tmp_path: Path) -> None:
    code, out, _ = invoke("reconcile", "--db", _store(tmp_path), "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    got = {
        (r["category"], r["bearer"], r["acceptance"]): (int(r["gpu_seconds"]), r["amount"])
        for r in rows
    }
    assert got == EXPECTED
    assert {
        (r["invoice_id"], r["line_id"], r["tenant"], r["allocation_id"], r["currency"])
        for r in rows
    } == {("INV-1", "L1", "acme", "A1", "USD")}


def test_parquet_file_holds_the_same_rows(tmp_path: Path) -> None:
    target = tmp_path / "out.parquet"
    code, _, err = invoke(
        "reconcile", "--db", _store(tmp_path), "--format", "parquet", "--out", str(target)
    )
    assert code == 0 and "wrote 3 rows" in err
    table = pq.read_table(target).to_pylist()
    got = {
        (r["category"], r["bearer"], r["acceptance"] or ""): (r["gpu_seconds"], r["amount"])
        for r in table
    }
    assert got == EXPECTED


def test_json_is_the_design_shape(tmp_path: Path) -> None:
    code, out, _ = invoke("reconcile", "--db", _store(tmp_path), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    acme = doc["tenants"]["acme"]
    assert acme["billed_gpu_seconds"] == 14400 and acme["unbilled_gpu_seconds"] == 0
    assert acme["by_bearer"] == {"provider": "0.00", "customer": "14.40", "disputed": "0.00"}
    assert acme["productive_by_acceptance"] == {"accepted": 0, "rejected": 0, "pending": 9600}
    assert acme["categories"]["productive"] == {
        "gpu_seconds": 9600,
        "amount": "9.60",
        "bearer": "customer",
    }
    assert [(line["line_id"], line["gpu_seconds"], line["amount"]) for line in doc["lines"]] == [
        ("L1", 14400, "14.40")
    ]


def test_table_names_the_tenant_and_each_category(tmp_path: Path) -> None:
    code, out, _ = invoke("reconcile", "--db", _store(tmp_path))
    assert code == 0
    assert "tenant acme" in out
    for category in ("startup", "productive", "idle_reserved"):
        assert category in out


def test_an_invoice_not_in_the_ledger_is_a_usage_error(tmp_path: Path) -> None:
    code, out, err = invoke("reconcile", "--db", _store(tmp_path), "--invoice", "NOPE")
    assert (code, out) == (2, "") and err.startswith(
        "Error: --invoice: no invoice 'NOPE' in the ledger (invoices: "
    )


def test_usage_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    url = _store(tmp_path)
    code, _, err = invoke("reconcile", "--db", url, "--format", "parquet")
    assert code == 2 and "--out: Parquet needs an output file" in err
    code, _, err = invoke("reconcile", "--db", url, "--fail-on-disputed", "lots")
    assert code == 2 and "--fail-on-disputed: not a decimal amount: 'lots'" in err
    code, _, err = invoke("reconcile", "--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert code == 2 and "no ledger at" in err


def test_the_engine_draws_no_progress_bar_on_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    # DuckDB draws its bar on stdout (TTY or not) once a statement runs past
    # progress_bar_time; `reconcile --format json > file` must hold JSON only. Setting that
    # time to 0 makes every statement "slow" (and turns the bar back on: only the engine's
    # enable_progress_bar_print = false keeps it off the screen).
    from reconcile.engine.snapshot import open_engine

    con = open_engine()
    con.execute("SET progress_bar_time = 0")
    con.execute("SELECT sum(range) FROM range(20000000)").fetchall()
    con.close()
    assert capfd.readouterr().out == ""


def test_the_program_ends_at_once_with_its_output_whole_and_its_exit_status(
    tmp_path: Path,
) -> None:
    """`gpuledger` as installed (`cli.run`): a reconciliation ends without the
    interpreter's teardown, so what it wrote to a pipe must be flushed first, whole, and
    its exit status kept (1 when --fail-on-disputed is crossed; 2 for a usage error)."""
    import subprocess
    import sys

    url = _store(tmp_path)

    def gpuledger(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", *args],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
        )

    done = gpuledger("reconcile", "--db", url, "--format", "json")
    assert done.returncode == 0, done.stderr
    (line,) = json.loads(done.stdout)["lines"]
    assert line["line_id"] == "L1" and line["gpu_seconds"] == 14_400
    piped = gpuledger("reconcile", "--db", url, "--format", "csv")
    assert piped.returncode == 0 and len(piped.stdout.strip().splitlines()) == 1 + len(EXPECTED)
    # billed 10:00-11:00 for an allocation granted at 10:30: the first half hour of 4 GPUs
    # (7,200 GPU-s of 14,400) is unallocated, borne by the provider: 7.20 of 14.40 USD
    s = Scenario()
    s.grant("A2", gpus=4, at="10:30")
    s.line("L2", "A2", "10:00", "11:00", gpus=4, amount="14.40")
    late = f"sqlite:///{tmp_path / 'late.db'}"
    store = Store(late)
    store.init()
    ingest(store, s.events)
    store.close()
    crossed = gpuledger("reconcile", "--db", late, "--format", "json", "--fail-on-disputed=7")
    (billed,) = json.loads(crossed.stdout)["lines"]
    assert billed["categories"]["unallocated"]["amount"] == "7.20"
    assert crossed.returncode == 1 and "exceeds 7" in crossed.stderr
    wrong = gpuledger("reconcile", "--db", url, "--format", "nope")
    assert wrong.returncode == 2 and "--format" in wrong.stderr
