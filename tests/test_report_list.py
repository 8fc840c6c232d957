"""Reports in one list (reconcile/reports/__init__.py): the command line's `report` commands
are made from REPORT_LIST, so a report added to the list is a command with its formats,
options and help, and nothing else to write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from rich.table import Table
from rich.text import Text

import cli
import reconcile.reports as reports
from reconcile.engine.pipeline import Pipeline
from tests.conftest import event, run_cli, write_jsonl


def test_the_report_commands_are_the_list() -> None:
    group = cli.ReportGroup("report")
    assert list(group.commands) == [r.name for r in reports.REPORT_LIST] == list(reports.REPORTS)
    for spec in reports.REPORT_LIST:
        command = group.commands[spec.name]
        formats = next(p for p in command.params if p.name == "fmt").type
        assert isinstance(formats, click.Choice) and tuple(formats.choices) == spec.formats
        assert {o.name for o in spec.options} <= {p.name for p in command.params}


class CountReport(reports.Report):
    name = "count"
    help = "How many events of each type the ledger holds (a report made for this test)."
    options = (reports.ReportOption("kind", "--kind", "Only this event type.", metavar="TYPE"),)

    def build(self, pipe: Pipeline, tenant: str | None, **options: Any) -> dict[str, Any]:
        con = pipe.need("events")
        found = con.execute(
            "SELECT type, count(*) FROM ev WHERE ($kind IS NULL OR type = $kind) "
            "GROUP BY type ORDER BY type",
            {"kind": options["kind"]},
        ).fetchall()
        return {"types": [{"type": t, "events": n} for t, n in found]}

    def rows(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        return list(doc["types"])

    def tables(self, doc: dict[str, Any]) -> list[Table | Text]:
        return [Text(" ".join(f"{r['type']}={r['events']}" for r in doc["types"]))]


def test_a_report_added_to_the_list_is_a_command(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [
        event("allocation.granted", "g1", {"tenant": "acme", "allocation_id": "a1", "gpus": 2}),
        event("allocation.granted", "g2", {"tenant": "acme", "allocation_id": "a2", "gpus": 1}),
        event("job.submitted", "s1", {"tenant": "acme", "job_id": "j1"}),
    ]
    assert (
        run_cli("ingest", "--db", sqlite_url, str(write_jsonl(tmp_path / "e.jsonl", events)))[0]
        == 0
    )
    monkeypatch.setattr(reports, "REPORT_LIST", (*reports.REPORT_LIST, CountReport()))
    command = cli.ReportGroup("report").commands["count"]
    runner = CliRunner()
    done = runner.invoke(command, ["--db", sqlite_url, "--format", "csv"])
    assert (done.exit_code, done.output) == (
        0,
        # every report's rows end with the period it covers (open: empty)
        "type,events,period_since,period_until\nallocation.granted,2,,\njob.submitted,1,,\n",
    )
    done = runner.invoke(
        command, ["--db", sqlite_url, "--kind", "job.submitted", "--format", "table"]
    )
    assert (done.exit_code, done.output) == (0, "job.submitted=1\n")
    assert "(a report made for this test)" in runner.invoke(command, ["--help"]).output
