"""Credit notes (docs/answers.md, "Credit notes"): FOCUS 1.2 rows for the money a provider
accepted, on the ledger of tests/test_letter.py, with line L2 billed through a FOCUS export
instead of a CloudEvent.

Findings of INV-1 (worked out by hand in tests/test_letter.py): L1/stalled_fault 2.60 USD,
L1/idle_unexplained 1.40, L2/unallocated 2.00, L3/double_billed 1.00. The provider accepts
L1/stalled_fault, accepts 0.50 of L2/unallocated, rejects L3/double_billed and leaves
L1/idle_unexplained open: the credit note has two rows, -2.60 and -0.50, -3.10 USD in all.

The rows are also checked by the real focus-validator 2.x from PyPI (`make focus-validator`),
run from its site-packages folder (it reads its currency list by a relative path); it exits
0 whatever it finds, so its "Pass: N | Fail: M" line and its per-rule lines are read.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli as run
from tests.conftest import write_jsonl
from tests.test_letter import EVENTS

ROOT = Path(__file__).resolve().parent.parent
FOCUS_VENV = ROOT / ".venv-focus"
FOCUS_HEADER = (
    "BilledCost,BillingAccountId,BillingAccountName,BillingCurrency,BillingPeriodEnd,"
    "BillingPeriodStart,ChargeCategory,ChargeClass,ChargeDescription,ChargePeriodEnd,"
    "ChargePeriodStart,InvoiceId,InvoiceIssuerName,ProviderName,PublisherName,RegionId,"
    "ResourceId,ServiceName,SubAccountId,Id,x_GpuCount\n"
)
L2_ROW = (
    "2.00,BA-7,Acme research,USD,2026-02-01T00:00:00Z,2026-01-01T00:00:00Z,Usage,,"
    "2 x H100 for A1,2026-01-05T10:50:00Z,2026-01-05T10:40:00Z,INV-1,Orbital GPU Cloud,"
    "Orbital GPU Cloud,Orbital GPU Cloud,us-east-2,A1,GPU Compute,acme,L2,2\n"
)
ANSWERS = [
    {"line_id": "L1", "category": "stalled_fault", "state": "accepted"},
    {"line_id": "L2", "category": "unallocated", "state": "partly", "amount": "0.50"},
    {"line_id": "L3", "category": "double_billed", "state": "rejected", "reason": "no"},
]


@pytest.fixture(scope="module")
def credit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("credit")
    url = f"sqlite:///{folder / 'ledger.db'}"
    events = [e for e in EVENTS if e["id"] != "L2"]
    assert run("keygen", "--out", str(folder / "key"), "--name", "orbital")[0] == 0
    assert run("ingest", "--db", url, str(write_jsonl(folder / "e.jsonl", events)))[0] == 0
    (folder / "focus.csv").write_text(FOCUS_HEADER + L2_ROW, encoding="utf-8")
    code, _, err = run(
        "ingest", "--db", url, "--format", "focus", "--gpu-field", "x_GpuCount",
        str(folder / "focus.csv"),
    )  # fmt: skip
    assert code == 0, err
    (folder / "a.json").write_text(json.dumps({"answers": ANSWERS}), encoding="utf-8")
    code, _, err = run(
        "answer", "--db", url, "--tenant", "acme", "--invoice", "INV-1",
        "--key", str(folder / "key"), str(folder / "a.json"),
    )  # fmt: skip
    assert code == 0, err
    code, out, err = run(
        "credit-note", "--db", url, "--tenant", "acme", "--invoice", "INV-1",
        "--out", str(folder / "credit.csv"),
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert out == (
        f"wrote {folder / 'credit.csv'}: credit note for invoice INV-1 of acme, 2 rows, "
        "-3.10 USD\n"
    )
    return folder


def rows(folder: Path) -> list[dict[str, str]]:
    with (folder / "credit.csv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_rows_are_the_accepted_money_as_credits_correcting_their_lines(credit: Path) -> None:
    found = rows(credit)
    assert [(r["x_CreditFor"], r["BilledCost"], r["EffectiveCost"]) for r in found] == [
        ("L1/stalled_fault", "-2.60", "-2.60"),
        ("L2/unallocated", "-0.50", "-0.50"),
    ]
    for row in found:
        assert (row["ChargeCategory"], row["ChargeClass"], row["InvoiceId"]) == (
            "Credit",
            "Correction",
            "INV-1",
        )
        assert row["BillingCurrency"] == "USD" and row["ConsumedQuantity"] == ""
    l1, l2 = found
    # L1 was a CloudEvent: its own period, and its source's authority as the provider
    assert (l1["ChargePeriodStart"], l1["ChargePeriodEnd"], l1["x_Corrects"]) == (
        "2026-01-05T10:00:00Z",
        "2026-01-05T10:40:00Z",
        "L1",
    )
    assert l1["InvoiceIssuerName"] == "acme"  # source slurm://acme
    # L2 came from FOCUS: billing period, description, issuer and accounts carried over
    assert {k: l2[k] for k in ("BillingPeriodStart", "BillingPeriodEnd", "ChargeDescription")} == {
        "BillingPeriodStart": "2026-01-01T00:00:00Z",
        "BillingPeriodEnd": "2026-02-01T00:00:00Z",
        "ChargeDescription": "2 x H100 for A1",
    }
    assert (l2["InvoiceIssuerName"], l2["BillingAccountId"], l2["RegionId"]) == (
        "Orbital GPU Cloud",
        "BA-7",
        "us-east-2",
    )
    assert (l2["ChargePeriodStart"], l2["ChargePeriodEnd"]) == (
        "2026-01-05T10:40:00Z",
        "2026-01-05T10:50:00Z",
    )


def test_writing_it_again_gives_the_same_rows(credit: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{credit / 'ledger.db'}"
    again = ["--db", url, "--tenant", "acme", "--invoice", "INV-1"]
    out = tmp_path / "again.csv"
    assert run("credit-note", *again, "--out", str(out))[0] == 0
    assert out.read_text(encoding="utf-8") == (credit / "credit.csv").read_text(encoding="utf-8")


def test_a_later_rejection_takes_its_row_out(credit: Path, tmp_path: Path) -> None:
    source, copy = sqlite3.connect(credit / "ledger.db"), sqlite3.connect(tmp_path / "ledger.db")
    source.backup(copy)  # the module's ledger as it stands (its WAL included)
    source.close()
    copy.close()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    reject = {"line_id": "L1", "category": "stalled_fault", "state": "rejected", "reason": "no"}
    (tmp_path / "r.json").write_text(json.dumps({"answers": [reject]}), encoding="utf-8")
    code, _, err = run(
        "answer", "--db", url, "--tenant", "acme", "--invoice", "INV-1",
        "--key", str(credit / "key"), str(tmp_path / "r.json"),
    )  # fmt: skip
    assert code == 0, err
    code, out, _ = run(
        "credit-note", "--db", url, "--tenant", "acme", "--invoice", "INV-1",
        "--out", str(tmp_path / "credit.csv"),
    )  # fmt: skip
    assert code == 0 and out.endswith(
        ": credit note for invoice INV-1 of acme, 1 rows, -0.50 USD\n"
    )
    assert [r["x_CreditFor"] for r in rows(tmp_path)] == ["L2/unallocated"]


LINE = re.compile(r"^\S+ (?P<rule>[\w-]+): (?P<verdict>PASS|FAIL|SKIPPED)\b", re.M)


def passed_or_alternatives(model: dict[str, Any], passed: set[str]) -> set[str]:
    """Rules that are one alternative of an OR whose rule passed: failing alone is allowed."""
    out: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("CheckFunction") == "OR":
                out.update(i["ModelRuleId"] for i in node.get("Items", []) if "ModelRuleId" in i)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for rule in passed:
        walk(model["ModelRules"].get(rule, {}).get("ValidationCriteria", {}))
    return out


@pytest.mark.skipif(
    not (FOCUS_VENV / "bin" / "focus-validator").exists(),
    reason="focus-validator is not installed: run `make focus-validator` (.venv-focus)",
)
def test_focus_validator_accepts_the_credit_note(credit: Path) -> None:
    site = next((FOCUS_VENV / "lib").glob("python3*/site-packages"))
    result = subprocess.run(
        [
            str(FOCUS_VENV / "bin" / "focus-validator"),
            "--data-file",
            str(credit / "credit.csv"),
            "--validate-version",
            "1.2",
            "--block-download",
        ],  # fmt: skip
        cwd=site,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = re.search(r"Pass: (\d+) \| Fail: (\d+)", result.stdout)
    assert summary is not None, result.stdout[-2000:] + result.stderr[-2000:]
    verdicts = {m["rule"]: m["verdict"] for m in LINE.finditer(result.stdout)}
    failed = {rule for rule, verdict in verdicts.items() if verdict == "FAIL"}
    assert int(summary[1]) > 100 and int(summary[2]) == len(failed)
    model_file = next((site / "focus_validator" / "rules").glob("model-1.2*.json"))
    model = json.loads(model_file.read_text(encoding="utf-8"))
    passed = {rule for rule, verdict in verdicts.items() if verdict == "PASS"}
    # a rule may fail only as the unchosen alternative of an OR that passed (InvoiceId-C-004-C,
    # "null when not invoiced", beside InvoiceId-C-005-C, which these rows meet)
    assert failed <= passed_or_alternatives(model, passed), failed


def test_a_cell_a_spreadsheet_would_run_is_written_as_text(credit: Path) -> None:
    """Every text carried from the source (a description, an id) could start like a
    formula: the CSV prefixes it `'`; the amounts, negative as they are, stay numbers."""
    from decimal import Decimal

    from reconcile.packets.credit_note import COLUMNS, CreditNote, credit_note_csv

    row = dict(rows(credit)[0])
    row["ChargeDescription"] = '=HYPERLINK("http://x","ok")'
    row["x_CreditFor"] = "@SUM(A1)/stalled_fault"
    row["InvoiceId"] = "+INV-1\u202e"
    note = CreditNote("acme", "INV-1", [row], "USD", Decimal("2.60"))
    written = next(csv.DictReader(io.StringIO(credit_note_csv(note))))
    assert list(written) == list(COLUMNS)
    assert written["ChargeDescription"] == '\'=HYPERLINK("http://x","ok")'
    assert written["x_CreditFor"] == "'@SUM(A1)/stalled_fault"
    assert written["InvoiceId"] == "'+INV-1\u202e"
    assert written["BilledCost"] == "-2.60"  # a figure, not text
