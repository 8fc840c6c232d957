"""One reconciliation as a declared pipeline: a DuckDB connection and the relations built in it.

A `Pipeline` owns the connection of one reconciliation. The ledger's entries are loaded
into it when it is made (one of `Pipeline.of_store`, `of_parquet`, `of_pages`,
`of_entries`); every other relation is made by a *stage* of `STAGES`, the one list of
what the engine, the reports and the packets build. A stage has one shape: its name,
the stages it needs, the relations it makes, the parameters it takes, and how it is
built (a Python function, or a `.sql` file of `reconcile/engine/sql/`).

Order rules, written here once and enforced by `Pipeline` (and `_check_stages`, when
this module is imported):

1. `events` is first, and is there from the start: a pipeline is made with its entries
   loaded, and nothing is built before they are.
2. A stage needs only stages listed before it in `STAGES`, so building them in the
   order the list gives them is always possible; a relation is made by one stage only.
3. A stage is built once, on first request (`need`), after the stages it needs; asking
   again returns the connection as it is. Nothing is built that nobody asked for.
4. A parameterised stage (a window, a packet's job, a dispute's invoice) is built again
   when asked with other parameters, and replaces its relations. No stage needs one, so
   nothing built on an earlier answer goes stale.
5. Reports and packets read a relation only after asking the pipeline for the stage
   that makes it (`need` returns the connection to read it with), and create none of
   their own: every CREATE is here or in the engine's stage modules.

    with Pipeline.of_store(store) as pipe:
        con = pipe.need("promise_outcomes")      # built now, with `events` before it
        con.execute("SELECT ... FROM promise_outcomes")
        pipe.reconciliation()                    # the cells and money (stages spans … money)
        pipe.relation("jobs")                    # a relation by its readable name

The short names inside the SQL (ev, ev_rest, aid, g_a, ps/pe, s/e …) are explained in
docs/architecture.md's glossary.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ledger.driver import ReadableStore
from reconcile.engine.causes import build_miss_causes
from reconcile.engine.classify import classify
from reconcile.engine.figures import placement_sql
from reconcile.engine.intervals import build_spans
from reconcile.engine.money import allocate
from reconcile.engine.placement import build_placement
from reconcile.engine.result import Reconciliation
from reconcile.engine.rules import (
    INF,
    LABELS,
    SPAN_LABELS,
    bit_sql,
    code,
    codes_sql,
    nodes_sql,
    winner_sql,
)
from reconcile.engine.scope import ALL_TIME, Period
from reconcile.engine.snapshot import (
    entry_pages,
    load_pages,
    load_parquet,
    load_store,
    open_engine,
)
from reconcile.engine.timeline import build_timeline

SQL_DIR = Path(__file__).with_name("sql")

# -- the engine's last steps: the cells and the unbilled time -----------------------------

UNBILLED = """
WITH held AS (
    SELECT a.tenant,
           sum(CAST(a.g_a AS HUGEINT) * greatest(least(a.released, h.h) - a.granted, 0)) AS us
    FROM allocs a JOIN horizons h ON h.tenant = a.tenant GROUP BY a.tenant),
billed AS (
    SELECT gl.tenant, sum(CAST(gl.gpus AS HUGEINT) * greatest(least(p.e, h.h) - p.s, 0)) AS us
    FROM pieces p JOIN gpu_lines gl ON gl.seq = p.owner JOIN horizons h ON h.tenant = gl.tenant
    GROUP BY gl.tenant)
SELECT held.tenant, CAST(held.us - coalesce(billed.us, 0) AS VARCHAR)
FROM held LEFT JOIN billed USING (tenant)
"""

_CELLS = """
SELECT {key}l.invoice_id, l.line_id, l.tenant, l.allocation_id, l.currency, m.minor, m.label,
       CAST(m.gpu_us AS BIGINT) AS gpu_us, CAST(m.cents AS BIGINT) AS cents,
       l.amount AS billed_amount, l.ps, l.pe, l.description
FROM money m JOIN lines_ev l ON l.seq = m.seq  -- money holds no replaced line
WHERE ($invoice IS NULL OR l.invoice_id = $invoice) AND ({in_period})
ORDER BY l.seq, m.label
"""


def cells_sql(period: Period = ALL_TIME, keyed: bool = False) -> str:
    """CELLS of the lines whose billed interval starts in `period` (scope.Period); `keyed`
    puts each cell's line seq first (`line_seq`), so that a partition's cells merge in
    ledger order with the other partitions' (partitions.py)."""
    key = "l.seq AS line_seq, " if keyed else ""
    return _CELLS.replace("{key}", key).replace("{in_period}", period.sql("l.ps"))


#: The cells of every period.
CELLS = cells_sql()
#: CELLS with each cell's line seq first.
KEYED_CELLS = cells_sql(keyed=True)


def unbilled_sql(period: Period = ALL_TIME) -> str:
    """UNBILLED with held and billed time clipped to `period` (open: UNBILLED itself)."""
    if period.open:
        return UNBILLED
    lo = "-9223372036854775807" if period.since is None else str(int(period.since))
    hi = "9223372036854775807" if period.until is None else str(int(period.until))
    return (
        UNBILLED.replace("least(a.released, h.h)", f"least(a.released, h.h, {hi})")
        .replace("- a.granted", f"- greatest(a.granted, {lo})")
        .replace("least(p.e, h.h)", f"least(p.e, h.h, {hi})")
        .replace("- p.s", f"- greatest(p.s, {lo})")
    )


#: The job tables a period keeps only its jobs in (each has tenant and job_id).
PERIOD_JOB_TABLES = ("job_outcomes", "job_attempts", "step_gaps", "job_allocation_time")

#: A job's own time: when it was asked for, else its first start, else its first grant.
JOB_TIME = "coalesce(submitted, first_start, granted)"

#: A promise's own time: the start it promised.
PROMISE_TIME = "start_by"


def _apply_period(pipe: Pipeline, stage: str) -> None:
    """Keep in `stage`'s relations only the jobs and promises of the pipeline's period."""
    period = pipe.period
    if period.open:
        return
    if stage == "job_facts":
        pipe.con.execute(
            "CREATE OR REPLACE TEMP TABLE period_jobs AS SELECT tenant, job_id "
            f"FROM job_outcomes WHERE {period.sql(JOB_TIME)}"
        )
        for table in PERIOD_JOB_TABLES:
            pipe.con.execute(
                f"DELETE FROM {table} WHERE (tenant, job_id) NOT IN "
                "(SELECT (tenant, job_id) FROM period_jobs)"
            )
    elif stage == "promise_outcomes":
        pipe.con.execute(f"DELETE FROM promise_outcomes WHERE NOT ({period.sql(PROMISE_TIME)})")


#: Each line's placement row (one a key), in key order: a partition's rows merge with the
#: others' in that order (partitions.py), so every run gives the same table.
PLACED = """
SELECT tenant, invoice_id, line_id, state, share FROM line_placement
WHERE ($invoice IS NULL OR invoice_id = $invoice)
ORDER BY tenant, invoice_id, line_id
"""


# -- stages --------------------------------------------------------------------------------

Build = Callable[["Pipeline", Mapping[str, Any]], None]


@dataclass(frozen=True)
class Stage:
    """One step of the pipeline: what it makes, from what, and how."""

    name: str
    needs: tuple[str, ...]
    makes: tuple[str, ...]  # the DuckDB tables and views it creates
    build: Build
    params: tuple[str, ...] = ()  # parameters it is built with (`need(name, **params)`)
    doc: str = ""


@cache
def sql_file(name: str) -> str:
    """The text of `sql/<name>.sql` without its leading comment (which says what it makes)."""
    lines = (SQL_DIR / f"{name}.sql").read_text().splitlines()
    while lines and lines[0].startswith("--"):
        lines.pop(0)
    return "\n".join(lines) + "\n"


def run_sql(name: str, **fragments: str) -> Build:
    """A stage built by `sql/<name>.sql`: its `{fragment}`s filled in (SQL written once in
    rules.py or figures.py), each statement given the parameters it names."""

    def build(pipe: Pipeline, params: Mapping[str, Any]) -> None:
        text = sql_file(name).format(**fragments) if fragments else sql_file(name)
        for statement in text.split(";\n\n"):
            pipe.con.execute(statement, {k: v for k, v in params.items() if f"${k}" in statement})

    return build


def _loaded(pipe: Pipeline, params: Mapping[str, Any]) -> None:
    raise AssertionError("events are loaded when the pipeline is made")  # rule 1: never built


def _engine(step: Callable[[duckdb.DuckDBPyConnection], None]) -> Build:
    def build(pipe: Pipeline, params: Mapping[str, Any]) -> None:
        step(pipe.con)

    return build


def _allocation_money(pipe: Pipeline, params: Mapping[str, Any]) -> None:
    """`allocation_money`: the exact money of the lines naming each allocation (the cells'
    exact shares, in minor units, as a fraction num/den), from the reconciliation."""
    per_alloc = pipe.reconciliation().allocation_money()
    page = pa.table(
        {
            "tenant": pa.array([k[0] for k in per_alloc], pa.string()),
            "allocation_id": pa.array([k[1] for k in per_alloc], pa.string()),
            "currency": pa.array([k[2] for k in per_alloc], pa.string()),
            "num": pa.array([str(v.numerator) for v in per_alloc.values()], pa.string()),
            "den": pa.array([str(v.denominator) for v in per_alloc.values()], pa.string()),
        }
    )
    pipe.con.register("allocation_money_page", page)
    pipe.con.execute(
        "CREATE OR REPLACE TEMP TABLE allocation_money AS "
        "SELECT tenant, allocation_id, currency, num, den FROM allocation_money_page"
    )
    pipe.con.unregister("allocation_money_page")


def _provider(source: str) -> str:
    """SQL: the provider of a CloudEvents source, as docs/envelope.md names it: the source's
    authority (the cluster), so that `gpu-binding://k8s-a` and `kueue://k8s-a` are one
    provider `k8s-a` (the tools that wrote the events are not providers); a source that is
    not such a URI, or has no authority, stays whole."""
    return (
        f"CASE WHEN regexp_matches({source}, '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]') "
        f"THEN regexp_extract({source}, '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)', 1) "
        f"ELSE {source} END"
    )


#: An event about the packet's job: its id, one of its Pods, one of its allocations.
ABOUT_JOB = (
    "(job_id = $job OR job_id IN (SELECT pod FROM packet_pods) "
    "OR allocation_id IN (SELECT aid FROM packet_allocations))"
)

#: Labels a customer disputes: provider-borne (the provider should not have charged) and disputed.
CLAIM_LABELS = tuple(label for label in LABELS if label.bearer in ("provider", "disputed"))
SWEEP_CLAIMS = tuple(label for label in CLAIM_LABELS if label in SPAN_LABELS)

#: Every stage, in the order rule 2 allows them to be built; each is
#: Stage(name, needs, makes, build, params=(), doc=…).
STAGES: tuple[Stage, ...] = (
    Stage(
        "events",
        (),
        ("ev", "ev_rest", "ev_other", "progress", "jobs", "lines_ev", "horizons"),
        _loaded,
        doc="the entries, one typed row per event (snapshot.py); loaded when the pipeline is made",
    ),
    Stage(
        "spans",
        ("events",),
        (
            "terms",
            "allocs",
            "attempts",
            "acceptance",
            "faults",
            "touches",
            "gangs",
            "attempt_touches",
            "running_on",
            "owed",
            "job_notes",
            "mark_notes",
            "first_progress",
            "odd_gaps",
            "productive_runs",
            "spans",
            "failures",
            "merged",
        ),
        _engine(build_spans),
        doc="facts and labelled spans on each allocation's timeline (intervals.py)",
    ),
    Stage(
        "cells",
        ("spans",),
        ("replaced", "lines", "gpu_lines", "clipped", "pieces", "owned", "cells"),
        _engine(classify),
        doc="billing lines against the spans: (line, label, GPU-µs) (classify.py)",
    ),
    Stage(
        "money",
        ("cells",),
        ("line_amounts", "invoice_cents", "line_cents", "line_total", "money"),
        _engine(allocate),
        doc="each cell's money, rounded per invoice (money.py)",
    ),
    Stage(
        "placement",
        ("cells",),
        ("allocation_placement", "line_placement"),
        _engine(build_placement),
        doc="each line's placement state and credit share, RULES.md 13 (placement.py)",
    ),
    Stage(
        "promise_outcomes",
        ("events",),
        ("promise_outcomes",),
        run_sql(
            "promise_outcomes",
            placement=placement_sql(
                "coalesce(p.cls, g.cls)",
                "CASE WHEN coalesce(p.cls, g.cls) = g.cls THEN g.profile END",
            ),
        ),
        doc="each promise with its outcome (reports/promises.py)",
    ),
    Stage(
        "job_facts",
        ("events",),
        (
            "tenant_horizons",
            "job_attempts",
            "allocation_holdings",
            "job_outcomes",
            "step_gaps",
            "job_allocation_time",
        ),
        run_sql("job_facts", inf=str(INF)),
        doc="jobs, attempts and step gaps (reports/outcomes.py)",
    ),
    Stage(
        "allocation_money",
        ("money",),
        ("allocation_money",),
        _allocation_money,
        doc="the exact money billed on each allocation (reports/outcomes.py)",
    ),
    Stage(
        "envelope_groups",
        ("job_facts", "promise_outcomes"),
        ("job_groups", "allocation_groups"),
        run_sql(
            "envelope_groups",
            grant_provider=_provider("g.source"),
            said_provider=_provider("s.source"),
            grant_placement=placement_sql("g.cls", "g.profile"),
        ),
        doc="each job's and allocation's provider and class (reports/envelope.py)",
    ),
    Stage(
        "fleet_changes",
        ("job_facts",),
        ("fleet_changes", "fleet_change_windows"),
        run_sql("fleet_changes"),
        params=("since", "until"),
        doc="fleet changes in a window, and their windows (reports/fleet_changes.py)",
    ),
    Stage(
        "packet_scope",
        ("events",),
        ("packet_pods", "packet_allocations", "packet_window"),
        run_sql("packet_scope", about_job=ABOUT_JOB, nodes=nodes_sql("nodes", "node")),
        params=("tenant", "job", "pid"),
        doc="one promise's job, for its diagnostic packet (packets/diagnostic.py)",
    ),
    Stage(
        "claims",
        ("money",),
        (
            "claim_lines",
            "claim_raw_stretches",
            "claim_stretches",
            "claim_bounds",
            "claim_activity",
        ),
        run_sql(
            "claims",
            activity_labels=f"{code('stalled_fault')}, {code('idle_unexplained')}",
            label_bit=bit_sql("m.label"),
            inf=str(INF),
            winner=winner_sql("mask"),
            sweep_claims=codes_sql(SWEEP_CLAIMS),
            double_billed=str(code("double_billed")),
            unallocated=str(code("unallocated")),
        ),
        params=("invoice",),
        doc="one invoice's claims, stretch by stretch (packets/claims.py)",
    ),
    Stage(
        "device_timeline",
        ("events",),
        ("timeline_devices", "device_timeline"),
        _engine(build_timeline),
        doc="every device's state in time: held, faulted, under a change, free (timeline.py)",
    ),
    Stage(
        "miss_causes",
        ("promise_outcomes", "device_timeline"),
        ("miss_causes",),
        _engine(build_miss_causes),
        doc="the cause of every missed start promise, with its figures (causes.py)",
    ),
    Stage(
        "backfill",
        ("promise_outcomes",),
        ("job_estimates", "jobs_ahead"),
        run_sql("backfill", grant_placement=placement_sql("placement_class", "profile")),
        doc="time limits against run times; the later jobs started ahead of a miss (promises.py)",
    ),
)

#: Readable names for the relations a newcomer (and the next features) ask for first:
#: name -> (stage, DuckDB relation).
RELATIONS: dict[str, tuple[str, str]] = {
    "events": ("events", "ev"),
    "allocations": ("spans", "allocs"),
    "attempts": ("spans", "attempts"),
    "marks": ("spans", "mark_notes"),
    "spans": ("spans", "merged"),
    "lines": ("cells", "lines"),
    "cells": ("money", "money"),
    "jobs": ("job_facts", "job_outcomes"),
    "job_attempts": ("job_facts", "job_attempts"),
    "promises": ("promise_outcomes", "promise_outcomes"),
    "allocation_money": ("allocation_money", "allocation_money"),
    "device_timeline": ("device_timeline", "device_timeline"),
    "miss_causes": ("miss_causes", "miss_causes"),
}


def _check_stages(
    stages: tuple[Stage, ...], relations: Mapping[str, tuple[str, str]] = RELATIONS
) -> dict[str, Stage]:
    """Rules 2 and 4, checked once: needs point back; each relation has one maker; no stage
    needs a parameterised one; the readable names name a relation their stage makes."""
    seen: dict[str, Stage] = {}
    made: set[str] = set()
    for stage in stages:
        for need in stage.needs:
            if need not in seen:
                raise AssertionError(
                    f"stage {stage.name!r} needs {need!r}, which is not listed before it"
                )
            if seen[need].params:
                raise AssertionError(
                    f"stage {stage.name!r} needs the parameterised stage {need!r}"
                )
        if stage.name in seen or made & set(stage.makes):
            raise AssertionError(f"stage {stage.name!r} makes what another stage makes")
        seen[stage.name] = stage
        made |= set(stage.makes)
    for name, (stage_name, relation) in relations.items():
        if stage_name not in seen or relation not in seen[stage_name].makes:
            raise AssertionError(
                f"relation {name!r}: stage {stage_name!r} does not make {relation!r}"
            )
    return seen


STAGE_BY_NAME = _check_stages(STAGES)


# -- the pipeline --------------------------------------------------------------------------


#: The event types of the entries loaded (progress's own table has one).
EVENT_TYPES = (
    "SELECT DISTINCT type FROM ev_rest UNION "
    "SELECT 'job.progress' FROM (SELECT 1 FROM progress LIMIT 1)"
)


@dataclass
class Pipeline:
    """The relations of one reconciliation, built on demand in the declared order."""

    con: duckdb.DuckDBPyConnection
    #: the period its lines, jobs and promises are kept in (scope.Period; RULES.md "Periods")
    period: Period = ALL_TIME
    _built: dict[str, tuple[tuple[str, Any], ...]] = field(default_factory=lambda: {"events": ()})
    _recons: dict[str | None, Reconciliation] = field(default_factory=dict)

    def need(self, name: str, **params: Any) -> duckdb.DuckDBPyConnection:
        """Build stage `name` (and what it needs, first) unless it is built with `params`
        already; the connection to read its relations with."""
        stage = STAGE_BY_NAME.get(name)
        if stage is None:
            raise KeyError(f"no stage {name!r} (reconcile/engine/pipeline.py lists them)")
        if set(params) != set(stage.params):
            raise TypeError(f"stage {name!r} takes {stage.params}, given {tuple(params)}")
        key = tuple(sorted(params.items()))
        if self._built.get(name) == key:
            return self.con
        for need in stage.needs:
            self.need(need)
        stage.build(self, params)
        _apply_period(self, name)
        self._built[name] = key
        return self.con

    def built(self) -> list[str]:
        """The stages built so far, in the order of STAGES."""
        return [stage.name for stage in STAGES if stage.name in self._built]

    def relation(self, name: str) -> duckdb.DuckDBPyRelation:
        """A relation by its readable name (RELATIONS), its stage built first."""
        stage, table = RELATIONS[name]
        return self.need(stage).table(table)

    def reconciliation(self, invoice: str | None = None) -> Reconciliation:
        """The reconciliation (of one invoice's lines, or all): the cells as one Arrow table
        (no Python object per cell until one is asked for) and each tenant's unbilled time."""
        if invoice not in self._recons:
            con = self.need("money")
            unbilled = {
                tenant: int(us) for tenant, us in con.execute(unbilled_sql(self.period)).fetchall()
            }
            table: pa.Table = con.sql(
                cells_sql(self.period), params={"invoice": invoice}
            ).to_arrow_table()
            if invoice is not None:
                tenants = set(table.column("tenant").to_pylist())
                unbilled = {t: us for t, us in unbilled.items() if t in tenants}
            placed = self.need("placement").sql(PLACED, params={"invoice": invoice})
            types = frozenset(t for (t,) in con.execute(EVENT_TYPES).fetchall())
            self._recons[invoice] = Reconciliation(
                table, unbilled, placed.to_arrow_table(), self.period, types
            )
        return self._recons[invoice]

    def use_reconciliation(self, result: Reconciliation) -> None:
        """Take `result` as this pipeline's whole reconciliation (`reconciliation()`): the
        same answer made elsewhere, by a cluster's partitions (reconcile/engine/cluster.py)."""
        self._recons[None] = result

    @property
    def recon(self) -> Reconciliation:
        """The whole reconciliation (`reconciliation()`)."""
        return self.reconciliation()

    # -- made with their entries loaded (rule 1) ------------------------------------------

    @classmethod
    @contextmanager
    def of_store(
        cls,
        store: ReadableStore,
        tenant: str | tuple[str, ...] | None = None,
        threads: int | None = None,
        upto_seq: int | None = None,
        sized: bool = True,
        period: Period = ALL_TIME,
    ) -> Iterator[Pipeline]:
        """One consistent snapshot of the store (with `tenant`: its entries and the fleet's;
        up to `upto_seq`; its lines, jobs and promises of `period`). `sized`: in a scratch
        file when the ledger is large (`engine`); else always in memory."""
        with ExitStack() as stack:
            with store.reading() as conn:  # the snapshot is read, then let go
                size = 0
                if sized:
                    size = (
                        conn.exec_driver_sql("SELECT coalesce(max(seq), 0) FROM entries").scalar()
                        or 0
                    )
                con = stack.enter_context(engine(int(size), threads))
                load_store(con, conn, tenant, upto_seq)
            yield cls(con, period)

    @classmethod
    @contextmanager
    def of_parquet(cls, path: Path, threads: int | None = None) -> Iterator[Pipeline]:
        """An exported entries file (`gpuledger export --format parquet`)."""
        with engine(parquet_rows(path), threads) as con:
            load_parquet(con, path)
            yield cls(con)

    @classmethod
    @contextmanager
    def of_pages(cls, pages: Iterable[pa.Table]) -> Iterator[Pipeline]:
        """Arrow pages of entries (columns seq, type, tenant, event)."""
        with engine(0) as con:
            load_pages(con, pages)
            yield cls(con)

    @classmethod
    @contextmanager
    def of_entries(cls, entries: Iterable[dict[str, Any]]) -> Iterator[Pipeline]:
        """Entries given as dicts with seq, type, tenant and event (a packet's)."""
        with cls.of_pages(entry_pages(entries)) as pipe:
            yield pipe


#: Past this many entries the engine works in a scratch file under a memory cap, so a
#: month of a large fleet stays within a few GB (DuckDB spills what does not fit).
LARGE_LEDGER = 2_000_000
MEMORY_LIMIT = os.environ.get("GPULEDGER_ENGINE_MEMORY", "3GB")


@contextmanager
def engine(entries: int, threads: int | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """An engine sized for `entries`: in memory when small, a capped scratch file when large."""
    if entries <= LARGE_LEDGER:
        con = open_engine(threads)
        try:
            yield con
        finally:
            con.close()
        return
    with tempfile.TemporaryDirectory(prefix="gpuledger-reconcile-") as scratch:
        con = open_engine(
            threads, MEMORY_LIMIT, Path(scratch) / "spill", Path(scratch) / "engine.duckdb"
        )
        try:
            yield con
        finally:
            con.close()


def parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)
