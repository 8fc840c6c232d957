"""Shared fixtures: a store on each backend (SQLite file, PostgreSQL schema), events.

PostgreSQL tests use the server at 127.0.0.1:5432 (or $GPULEDGER_TEST_PG); each test gets
a schema of its own, dropped afterwards. Where no server answers they skip, saying why.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from sqlalchemy import text

from ledger import Store

PG_URL = os.environ.get("GPULEDGER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parent.parent
REALDATA = ROOT.parent / "shared" / "realdata"
SLOW = os.environ.get("GPULEDGER_SLOW") == "1"
#: A bug in a command raises in tests, where the user gets one line and exit 3 (cli.py):
#: the tests that drive the CLI in this process see the traceback and fail on it.
os.environ.setdefault("GPULEDGER_DEBUG", "1")
#: Hypothesis examples per fuzz test: the volume knob of the parser fuzzing.
FUZZ_EXAMPLES = 5000 if SLOW else 300


def _pg_unavailable_reason() -> str | None:
    try:
        import psycopg

        with psycopg.connect(
            PG_URL.replace("postgresql+psycopg", "postgresql"), connect_timeout=3
        ):
            return None
    except Exception as exc:  # any failure to connect means: skip, and say why
        return f"PostgreSQL not reachable at {PG_URL}: {str(exc).strip().splitlines()[0]}"


PG_SKIP_REASON = _pg_unavailable_reason()


@pytest.fixture
def pg_url() -> Iterator[str]:
    if PG_SKIP_REASON:
        pytest.skip(PG_SKIP_REASON)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = Store(PG_URL)
    with admin.engine.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    s.init()
    yield s
    s.close()


def event(
    type_: str,
    id_: str,
    data: dict[str, Any],
    *,
    source: str = "test://fleet",
    time: str = "2026-01-05T10:00:00Z",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": id_,
        "source": source,
        "type": type_,
        "time": time,
        "data": data,
        **extra,
    }


def progress(i: int, tenant: str = "acme", source: str = "test://fleet") -> dict[str, Any]:
    return event(
        "job.progress", f"p{i}", {"tenant": tenant, "job_id": "j1", "step": i}, source=source
    )


def write_jsonl(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return path


FIXED_TIME = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def fixed_salts(n: int) -> bytes:
    """Deterministic salts for pinned vectors: every entry's salt is 00 01 … 0f."""
    return bytes(range(16)) * (n // 16)


def run_cli(*args: str) -> tuple[int, str, str]:
    """`gpuledger ARGS` in this process: exit code, stdout, stderr. A traceback is a
    failure of the calling test, never an exit code."""
    from cli import main

    result = CliRunner().invoke(main, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[int]:
    """A local Ray cluster of 2 workers, started once for the whole test session (it takes
    seconds): `reconcile.engine.cluster` finds Ray connected and runs its tasks there. Yields the
    number of workers."""
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        object_store_memory=200 * 1024 * 1024,
    )
    try:
        yield 2
    finally:
        ray.shutdown()
