"""verify throughput beside a bare hashlib loop (`python -m bench.verify [--quick]`).

The ledger is built by a real ingest of the generated native stream (bench.sources). The
measured side is `verify_ledger` whole: reading every entry, recomputing each leaf, the
chain, the tenant chains, the tree level by level against the stored nodes, the batch
heads. The baseline, in the same process, is the least any verifier must do over the same
bytes: SHA-256 of each canonical entry (the leaf) and of the chain link, in a loop over
entry bytes already in memory (built beforehand, not timed); its final chain hash is
checked against the stored head, so it hashed the same bytes. ratio = verify entries/s ÷
baseline entries/s, for verify in one process (`ratio`) and in ranges on every core
(`parallel_ratio`, ledger/verify_ranges.py: 4 ranges a process). The baseline stays
single-threaded: the goal is half its speed with every core at work. Best of `runs`
each, since the machine is shared. Beside it, the same hashes made a page a call through
ledger/digests.py (`batched_baseline_*`, `parallel_ratio_to_batched`): verify and the
appender now hash that way, so that figure says how far verify is from its own hashing.

Beside them, the read floors: the same rows fetched through the Python driver exactly as
the walk fetches them (`verify_pages`), and as Arrow batches through ADBC exactly as the
range pass reads them (`entry_batches`), with no hashing and no checks. No verifier that
reads the store through that driver can be faster than it, whatever it does with the rows. Last,
the runs are sealed (ledger/sealed.py, as a checkpoint seals them) and verify is timed
again on every core, now also comparing every sealed page with its entries, a share of
the pages a process (`with_sealed_pages_*`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from hashlib import sha256
from pathlib import Path
from typing import Any

import numpy as np

import ledger
from bench.ingest import Stores, ingest_file, ledger_rows
from bench.results_file import record
from bench.sources import write_native
from ledger import digests
from ledger.arrow_entries import entry_batches
from ledger.hashing import CHAIN_PREFIX, LEAF_PREFIX, ZERO_HASH, entry_bytes
from ledger.sealed import seal_store
from ledger.verify import verify_pages

GOAL = "a ratio of at least 0.5, and at least 1 million entries/s"


def verify_seconds(
    url: str, processes: int = 1, smallest: int = 1, runs: int = 1
) -> tuple[float, float, int, float]:
    """verify_ledger whole, in one process (processes=1) or in ranges of at least
    `smallest` entries on `processes` processes: the best of `runs` runs after a first,
    in a fresh interpreter that has imported what `gpuledger verify` imports, and that
    first run's wall time (it pays the drivers' import, 0.3 s, and every first use).

    Not in this process: its heap, grown by the ingest that built the ledger, would be
    copied page by page into each forked range process as it ran (a range of 100 entries
    took 126 ms as the first task of a worker forked from a parent holding 2M objects,
    29 ms from one the size of the CLI's), which no user's verify pays. CPU time: that
    interpreter and its children. Returns (wall, cpu, entries, first run's wall)."""
    out = subprocess.run(
        [sys.executable, "-c", _TIMED_VERIFY, url, str(processes), str(smallest), str(runs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    first, timings = json.loads(out.strip().splitlines()[-1])
    wall, cpu, entries, ranges, ok = min(timings)
    assert ok, f"verify failed: {out}"
    assert (ranges > 1) == (processes > 1), "the parallel pass did not run"
    return wall, cpu, entries, first


_TIMED_VERIFY = """
import json, resource, sys, time
import cli, ledger
def cpu():
    own, children = resource.getrusage(resource.RUSAGE_SELF), \
resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
def timed():
    wall, used = time.perf_counter(), cpu()
    result = ledger.verify_ledger(store, processes=int(sys.argv[2]), \
smallest_range=int(sys.argv[3]))
    return [time.perf_counter() - wall, cpu() - used, result.entries, result.ranges, result.ok]
store = ledger.Store(sys.argv[1])
first = timed()[0]
print(json.dumps([first, [timed() for _ in range(int(sys.argv[4]))]]))
"""


def fetch_seconds(url: str) -> tuple[float, int]:
    """The read floor: every row verify reads, fetched by the driver, nothing else done."""
    store = ledger.Store(url)
    count, started = 0, time.perf_counter()
    with store.reading() as conn:
        for page in verify_pages(conn):
            count += len(page)
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed, count


def arrow_fetch_seconds(url: str) -> tuple[float, int]:
    """The read floor of the range pass: every entry read as Arrow batches through ADBC
    (ledger/arrow_entries.py), nothing else done."""
    started, count = time.perf_counter(), 0
    for batch in entry_batches(url, 1, 2**62):
        count += batch.num_rows
    return time.perf_counter() - started, count


def baseline_seconds(url: str, batched: bool = False) -> tuple[float, int]:
    """Leaf and chain hashes over the canonical entries, a page at a time; only the
    hashing is timed: in a hashlib loop (the goal's baseline), or `batched`, a page a call
    through ledger/digests.py as verify and the appender now hash (the prefixed entries
    joined into one buffer first, in the timing)."""
    chain, elapsed, count, stored_head = ZERO_HASH, 0.0, 0, b""
    for rows in ledger_rows(url):
        page = [
            entry_bytes(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7].encode(), bytes(r[8]))
            for r in rows
        ]
        started = time.perf_counter()
        if batched:
            inputs = [LEAF_PREFIX + entry for entry in page]
            links = digests.chain(
                CHAIN_PREFIX,
                chain,
                digests.each(b"".join(inputs), np.cumsum([0, *map(len, inputs)], dtype=np.int64)),
            )
            chain = links[-32:]
        else:
            for entry in page:
                leaf = sha256(LEAF_PREFIX + entry).digest()
                chain = sha256(CHAIN_PREFIX + chain + leaf).digest()
        elapsed += time.perf_counter() - started
        count += len(page)
        stored_head = bytes(rows[-1][10])
    assert chain == stored_head, "the baseline did not hash the entries the ledger holds"
    return elapsed, count


def measure(backend: str, count: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as folder:
        stores = Stores(backend, Path(folder))
        try:
            source = Path(folder) / "events.jsonl"
            write_native(source, count)
            url = stores.fresh()
            ingest_file(url, source, "cloudevents")
            source.unlink()
            verify = verify_seconds(url, runs=runs)
            cores = len(os.sched_getaffinity(0))
            parallel = verify_seconds(url, cores, count // (4 * cores), runs)
            base = min((baseline_seconds(url) for _ in range(runs)), key=lambda t: t[0])
            batched = min(
                (baseline_seconds(url, batched=True) for _ in range(runs)), key=lambda t: t[0]
            )
            fetch = min((fetch_seconds(url) for _ in range(runs)), key=lambda t: t[0])
            arrow_fetch = min((arrow_fetch_seconds(url) for _ in range(runs)), key=lambda t: t[0])
            sealed_store = ledger.Store(url)
            seal_store(
                sealed_store
            )  # as `gpuledger checkpoint` does: verify now compares the pages too
            sealed_store.close()
            sealed = verify_seconds(url, cores, count // (4 * cores), runs)
        finally:
            stores.drop()
    wall, cpu, entries, _ = verify
    parallel_processes = len(os.sched_getaffinity(0))
    return {
        "backend": backend,
        "entries": entries,
        "runs": runs,
        "verify_entries_per_s": round(entries / wall),
        "verify_cpu_us_per_entry": round(cpu / entries * 1e6, 2),
        "baseline_entries_per_s": round(base[1] / base[0]),
        "ratio": round(base[0] / wall, 3),
        "processes": parallel_processes,
        "parallel_entries_per_s": round(entries / parallel[0]),
        "parallel_cpu_us_per_entry": round(parallel[1] / entries * 1e6, 2),
        "parallel_ratio": round(base[0] / parallel[0], 3),
        "with_sealed_pages_parallel_entries_per_s": round(entries / sealed[0]),
        "with_sealed_pages_parallel_ratio": round(base[0] / sealed[0], 3),
        "first_run_s": {
            "one_process": round(verify[3], 3),
            "parallel": round(parallel[3], 3),
            "with_sealed_pages": round(sealed[3], 3),
        },
        "timed": (
            "in a fresh interpreter with the CLI's imports, best of the runs after a first "
            "(first_run_s: that first run)"
        ),
        "sealed_pages_check_cpu_us_per_entry": round((sealed[1] - parallel[1]) / entries * 1e6, 2),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "read_floor_entries_per_s": round(fetch[1] / fetch[0]),
        "read_floor": (
            "the same rows fetched by the driver as the walk fetches them, no hashing, no checks"
        ),
        "arrow_read_floor_entries_per_s": round(arrow_fetch[1] / arrow_fetch[0]),
        "arrow_read_floor": (
            "the same rows as Arrow batches through ADBC, as the range pass reads them, nothing "
            "else done"
        ),
        "baseline": (
            "bare hashlib loop: leaf and chain SHA-256 over the same canonical entry bytes, in "
            "memory"
        ),
        "batched_baseline_entries_per_s": round(batched[1] / batched[0]),
        "parallel_ratio_to_batched": round(batched[0] / parallel[0], 3),
        "batched_baseline": (
            "the same leaf and chain hashes a page a call (ledger/digests.py), as verify now "
            "hashes"
        ),
        "goal": GOAL,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small ledgers, one run each")
    parser.add_argument(
        "--entries",
        type=int,
        default=None,
        help="this many entries on each backend (recorded as verify_<backend>_<N>)",
    )
    parser.add_argument(
        "--runs", type=int, default=None, help="runs per side (default 3, quick 1)"
    )
    args = parser.parse_args(argv)
    cases = (
        [("sqlite", 50_000), ("postgresql", 20_000)]
        if args.quick
        else [("sqlite", 1_000_000), ("postgresql", 200_000)]
    )
    if args.entries:
        cases = [(backend, args.entries) for backend, _ in cases]
    for backend, count in cases:
        result = measure(backend, count, args.runs or (1 if args.quick else 3))
        record(
            f"verify_{backend}"
            + ("_quick" if args.quick else f"_{count}" if args.entries else ""),
            result,
        )
        print(f"verify {backend}: {result}", flush=True)


if __name__ == "__main__":
    main()
