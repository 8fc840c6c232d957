"""The reconciliation on a Ray cluster against one process, and the user's command against
the engine (`python -m bench.cluster --gpus 80 500 --days 30`).

For each size, `bench.reconcile`'s fleet (50 tenants) is ingested into a SQLite store with
`gpuledger ingest`, which seals the complete runs of entries as it finishes them (no
checkpoint is asked for), then:

- the engine on the same events as a Parquet file (`reconcile_parquet`, 2 DuckDB threads,
  the machine's cores), beside `gpuledger reconcile --format F --out FILE` from the store
  for every format F (`table` to a pipe; a process each, output written, wall time): the
  user's command against the engine;
- (with --cluster) `reconcile_store` in one process with 2 DuckDB threads against
  `reconcile --cluster local[2]`'s path (2 Ray workers, 1 DuckDB thread each), threads
  matched so that the ratio is Ray's overhead (its start is timed apart: a cluster is up
  before a reconciliation is asked of it); and each partition timed alone on one thread,
  the measured per-partition costs from which docs/scale.md estimates 100,000 GPUs.

Each timed run is a child process of its own; the best of `--repeats` is kept. The CPU is
shared with whatever else runs: loadavg before and after is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.e2e import run_step
from bench.field_scale import sorted_fleet, write_jsonl
from bench.reconcile import Shape, run_child, write_fleet
from bench.results_file import record
from cli import RECONCILE_FORMATS

ROOT = Path(__file__).resolve().parent.parent
FLEET_EVENTS_PER_GPU_MONTH = 62_472_800 / 10_000  # bench.reconcile's fleet, 30 days


def prepare(shape: Shape, folder: Path) -> tuple[Path, str, int]:
    """The fleet as sorted Parquet and as a SQLite store as `gpuledger ingest` leaves it,
    its complete runs sealed, no checkpoint (kept: a second run reuses them)."""
    folder.mkdir(parents=True, exist_ok=True)
    fleet, db = folder / "fleet.parquet", folder / "ledger.db"
    url = f"sqlite:///{db}"
    done = folder / "prepared.json"
    if done.exists():
        return fleet, url, int(json.loads(done.read_text())["events"])
    raw, jsonl = folder / "raw.parquet", folder / "fleet.jsonl"
    events = write_fleet(raw, shape)
    sorted_fleet(raw, fleet)
    raw.unlink()
    write_jsonl(fleet, jsonl)
    run_step("ingest", ["ingest", "--db", url, str(jsonl)])
    jsonl.unlink()
    done.write_text(json.dumps({"events": events}))
    return fleet, url, events


def best(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return min(runs, key=lambda r: float(r[key]))


#: The project's modules: compiled to bytecode before a command is timed (`compiled`).
PACKAGES = ("ledger", "reconcile", "schemas", "ingest", "fixtures")


def compiled() -> None:
    """Write the project's bytecode, as installing gpuledger does (pip compiles what it
    installs): a machine with PYTHONDONTWRITEBYTECODE set (this one) would otherwise have
    each timed command compile the ~50 modules it imports from source, about 0.1 CPU-s
    that no installed copy pays."""
    import compileall

    for name in PACKAGES:
        compileall.compile_dir(ROOT / name, quiet=1)
    compileall.compile_file(ROOT / "cli.py", quiet=1)


def run_command(name: str, args: list[str], python: list[str] | None = None) -> dict[str, Any]:
    """`gpuledger ARGS` in a child process as a user runs it (or `python` ARGS): wall and CPU
    seconds. Not through `run_step`'s RSS probe, whose thread scans /proc every 50 ms (on
    a busy machine, CPU time and the GIL taken from the command the engine is not
    charged)."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *(python or ["-m", "cli"]), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: exit {done.returncode}: {done.stderr.strip()[-800:]}")
    said = [line for line in done.stderr.strip().splitlines() if line.strip()]
    result = {
        "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 2),
        "output": said[-1][:300] if said else "",
    }
    print(f"{name}: {result}", flush=True)
    return result


#: The engine on Parquet as a process of its own (start and imports included), the JSON
#: text left out: what the command costs beyond running the engine itself in a process
#: (pyarrow's pandas probe answered, as the command has it).
ENGINE_PROCESS = (
    "import sys; from pathlib import Path; "
    "from ledger.arrow_probe import skip_pandas_probe_on_import; "
    "skip_pandas_probe_on_import(); "
    "from reconcile import reconcile_parquet; "
    "reconcile_parquet(Path(sys.argv[1]), threads=2)"
)


def command_vs_engine(shape: Shape, folder: Path, repeats: int) -> dict[str, Any]:
    fleet, url, events = prepare(shape, folder)
    compiled()
    load_before = os.getloadavg()
    engine = best([run_child("engine", fleet, 2) for _ in range(repeats)], "seconds")
    out: dict[str, Any] = {"gpus": shape.gpus, "days": shape.days, "events": events}
    out["engine_parquet"] = engine
    process = best(
        [
            run_command("engine process", [str(fleet)], ["-c", ENGINE_PROCESS])
            for _ in range(repeats)
        ],
        "wall_s",
    )
    out["engine_parquet_process"] = process
    for fmt in RECONCILE_FORMATS:  # every output format of the command
        target = folder / f"r.{fmt}"
        written = ["--out", str(target)] if fmt != "table" else []  # the table: to a pipe
        runs = [
            run_command(
                f"reconcile {fmt}", ["reconcile", "--db", url, "--format", fmt, *written]
            )
            for _ in range(repeats)
        ]
        run = best(runs, "wall_s")
        out[f"command_{fmt}"] = run
        if written:
            out[f"command_{fmt}_bytes"] = target.stat().st_size
            target.unlink()
        out[f"ratio_{fmt}"] = round(run["wall_s"] / engine["seconds"], 2)
        out[f"ratio_{fmt}_cpu"] = round(run["cpu_s"] / engine["cpu_seconds"], 2)
        out[f"ratio_{fmt}_to_engine_process"] = round(run["wall_s"] / process["wall_s"], 2)
        out[f"ratio_{fmt}_to_engine_process_cpu"] = round(run["cpu_s"] / process["cpu_s"], 2)
    out["loadavg_before"] = [round(x, 2) for x in load_before]
    out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    out["note"] = (
        "ratio: the command's wall time (a process: start, read the store, reconcile, write "
        "the file) over the engine's on Parquet (in a warm child, 2 DuckDB threads; its "
        "imports not timed); _to_engine_process: over the engine on Parquet as a process of "
        "its own (start and imports timed, no output written); the project's bytecode "
        "compiled first, as an install has it; the CPU is shared with other work"
    )
    return out


def _child(kind: str, url: str, repeats: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.cluster", "--child", kind, url, "--repeats", str(repeats)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{kind} on {url} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child_main(kind: str, url: str, repeats: int) -> dict[str, Any]:
    import ledger
    from reconcile import reconcile_store
    from reconcile.engine.cluster import Cluster, connected, reconcile_on_cluster
    from reconcile.engine.partitions import plan, reconcile_partition

    store = ledger.Store(url)
    seconds: list[float] = []
    if kind == "single":
        for _ in range(repeats):
            t0 = time.perf_counter()
            cells = reconcile_store(store, threads=2).cell_count
            seconds.append(time.perf_counter() - t0)
        return {"seconds": [round(s, 2) for s in seconds], "cells": cells}
    if kind == "cluster":
        t0 = time.perf_counter()
        with connected(Cluster(None, 2)):
            start = time.perf_counter() - t0
            for _ in range(repeats + 1):  # the first warms the workers (their imports)
                t0 = time.perf_counter()
                cells = reconcile_on_cluster(store, Cluster(None, 2)).cell_count
                seconds.append(time.perf_counter() - t0)
        return {
            "ray_start_s": round(start, 2),
            "first_s": round(seconds[0], 2),
            "seconds": [round(s, 2) for s in seconds[1:]],
            "cells": cells,
        }
    # kind == "partitions": each partition of a 2- and a 4-way plan alone, one thread
    out: dict[str, Any] = {}
    for parts in (2, 4):
        layout = plan(store, parts)
        timed = []
        for part in layout.partitions:
            t0, c0 = time.perf_counter(), _cpu()
            reconcile_partition(store.url, part.tenants, layout.upto_seq, 1)
            timed.append(
                {
                    "entries": part.entries,
                    "seconds": round(time.perf_counter() - t0, 2),
                    "cpu_seconds": round(_cpu() - c0, 2),
                }
            )
        out[str(parts)] = {"fleet_entries": layout.fleet_entries, "partitions": timed}
    return out


def cluster_vs_single(shape: Shape, folder: Path, repeats: int) -> dict[str, Any]:
    _fleet, url, events = prepare(shape, folder)
    load_before = os.getloadavg()
    single = _child("single", url, repeats)
    cluster = _child("cluster", url, repeats)
    partitions = _child("partitions", url, 1)
    ratio = round(min(cluster["seconds"]) / min(single["seconds"]), 2)
    return {
        "gpus": shape.gpus,
        "days": shape.days,
        "events": events,
        "single_process_2_threads": single,
        "cluster_2_workers_1_thread": cluster,
        "ratio": ratio,
        "goal": "at most 1.25x the single process, threads matched",
        "per_partition_1_thread": partitions,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "note": "best of the repeats; the CPU (2 cores) is shared with other work",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[80, 500])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--cluster",
        type=int,
        nargs="*",
        default=[500],
        help="the sizes (GPUs) at which the cluster is measured too",
    )
    parser.add_argument(
        "--folder", type=Path, default=Path(tempfile.gettempdir()) / "gpuledger-bench-cluster"
    )
    parser.add_argument("--child", nargs=2, metavar=("KIND", "URL"), default=None)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child_main(args.child[0], args.child[1], args.repeats)), flush=True)
        return
    for gpus in args.gpus:
        shape = Shape(gpus, args.days)
        folder = args.folder / f"{gpus}x{args.days}"
        result = command_vs_engine(shape, folder, args.repeats)
        record(f"command_vs_engine_{gpus}x{args.days}", result)
        print(json.dumps(result), flush=True)
        if gpus in args.cluster:
            result = cluster_vs_single(shape, folder, args.repeats)
            record(f"cluster_{gpus}x{args.days}", result)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
