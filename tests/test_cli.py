"""The command line through CliRunner: exit codes and exact output."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import click
import pytest
from sqlalchemy import text

import cli
from cli import main
from ledger import Store
from tests.conftest import ROOT, event, progress, write_jsonl
from tests.conftest import run_cli as run


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in group.commands.items():
        found.append(prefix + (name,))
        if isinstance(command, click.Group):
            found.extend(all_commands(command, prefix + (name,)))
    return found


@pytest.mark.parametrize("path", all_commands(main), ids=" ".join)
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    assert command.help and len(command.help.strip()) > 20, f"{' '.join(path)} lacks help text"
    code, out, _ = run(*path, "--help")
    assert code == 0 and "Usage:" in out


def test_import_cli_loads_no_heavy_library() -> None:
    """What keeps --help fast: the commands import the project (and sqlalchemy, duckdb, ... behind
    it)
    only when they run. A fresh interpreter, since this one has loaded them all."""
    probe = (
        "import cli, sys; print(sorted(m for m in "
        "('sqlalchemy','duckdb','pyarrow','pandas','pydantic','jinja2') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout == "[]\n"


def test_help_values_written_in_cli_are_the_libraries_own() -> None:
    import ingest
    import ledger.append
    import ledger.checkpoint
    import reconcile.reports
    import reconcile.reports.output

    assert cli.INGEST_FORMATS == tuple(ingest.format_names())
    assert cli.DEFAULT_BATCH_SIZE == ledger.append.DEFAULT_BATCH_SIZE
    assert cli.DEFAULT_ORIGIN == ledger.checkpoint.DEFAULT_ORIGIN
    assert cli.RECONCILE_FORMATS == tuple(reconcile.reports.output.FORMATS)
    assert cli.REPORT_FORMATS == tuple(reconcile.reports.FORMATS)


def test_ingest_reports_counts_and_reingest_is_idempotent(tmp_path: Path, db_url: str) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", [progress(i) for i in range(1, 6)])
    assert run("ingest", "--db", db_url, str(path)) == (
        0,
        f"{path}: read 5 · appended 5 · duplicate 0 · quarantined 0\n",
        "",
    )
    assert run("ingest", "--db", db_url, str(path)) == (
        0,
        f"{path}: read 5 · appended 0 · duplicate 5 · quarantined 0\n",
        "",
    )
    code, out, _ = run("verify", "--db", db_url)
    assert (code, out) == (
        0,
        "ok: 5 entries, 1 tenants; checked leaves, chain, tenant chains, batch heads, tree nodes, "
        "quarantine chain\n",
    )


def test_bad_records_exit_1_name_file_line_field_and_keep_the_good(
    tmp_path: Path, sqlite_url: str
) -> None:
    path = tmp_path / "mixed.jsonl"
    bad_gpus = event("allocation.granted", "a1", {"tenant": "t", "allocation_id": "A", "gpus": 0})
    path.write_text(
        "\n".join(
            [
                json.dumps(progress(1)),
                "{not json",
                json.dumps(bad_gpus),
                "",
                json.dumps(progress(2)),
            ]
        )
        + "\n"
    )
    code, out, err = run("ingest", "--db", sqlite_url, str(path))
    assert code == 1
    assert out == f"{path}: read 4 · appended 2 · duplicate 0 · quarantined 2\n"
    assert err.splitlines() == [
        f"{path}:2: (record): Invalid JSON: key must be a string at line 1 column 2",
        f"{path}:3: data.gpus: Input should be greater than or equal to 1",
    ]
    code, out, _ = run("quarantine", "--db", sqlite_url, "--format", "json")
    listed = json.loads(out)
    assert [(r["line"], r["field"], r["record"]) for r in listed] == [
        (2, "(record)", "{not json"),
        (3, "data.gpus", json.dumps(bad_gpus)),
    ]


def test_conflict_is_reported_and_quarantined(tmp_path: Path, sqlite_url: str) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", [progress(1)])
    changed = progress(1)
    changed["data"]["step"] = 2
    second = write_jsonl(tmp_path / "b.jsonl", [changed])
    run("ingest", "--db", sqlite_url, str(first))
    code, out, err = run("ingest", "--db", sqlite_url, str(second))
    assert code == 1 and "quarantined 1" in out
    assert err.startswith(
        f"{second}:1: id: event 'p1' from 'test://fleet' is already in the ledger with other "
        "content"
    )


def test_missing_file_is_a_usage_error(tmp_path: Path, sqlite_url: str) -> None:
    code, _, err = run("ingest", "--db", sqlite_url, str(tmp_path / "nope.jsonl"))
    assert code == 2 and "does not exist" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://x", "Error: --db: unsupported database 'mysql' (sqlite or postgresql)\n"),
        ("not a url", "Error: --db: not a database URL: 'not a url'\n"),
    ],
)
def test_bad_database_urls_are_one_line_errors(url: str, message: str) -> None:
    assert run("verify", "--db", url) == (2, "", message)


def test_verify_of_a_missing_store_says_run_init(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    code, _, err = run("verify", "--db", url)
    assert (code, err) == (2, f"Error: --db: no ledger at {url} (run `gpuledger init` first)\n")


def test_unreachable_postgres_is_a_one_line_error() -> None:
    code, _, err = run("init", "--db", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert code == 2 and err.startswith("Error: --db: cannot open") and len(err.splitlines()) == 1


def test_verify_exits_1_and_names_the_seq(tmp_path: Path, sqlite_url: str) -> None:
    run(
        "ingest",
        "--db",
        sqlite_url,
        str(write_jsonl(tmp_path / "e.jsonl", [progress(i) for i in range(1, 9)])),
    )
    store = Store(sqlite_url)
    with store.engine.begin() as conn:
        conn.execute(text("DROP TRIGGER entries_no_update"))
        conn.execute(text("UPDATE entries SET source = 'elsewhere' WHERE seq = 6"))
    code, out, err = run("verify", "--db", sqlite_url)
    assert code == 1 and out == ""
    assert err.startswith(
        "FAILED at seq 6: edited: the entry's content or salt does not match its leaf hash"
    )


def test_init_is_repeatable(sqlite_url: str) -> None:
    assert run("init", "--db", sqlite_url) == (0, f"initialised {sqlite_url}\n", "")
    assert run("init", "--db", sqlite_url) == (0, f"initialised {sqlite_url}\n", "")


def test_export_filters_and_formats(tmp_path: Path, sqlite_url: str) -> None:
    events = [
        progress(1, "a"),
        progress(2, "b"),
        event("health.fault", "f", {"node": "n", "code": "xid-79"}),
    ]
    run("ingest", "--db", sqlite_url, str(write_jsonl(tmp_path / "e.jsonl", events)))
    code, out, _ = run("export", "--db", sqlite_url, "--tenant", "b")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [(r["seq"], r["tenant"], r["event"]["id"]) for r in lines] == [
        (2, "b", "p2")
    ]
    assert len(lines[0]["salt"]) == 32 and len(lines[0]["leaf_hash"]) == 64
    code, out, _ = run(
        "export",
        "--db",
        sqlite_url,
        "--type",
        "health.fault",
        "--format",
        "parquet",
        "--out",
        str(tmp_path / "f.parquet"),
    )
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "f.parquet")
    assert (code, out, table.column("id").to_pylist()) == (
        0,
        f"wrote 1 entries to {tmp_path / 'f.parquet'}\n",
        ["f"],
    )
    assert run("export", "--db", sqlite_url, "--format", "parquet")[0] == 2


def test_json_array_batches_ingest_with_element_lines(tmp_path: Path, sqlite_url: str) -> None:
    path = tmp_path / "batch.json"
    path.write_text(
        "[\n"
        + ",\n".join(json.dumps(e) for e in [progress(1), {"specversion": "1.0"}, progress(3)])
        + "\n]\n"
    )
    code, out, err = run("ingest", "--db", sqlite_url, str(path))
    assert (code, out) == (1, f"{path}: read 3 · appended 2 · duplicate 0 · quarantined 1\n")
    assert err.startswith(f"{path}:3: type: missing event type")


def test_demo_simulates_ingests_signs_and_verifies(tmp_path: Path) -> None:
    out_dir = tmp_path / "demo"
    for _ in range(2):  # a second run replaces the fleet, the store and the key
        code, out, _ = run("demo", "--out", str(out_dir))
        assert code == 0, out
        manifest = json.loads((out_dir / "sim" / "manifest.json").read_text())
        ingest_line = next(line for line in out.splitlines() if line.startswith("2 ingest: "))
        read, appended = (
            int(ingest_line.split(word)[1].split()[0]) for word in ("read ", "appended ")
        )
        assert read == appended and appended > manifest["counts"]["progress_events"]
        assert ingest_line.endswith("duplicate 0 · quarantined 0")
        assert f"4 verify: ok: {appended} entries, 4 tenants" in out
        for name in ("checkpoint.txt", "demo-key.pub", "gpuledger.db", "sim/truth.jsonl"):
            assert (out_dir / name).exists(), name
        assert f"{out_dir / 'sim'}" in out and f"{out_dir / 'demo-key.pub'}" in out
        # Steps 5-7: the reconciliation, the summary and every user's output.
        assert (
            "5 reconcile: " in out
            and "what every billed GPU-second was" in out
            and "biggest findings" in out
        )
        assert "verified with the public key alone" in out
        for name in (
            "reconcile.json",
            "reconcile.csv",
            "reconcile.parquet",
            "reports/promises.json",
            "reports/capacity.json",
            "reports/outcomes.csv",
        ):
            assert (out_dir / name).exists(), name
        assert len(list(out_dir.glob("dispute-*.json"))) == 1
        assert len(list(out_dir.glob("packet-*/packet.html"))) == 1
        # step 6 counts the misses the promises report lists; step 7 says why the first was missed
        misses = json.loads((out_dir / "reports" / "promises.json").read_text())["misses"]
        assert (
            f"6 promises: {len(misses)} missed; the first 5, with the command that writes the "
            "packet:" in out
        )
        assert (
            f"  why: {json.loads(next(out_dir.glob('packet-*/packet.json')).read_text())['why']}"
            in out
        )
        doc = json.loads((out_dir / "reconcile.json").read_text())
        assert len(doc["tenants"]) == 4
        _check_demo_evidence(out_dir, out)
        _check_demo_answers(out_dir, out)


def _check_demo_answers(out_dir: Path, out: str) -> None:
    """The demo's answers (reconcile/demo.py `demo_answers`), worked out here from the
    packet's claims: every provider-borne finding accepted but the last (rejected), the
    largest disputed one accepted half (rounded down to the cent), the rest open; the
    credit note is the accepted money, one row per finding, negative."""
    packet_path = next(out_dir.glob("dispute-*.json"))
    claims = json.loads(packet_path.read_text())["claims"]
    answers = json.loads(packet_path.read_text())["answers"]
    provider = [c for c in claims if c["bearer"] == "provider"]
    disputed = [c for c in claims if c["bearer"] == "disputed" and Decimal(c["amount"]) > 0]
    largest = max(disputed, key=lambda c: (Decimal(c["amount"]), c["line_id"]))
    half = (Decimal(largest["amount"]) / 2).quantize(Decimal("0.01"), rounding="ROUND_DOWN")
    expected = {(c["line_id"], c["category"]): "accepted" for c in provider[:-1]}
    expected[(provider[-1]["line_id"], provider[-1]["category"])] = "rejected"
    expected[(largest["line_id"], largest["category"])] = "partly"
    assert {(a["line_id"], a["category"]): a["state"] for a in answers} == expected
    assert all(a["status"] == "current" for a in answers)
    total = sum((Decimal(c["amount"]) for c in provider[:-1]), Decimal(0)) + half
    rows = list(csv.DictReader(io.StringIO(next(out_dir.glob("credit-note-*.csv")).read_text())))
    assert len(rows) == len(provider)  # the accepted ones and the partly one
    assert sum(Decimal(r["BilledCost"]) for r in rows) == -total
    assert {r["ChargeCategory"] for r in rows} == {"Credit"}
    assert (
        f"  the provider's answers: accepted {len(provider) - 1}, partly 1, rejected 1, "
        f"{len(claims) - len(provider) - 1} open; credit note "
    ) in out
    assert f": {len(provider)} rows, {-total} USD" in out


def _check_demo_evidence(out_dir: Path, out: str) -> None:
    """Steps 8-9 against the simulator's own truth (truth_evidence.json, read here as written)."""
    manifest = json.loads((out_dir / "sim" / "manifest.json").read_text())
    truth = json.loads((out_dir / "sim" / manifest["truth"]["evidence"]).read_text())
    causes = json.loads((out_dir / "sim" / manifest["truth"]["causes"]).read_text())
    truth["fleet_changes"] = causes["fleet_changes"] + truth["fleet_changes"]  # the day first
    reports = out_dir / "reports"
    for name in (
        "envelope.json",
        "envelope.csv",
        "envelope.html",
        "envelope_by_class.json",
        "envelope_by_class.csv",
        "capacity.csv",
        "capacity_changes.csv",
    ):
        assert (reports / name).exists(), name
    assert (reports / "envelope.html").read_text().lstrip().lower().startswith("<!doctype html")
    # the envelope per class covers the classes the simulator offers (truth: whole, mig, timeslice)
    by_class = json.loads((reports / "envelope_by_class.json").read_text())
    assert {g["placement_class"].split(":")[0] for g in by_class["groups"]} == set(
        truth["receipts"]["classes"]
    )
    assert "8 envelope: " in out and "the envelope per placement class" in out
    # receipts per class: the simulator's class `mig` is the report's `mig:<profile>`
    capacity = json.loads((reports / "capacity.json").read_text())
    # (start attempts and failures: the fleet's, and the causes day's failed start)
    found: dict[str, dict[str, int]] = {}
    keys = ("receipts", "devices_discovered", "start_attempts", "failed_starts")
    for row in capacity["receipts"]:
        family = found.setdefault(row["placement_class"].split(":")[0], dict.fromkeys(keys, 0))
        for key in keys:
            family[key] += row[key]
    day = causes["failed_start_receipts"]
    assert found == {
        cls: {
            "receipts": t["receipts"],
            "devices_discovered": t["devices_discovered"],
            "start_attempts": t["attempted"] + day.get(cls, {}).get("attempted", 0),
            "failed_starts": t["failed_to_start"] + day.get(cls, {}).get("failed", 0),
        }
        for cls, t in truth["receipts"]["classes"].items()
    }
    # every miss of the causes day is named with the truth's cause and seconds
    named = {
        m["promise_id"]: (m["cause"], m["cause_seconds"])
        for m in json.loads((reports / "promises.json").read_text())["misses"]
    }
    for m in causes["misses"]:
        assert named[m["promise_id"]] == (m["cause"], m["cause_seconds"]), m["situation"]
    receipts_line = next(
        line
        for line in out.splitlines()
        if line.startswith("9 capacity: start receipts per class")
    )
    for cls, t in truth["receipts"]["classes"].items():
        assert f" {cls}" in receipts_line and f" {t['receipts']} (" in receipts_line, (
            cls,
            receipts_line,
        )
    # every fleet change, its window and the receipts it held back past its end
    changes = capacity["changes"]
    assert [
        (c["change_id"], c["kind"], c["nodes"], c["started_at"], c["ended_at"]) for c in changes
    ] == [
        (t["change_id"], t["kind"], t["nodes"], t["started_at"], t["ended_at"])
        for t in truth["fleet_changes"]
    ]
    for change, t in zip(changes, truth["fleet_changes"]):
        during = next(w for w in change["windows"] if w["phase"] == "during")
        assert sorted(h["job_id"] for h in change["held_past_end"]) == sorted(t["delayed_starts"])
        # no customer job is asked for, starts or is interrupted during the change: only receipts
        assert during["submitted"] == len(t["delayed_starts"]) + len(t["on_time_during"])
        assert (
            during["started_after_window"] == len(t["delayed_starts"])
            and during["interrupted"] == 0
        )
        assert f"{t['kind']} {t['change_id']} of {' '.join(t['nodes'])}" in out
    rows = list(csv.DictReader(io.StringIO((reports / "capacity_changes.csv").read_text())))
    assert [(r["change_id"], r["phase"]) for r in rows] == [
        (t["change_id"], phase)
        for t in truth["fleet_changes"]
        for phase in ("before", "during", "after")
    ]
    # placement (RULES.md 13, truth_placement.json): the allocations the truth says were not
    # placed as sold (the pilots' captures without NVLink, and the multi-node pool's) are
    # the report's mismatches, and their lines the claim; rho per class
    placement = json.loads((reports / "placement.json").read_text())
    placed = json.loads((out_dir / "sim" / manifest["truth"]["placement"]).read_text())["lines"]
    not_as_sold = {
        (p["tenant"], p["allocation_id"]) for p in placed if p["state"] == "not_as_sold"
    }
    observed = {(p["tenant"], p["allocation_id"]) for p in placed if p["state"] != "unobserved"}
    assert {
        (a["tenant"], a["allocation_id"])
        for a in placement["allocations"]
        if a["status"] == "mismatch"
    } == not_as_sold
    pilots = {(p["tenant"], p["allocation_id"]) for p in truth["placement"]}
    assert pilots <= observed
    assert {
        (p["tenant"], p["allocation_id"]) for p in truth["placement"] if not p["observed_match"]
    } <= not_as_sold
    assert (
        f"10 placement: {len(observed)} of {manifest['counts']['allocations']} allocations "
        f"observed, {len(not_as_sold)} mismatched, " in out
    )
    _check_demo_placement_claims(out_dir, out, placed)
    rho = {
        p["placement_class"].split(":")[0]: (p["n"], Decimal(p["spearman"]))
        for p in placement["prediction"]
        if p["n"]
    }
    assert rho == {
        cls: (t["allocations"], Decimal(t["rank_correlation"]))
        for cls, t in truth["probes"]["classes"].items()
    }
    # serving: each window the simulator wrote is one concurrency level of its tenant
    serving = json.loads((reports / "outcomes.json").read_text())["serving"]
    assert sorted(
        (r["tenant"], r["concurrency"], r["requests"], r["accepted"])
        for r in serving
        if r["concurrency"] != "all"
    ) == sorted(
        (w["tenant"], w["concurrency"], w["requests"], w["accepted"]) for w in truth["serving"]
    )
    for w in truth["serving"]:
        assert f"│ {w['requests']} ({w['accepted']}) " in out, w
    assert (reports / "serving.csv").exists() and (reports / "placement.csv").exists()


def _cents(value: Fraction) -> Decimal:
    """An exact amount rounded half-even to cents, as reports show it."""
    return Decimal(round(value * 100)) / 100


def _check_demo_placement_claims(out_dir: Path, out: str, placed: list[dict[str, Any]]) -> None:
    """The multi-node pool and the placement claims, against the simulator's truth: the
    claim per tenant (rounded as reported) in reconcile.json, the demo's line, and the
    dispute packet's placement claims, line by line."""
    manifest = json.loads((out_dir / "sim" / "manifest.json").read_text())
    counts = manifest["counts"]
    assert manifest["config"]["multinode"] is True
    assert f"1 simulate: {counts['allocations']} allocations, " in out
    pool = [
        json.loads(text)["data"]
        for text in (out_dir / "sim" / "multinode" / "events.jsonl").read_text().splitlines()
        if json.loads(text)["type"] == "allocation.granted"
    ]
    assert counts["allocations.multinode"] == len(pool)
    assert any(len(g.get("nodes", [])) >= 2 for g in pool)  # jobs across nodes, and gangs
    claims: dict[str, Fraction] = defaultdict(Fraction)
    for p in placed:
        claims[p["tenant"]] += Fraction(p["claim"])
    doc = json.loads((out_dir / "reconcile.json").read_text())
    for tenant, claim in claims.items():
        got = doc["tenants"][tenant]["placement"]["not_as_sold"]["claim"]
        assert Decimal(got) == _cents(claim), tenant
    total = sum((_cents(c) for c in claims.values()), Decimal(0))
    lines = sum(p["state"] == "not_as_sold" for p in placed)
    assert total > 0 and f"  placement claim: {total:,} USD on {lines} line(s)\n" in out
    # the dispute packet's placement claims are the truth's not_as_sold lines of its invoice
    packet = json.loads(next(out_dir.glob("dispute-*.json")).read_text())
    truth_lines = (out_dir / "sim" / manifest["truth"]["lines"]).read_text().splitlines()
    invoice = {(r["tenant"], r["line_id"]): r["invoice_id"] for r in map(json.loads, truth_lines)}
    expected = {
        p["line_id"]: _cents(Fraction(p["claim"]))
        for p in placed
        if p["state"] == "not_as_sold"
        and p["tenant"] == packet["tenant"]
        and invoice[(p["tenant"], p["line_id"])] == packet["invoice_id"]
    }
    assert expected
    assert {c["line_id"]: Decimal(c["amount"]) for c in packet["placement_claims"]} == expected


def test_an_unexpected_error_is_one_line_and_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug (here: the store's init raising what no code expects) reaches the user as one
    line with exit 3, never a traceback; GPULEDGER_DEBUG=1 gives the traceback back."""
    from click.testing import CliRunner

    def broken(self: Store) -> None:
        raise RuntimeError("the disk said no\n  SELECT 1\n(Background on this error at: …)")

    monkeypatch.setattr(Store, "init", broken)
    url = f"sqlite:///{tmp_path / 'l.db'}"
    monkeypatch.delenv("GPULEDGER_DEBUG", raising=False)
    result = CliRunner().invoke(main, ["init", "--db", url])
    assert result.exit_code == 3
    assert result.output.splitlines()[0] == "internal error: RuntimeError: the disk said no"
    assert "Traceback" not in result.output and "SELECT" not in result.output
    monkeypatch.setenv("GPULEDGER_DEBUG", "1")
    result = CliRunner().invoke(main, ["init", "--db", url])
    assert isinstance(result.exception, RuntimeError)


def test_the_machine_failing_a_command_is_one_line_and_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk is not a bug to report: one line naming it, exit 3."""
    from click.testing import CliRunner

    def full(self: Store) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Store, "init", full)
    monkeypatch.delenv("GPULEDGER_DEBUG", raising=False)
    result = CliRunner().invoke(main, ["init", "--db", f"sqlite:///{tmp_path / 'l.db'}"])
    assert result.exit_code == 3
    assert result.output == "error: OSError: [Errno 28] No space left on device\n"
