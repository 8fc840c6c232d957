"""Reconcile from the store beside reconcile from Parquet, on the same entries
(`python -m bench.store_read [--gpus N --days D] [--backend sqlite|postgresql] [--runs R]`).

The fleet is `bench.reconcile`'s synthetic one (`write_fleet`), written as CloudEvents
JSON Lines and ingested through the user's path (`ingest.extract` + `ledger.append_stream`,
what `gpuledger ingest` does). The store's entries are then exported to Parquet
(`ledger.export`, what `gpuledger export --format parquet` writes), so both sides read
the very same entries and must give the same reconciliation, byte for byte: the bench
checks that before it reports a figure. Each run times `reconcile_store` and
`reconcile_parquet` in this process, alternating; the best of each counts (the machine is
shared), and ratio = store ÷ Parquet, on wall time and on CPU time. The store is timed
twice: first with every entry read through the driver (`rows_*`), then after its runs are
sealed as `gpuledger checkpoint` seals them (`seal_*`, ledger/sealed.py), when
`reconcile_store` reads the sealed pages and only the rest as rows (`store_*`, `ratio`).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import ledger
import reconcile.engine
import reconcile.engine.pipeline
from bench.ingest import Stores, ingest_file
from bench.reconcile import Shape, write_fleet
from bench.results_file import record
from ledger.export import export_entries
from ledger.sealed import seal_store
from reconcile.reports import output

GOAL = "reconcile from the store within 1.5x of reconcile_parquet on the same entries"


def write_jsonl(parquet: Path, out: Path) -> None:
    """The fleet's events, one canonical CloudEvent a line (what a collector would ship)."""
    with out.open("wb") as sink:
        for batch in pq.ParquetFile(parquet).iter_batches(batch_size=100_000, columns=["event"]):
            sink.write(b"\n".join(e.encode() for e in batch.column(0).to_pylist()) + b"\n")


def _timed(run: Any) -> tuple[float, float, str]:
    wall, cpu = time.perf_counter(), _cpu()
    result = run()
    text = io.StringIO()
    output.write(result, "json", text)  # what `gpuledger reconcile --format json` prints
    digest = hashlib.sha256(text.getvalue().encode()).hexdigest()
    return time.perf_counter() - wall, _cpu() - cpu, digest


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _clock(run: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu()
    run()
    return time.perf_counter() - wall, _cpu() - cpu


def floor(store: ledger.Store, exported: Path) -> dict[str, tuple[float, float]]:
    """Where the store path's extra time goes, as (wall s, CPU s) each: the driver's rows
    alone (the database's stepping and a Python tuple a row, the part no reader built on
    the driver avoids), those rows as Arrow pages (`store_pages`), DuckDB's projection of
    the pages beside its projection of the Parquet file."""
    from reconcile.engine.snapshot import load_pages, load_parquet, open_engine, store_pages

    figures: dict[str, tuple[float, float]] = {}
    with store.reading() as conn:
        driver: Any = conn.connection.driver_connection

        def rows() -> None:
            # as store_pages reads: on PostgreSQL a server-side cursor (rows streamed)
            cursor = (
                driver.cursor("bench_rows") if store.dialect == "postgresql" else driver.cursor()
            )
            cursor.execute("SELECT seq, type, tenant, event FROM entries ORDER BY seq")
            while cursor.fetchmany(100_000):
                pass
            cursor.close()

        figures["driver_rows"] = _clock(rows)
        pages: list[Any] = []
        figures["store_pages"] = _clock(lambda: pages.extend(store_pages(conn)))
    con = open_engine()
    figures["project_pages"] = _clock(lambda: load_pages(con, pages))
    con.close()
    con = open_engine()
    figures["project_parquet"] = _clock(lambda: load_parquet(con, exported))
    con.close()
    return figures


def measure(shape: Shape, backend: str, runs: int) -> dict[str, Any]:
    from reconcile import reconcile_parquet, reconcile_store

    with tempfile.TemporaryDirectory(prefix="gpuledger-store-read-") as scratch:
        folder = Path(scratch)
        stores = Stores(backend, folder)
        try:
            events = write_fleet(folder / "fleet.parquet", shape)
            write_jsonl(folder / "fleet.parquet", folder / "fleet.jsonl")
            url = stores.fresh()
            ingested = ingest_file(url, folder / "fleet.jsonl", "cloudevents")
            store = ledger.Store(url)
            exported = folder / "entries.parquet"
            export_entries(store, exported, "parquet")
            timings: dict[str, list[tuple[float, float, str]]] = {
                "rows": [],
                "store": [],
                "parquet": [],
            }
            floors: list[dict[str, tuple[float, float]]] = []
            for _ in range(runs):  # no sealed pages yet: every entry read through the driver
                timings["rows"].append(_timed(lambda: reconcile_store(store)))
                timings["parquet"].append(_timed(lambda: reconcile_parquet(exported)))
                floors.append(floor(store, exported))
            sealing = _clock(lambda: seal_store(store))  # what `gpuledger checkpoint` adds
            for _ in range(runs):
                timings["store"].append(_timed(lambda: reconcile_store(store)))
                timings["parquet"].append(_timed(lambda: reconcile_parquet(exported)))
            store.close()
        finally:
            stores.drop()
    digests = {d for side in timings.values() for _, _, d in side}
    if len(digests) != 1:
        raise SystemExit(
            "bench.store_read: the store and the Parquet file reconcile differently: "
            f"{sorted(digests)}"
        )
    store_s, store_cpu = min(t[0] for t in timings["store"]), min(t[1] for t in timings["store"])
    rows_s, rows_cpu = min(t[0] for t in timings["rows"]), min(t[1] for t in timings["rows"])
    parquet_s, parquet_cpu = (
        min(t[0] for t in timings["parquet"]),
        min(t[1] for t in timings["parquet"]),
    )
    return {
        "backend": backend,
        "gpus": shape.gpus,
        "days": shape.days,
        "events": events,
        "ingested": ingested.events,
        "runs": runs,
        "store_s": round(store_s, 2),
        "store_cpu_s": round(store_cpu, 2),
        "parquet_s": round(parquet_s, 2),
        "parquet_cpu_s": round(parquet_cpu, 2),
        "ratio": round(store_s / parquet_s, 2),
        "cpu_ratio": round(store_cpu / parquet_cpu, 2),
        "rows_s": round(rows_s, 2),
        "rows_cpu_s": round(rows_cpu, 2),
        "rows_ratio": round(rows_s / parquet_s, 2),
        "rows_cpu_ratio": round(rows_cpu / parquet_cpu, 2),
        "seal_s": round(sealing[0], 2),
        "seal_cpu_s": round(sealing[1], 2),
        "all_runs_s": {side: [round(t[0], 2) for t in ts] for side, ts in timings.items()},
        "result_sha256": digests.pop(),
        "goal": GOAL,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "floor_best_of_runs": {
            part: {
                "wall_s": round(min(f[part][0] for f in floors), 2),
                "cpu_s": round(min(f[part][1] for f in floors), 2),
            }
            for part in floors[0]
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--scratch",
        action="store_true",
        help=(
            "both sides in the engine's scratch-file mode (what ledgers past LARGE_LEDGER entries "
            "use)"
        ),
    )
    args = parser.parse_args(argv)
    if args.scratch:
        reconcile.engine.pipeline.LARGE_LEDGER = 0
    result = measure(Shape(args.gpus, args.days), args.backend, args.runs)
    result["engine"] = "scratch file" if args.scratch else "in memory"
    record(f"store_read_{args.backend}" + ("_scratch" if args.scratch else ""), result)
    print(f"store_read {args.backend}: {result}", flush=True)


if __name__ == "__main__":
    main()
