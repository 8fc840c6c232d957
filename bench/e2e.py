"""The user's path end to end on a synthetic fleet (`python -m bench.e2e --gpus N --days D
--backend sqlite|postgresql [--quick]`).

The fleet is bench/reconcile.py's (`write_fleet`: the same events the reconcile benchmark
reconciles), written as JSON Lines of canonical CloudEvents, one a line, in seq order.
Each step is the CLI itself, run in a child process through tests/rss_probe.py (which
reports the command's peak RSS, and that of its own children, such as ingest's parsing
process): ingest, checkpoint, verify, reconcile from the store, one tenant's dispute
packet, verify-packet. Each step's CPU seconds are the child's (user + system, its own
children included). Beside them, in the same run: `reconcile_parquet` on the same events
as a Parquet file (bench/reconcile.py's engine child), the ratio's baseline; and the
store's bytes per event beside the canonical event's bytes (the JSON the ledger hashes).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from sqlalchemy import text

import ledger
from bench.ingest import Stores
from bench.reconcile import Shape, run_child, write_fleet
from bench.results_file import record

ROOT = Path(__file__).resolve().parent.parent
TENANT = "tenant-0"  # write_fleet's tenants are tenant-0 .. tenant-49, invoices INV-<tenant>


def write_jsonl(parquet: Path, out: Path) -> tuple[int, int]:
    """The fleet's events as JSON Lines, in seq order; returns (events, canonical bytes)."""
    table = pq.read_table(parquet, columns=["seq", "event"]).sort_by("seq")
    events = table.column("event").to_pylist()
    with out.open("w", encoding="utf-8") as sink:
        for start in range(0, len(events), 100_000):
            sink.write("".join(e + "\n" for e in events[start : start + 100_000]))
    return len(events), sum(len(e.encode("utf-8")) for e in events)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_step(name: str, args: list[str], expect: int = 0) -> dict[str, Any]:
    """One CLI command in a child process: wall and CPU seconds, peak RSS (its own, and
    its children's), its last line of output."""
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "rss_probe.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall, cpu = time.perf_counter() - wall, _children_cpu() - cpu
    if done.returncode != expect:
        raise RuntimeError(f"{name}: exit {done.returncode}: {done.stderr.strip()[-800:]}")
    lines = done.stdout.strip().splitlines()
    peak = float(lines[-1].split("=", 1)[1])
    child = float(lines[-2].split()[0].split("=", 1)[1])
    said = [line for line in lines[:-2] + done.stderr.strip().splitlines() if line.strip()]
    result = {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_mib": peak,
        "child_peak_rss_mib": child,
        "output": said[-1][:300] if said else "",
    }
    print(f"{name}: {result}", flush=True)
    return result


def store_bytes(url: str, backend: str) -> dict[str, int]:
    """What the store takes, by table and index: SQLite's pages (dbstat, the WAL
    checkpointed into the file first), or PostgreSQL's relations of the schema (each
    index apart, a table with its TOAST); "total" is the file, or their sum."""
    store = ledger.Store(url)
    try:
        if backend == "sqlite":
            raw: Any = store.engine.raw_connection()
            db = raw.dbapi_connection
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            parts = dict(
                db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
            )
            raw.close()
            path = Path(url.removeprefix("sqlite:///"))
            parts["total"] = sum(
                p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists()
            )
            return {str(k): int(v) for k, v in parts.items()}
        with store.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.relname, pg_total_relation_size(c.oid) - "
                    "coalesce(pg_indexes_size(c.oid), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = "
                    "current_schema() AND c.relkind = 'r' "
                    "UNION ALL SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = "
                    "current_schema() AND c.relkind = 'i'"
                )
            ).all()
        parts = {str(name): int(size) for name, size in rows}
        parts["total"] = sum(parts.values())
        return parts
    finally:
        store.close()


def measure(shape: Shape, backend: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuledger-e2e-") as tmp:
        folder = Path(tmp)
        stores = Stores(backend, folder)
        try:
            return _measure_in(folder, stores.fresh(), shape, backend)
        finally:
            stores.drop()


def _measure_in(folder: Path, url: str, shape: Shape, backend: str) -> dict[str, Any]:
    parquet, fleet = folder / "fleet.parquet", folder / "fleet.jsonl"
    write_fleet(parquet, shape)
    events, event_bytes = write_jsonl(parquet, fleet)
    print(
        f"fleet: {shape} {events} events, {fleet.stat().st_size / 2**20:.1f} MiB of JSON Lines",
        flush=True,
    )
    key, packet = folder / "log.key", folder / "packet.json"
    db = ["--db", url]
    steps: dict[str, dict[str, Any]] = {}
    run_step("keygen", ["keygen", "--out", str(key), "--name", "bench.example/log"])
    steps["ingest"] = run_step("ingest", ["ingest", *db, str(fleet)])
    steps["checkpoint"] = run_step("checkpoint", ["checkpoint", *db, "--key", str(key)])
    steps["verify"] = run_step("verify", ["verify", *db, "--pubkey", f"{key}.pub"])
    steps["reconcile"] = run_step(
        "reconcile",
        ["reconcile", *db, "--format", "parquet", "--out", str(folder / "cells.parquet")],
    )
    steps["dispute"] = run_step(
        "dispute",
        [
            "dispute",
            *db,
            "--tenant",
            TENANT,
            "--invoice",
            f"INV-{TENANT}",
            "--key",
            str(key),
            "--out",
            str(packet),
        ],
    )
    steps["verify_packet"] = run_step(
        "verify-packet", ["verify-packet", str(packet), "--pubkey", f"{key}.pub"]
    )
    engine = run_child("engine", parquet)
    print(f"reconcile_parquet: {engine}", flush=True)
    parts = store_bytes(url, backend)
    stored = parts["total"]
    for step in steps.values():
        step["events_per_s"] = round(events / step["wall_s"]) if step["wall_s"] else None
    return {
        "backend": backend,
        "gpus": shape.gpus,
        "days": shape.days,
        "events": events,
        "jsonl_mib": round(fleet.stat().st_size / 2**20, 1),
        "packet_kib": round(packet.stat().st_size / 1024, 1),
        "steps": steps,
        "reconcile_parquet": engine,
        "reconcile_store_over_parquet_wall": round(
            steps["reconcile"]["wall_s"] / engine["seconds"], 2
        ),
        "store_bytes": stored,
        "store_bytes_per_event": round(stored / events),
        "canonical_event_bytes_per_event": round(event_bytes / events),
        "store_over_event_bytes": round(stored / event_bytes, 2),
        "store_bytes_per_event_by_part": {
            k: round(v / events)
            for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
            if v >= events
        },
        "cores": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def growth(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """How each step grows across runs of 1x, 2x, 4x the events: its wall and CPU at each
    size over the first size's, beside the events' ratio; and its marginal CPU an event
    between consecutive sizes (the extra CPU over the extra events), which stays flat when
    a step is linear plus a fixed cost (starting Python, importing), whatever that cost."""
    first = runs[0]
    steps: dict[str, Any] = {}
    for step in first["steps"]:
        cpu = [run["steps"][step]["cpu_s"] for run in runs]
        wall = [run["steps"][step]["wall_s"] for run in runs]
        steps[step] = {
            "wall_s": wall,
            "cpu_s": cpu,
            "wall_over_first": [round(w / wall[0], 2) for w in wall],
            "cpu_over_first": [round(c / cpu[0], 2) for c in cpu],
            "marginal_cpu_us_an_event": [
                round((cpu[i] - cpu[i - 1]) * 1e6 / (runs[i]["events"] - runs[i - 1]["events"]), 2)
                for i in range(1, len(runs))
            ],
            "peak_rss_mib": [run["steps"][step]["peak_rss_mib"] for run in runs],
        }
    parquet = [run["reconcile_parquet"]["seconds"] for run in runs]
    return {
        "events": [run["events"] for run in runs],
        "events_over_first": [round(run["events"] / first["events"], 2) for run in runs],
        "days": [run["days"] for run in runs],
        "gpus": first["gpus"],
        "backend": first["backend"],
        "steps": steps,
        "reconcile_parquet_s": parquet,
        "reconcile_parquet_over_first": [round(s / parquet[0], 2) for s in parquet],
        "store_bytes_per_event": [run["store_bytes_per_event"] for run in runs],
        "loadavg_1m": [run["loadavg_1m"] for run in runs],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.e2e", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument(
        "--quick", action="store_true", help="16 GPUs for 2 days (about 7,000 events)"
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="run at --days, twice and four times as many days (1x, 2x, 4x the events, every "
        "tenant's share the same) and record each step's growth",
    )
    args = parser.parse_args(argv)
    if args.scale:
        runs = []
        for factor in (1, 2, 4):
            runs.append(measure(Shape(args.gpus, args.days * factor), args.backend))
            record(f"e2e_{args.backend}_{args.gpus}gpus_{args.days * factor}d", runs[-1])
        scaled = growth(runs)
        name = f"e2e_scale_{args.backend}_{args.gpus}gpus_{args.days}d"
        record(name, scaled)
        print(f"{name}: {scaled}", flush=True)
        return
    shape = Shape(16, 2) if args.quick else Shape(args.gpus, args.days)
    result = measure(shape, args.backend)
    name = f"e2e_{args.backend}" + ("_quick" if args.quick else f"_{shape.gpus}gpus_{shape.days}d")
    record(name, result)
    print(f"{name}: {result}", flush=True)


if __name__ == "__main__":
    main()
