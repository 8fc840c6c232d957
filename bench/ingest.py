"""Ingest throughput beside the raw driver (`python -m bench.ingest [--quick]`).

Each case ingests a generated file the way `gpuledger ingest` does (extract, validate,
canonical bytes, dedup, salt, hashes, tree nodes, one durable transaction a batch), then,
in the same process, writes the very rows the ledger wrote into a fresh store of the same
schema and settings through the driver alone: sqlite3 `executemany` (SQLite, WAL,
synchronous=FULL) or psycopg `COPY` (PostgreSQL over loopback), in batches of the same
size, one commit a batch, no parsing, no hashing, no checks. Only the inserts and commits
of the baseline are timed (reading the rows back is not). The ledger side runs twice a
run: parsing in this process, and parsing in a child process (what the CLI does for files
of 16 MiB and more); ratio = the faster one's events/s ÷ baseline events/s. Each side
runs `runs` times, alternating; the best run of each counts, since the machine is
shared. CPU time is this process's (user + system), the child's not included.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text

import ingest
import ledger
from bench.results_file import record
from bench.sources import write_focus, write_native, write_sacct
from ingest import worker
from ledger.append import DEFAULT_BATCH_SIZE, ENTRY_COLUMNS

PG_URL = os.environ.get("GPULEDGER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
GOAL = "at least 100,000 events/s and a ratio of at least 0.5 (native JSONL into SQLite)"


@dataclass(frozen=True)
class Case:
    name: str
    fmt: str
    write: Callable[[Path, int], int]
    backend: str = "sqlite"


@dataclass
class Timing:
    wall_s: float
    cpu_s: float
    events: int

    @property
    def per_s(self) -> float:
        return self.events / self.wall_s


def ingest_file(url: str, path: Path, fmt: str, parse_process: bool = False) -> Timing:
    """What `gpuledger ingest` does, without the progress bar: parsing in this process, or
    in a child process whatever the file's size (the CLI starts one from 16 MiB up)."""
    store = ledger.Store(url)
    store.init()
    wall, cpu = time.perf_counter(), time.process_time()
    if parse_process:
        worker.MIN_BYTES = 0
        records = worker.extract_parallel(path, fmt)
    else:
        records = ingest.extract(path, fmt)
    report = ledger.append_stream(ledger.Appender(store), records)
    timing = Timing(
        time.perf_counter() - wall, time.process_time() - cpu, report.appended + report.duplicates
    )
    store.close()
    if report.quarantined:
        raise RuntimeError(
            f"{path}: {report.quarantined} records quarantined: {report.problems[:3]}"
        )
    return timing


def ledger_rows(url: str) -> Iterator[list[tuple[Any, ...]]]:
    """The ledger's entry rows, a batch at a time, as the driver returns them."""
    store = ledger.Store(url)
    raw: Any = store.engine.raw_connection()
    mark = "?" if store.dialect == "sqlite" else "%s"
    last = 0
    try:
        while True:
            cursor = raw.cursor()
            cursor.execute(
                f"SELECT {', '.join(ENTRY_COLUMNS)} FROM entries WHERE seq > {mark} ORDER BY seq "
                f"LIMIT {DEFAULT_BATCH_SIZE}",
                (last,),
            )
            rows = [tuple(r) for r in cursor.fetchall()]
            cursor.close()
            raw.rollback()
            if not rows:
                return
            yield rows
            last = rows[-1][0]
    finally:
        raw.close()
        store.close()


def baseline(source_url: str, target_url: str) -> Timing:
    """The same rows through the bare driver, into a fresh store with the same schema and
    connection settings (the store's own raw connection: WAL and synchronous=FULL on SQLite)."""
    target = ledger.Store(target_url)
    target.init()
    raw: Any = target.engine.raw_connection()
    db = raw.dbapi_connection
    columns = ", ".join(ENTRY_COLUMNS)
    wall = cpu = 0.0
    count = 0
    for rows in ledger_rows(source_url):
        w0, c0 = time.perf_counter(), time.process_time()
        if target.dialect == "sqlite":
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                f"INSERT INTO entries ({columns}) VALUES ({', '.join('?' * len(ENTRY_COLUMNS))})",
                rows,
            )
            db.execute("COMMIT")
        else:
            with (
                db.cursor() as cursor,
                cursor.copy(f"COPY entries ({columns}) FROM STDIN") as copy,
            ):
                for row in rows:
                    copy.write_row(row)
            db.commit()
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        count += len(rows)
    raw.close()
    target.close()
    return Timing(wall, cpu, count)


class Stores:
    """Fresh stores for one run: files in a folder, or schemas on the PostgreSQL server."""

    def __init__(self, backend: str, folder: Path) -> None:
        self.backend, self.folder = backend, folder
        self.schemas: list[str] = []

    def fresh(self) -> str:
        if self.backend == "sqlite":
            return f"sqlite:///{self.folder / f'{uuid.uuid4().hex[:8]}.db'}"
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with ledger.Store(PG_URL).engine.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        self.schemas.append(schema)
        return f"{PG_URL}?options=-csearch_path%3D{schema}"

    def drop(self) -> None:
        if self.schemas:
            with ledger.Store(PG_URL).engine.begin() as conn:
                for schema in self.schemas:
                    conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        self.schemas.clear()


def _best(timings: list[Timing]) -> Timing:
    return min(timings, key=lambda t: t.wall_s)


def measure(case: Case, count: int, runs: int) -> dict[str, Any]:
    """Each run: the ingest parsing in-process, the ingest parsing in a child, the baseline."""
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as folder:
        source = Path(folder) / f"{case.name}.input"
        events = case.write(source, count)
        size = source.stat().st_size
        stores = Stores(case.backend, Path(folder))
        timings: dict[str, list[Timing]] = {"in_process": [], "parse_process": [], "baseline": []}
        try:
            for _ in range(runs):
                url = stores.fresh()
                timings["in_process"].append(ingest_file(url, source, case.fmt))
                timings["parse_process"].append(
                    ingest_file(stores.fresh(), source, case.fmt, parse_process=True)
                )
                timings["baseline"].append(baseline(url, stores.fresh()))
            again = ingest_file(url, source, case.fmt)  # every record a duplicate now
        finally:
            stores.drop()
    single, parallel, base = (
        _best(timings[k]) for k in ("in_process", "parse_process", "baseline")
    )
    return {
        "backend": case.backend,
        "format": case.fmt,
        "events": events,
        "input_mib": round(size / 2**20, 1),
        "runs": runs,
        "batch_size": DEFAULT_BATCH_SIZE,
        "ledger_events_per_s": round(max(single.per_s, parallel.per_s)),
        "ratio": round(max(single.per_s, parallel.per_s) / base.per_s, 3),
        "in_process_events_per_s": round(single.per_s),
        "in_process_cpu_us_per_event": round(single.cpu_s / events * 1e6, 2),
        "parse_process_events_per_s": round(parallel.per_s),
        "parse_process_main_cpu_us_per_event": round(parallel.cpu_s / events * 1e6, 2),
        "baseline_events_per_s": round(base.per_s),
        "baseline_cpu_us_per_event": round(base.cpu_s / events * 1e6, 2),
        "reingest_duplicates_per_s": round(again.per_s),
        "baseline": "raw sqlite3 executemany of the same rows"
        if case.backend == "sqlite"
        else "raw psycopg COPY of the same rows",
        "goal": GOAL,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


CASES = [
    Case("native_sqlite", "cloudevents", write_native),
    Case("native_postgresql", "cloudevents", write_native, backend="postgresql"),
    Case("focus_sqlite", "focus", write_focus),
    Case("sacct_sqlite", "sacct", lambda path, count: write_sacct(path, count // 5)),
]
FULL = {
    "native_sqlite": 1_000_000,
    "native_postgresql": 1_000_000,
    "focus_sqlite": 200_000,
    "sacct_sqlite": 250_000,
}
QUICK = {
    "native_sqlite": 60_000,
    "native_postgresql": 20_000,
    "focus_sqlite": 20_000,
    "sacct_sqlite": 20_000,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="small inputs, one run each (under a minute)"
    )
    parser.add_argument(
        "--runs", type=int, default=None, help="runs per side (default 3, quick 1)"
    )
    parser.add_argument(
        "--events",
        type=int,
        default=None,
        help="this many events in each case (recorded as ingest_<case>_<N>)",
    )
    parser.add_argument(
        "cases", nargs="*", help=f"cases to run (default all): {', '.join(c.name for c in CASES)}"
    )
    args = parser.parse_args(argv)
    sizes, runs = (QUICK, 1) if args.quick else (FULL, 3)
    runs = args.runs or runs
    for case in CASES:
        if args.cases and case.name not in args.cases:
            continue
        result = measure(case, args.events or sizes[case.name], runs)
        record(
            f"ingest_{case.name}"
            + ("_quick" if args.quick else "")
            + (f"_{args.events}" if args.events else ""),
            result,
        )
        print(f"ingest {case.name}: {result}", flush=True)


if __name__ == "__main__":
    main()
