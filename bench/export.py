"""`gpuledger export --format parquet` from the sealed pages and their extras, against the
same export from the rows alone (`python -m bench.export --gpus 80`).

The store is `bench.cluster`'s (its fleet ingested with `gpuledger ingest`, which seals
the complete runs), then checkpointed (which gives the pages their extras). Both sides
are processes, timed from outside, the output written: the user's command, and the
export as it was before the pages were read (`ledger.export.entry_tables` through the
driver, the same Parquet writer). Both files must be the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from bench.cluster import best, compiled, prepare, run_command
from bench.e2e import run_step
from bench.reconcile import Shape
from bench.results_file import record

#: The export from the rows alone: what `export --format parquet` did before it read the
#: sealed pages (the driver's rows column-wise, row groups of 10,000).
ROWS_EXPORT = """
import sys
import pyarrow.parquet as pq
from ledger import Store
from ledger.export import ENTRY_SCHEMA, entry_tables
store = Store(sys.argv[1])
with store.reading() as conn, pq.ParquetWriter(sys.argv[2], ENTRY_SCHEMA) as writer:
    for table in entry_tables(conn):
        writer.write_table(table)
"""


def export_vs_rows(shape: Shape, folder: Path, repeats: int) -> dict[str, object]:
    _fleet, url, events = prepare(shape, folder)
    key = folder / "log.key"
    if not key.exists():
        run_step("keygen", ["keygen", "--out", str(key), "--name", "bench.example/log"])
    run_step("checkpoint", ["checkpoint", "--db", url, "--key", str(key)])
    compiled()
    load_before = os.getloadavg()
    sealed_file, rows_file = folder / "sealed.parquet", folder / "rows.parquet"
    sealed = best(
        [
            run_command(
                "export (sealed pages)",
                ["export", "--db", url, "--format", "parquet", "--out", str(sealed_file)],
            )
            for _ in range(repeats)
        ],
        "wall_s",
    )
    rows = best(
        [
            run_command("export (rows)", [url, str(rows_file)], ["-c", ROWS_EXPORT])
            for _ in range(repeats)
        ],
        "wall_s",
    )
    same = sealed_file.read_bytes() == rows_file.read_bytes()
    out: dict[str, object] = {
        "gpus": shape.gpus,
        "days": shape.days,
        "events": events,
        "export_sealed": sealed,
        "export_rows": rows,
        "ratio": round(float(sealed["wall_s"]) / float(rows["wall_s"]), 2),
        "ratio_cpu": round(float(sealed["cpu_s"]) / float(rows["cpu_s"]), 2),
        "same_bytes": same,
        "file_bytes": sealed_file.stat().st_size,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "note": "best of the repeats; each side a process, start and imports in",
    }
    sealed_file.unlink()
    rows_file.unlink()
    if not same:
        raise SystemExit("the export from the sealed pages is not the rows' export, byte for byte")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[80])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--folder", type=Path, default=Path(tempfile.gettempdir()) / "gpuledger-bench-cluster"
    )
    args = parser.parse_args(argv)
    for gpus in args.gpus:
        folder = args.folder / f"{gpus}x{args.days}"
        result = export_vs_rows(Shape(gpus, args.days), folder, args.repeats)
        record(f"export_{gpus}x{args.days}", result)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
