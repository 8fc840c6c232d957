"""The CSV/Parquet frame of a reconciliation: column-wise (`Reconciliation.frame()`)
against the per-cell Python it replaced (kept as the reference in
tests/test_reconcile_frame.py), on one synthetic fleet of bench.reconcile
(`python -m bench.frame [--gpus N --days D]`).

Each side runs in a child process of its own: it reconciles the fleet, resets its peak
RSS (/proc/self/clear_refs), then builds the frame once. CPU-s and peak RSS are the
frame's alone; the children also report the SHA-256 of the frame's CSV, which must agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from bench.reconcile import Shape, _cpu_seconds, peak_rss_mib, write_fleet
from bench.results_file import record


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _child(kind: str, path: Path) -> dict[str, Any]:
    from reconcile import reconcile_parquet
    from tests.test_reconcile_frame import reference_frame

    result = reconcile_parquet(path)
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS from here on: the frame's
    before = current_rss_mib()
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    frame = result.frame() if kind == "new" else reference_frame(result)
    seconds, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
    peak = peak_rss_mib()
    sink = pa.BufferOutputStream()
    pacsv.write_csv(frame, sink)
    return {
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "rows": frame.num_rows,
        "rss_before_mib": round(before, 1),
        "peak_rss_mib": round(peak, 1),
        "peak_above_before_mib": round(peak - before, 1),
        "csv_sha256": hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest(),
    }


def run_child(kind: str, path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.frame", "--child", kind, str(path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{kind} frame on {path} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.frame",
        description="The reconcile frame: column-wise against per-cell.",
    )
    parser.add_argument("--gpus", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--child", choices=["new", "old"], help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.path)), flush=True)
        return
    shape = Shape(args.gpus, args.days)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fleet.parquet"
        events = write_fleet(path, shape)
        old, new = run_child("old", path), run_child("new", path)
    if old["csv_sha256"] != new["csv_sha256"]:
        raise SystemExit(f"the frames differ: {old['csv_sha256']} against {new['csv_sha256']}")
    result = {
        "gpus": shape.gpus,
        "days": shape.days,
        "events": events,
        "rows": new["rows"],
        "old": old,
        "new": new,
        "cpu_ratio": round(old["cpu_seconds"] / max(new["cpu_seconds"], 0.01), 1),
        "peak_above_before_ratio": round(
            old["peak_above_before_mib"] / max(new["peak_above_before_mib"], 0.1), 1
        ),
    }
    print(json.dumps(result, indent=2))
    record(f"reconcile_frame_{shape.gpus}x{shape.days}", result)


if __name__ == "__main__":
    main()
