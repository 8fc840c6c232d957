"""Reconciliation cost: the DuckDB engine against the plain pandas baseline, and how the
engine scales (`python -m bench.reconcile [--gpus N --days D] [--scaling] [--quick]`).

The fleet is synthetic and written straight to an entries Parquet file (seq, type,
tenant, event: the canonical CloudEvent text, as `gpuledger export --format parquet`
writes it) by DuckDB from `range()`, never event by event in Python. Each node holds one
8-GPU allocation after another, 12 h each, one job each: progress every 60 s,
checkpoints every 30 min, a billing line every 10 min, and on a few allocations in every
hundred a stall with a fault, a stall without one, a failure and restart, a reclaim,
steps that stop rising, a correction with a credit, a double-billed line, a line past
the release. At 10,000 GPUs × 30 days that is 75,000 allocations, ≈53M progress events
and ≈5.4M lines. Sequence numbers are unique and in time order within an allocation, with
gaps between allocations (the engine orders by seq, it never counts on it being gapless).

Every timed run happens in a child process of its own, which reports its peak RSS
(VmHWM), so one run's memory never shows in the next one's figure.
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.compute as pc

from bench.results_file import record

T0 = 1767225600  # 2026-01-01T00:00:00Z
GPUS_PER_ALLOCATION = 8
ALLOCATION_S = 12 * 3600
PROGRESS = 712  # progress marks a job, one a minute
CHECKPOINTS = 23  # one each 30 min
LINES = 72  # one each 10 min
STRIDE = 1000  # seq numbers reserved for one allocation's events
TENANTS = 50
PRICE_PER_LINE = "3.60"  # 8 GPUs × 10 min at 2.70 a GPU-hour


@dataclass(frozen=True)
class Shape:
    """A synthetic fleet: `stretch` multiplies every duration (same events, longer lines)."""

    gpus: int
    days: int
    stretch: int = 1

    @property
    def slots(self) -> int:
        return max(1, self.gpus // GPUS_PER_ALLOCATION)

    @property
    def per_slot(self) -> int:
        return max(1, self.days * 86400 // (ALLOCATION_S * self.stretch))

    @property
    def allocations(self) -> int:
        return self.slots * self.per_slot


# ---------------------------------------------------------------- the fleet, in SQL

_MACROS = """
CREATE OR REPLACE MACRO iso(s) AS strftime(make_timestamp(CAST(s AS BIGINT) * 1000000), \
'%Y-%m-%dT%H:%M:%SZ');
CREATE OR REPLACE MACRO cloud_event(typ, id, s, data) AS
    '{"data":' || data || ',"id":"' || id || \
'","source":"bench://fleet","specversion":"1.0","time":"'
    || iso(s) || '","type":"' || typ || '"}';
CREATE OR REPLACE MACRO jt(tenant) AS '"tenant":"' || tenant || '"';
"""

#: Each kind of event as (seq offset within the allocation, type, time, data, condition).
#: Columns of `a`: k, slot, tenant, g (grant, epoch s), v (variant: k % 100), f (stretch).
_KINDS: list[tuple[str, str, str, str, str]] = [
    (
        "0",
        "allocation.granted",
        "g",
        """'{"allocation_id":"a-' || k || '","devices":[0,1,2,3,4,5,6,7],"fabric_domain":"fd-' || \
slot // 32
        || '","gpus":8,"node":"node-' || slot || '",' || jt(tenant) || '}'""",
        "true",
    ),
    (
        "1",
        "job.started",
        "g + 60*f",
        """'{"allocation_id":"a-' || k || '","attempt":1,"job_id":"job-' || k || '",' || \
jt(tenant) || '}'""",
        "true",
    ),
    (
        "771",
        "allocation.released",
        f"g + {ALLOCATION_S}*f",
        """'{"allocation_id":"a-' || k || '",' || jt(tenant) || '}'""",
        "true",
    ),
    (
        "770",
        "job.completed",
        f"g + 60*f*{PROGRESS + 1} + 30*f",
        """'{"job_id":"job-' || k || '",' || jt(tenant) || '}'""",
        "v <> 7",
    ),
    (
        "880",
        "work.accepted",
        f"g + 60*f*{PROGRESS + 2}",
        """'{"job_id":"job-' || k || '","result_id":"r-' || k || '",' || jt(tenant) || '}'""",
        "v % 2 = 0",
    ),
    (
        "880",
        "work.rejected",
        f"g + 60*f*{PROGRESS + 2}",
        """'{"job_id":"job-' || k || '","result_id":"r-' || k || '",' || jt(tenant) || '}'""",
        "v = 9",
    ),
    # v = 3: a 20-minute stall on a critical fault of one of the allocation's devices
    (
        "881",
        "health.fault",
        "g + 60*f*301 + 10*f",
        """'{"code":"xid-79","device":"3","node":"node-' || slot || '","severity":"critical"}'""",
        "v = 3",
    ),
    (
        "882",
        "health.cleared",
        "g + 60*f*301 + 3610*f",
        """'{"code":"xid-79","device":"3","node":"node-' || slot || '"}'""",
        "v = 3",
    ),
    # v = 5, 15: the job fails mid-run (application, hardware) and restarts 2.5 min later
    (
        "883",
        "job.failed",
        "g + 60*f*361 + 30*f",
        """'{"cause":"' || CASE WHEN v = 5 THEN 'application' ELSE 'hardware' END || \
'","job_id":"job-' || k
        || '",' || jt(tenant) || '}'""",
        "v IN (5, 15)",
    ),
    (
        "884",
        "job.started",
        "g + 60*f*361 + 180*f",
        """'{"allocation_id":"a-' || k || '","attempt":2,"job_id":"job-' || k || '",' || \
jt(tenant) || '}'""",
        "v IN (5, 15)",
    ),
    # v = 7: reclaimed at 10 h, the job cancelled 30 s later
    (
        "885",
        "policy.decision",
        "g + 36000*f",
        """'{"decision":"preempted","job_id":"job-' || k || '",' || jt(tenant) || '}'""",
        "v = 7",
    ),
    (
        "886",
        "job.cancelled",
        "g + 36000*f + 30*f",
        """'{"job_id":"job-' || k || '",' || jt(tenant) || '}'""",
        "v = 7",
    ),
    # v = 13: line 5 corrected, and a credit; v = 17: a line billing 20 min again;
    # v = 19: a line running 10 min past the release
    (
        "890",
        "billing.line",
        "g + 600*f*7",
        """line(k, tenant, '-5c', g + 600*f*5, g + 600*f*6, 8, amount, ',"corrects":"L' || k || \
'-5"')""",
        "v = 13",
    ),
    (
        "891",
        "billing.line",
        "g + 600*f*7",
        "line(k, tenant, '-credit', g + 600*f*5, g + 600*f*6, 0, '-5.00', "
        '\',"category":"credit"\')',
        "v = 13",
    ),
    (
        "892",
        "billing.line",
        "g + 600*f*13",
        "line(k, tenant, '-dup', g + 600*f*10, g + 600*f*12, 8, amount, '')",
        "v = 17",
    ),
    (
        "893",
        "billing.line",
        f"g + {ALLOCATION_S}*f + 600*f",
        f"line(k, tenant, '-late', g + {ALLOCATION_S}*f - 600*f, g + {ALLOCATION_S}*f + 600*f, 8, "
        "amount, '')",
        "v = 19",
    ),
]

_LINE_MACRO = """
CREATE OR REPLACE MACRO line(k, tenant, suffix, ps, pe, gpus, amount, extra) AS
    '{"allocation_id":"a-' || k || '","amount":"' || amount || '"' || extra || \
',"currency":"USD","gpus":' || gpus
    || ',"invoice_id":"INV-' || tenant || '","line_id":"L' || k || suffix || '","period_end":"' \
|| iso(pe)
    || '","period_start":"' || iso(ps) || '",' || jt(tenant) || '}';
"""


def _progress_sql() -> str:
    step = "CASE WHEN v = 11 AND m BETWEEN 100 AND 110 THEN 100 ELSE m END"
    skip = (
        "(v = 3 AND m BETWEEN 301 AND 320) OR (v = 4 AND m BETWEEN 400 AND 419)"
        " OR (v IN (5, 15) AND m BETWEEN 361 AND 363) OR (v = 7 AND m > 599)"
    )
    data = (
        f"""'{{"job_id":"job-' || k || '","step":' || ({step}) || ',' || jt(tenant) """
        f"""|| ',"units":' || ({step}) * 4096 || '}}'"""
    )
    return (
        f"SELECT 1 + m AS local, 'job.progress' AS type, tenant, g + 60*f + 60*f*m AS s, {data} "
        f"AS data, k FROM a, range(1, {PROGRESS + 1}) r(m) WHERE NOT ({skip})"
    )


def _checkpoint_sql() -> str:
    parts = []
    for offset, kind, delay in ((0, "checkpoint.started", 20), (1, "checkpoint.saved", 50)):
        data = (
            """'{"checkpoint_id":"c-' || k || '-' || c || '","job_id":"job-' || k || \
'","step":' """
            """|| (30*c - 1) || ',' || jt(tenant) || '}'"""
        )
        parts.append(
            f"SELECT 720 + 2*(c - 1) + {offset} AS local, '{kind}' AS type, tenant, g + 1800*f*c "
            f"+ {delay}*f AS s, {data} AS data, k FROM a, range(1, {CHECKPOINTS + 1}) r(c) WHERE "
            "NOT (v = 7 AND 1800*c > 36000)"
        )
    return " UNION ALL ".join(parts)


def _lines_sql() -> str:
    return (
        f"SELECT 800 + l AS local, 'billing.line' AS type, tenant, g + 600*f*(l + 1) + 60 AS s, "
        f"line(k, tenant, '-' || l, g + 600*f*l, g + 600*f*(l + 1), 8, amount, '') AS data, k "
        f"FROM a, range({LINES}) r(l)"
    )


def _kinds_sql() -> str:
    return " UNION ALL ".join(
        f"SELECT {local} AS local, '{kind}' AS type, "
        f"{'NULL' if kind.startswith('health') else 'tenant'} AS tenant, "
        f"{at} AS s, {data} AS data, k FROM a WHERE {where}"
        for local, kind, at, data, where in _KINDS
    )


def write_fleet(path: Path, shape: Shape, threads: int | None = None) -> int:
    """Write the fleet's entries to `path` (Parquet); returns the number of events."""
    con = duckdb.connect(":memory:")
    try:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET enable_progress_bar = false")
        con.execute(_MACROS + _LINE_MACRO)
        amount = f"{float(PRICE_PER_LINE) * shape.stretch:.2f}"
        con.execute(f"""CREATE TEMP TABLE a AS
            SELECT k, k // {shape.per_slot} AS slot, 'tenant-' || (k // {shape.per_slot}) % \
{TENANTS} AS tenant,
                   {T0} + (k % {shape.per_slot}) * {ALLOCATION_S * shape.stretch} + (k // \
{shape.per_slot}) % 60 AS g,
                   k % 100 AS v, {shape.stretch} AS f, '{amount}' AS amount
            FROM range({shape.allocations}) r(k)""")
        terms = (
            f"SELECT i + 1 AS seq, 'policy.terms' AS type, 'tenant-' || i AS tenant, "
            f"""cloud_event('policy.terms', 'terms-' || i, {T0 - 86400}, \
'{{"reclaim_notice_s":0,"stall_threshold_s":300,' """
            f"""|| jt('tenant-' || i) || ',"warmup_allowance_s":600}}') AS event FROM \
range({TENANTS}) r(i)"""
        )
        body = " UNION ALL ".join(
            f"({part})"
            for part in (_progress_sql(), _checkpoint_sql(), _lines_sql(), _kinds_sql())
        )
        events = (
            f"SELECT {TENANTS + 1} + k * {STRIDE} + local AS seq, type, tenant, "
            f"cloud_event(type, type || '-' || k || '-' || local, s, data) AS event FROM ({body})"
        )
        con.execute(
            f"COPY ({terms} UNION ALL {events}) TO '{_quoted(path)}' "
            f"(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1000000)"
        )
        row = con.execute(f"SELECT count(*) FROM read_parquet('{_quoted(path)}')").fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def check_fleet(path: Path, project: bool, sample: int = 2000) -> dict[str, int]:
    """A few events of every type, and a random sample, must validate as the ledger would
    take them, and seq must be unique; with `project`, the engine's projection must also
    find every time and tenant. Returns the count of events by type."""
    from reconcile.engine.snapshot import load_parquet, open_engine
    from schemas import validate_event_json

    con = duckdb.connect(":memory:")
    try:
        source = f"read_parquet('{_quoted(path)}')"
        counts = {
            str(k): int(n)
            for k, n in con.execute(
                f"SELECT type, count(*) FROM {source} GROUP BY type ORDER BY type"
            ).fetchall()
        }
        texts = [
            t
            for kind in counts
            for (t,) in con.execute(
                f"SELECT event FROM {source} WHERE type = ? LIMIT 3", [kind]
            ).fetchall()
        ]
        texts += [
            t
            for (t,) in con.execute(
                f"SELECT event FROM {source} USING SAMPLE {sample} ROWS"
            ).fetchall()
        ]
        for text in texts:
            validate_event_json(text)
        duplicates = con.execute(f"SELECT count(*) - count(DISTINCT seq) FROM {source}").fetchone()
        if duplicates and duplicates[0]:
            raise ValueError(f"{path}: {duplicates[0]} duplicate seq numbers")
    finally:
        con.close()
    if not project:
        return counts
    engine = open_engine()
    try:
        load_parquet(engine, path)
        missing = engine.execute(
            "SELECT count(*) FROM ev WHERE t IS NULL OR (type <> 'health.fault' "
            "AND type <> 'health.cleared' AND tenant IS NULL)"
        ).fetchone()
        if missing and missing[0]:
            raise ValueError(
                f"{path}: {missing[0]} events without time or tenant after projection"
            )
        return counts
    finally:
        engine.close()


# ---------------------------------------------------------------- timed runs, each in a child


def peak_rss_mib() -> float:
    """VmHWM of this process (ru_maxrss is inherited across exec on Linux, so not used)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _engine_child(path: Path, threads: int | None) -> dict[str, Any]:
    from reconcile import reconcile_parquet

    _no_pandas_probe()
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    result = reconcile_parquet(path, threads=threads)
    return _summary(result, time.perf_counter() - t0, _cpu_seconds() - cpu0)


def _store_child(path: Path, threads: int | None) -> dict[str, Any]:
    """reconcile_store on the SQLite store at `path` (what `gpuledger reconcile` computes,
    before it renders the cells)."""
    import ledger
    from reconcile import reconcile_store

    _no_pandas_probe()
    store = ledger.Store(f"sqlite:///{path}")
    try:
        t0, cpu0 = time.perf_counter(), _cpu_seconds()
        result = reconcile_store(store, threads=threads)
        return _summary(result, time.perf_counter() - t0, _cpu_seconds() - cpu0)
    finally:
        store.close()


def _no_pandas_probe() -> None:
    """pyarrow's pandas probe answered before the timed run, as every gpuledger command
    has it answered (ledger/arrow_probe.py): otherwise the engine's first conversion would
    import pandas (0.1-0.2 s) inside the time it is measured by."""
    from ledger.arrow_probe import skip_pandas_probe

    skip_pandas_probe()


def _summary(result: Any, seconds: float, cpu: float) -> dict[str, Any]:
    table = getattr(result, "table", None)  # the cells as Arrow: no Python object per cell
    if table is not None:
        return {
            "seconds": round(seconds, 2),
            "cpu_seconds": round(cpu, 2),
            "cells": table.num_rows,
            "billed_gpu_us": int(pc.sum(table.column("gpu_us")).as_py() or 0),
        }
    return {
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "cells": len(result.cells),
        "billed_gpu_us": sum(c.gpu_us for c in result.cells),
    }


def _cpu_seconds() -> float:
    """This process's CPU time, all threads: steadier than wall time on a shared host,
    where the same run's wall time has swung by a third."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pandas_child(path: Path, threads: int | None) -> dict[str, Any]:
    """The pandas baseline from the raw entries: it parses every event itself (Python's
    json, one event at a time), so its load time is that parse, not DuckDB's."""
    from bench.pandas_reconcile import entries_of_parquet, frame_of_entries, reconcile_frame

    t0 = time.perf_counter()
    ev = frame_of_entries(entries_of_parquet(path))
    loaded = time.perf_counter()
    lines = reconcile_frame(ev)
    done = time.perf_counter()
    return {
        "seconds": round(done - t0, 2),
        "load_seconds": round(loaded - t0, 2),
        "reconcile_frame_seconds": round(done - loaded, 2),
        "lines": len(lines),
        "billed_gpu_us": sum(sum(cells.values()) for cells in lines.values()),
    }


def _agreement_child(path: Path, threads: int | None) -> dict[str, Any]:
    """Both implementations on one file: the number of lines on which they differ, in
    GPU-µs or in cents of any category. The oracle reads the raw entries itself."""
    from bench.pandas_reconcile import (
        category_key,
        entries_of_parquet,
        frame_of_entries,
        line_cents,
        reconcile_frame,
    )
    from reconcile import reconcile_parquet

    frame = frame_of_entries(entries_of_parquet(path))
    expected = reconcile_frame(frame)
    expected_cents = line_cents(frame, expected)
    got: dict[tuple[str, str], dict[str, int]] = {}
    got_cents: dict[tuple[str, str], dict[str, int]] = {}
    for cell in reconcile_parquet(path, threads=threads).cells:
        key = category_key(cell.category, cell.bearer, cell.acceptance)
        for value, target in ((cell.gpu_us, got), (cell.cents, got_cents)):
            line = target.setdefault((cell.tenant, cell.line_id), {})
            if value:
                line[key] = line.get(key, 0) + value
    differing = sorted(k for k in set(expected) | set(got) if expected.get(k) != got.get(k))
    differing_cents = sorted(
        k
        for k in set(expected_cents) | set(got_cents)
        if expected_cents.get(k, {}) != got_cents.get(k, {})
    )
    return {
        "lines": len(expected),
        "differing_lines": len(differing),
        "differing_lines_cents": len(differing_cents),
        "first_differences": [[list(k), expected.get(k), got.get(k)] for k in differing[:3]],
        "first_differences_cents": [
            [list(k), expected_cents.get(k), got_cents.get(k)] for k in differing_cents[:3]
        ],
    }


CHILDREN = {
    "engine": _engine_child,
    "store": _store_child,
    "pandas": _pandas_child,
    "agreement": _agreement_child,
}


def run_child(kind: str, path: Path, threads: int | None = None) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.reconcile", "--child", kind, str(path)]
    if threads:
        command += ["--threads", str(threads)]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent
    )
    if done.returncode != 0:
        raise RuntimeError(f"{kind} run on {path} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _child_main(kind: str, path: Path, threads: int | None) -> None:
    result = CHILDREN[kind](path, threads)
    result["peak_rss_mib"] = round(peak_rss_mib(), 1)
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------- the two benchmarks


def _fleet(folder: Path, shape: Shape, name: str) -> tuple[Path, dict[str, Any]]:
    path = folder / f"{name}.parquet"
    t0 = time.perf_counter()
    events = write_fleet(path, shape)
    written = time.perf_counter() - t0
    info = {
        **asdict(shape),
        "allocations": shape.allocations,
        "events": events,
        "write_seconds": round(written, 1),
        "parquet_mib": round(path.stat().st_size / 2**20, 1),
    }
    print(f"fleet {name}: {info}", flush=True)
    return path, info


def _rate(events: int, seconds: float) -> int:
    return round(events / seconds) if seconds > 0 else 0


def measure_reconcile(folder: Path, shape: Shape, fraction: float, check: bool) -> dict[str, Any]:
    """The engine at full size; engine and pandas on `fraction` of the GPUs."""
    load_before, code_before = os.getloadavg(), code_state()
    full_path, full = _fleet(folder, shape, "full")
    full["by_type"] = check_fleet(full_path, project=False)
    engine_full = run_child("engine", full_path)
    print(f"engine, full size: {engine_full}", flush=True)
    full_path.unlink()
    small_shape = Shape(max(GPUS_PER_ALLOCATION, round(shape.gpus * fraction / 8) * 8), shape.days)
    small_path, small = _fleet(folder, small_shape, "small")
    check_fleet(small_path, project=True)
    engine_small = run_child("engine", small_path)
    print(f"engine, small: {engine_small}", flush=True)
    pandas_small = run_child("pandas", small_path)
    print(f"pandas, small: {pandas_small}", flush=True)
    result: dict[str, Any] = {
        "fleet": full,
        "engine": dict(engine_full, events_per_s=_rate(full["events"], engine_full["seconds"])),
        "baseline_fleet": small,
        "engine_on_baseline_fleet": dict(
            engine_small, events_per_s=_rate(small["events"], engine_small["seconds"])
        ),
        "pandas_on_baseline_fleet": dict(
            pandas_small, events_per_s=_rate(small["events"], pandas_small["seconds"])
        ),
        "pandas_fraction": small_shape.gpus / shape.gpus,
        "ratio_pandas_over_engine_same_size": round(
            pandas_small["seconds"] / engine_small["seconds"], 1
        ),
        "ratio_engine_over_pandas_events_per_s": round(
            _rate(full["events"], engine_full["seconds"])
            / max(1, _rate(small["events"], pandas_small["seconds"])),
            1,
        ),
        "billed_gpu_us_agree": engine_small["billed_gpu_us"] == pandas_small["billed_gpu_us"],
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
        "code": _code_during(code_before),
    }
    if check:
        result["agreement_on_baseline_fleet"] = run_child("agreement", small_path)
    small_path.unlink()
    return result


def measure_scaling(folder: Path, shape: Shape, repeats: int = 2) -> dict[str, Any]:
    """Engine time at 1×, 2×, 4× the events (GPUs), and at 1×, 2×, 4× the billed time with
    the same events (every duration stretched); the best of `repeats` runs of each."""
    runs: dict[str, list[dict[str, Any]]] = {"events": [], "billed_time": []}
    code_before = code_state()
    for axis, shapes in (
        ("events", [Shape(shape.gpus * m, shape.days) for m in (1, 2, 4)]),
        ("billed_time", [Shape(shape.gpus, shape.days * m, stretch=m) for m in (1, 2, 4)]),
    ):
        for factor, each in zip((1, 2, 4), shapes):
            path, info = _fleet(folder, each, f"{axis}-{factor}")
            tries = [run_child("engine", path) for _ in range(repeats)]
            engine = min(tries, key=lambda run: float(run["seconds"]))
            path.unlink()
            entry = {
                "factor": factor,
                "events": info["events"],
                "allocations": info["allocations"],
                "billed_gpu_seconds": engine["billed_gpu_us"] // 1_000_000,
                "seconds": engine["seconds"],
                "seconds_each_try": [run["seconds"] for run in tries],
                "peak_rss_mib": engine["peak_rss_mib"],
                "loadavg_1min": round(os.getloadavg()[0], 2),
            }
            print(f"scaling {axis} ×{factor}: {entry}", flush=True)
            runs[axis].append(entry)
    base_events, base_time = runs["events"][0]["seconds"], runs["billed_time"][0]["seconds"]
    return {
        "base": asdict(shape),
        **runs,
        "time_ratio_events": [round(r["seconds"] / base_events, 2) for r in runs["events"]],
        "time_ratio_billed_time": [
            round(r["seconds"] / base_time, 2) for r in runs["billed_time"]
        ],
        "expect": "events: about 1, 2, 4; billed time: about 1, 1, 1",
        "cores": os.cpu_count(),
        "repeats": repeats,
        "code": _code_during(code_before),
    }


def _code_during(before: str) -> str:
    after = code_state()
    return before if after == before else f"changed during the runs: from {before} to {after}"


def code_state() -> str:
    """The last commit of the code measured (reconcile/ and the two bench modules), and
    whether any of it had changes not yet committed (others work in the same tree)."""
    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(
        [
            "git",
            "log",
            "-1",
            "--format=%h",
            "--",
            "reconcile",
            "bench/pandas_reconcile.py",
            "bench/reconcile.py",
        ],
        cwd=root,
        capture_output=True,
        text=True,
    ).stdout.strip()
    dirty = subprocess.run(
        [
            "git",
            "status",
            "--porcelain",
            "--",
            "reconcile",
            "bench/pandas_reconcile.py",
            "bench/reconcile.py",
        ],
        cwd=root,
        capture_output=True,
        text=True,
    ).stdout.split()
    changed = sorted(p for p in dirty if "/" in p or p.endswith(".py"))
    return head + (f" with uncommitted changes to {', '.join(changed)}" if changed else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reconcile",
        description="Reconciliation cost: DuckDB engine against the pandas baseline, and scaling.",
    )
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument(
        "--pandas-fraction",
        type=float,
        default=0.1,
        help="share of the GPUs the pandas baseline gets",
    )
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="run the scaling series instead (base: --gpus, --days)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, both benchmarks, under a minute; records nothing",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="also compare engine and pandas line by line on the baseline fleet",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the Parquet files go (default: a temporary folder)",
    )
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_main(args.child, args.path, args.threads)
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        if args.quick:
            print(json.dumps(measure_reconcile(folder, Shape(160, 2), 0.5, check=True), indent=1))
            print(json.dumps(measure_scaling(folder, Shape(80, 2), repeats=1), indent=1))
            return
        if args.scaling:
            record("scaling", measure_scaling(folder, Shape(args.gpus, args.days)))
        else:
            record(
                "reconcile",
                measure_reconcile(
                    folder, Shape(args.gpus, args.days), args.pandas_fraction, args.check
                ),
            )
        print(
            json.dumps(
                json.loads(Path(__file__).with_name("results.json").read_text())[
                    "scaling" if args.scaling else "reconcile"
                ],
                indent=1,
            )
        )


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


if __name__ == "__main__":
    main()
