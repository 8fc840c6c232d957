"""Where the engine's time goes, statement by statement
(`python -m bench.profile_reconcile [--gpus N --days D] [--min-seconds S]`).

Writes (or reuses) the synthetic fleet of `bench.reconcile` as a Parquet file, then runs
the steps of `reconcile_parquet` one by one on the same engine it would get, printing
every SQL statement that takes longer than `--min-seconds` with its wall time and the
process's CPU time (all DuckDB threads), then each step's and the total. CPU time is
the steadier figure on a shared machine; wall time is what the goal is about.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

import reconcile.engine as engine_package
from bench.reconcile import Shape, write_fleet
from reconcile.engine.classify import classify
from reconcile.engine.intervals import build_spans
from reconcile.engine.money import allocate
from reconcile.engine.snapshot import load_parquet


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TimedConnection:
    """A DuckDB connection that reports its slow statements (the rest passes through)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, min_seconds: float) -> None:
        self._con = con
        self._min_seconds = min_seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._con.execute, query, *args, **kwargs)

    def sql(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._con.sql, query, *args, **kwargs)

    def _timed(self, call: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), cpu_seconds()
        result = call(query, *args, **kwargs)
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        if wall >= self._min_seconds:
            print(
                f"    {wall:7.2f} s  cpu {cpu:7.2f} s  {' '.join(str(query).split())[:90]}",
                flush=True,
            )
        return result


def profile(path: Path, min_seconds: float) -> None:
    entries = engine_package.parquet_rows(path)
    started, started_cpu = time.perf_counter(), cpu_seconds()
    with engine_package.engine(entries) as raw:
        con: Any = TimedConnection(raw, min_seconds)
        steps: list[tuple[str, Callable[[], object]]] = [
            ("load", lambda: load_parquet(con, path)),
            ("build_spans", lambda: build_spans(con)),
            ("classify", lambda: classify(con)),
            ("allocate", lambda: allocate(con)),
            (
                "cells",
                lambda: con.sql(engine_package.CELLS, params={"invoice": None}).to_arrow_table(),
            ),
        ]
        for name, step in steps:
            wall, cpu = time.perf_counter(), cpu_seconds()
            step()
            print(
                f"  {name}: {time.perf_counter() - wall:.2f} s, cpu {cpu_seconds() - cpu:.2f} s",
                flush=True,
            )
    print(
        f"total {time.perf_counter() - started:.2f} s, cpu {cpu_seconds() - started_cpu:.2f} s, "
        f"{entries:,} events"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument(
        "--min-seconds", type=float, default=0.3, help="print statements at least this slow"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="keep the fleet here and reuse it (default: a temporary folder)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpuledger-profile-") as scratch:
        folder = args.dir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"fleet-{args.gpus}-{args.days}.parquet"
        if not path.exists():
            write_fleet(path, Shape(args.gpus, args.days))
        profile(path, args.min_seconds)


if __name__ == "__main__":
    main()
