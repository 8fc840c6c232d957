"""Peak memory of an ingest as the file grows (`python -m bench.memory [SIZE_MIB...]`).

The ingest runs in a child process (tests/rss_probe.py: the CLI, then its peak RSS, the
kernel's VmHWM, and that of its own parsing process, if it started one) over a JSON Lines
file of job.progress events from tests/big_jsonl.py. Goal: the two together under 300 MiB
at 2 GiB of input.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.results_file import record
from tests.big_jsonl import (
    write_big,
)  # the streaming test's generator: one definition of the input

ROOT = Path(__file__).resolve().parent.parent

LIMIT_MIB = 300


def measure(size_mib: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as folder:
        source = Path(folder) / "events.jsonl"
        events = write_big(source, size_mib)
        url = f"sqlite:///{Path(folder) / 'ledger.db'}"
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "tests" / "rss_probe.py"),
                "ingest",
                "--db",
                url,
                str(source),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - started
    if done.returncode != 0 or f"appended {events} ·" not in done.stdout:
        raise RuntimeError(f"the ingest failed: {done.stderr.strip()[-500:]}")
    peak = float(done.stdout.rsplit("peak_rss_mib=", 1)[1])
    child = float(done.stdout.split("child_peak_rss_mib=", 1)[1].split()[0])
    return {
        "input_mib": size_mib,
        "events": events,
        "peak_rss_mib": peak,
        "child_peak_rss_mib": child,
        "total_peak_rss_mib": round(peak + child, 1),
        "limit_mib": LIMIT_MIB,
        "under_limit": peak + child < LIMIT_MIB,
        "ingest_s": round(elapsed, 1),
        "events_per_s": round(events / elapsed),
    }


def main(argv: list[str] | None = None) -> None:
    sizes = [int(s) for s in (argv if argv is not None else sys.argv[1:])] or [2048]
    for size in sizes:
        result = measure(size)
        record(f"memory_{size}mib", result)
        print(f"memory {size} MiB: {result}", flush=True)


if __name__ == "__main__":
    main()
