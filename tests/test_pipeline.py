"""The declared pipeline (reconcile/engine/pipeline.py): its order rules hold, each stage is
built once and on demand, and the outputs create no table of their own."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from reconcile.engine import pipeline
from reconcile.engine.pipeline import RELATIONS, SQL_DIR, STAGE_BY_NAME, STAGES, Pipeline, Stage

ROOT = Path(__file__).resolve().parent.parent


def _noop(pipe: Pipeline, params: Mapping[str, Any]) -> None:
    pass


def test_no_create_in_reports_or_packets() -> None:
    """Done when `grep -rn CREATE reconcile/reports reconcile/packets` finds nothing."""
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("reconcile/reports", "reconcile/packets")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file() and path.suffix in (".py", ".sql")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bCREATE\b", line)
    ]
    assert found == []


def test_a_stage_needing_a_later_one_is_refused() -> None:
    early = Stage("early", ("late",), ("a",), _noop)
    late = Stage("late", (), ("b",), _noop)
    with pytest.raises(AssertionError, match="not listed before it"):
        pipeline._check_stages((STAGES[0], early, late), {})
    assert set(pipeline._check_stages((STAGES[0], late, early), {})) == {"events", "late", "early"}
    with pytest.raises(AssertionError, match="does not make"):
        pipeline._check_stages((STAGES[0], late, early), {"jobs": ("late", "a")})


def test_a_relation_with_two_makers_or_a_parameterised_need_is_refused() -> None:
    one = Stage("one", ("events",), ("x",), _noop)
    with pytest.raises(AssertionError, match="makes what another"):
        pipeline._check_stages((STAGES[0], one, Stage("two", ("events",), ("x",), _noop)), {})
    window = Stage("window", ("events",), ("w",), _noop, params=("since",))
    with pytest.raises(AssertionError, match="parameterised"):
        pipeline._check_stages((STAGES[0], window, Stage("after", ("window",), ("y",), _noop)), {})


def test_every_readable_name_is_a_relation_its_stage_makes() -> None:
    for name, (stage, relation) in RELATIONS.items():
        assert relation in STAGE_BY_NAME[stage].makes, name


def _counting(
    monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]
) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    for name in names:
        stage = STAGE_BY_NAME[name]

        def build(pipe: Pipeline, params: Mapping[str, Any], stage: Stage = stage) -> None:
            calls.append((stage.name, dict(params)))
            original(stage)(pipe, params)

        monkeypatch.setitem(STAGE_BY_NAME, name, dataclasses.replace(stage, build=build))
    return calls


def original(stage: Stage) -> Any:
    return next(s for s in STAGES if s.name == stage.name).build


def test_a_stage_is_built_once_after_what_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch, ("promise_outcomes", "job_facts", "envelope_groups"))
    with Pipeline.of_entries([]) as pipe:
        assert pipe.built() == ["events"]
        con = pipe.need("envelope_groups")
        pipe.need("envelope_groups")
        pipe.need("job_facts")
        assert [name for name, _ in calls] == ["job_facts", "promise_outcomes", "envelope_groups"]
        assert pipe.built() == ["events", "promise_outcomes", "job_facts", "envelope_groups"]
        tables = {
            row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        }
        assert {"job_groups", "allocation_groups", "job_outcomes", "promise_outcomes"} <= tables
        assert "money" not in tables  # nobody asked for it


def test_a_parameterised_stage_is_built_again_only_for_other_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _counting(monkeypatch, ("fleet_changes",))
    with Pipeline.of_entries([]) as pipe:
        pipe.need("fleet_changes", since=0, until=10)
        pipe.need("fleet_changes", since=0, until=10)
        pipe.need("fleet_changes", since=5, until=10)
        assert calls == [
            ("fleet_changes", {"since": 0, "until": 10}),
            ("fleet_changes", {"since": 5, "until": 10}),
        ]
        with pytest.raises(TypeError, match="takes"):
            pipe.need("fleet_changes")
        with pytest.raises(KeyError):
            pipe.need("nothing")


def test_the_sql_files_are_stages_and_packaged() -> None:
    files = {path.stem for path in SQL_DIR.glob("*.sql")}
    assert files and files <= set(STAGE_BY_NAME)
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    assert "sql/*.sql" in package_data["reconcile.engine"]
