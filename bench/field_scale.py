"""Reconcile from a SQLite store as the fleet grows toward field scale
(`python -m bench.field_scale --gpus 500 1000 2000 --days 30`).

For each size: `bench.reconcile`'s fleet (`write_fleet`), sorted by seq, written as
CloudEvents JSON Lines and ingested with `gpuledger ingest` (the user's path), then
`reconcile_store` with every entry read as a driver row, `gpuledger checkpoint` (which
seals the complete runs of entries, ledger/sealed.py), `reconcile_store` again (the sealed
pages, then the rest as rows) and `reconcile_parquet` on the same events as a
Parquet file, each in a child process of its own that reports its peak RSS (VmHWM). In
this process, after them: the store read alone, per entry: the driver stepping through
the rows (`SELECT seq, type, tenant, event ... ORDER BY seq`, a tuple a row, nothing
else) and the same rows as `store_pages` makes them (Arrow pages, then dropped). The
issue's goal at 10,000 GPUs x 30 days (62.5M events) is under 90 s and 4 GB; where a
size is not measured, `extrapolate` says what the measured costs an entry give there.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq

import ledger
from bench.e2e import run_step
from bench.reconcile import Shape, run_child, write_fleet
from bench.results_file import RESULTS, record

FIELD_EVENTS = 62_472_800  # bench.reconcile's fleet at 10,000 GPUs x 30 days
GOAL = "reconcile from the SQLite store at 10,000 GPUs x 30 days under 90 s and 4 GB"


def sorted_fleet(fleet: Path, out: Path) -> None:
    """The fleet in seq order (write_fleet's file is not), sorted by DuckDB under a memory
    cap so a large fleet spills rather than filling memory."""
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET memory_limit = '2GB'")
        con.execute(
            f"SET temp_directory = '{out.parent / 'spill'}'"
        )  # not the working directory's .tmp
        con.execute("SET enable_progress_bar = false")
        con.execute(
            f"COPY (SELECT * FROM read_parquet('{fleet}') ORDER BY seq) TO '{out}' "
            "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1000000)"
        )
    finally:
        con.close()


def write_jsonl(parquet: Path, out: Path) -> int:
    """The events, one canonical CloudEvent a line, streamed a batch at a time; returns
    the canonical bytes."""
    size = 0
    with out.open("wb") as sink:
        for batch in pq.ParquetFile(parquet).iter_batches(batch_size=100_000, columns=["event"]):
            chunk = b"\n".join(e.encode() for e in batch.column(0).to_pylist()) + b"\n"
            size += len(chunk) - batch.num_rows
            sink.write(chunk)
    return size


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _clock(run: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu()
    run()
    return time.perf_counter() - wall, _cpu() - cpu


def store_read(url: str) -> dict[str, tuple[float, float]]:
    """The store read alone, (wall s, CPU s): the driver's rows, then `store_pages`."""
    from reconcile.engine.snapshot import store_pages

    store = ledger.Store(url)
    figures: dict[str, tuple[float, float]] = {}
    try:
        with store.reading() as conn:
            driver: Any = conn.connection.driver_connection

            def rows() -> None:
                cursor = driver.cursor()
                cursor.execute("SELECT seq, type, tenant, event FROM entries ORDER BY seq")
                while cursor.fetchmany(100_000):
                    pass
                cursor.close()

            def pages() -> None:
                for _ in store_pages(conn):
                    pass

            figures["driver_rows"] = _clock(rows)
            figures["store_pages"] = _clock(pages)
    finally:
        store.close()
    return figures


def measure(shape: Shape, folder: Path, cli: bool, sealed_only: bool = False) -> dict[str, Any]:
    load_before = os.getloadavg()
    raw, fleet, jsonl = folder / "raw.parquet", folder / "fleet.parquet", folder / "fleet.jsonl"
    url = f"sqlite:///{folder / 'ledger.db'}"
    started = time.perf_counter()
    events = write_fleet(raw, shape)
    sorted_fleet(raw, fleet)
    raw.unlink()
    event_bytes = write_jsonl(fleet, jsonl)
    prepared = time.perf_counter() - started
    print(
        f"fleet {shape}: {events} events, {jsonl.stat().st_size / 2**20:.0f} MiB of JSON Lines, "
        f"{prepared:.0f} s",
        flush=True,
    )
    ingest = run_step("ingest", ["ingest", "--db", url, str(jsonl)])
    jsonl.unlink()
    rows = (
        None if sealed_only else run_child("store", folder / "ledger.db")
    )  # before any checkpoint: every entry a driver row
    print(f"reconcile_store, rows only: {rows}", flush=True)
    key = folder / "log.key"
    run_step("keygen", ["keygen", "--out", str(key), "--name", "bench.example/log"])
    checkpoint = run_step(
        "checkpoint", ["checkpoint", "--db", url, "--key", str(key)]
    )  # seals the complete runs
    store = run_child("store", folder / "ledger.db")
    print(f"reconcile_store: {store}", flush=True)
    parquet = run_child("engine", fleet)
    print(f"reconcile_parquet: {parquet}", flush=True)
    if (store["cells"], store["billed_gpu_us"]) != (parquet["cells"], parquet["billed_gpu_us"]):
        raise SystemExit(
            f"bench.field_scale: the store and the Parquet file reconcile differently: {store} "
            f"{parquet}"
        )
    command = (
        run_step(
            "reconcile",
            [
                "reconcile",
                "--db",
                url,
                "--format",
                "parquet",
                "--out",
                str(folder / "cells.parquet"),
            ],
        )
        if cli
        else None
    )
    read = None if sealed_only else store_read(url)
    print(f"store read: {read}", flush=True)
    db_bytes = sum(p.stat().st_size for p in folder.glob("ledger.db*"))

    def per_entry(seconds: float) -> float:
        return round(seconds * 1e6 / events, 3)

    return {
        "gpus": shape.gpus,
        "days": shape.days,
        "events": events,
        "prepare_s": round(prepared, 1),
        "store_bytes": db_bytes,
        "store_bytes_per_event": round(db_bytes / events),
        "canonical_event_bytes_per_event": round(event_bytes / events),
        "ingest": ingest,
        "ingest_events_per_s": round(events / ingest["wall_s"]),
        "reconcile_store": store,
        "reconcile_parquet": parquet,
        "gpuledger_reconcile_parquet_out": command,
        "reconcile_store_rows_only": rows,
        "checkpoint_with_sealing": checkpoint,
        "ratio_rows_only_wall": round(rows["seconds"] / parquet["seconds"], 2) if rows else None,
        "ratio_rows_only_cpu": round(rows["cpu_seconds"] / parquet["cpu_seconds"], 2)
        if rows
        else None,
        "ratio_wall": round(store["seconds"] / parquet["seconds"], 2),
        "ratio_cpu": round(store["cpu_seconds"] / parquet["cpu_seconds"], 2),
        "us_an_entry": {
            "reconcile_store_wall": per_entry(store["seconds"]),
            "reconcile_store_cpu": per_entry(store["cpu_seconds"]),
            "reconcile_parquet_wall": per_entry(parquet["seconds"]),
            "reconcile_parquet_cpu": per_entry(parquet["cpu_seconds"]),
            "store_minus_parquet_cpu": per_entry(store["cpu_seconds"] - parquet["cpu_seconds"]),
            **(
                {}
                if read is None
                else {
                    "driver_rows_cpu": per_entry(read["driver_rows"][1]),
                    "store_pages_cpu": per_entry(read["store_pages"][1]),
                    "driver_rows_wall": per_entry(read["driver_rows"][0]),
                    "store_pages_wall": per_entry(read["store_pages"][0]),
                }
            ),
        },
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }


def extrapolate(measured: dict[str, Any], parquet_field: dict[str, Any]) -> dict[str, Any]:
    """The store path at field scale from the largest measured size: the Parquet path
    measured there (`bench.reconcile` at 10,000 GPUs x 30 days) plus the store path's
    extra CPU an entry, measured here, times the field's entries. An extrapolation, not a
    measurement: it assumes the extra stays flat an entry (the series shows whether it
    does) and that the extra CPU is extra wall time (the read and DuckDB's projection
    overlap by one page only, and DuckDB already uses both cores)."""
    extra_us = measured["us_an_entry"]["store_minus_parquet_cpu"]
    extra_s = extra_us * FIELD_EVENTS / 1e6
    return {
        "from_size": (
            f"{measured['gpus']} GPUs x {measured['days']} d ({measured['events']} events)"
        ),
        "field_events": FIELD_EVENTS,
        "extra_cpu_us_an_entry": extra_us,
        "parquet_path_at_field_s": parquet_field["seconds"],
        "parquet_path_at_field_cpu_s": parquet_field["cpu_seconds"],
        "parquet_path_at_field_peak_rss_mib": parquet_field["peak_rss_mib"],
        "store_path_at_field_s_estimate": round(parquet_field["seconds"] + extra_s, 1),
        "store_path_at_field_cpu_s_estimate": round(parquet_field["cpu_seconds"] + extra_s, 1),
        "driver_rows_floor_s_at_field": round(
            measured["us_an_entry"]["driver_rows_cpu"] * FIELD_EVENTS / 1e6, 1
        ),
        "store_pages_s_at_field": round(
            measured["us_an_entry"]["store_pages_cpu"] * FIELD_EVENTS / 1e6, 1
        ),
        "goal": GOAL,
        "kind": "extrapolation",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.field_scale", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--gpus", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument(
        "--cli",
        action="store_true",
        help=(
            "also run `gpuledger reconcile --format parquet` (the engine, then the cells rendered "
            "a row at a time)"
        ),
    )
    parser.add_argument(
        "--sealed-only",
        action="store_true",
        help="skip the rows-only reconcile and the driver read (minutes each at field scale)",
    )
    parser.add_argument(
        "--tmp",
        type=Path,
        default=None,
        help="where the fleets and stores go (the largest needs ~10 GB)",
    )
    args = parser.parse_args(argv)
    for gpus in args.gpus:
        with tempfile.TemporaryDirectory(prefix="gpuledger-field-", dir=args.tmp) as folder:
            result = measure(Shape(gpus, args.days), Path(folder), args.cli, args.sealed_only)
        record(f"field_scale_sqlite_{gpus}gpus_{args.days}d", result)
        print(f"field_scale {gpus} GPUs: {result}", flush=True)
        summary = summarise(args.days)
        record(f"field_scale_sqlite_{args.days}d", summary)
        print(f"field_scale: {summary}", flush=True)


def summarise(days: int) -> dict[str, Any]:
    """Every size measured so far at `days` (bench/results.json), smallest first, with the
    extrapolation to field scale from the largest."""
    recorded = json.loads(RESULTS.read_text())
    series = sorted(
        (
            r
            for k, r in recorded.items()
            if k.startswith("field_scale_sqlite_") and k.endswith(f"gpus_{days}d")
        ),
        key=lambda r: r["events"],
    )
    summary: dict[str, Any] = {
        "sizes": [f"{r['gpus']}x{r['days']}" for r in series],
        "events": [r["events"] for r in series],
        "us_an_entry": {
            part: [r["us_an_entry"].get(part) for r in series] for part in series[0]["us_an_entry"]
        },
        "sealed_pages_read": ["reconcile_store_rows_only" in r for r in series],
        "reconcile_store_s": [r["reconcile_store"]["seconds"] for r in series],
        "reconcile_parquet_s": [r["reconcile_parquet"]["seconds"] for r in series],
        "reconcile_store_peak_rss_mib": [r["reconcile_store"]["peak_rss_mib"] for r in series],
        "ratio_wall": [r["ratio_wall"] for r in series],
        "ratio_cpu": [r["ratio_cpu"] for r in series],
        "loadavg_after": [r["loadavg_after"][0] for r in series],
        "measured_at": [r["measured_at"] for r in series],
    }
    field = recorded.get("reconcile", {}).get("engine")  # bench.reconcile at 10,000 GPUs x 30 days
    if series[-1]["events"] >= FIELD_EVENTS:
        summary["field"] = {
            "kind": "measurement",
            "size": summary["sizes"][-1],
            "goal": GOAL,
            "reconcile_store": series[-1]["reconcile_store"],
        }
    elif field and days == 30 and "driver_rows_cpu" in series[-1]["us_an_entry"]:
        summary["field"] = extrapolate(series[-1], field)
    return summary


if __name__ == "__main__":
    main()
