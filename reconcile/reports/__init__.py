"""The operator's and finance's reports over the ledger: promises, capacity, outcomes,
placement, envelope.

A report is one class of REPORT_LIST (below): its name and help, its own options, how it is
built from a pipeline (`build`), its CSV rows (`rows`), its terminal tables (`tables`) and
its page if it has one (`page`). `gpuledger report`'s commands, their formats, options and
help are made from that list (cli.py's ReportGroup), so adding a report is adding one class
to the list (docs/architecture.md shows how).

Each report is computed in DuckDB from the relations of one `Pipeline`
(reconcile/engine/pipeline.py), loaded once from the store: it asks the pipeline for what
it reads (`pipe.need("promise_outcomes")`, `pipe.recon`) and creates no table. Each
returns plain dicts and lists (JSON as is), and renders as rich tables or CSV rows.
Definitions are in the module docstrings of reconcile/reports/promises.py, capacity.py,
outcomes.py (with serving.py, its serving view), placement.py and envelope.py, in
docs/reports.md and docs/placement.md.

    with loaded(store) as pipe:            # one snapshot, one DuckDB, one pipeline
        promises.report(pipe)              # or report(store, "promises") for one report
    write_reports(store, out_dir)          # every report, JSON and CSV, for `gpuledger demo`
"""

from __future__ import annotations

import csv
import io
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.table import Table
from rich.text import Text

from reconcile.engine.pipeline import Pipeline
from reconcile.engine.scope import ALL_TIME, Period
from reconcile.reports import (
    capacity,
    envelope,
    envelope_page,
    fleet_changes,
    outcomes,
    placement,
    promises,
    serving,
)
from reconcile.reports.numbers import money, percent
from schemas.display import DataTable, data_text, spreadsheet_safe, terminal_safe
from schemas.errors import BadInput

if TYPE_CHECKING:  # a name only: reading a SQLite store needs no SQLAlchemy (ledger/driver.py)
    from ledger import Store

FORMATS = ("table", "json", "csv", "tsv")


#: What the reports read: a pipeline over one snapshot of the store.
Loaded = Pipeline


@contextmanager
def loaded(
    store: Store,
    tenant: str | None = None,
    threads: int | None = None,
    period: Period = ALL_TIME,
    cluster: str | None = None,
) -> Iterator[Pipeline]:
    """One consistent snapshot of the store (with `tenant`: its entries and the fleet's), in
    memory, as a pipeline: its relations built as the reports ask for them, its lines, jobs
    and promises those of `period` (scope.Period). With `cluster` (`local[N]` or
    `ray://HOST:PORT`), the reconciliation the reports read is the cluster's (the same
    answer, its partitions run there: reconcile/engine/cluster.py)."""
    if cluster is not None and not period.open:
        from reconcile.engine.cluster import ClusterError

        raise ClusterError("a cluster reconciles whole periods: give no period")
    with Pipeline.of_store(store, tenant, threads, sized=False, period=period) as pipe:
        if cluster is not None:
            from reconcile.engine.cluster import parse_cluster, reconcile_on_cluster

            pipe.use_reconciliation(reconcile_on_cluster(store, parse_cluster(cluster), tenant))
        yield pipe


@dataclass(frozen=True)
class ReportOption:
    """An option of one report beyond the ones every report takes (tenant, format, out):
    the keyword `build` receives, and what the command line makes of it."""

    name: str  # build()'s keyword
    flag: str  # the command line's flag
    help: str
    choices: tuple[str, ...] = ()  # the values it may take (none: free text)
    default: str | None = None
    metavar: str | None = None
    time: bool = False  # an RFC 3339 time, given to build() as µs since the epoch


class Report(ABC):
    """One report: its name and what the command line says of it, how it is built from a
    pipeline (`build`), its rows for CSV and TSV (`rows`), its tables for the terminal
    (`tables`) and its page, if it has one (`page`). Registered in REPORT_LIST, from
    which `gpuledger report`'s commands, formats and help are made."""

    name: ClassVar[str]
    help: ClassVar[str]  # the command's help
    tenant_help: ClassVar[str] = "Only this tenant (capacity: its jobs; devices are the fleet's)."
    formats: ClassVar[tuple[str, ...]] = FORMATS
    options: ClassVar[tuple[ReportOption, ...]] = ()
    options_first: ClassVar[bool] = False  # its options come before --format on the command line
    #: Built on the whole fleet's snapshot even for one tenant (its build keeps only that
    #: tenant's rows): what it judges depends on every tenant's grants (a missed start's cause).
    whole_fleet: ClassVar[bool] = False

    @abstractmethod
    def build(self, pipe: Pipeline, tenant: str | None, **options: Any) -> dict[str, Any]:
        """Each report says its own."""

    @abstractmethod
    def rows(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """Each report says its own."""

    @abstractmethod
    def tables(self, doc: dict[str, Any]) -> list[Table | Text]:
        """Each report says its own."""

    def page(self, doc: dict[str, Any]) -> str | None:
        return None


class PromisesReport(Report):
    name = "promises"
    whole_fleet = True  # a miss's cause is judged on every tenant's grants (reconcile/RULES.md)
    help = """Promised against actual start and completion; p50/p95 start delay by tenant and
    placement class; every miss with the command that writes its packet."""

    def build(self, pipe: Pipeline, tenant: str | None, **options: Any) -> dict[str, Any]:
        return promises.report(pipe, tenant)

    def rows(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """One row per promise."""
        hidden = ("seq", "cause", "cause_seconds", "cause_bearer", "ahead")
        return [
            {k: v for k, v in p.items() if k not in hidden}
            | {"packet_command": p.get("packet_command", "")}
            | {"cause": p.get("cause") or "", "cause_bearer": p.get("cause_bearer") or ""}
            | {"jobs_ahead": (p.get("ahead") or {}).get("jobs", "")}
            for p in doc["promises"]
        ]

    def tables(self, doc: dict[str, Any]) -> list[Table | Text]:
        return _promise_tables(doc)


class CapacityReport(Report):
    name = "capacity"
    help = """Devices discovered, jobs admitted, jobs placed, workloads started, and the gaps,
    by placement class (whole, mig:<profile>, timeslice)."""
    options = (
        ReportOption(
            "since",
            "--since",
            "Window start (inclusive; default: open).",
            metavar="RFC3339",
            time=True,
        ),
        ReportOption(
            "until",
            "--until",
            "Window end (exclusive; default: open).",
            metavar="RFC3339",
            time=True,
        ),
    )

    def build(self, pipe: Pipeline, tenant: str | None, **options: Any) -> dict[str, Any]:
        return capacity.report(pipe, tenant, options.get("since"), options.get("until"))

    def rows(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """One row per placement class and the total."""
        return capacity.csv_rows(doc)

    def tables(self, doc: dict[str, Any]) -> list[Table | Text]:
        return [_capacity_table(doc), *capacity.extra_tables(doc)]


class OutcomesReport(Report):
    name = "outcomes"
    help = """Time to first usable allocation, step time p50/p95, checkpoint overhead,
    completed-run time, cost per completed run and per accepted result; for serving jobs,
    per concurrency level: request rate, TTFT and latency, output tokens/s, cancellations
    and cost per accepted response."""
    options = (
        ReportOption(
            "view",
            "--view",
            "serving: only the serving view (CSV: its rows instead of the jobs').",
            choices=("all", "serving"),
            default="all",
        ),
    )

    def build(self, pipe: Pipeline, tenant: str | None, **options: Any) -> dict[str, Any]:
        if options.get("view") == "serving":  # the serving view alone
            return {"serving": serving.view(pipe, tenant)}
        return outcomes.report(pipe, tenant) | {"serving": serving.view(pipe, tenant)}

    def rows(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """One row per job and currency of its cost (the serving view alone: its rows)."""
        return _job_rows(doc) if "jobs" in doc else _serving_rows(doc)

    def tables(self, doc: dict[str, Any]) -> list[Table | Text]:
        if "jobs" not in doc:
            return [_serving_table(doc)]
        return (
            [_outcome_table(doc), _serving_table(doc)]
            if doc.get("serving")
            else [_outcome_table(doc)]
        )


class PlacementReport(Report):
    name = "placement"
    help = """Per allocation: the placement class sold against the topology observed (match, or
    mismatch and why) and the money billed on mismatches; per class, whether probe bus
    bandwidth ranks the jobs' step time (Spearman's rho)."""

    def build(self, pipe: Pipeline, tenant: str | None, **options: Any) -> dict[str, Any]:
        return placement.report(pipe, tenant)

    def rows(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """One row per allocation and currency of its billed money."""
        return [
            _flat(_placement_row(row)) | {"currency": currency, "billed": amount}
            for row in doc["allocations"]
            for currency, amount in _currencies(row["billed"], "")
        ]

    def tables(self, doc: dict[str, Any]) -> list[Table | Text]:
        return _placement_tables(doc)


class EnvelopeReport(Report):
    name = "envelope"
    whole_fleet = True  # misses by cause are judged on every tenant's grants (reconcile/RULES.md)
    help = """Per source (provider) and placement class: p95 start and completion against the
    promises, restart rate, checkpoint overhead, cost per completed run and per accepted
    result (definitions: docs/envelope.md)."""
    tenant_help = "Only this tenant's jobs and money."
    formats = (*FORMATS, "html")
    options = (
        ReportOption(
            "by",
            "--by",
            "Group by source (the provider), by placement class, or by both.",
            choices=tuple(envelope.GROUPINGS),
            default="both",
        ),
    )
    options_first = True

    def build(self, pipe: Pipeline, tenant: str | None, **options: Any) -> dict[str, Any]:
        return envelope.report(pipe, tenant, options.get("by") or "both")

    def rows(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """One row per group and currency."""
        return envelope.csv_rows(doc)

    def tables(self, doc: dict[str, Any]) -> list[Table | Text]:
        return envelope.tables(doc)

    def page(self, doc: dict[str, Any]) -> str | None:
        return envelope_page.html(doc)


#: Every report, in the order `gpuledger report` and `demo` give them. A new report is one
#: more class here: the command line makes its command, formats and help from it.
REPORT_LIST: tuple[Report, ...] = (
    PromisesReport(),
    CapacityReport(),
    OutcomesReport(),
    PlacementReport(),
    EnvelopeReport(),
)
REPORTS = tuple(r.name for r in REPORT_LIST)


def report_of(name: str) -> Report | None:
    """The report of REPORT_LIST named `name`, or None."""
    return next((r for r in REPORT_LIST if r.name == name), None)


#: Other names a document is asked for by: (report, options).
_VIEWS: dict[str, tuple[str, dict[str, Any]]] = {"serving": ("outcomes", {"view": "serving"})}


def report_or_view(name: str) -> Report | None:
    """The report a name asks for, a view's (serving: outcomes') included, or None."""
    return report_of(_VIEWS.get(name, (name, {}))[0])


def build_report(
    data: Pipeline, name: str, tenant: str | None = None, **options: Any
) -> dict[str, Any]:
    """One report by name, as plain dicts and lists; `options` are its own (ReportOption:
    capacity's since and until, outcomes' view, envelope's by), others are not its."""
    name, fixed = _VIEWS.get(name, (name, {}))
    spec = report_of(name)
    if spec is None:
        raise ValueError(f"unknown report {name!r}")
    given = options | fixed
    doc = spec.build(data, tenant, **{o.name: given.get(o.name, o.default) for o in spec.options})
    # the period it covers: capacity's is its own window, every other report's the pipeline's
    window = doc.get("window")
    covered = data.period.as_dict() if window is None else {k: window[k] for k in PERIOD_KEYS}
    return {"period": covered, **doc}


def report(
    store: Store,
    name: str,
    tenant: str | None = None,
    period: Period = ALL_TIME,
    cluster: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """One report of the store (`name`: one of REPORTS, or serving, outcomes' serving view),
    of the jobs, promises and lines of `period` (capacity's window is its own options). A
    report that judges on the whole fleet (promises' causes) loads every tenant's events and
    shows only `tenant`'s. With `cluster`, the reconciliation is the cluster's (`loaded`)."""
    spec = report_or_view(name)
    scope = None if spec is not None and spec.whole_fleet else tenant
    with loaded(store, scope, period=period, cluster=cluster) as data:
        return build_report(data, name, tenant, **options)


@dataclass
class Written:
    paths: list[Path]
    missed_promises: list[dict[str, Any]]
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)


def write_reports(store: Store, out_dir: Path) -> Written:
    """Every report as `<name>.json` and `<name>.csv` under `out_dir` (from one snapshot);
    the serving view of outcomes as `serving.csv` and capacity's change windows as
    `capacity_changes.csv` (rows of another shape than their report's); the envelope's
    page as `envelope.html`, and the envelope per placement class alone as
    `envelope_by_class.json` and `.csv`.
    Returns the files written, the missed promises (each with its packet command) and the
    documents (by file name without its extension)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    with loaded(store) as data:
        docs = {name: build_report(data, name) for name in REPORTS}
        docs["envelope_by_class"] = build_report(data, "envelope", by="placement_class")
    for name, doc in docs.items():
        kind = "envelope" if name == "envelope_by_class" else name
        paths.append(out_dir / f"{name}.json")
        paths[-1].write_text(report_json(kind, doc))
        paths.append(out_dir / f"{name}.csv")
        paths[-1].write_text(to_csv(kind, doc))
    paths.append(
        out_dir / "serving.csv"
    )  # outcomes' serving view: rows of another shape than its jobs'
    paths[-1].write_text(to_csv("serving", docs["outcomes"]))
    paths.append(out_dir / "capacity_changes.csv")
    paths[-1].write_text(to_csv("capacity_changes", docs["capacity"]))
    paths.append(out_dir / "promise_causes.csv")  # the misses grouped by cause
    paths[-1].write_text(to_csv("promise_causes", docs["promises"]))
    paths.append(out_dir / "envelope.html")
    paths[-1].write_text(envelope_page.html(docs["envelope"]))
    return Written(paths, docs["promises"]["misses"], docs)


def report_json(name: str, doc: dict[str, Any]) -> str:
    """The report's JSON text, through its document (schemas/documents/reports.py)."""
    from schemas.documents.reports import REPORT_DOCUMENTS  # its models: when one is written

    return REPORT_DOCUMENTS[name].parse(doc).to_json()


def render(name: str, doc: dict[str, Any], fmt: str) -> str | list[Table | Text]:
    """JSON, CSV or TSV text, rich tables (and plain lines, printed unwrapped) for the
    terminal, or the report's page."""
    if fmt == "json":
        return report_json(name, doc)
    if fmt in ("csv", "tsv"):
        return to_csv(name, doc, "," if fmt == "csv" else "\t")
    if fmt == "table":
        return tables(name, doc)
    spec = report_of(name) if fmt == "html" else None
    page = spec.page(doc) if spec is not None else None
    if page is not None:
        return page
    raise BadInput(f"unknown format {fmt!r}", option="format")


# -- CSV: the rows finance would load ---------------------------------------------------


def csv_rows(name: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A report's rows (`Report.rows`), or rows of another shape from its document:
    serving, one per tenant, concurrency level and currency (from outcomes');
    capacity_changes, one per fleet change and window (from capacity's); promise_causes,
    one per cause of a missed start (from promises')."""
    if name == "serving":
        return _serving_rows(doc)
    if name == "capacity_changes":
        return fleet_changes.csv_rows(doc["changes"])
    if name == "promise_causes":
        return [dict(row) for row in doc.get("causes", [])]
    return _report(name).rows(doc)


def _serving_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _flat({k: v for k, v in row.items() if k != "cost"}) | {"currency": currency} | figures
        for row in doc["serving"]
        for currency, figures in _currencies(row["cost"], SERVING_COST)
    ]


def _job_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for job in doc["jobs"]:
        base = {k: v for k, v in job.items() if k != "cost"}
        for currency, amount in (job["cost"] or {"": ""}).items():
            rows.append(base | {"cost": amount, "currency": currency})
    return rows


SERVING_COST = {"cost": "", "cost_per_accepted_response": ""}


def _currencies(by_currency: dict[str, Any], empty: Any) -> list[tuple[str, Any]]:
    """(currency, value) pairs of a row's money, or one empty pair when it has none."""
    return list(by_currency.items()) or [("", empty)]


def _placement_row(row: dict[str, Any]) -> dict[str, Any]:
    """An allocation's row as CSV columns: links as `NV12:6 SYS:2`, the one-line reason."""
    links = " ".join(f"{link}:{n}" for link, n in row["links_observed"].items())
    return {k: v for k, v in row.items() if k not in ("billed", "reasons")} | {
        "links_observed": links
    }


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """Nested figures as columns: {"ttft_ms": {"p50": …}} → ttft_ms_p50; lists as text."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out |= {f"{k}_{name}": x for name, x in v.items()}
        else:
            out[k] = " ".join(map(str, v)) if isinstance(v, list) else v
    return out


#: The members of a document's `period` (schemas/documents/base.py's Period).
PERIOD_KEYS = ("since", "until")


def to_csv(name: str, doc: dict[str, Any], delimiter: str = ",") -> str:
    """The rows of csv_rows as CSV (or, with a tab delimiter, TSV: a table for `cut` and
    `column -t`), each text cell through `_cell` (both are opened in spreadsheets); each
    row ends with the period the report covers (`period_since`, `period_until`)."""
    period = doc.get("period") or dict.fromkeys(PERIOD_KEYS)
    rows = [row | {f"period_{k}": period[k] for k in PERIOD_KEYS} for row in csv_rows(name, doc)]
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(
        buffer, fieldnames=list(rows[0]), lineterminator="\n", delimiter=delimiter
    )
    writer.writeheader()
    writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)
    return buffer.getvalue()


def _cell(value: Any) -> Any:
    """A CSV cell: None empty, a text that starts like a formula prefixed `'` (OWASP's rule:
    these files are opened in spreadsheets), numbers as they are."""
    if value is None:
        return ""
    return spreadsheet_safe(value) if isinstance(value, str) else value


# -- terminal tables ----------------------------------------------------------------------


def tables(name: str, doc: dict[str, Any]) -> list[Table | Text]:
    if name == "serving":
        return [_serving_table(doc)]
    return _report(name).tables(doc)


def _report(name: str) -> Report:
    spec = report_of(name)
    if spec is None:
        raise ValueError(f"unknown report {name!r}")
    return spec


def _text(value: Any) -> str:
    return "–" if value is None else str(value)


def _promise_tables(doc: dict[str, Any]) -> list[Table | Text]:
    summary = DataTable(
        "tenant",
        "class",
        "promises",
        "met",
        "missed",
        "pending",
        "p50 start delay s",
        "p95 start delay s",
        title="promises: start delay against start_by (negative: early)",
    )
    for row in doc["summary"]:
        summary.add_row(
            row["tenant"],
            row["placement_class"],
            *(
                _text(row[k])
                for k in (
                    "promises",
                    "met",
                    "missed",
                    "pending",
                    "start_delay_p50_s",
                    "start_delay_p95_s",
                )
            ),
            style="red" if row["missed"] else "",
        )
    misses = DataTable(
        "tenant",
        "promise",
        "job",
        "start_by",
        "started",
        "complete_by",
        "completed",
        "missed",
        "cause",
        "later jobs ahead",
        title=f"missed promises: {len(doc['misses'])}",
    )
    for m in doc["misses"]:
        misses.add_row(
            m["tenant"],
            m["promise_id"],
            m["job_id"],
            _text(m["start_by"]),
            _text(m["started"]),
            _text(m["complete_by"]),
            _text(m["completed"]),
            _what_missed(m),
            _text(m.get("cause")),
            _ahead(m.get("ahead")),
        )
    commands = Text(
        "\n".join(
            ["packets:", *(f"  {terminal_safe(m['packet_command'])}" for m in doc["misses"])]
        )
    )
    causes = DataTable("cause", "bearer", "misses", "seconds", title="missed starts by cause")
    for row in doc.get("causes", []):
        causes.add_row(row["cause"], row["cause_bearer"], str(row["misses"]), str(row["seconds"]))
    estimates = DataTable(
        "queue",
        "jobs",
        "requested h",
        "ran h",
        "used",
        "optimistic",
        "pessimistic",
        "accurate",
        title="estimates per queue: time limit asked for against time run",
    )
    for e in doc.get("estimates", []):
        estimates.add_row(
            e["queue"] or "–",
            str(e["jobs"]),
            f"{e['requested_s'] / 3600:.1f}",
            f"{e['elapsed_s'] / 3600:.1f}",
            percent(e["used_share"]),
            *(str(e[k]) for k in ("optimistic", "pessimistic", "accurate")),
        )
    tail = [estimates] if doc.get("estimates") else []
    if not doc["misses"]:
        return [summary, misses, *tail]
    return [summary, misses, causes, *tail, commands]


def _ahead(ahead: dict[str, Any] | None) -> str:
    """`2 (1 backfilled): beta/k, 1 other tenant's` (the miss's later jobs started first)."""
    if not ahead or not ahead["jobs"]:
        return "–"
    named = [f"{j['tenant']}/{j['job_id']}" for j in ahead["seen"][:3]]
    if len(ahead["seen"]) > 3:
        named.append(f"{len(ahead['seen']) - 3} more")
    if ahead["others"]:
        named.append(f"{ahead['others']} of other tenants")
    return f"{ahead['jobs']} ({ahead['backfilled']} backfilled): {', '.join(named)}"


def _what_missed(m: dict[str, Any]) -> str:
    parts = []
    if m["start_status"] == "late":
        parts.append(f"start +{m['start_delay_s']} s")
    elif m["start_status"] == "not_started":
        parts.append("never started")
    if m["completion_status"] == "late":
        parts.append(f"completion +{m['completion_delay_s']} s")
    elif m["completion_status"] == "not_completed":
        parts.append("never completed")
    return ", ".join(parts)


def _capacity_table(doc: dict[str, Any]) -> Table:
    """Counts, then each rate as a share with the counts it divides
    (reconcile/reports/capacity.py)."""
    window = doc["window"]
    table = DataTable(
        "class",
        "devices",
        "jobs admitted",
        "placed",
        "started",
        "started, no admission needed",
        "devices admitted",
        "devices placed",
        "devices started",
        "admitted jobs started",
        title=f"capacity [{window['since'] or '-∞'}, {window['until'] or '+∞'}): "
        "shares of devices discovered, and of jobs admitted",
    )
    for row in [*doc["classes"], doc["total"]]:
        counts = [
            str(row[k])
            for k in (
                "devices_discovered",
                "jobs_admitted",
                "jobs_placed",
                "workloads_started",
                "started_without_admission",
            )
        ]
        shares = [_share(row[name], row[part], row[whole]) for name, part, whole in capacity.RATES]
        table.add_row(
            row["placement_class"], *counts, *shares, style="bold" if row is doc["total"] else ""
        )
    return table


def _share(share: float | None, part: int, whole: int) -> str:
    return "–" if share is None else f"{percent(share)} ({part}/{whole})"


def _outcome_table(doc: dict[str, Any]) -> Table:
    table = DataTable(
        "tenant",
        "jobs",
        "completed",
        "first usable p50/p95 s",
        "step p50/p95 s",
        "checkpoint overhead",
        "run time p50/p95 s",
        "cost / completed run",
        "cost / accepted result",
        title="outcomes",
    )
    for t in doc["tenants"]:

        def pair(d: dict[str, Any]) -> str:
            return f"{_text(d['p50'])} / {_text(d['p95'])}"

        ratio = t["checkpoint_overhead"]["ratio"]
        costs = t["cost"].items()
        table.add_row(
            t["tenant"],
            str(t["jobs"]),
            str(t["completed_runs"]),
            pair(t["time_to_first_usable_allocation_s"]),
            pair(t["step_time_s"]),
            percent(ratio),
            pair(t["completed_run_time_s"]),
            " ".join(f"{money(c['cost_per_completed_run'])} {cur}" for cur, c in costs),
            " ".join(f"{money(c['cost_per_accepted_result'])} {cur}" for cur, c in costs),
        )
    return table


def _placement_tables(doc: dict[str, Any]) -> list[Table | Text]:
    """Each allocation's class sold against its topology; the mismatches' money; ρ per class."""
    rows = DataTable(
        "tenant",
        "allocation",
        "class sold",
        "from",
        "nodes",
        "GPU links",
        "status",
        "why",
        "billed",
        title="placement: class sold against nvidia-smi topo -m",
    )
    for a in doc["allocations"]:
        rows.add_row(
            a["tenant"],
            a["allocation_id"],
            a["placement_class"],
            _text(a["class_from"]),
            " ".join(a["nodes_observed"]) or "–",
            " ".join(f"{k}×{n}" for k, n in a["links_observed"].items()) or "–",
            a["status"],
            a["reason"],
            " ".join(f"{v} {c}" for c, v in a["billed"].items()) or "–",
            style="red" if a["status"] == "mismatch" else "",
        )
    summary = DataTable(
        "tenant",
        "class",
        "allocations",
        "match",
        "mismatch",
        "undetermined",
        "unobserved",
        "billed on mismatch",
        title="placement by tenant and class",
    )
    for s in doc["summary"]:
        summary.add_row(
            s["tenant"],
            s["placement_class"],
            *(
                str(s[k])
                for k in ("allocations", "match", "mismatch", "undetermined", "unobserved")
            ),
            " ".join(f"{v} {c}" for c, v in s["billed_on_mismatch"].items()) or "–",
        )
    rho = DataTable(
        "class",
        "n",
        "Spearman ρ",
        "reading",
        title="does all_reduce busbw (largest size) rank the step-time p50? (ρ < 0: more "
        "bandwidth, shorter steps)",
    )
    few = placement.FEW_POINTS
    for p in doc["prediction"]:
        small = p["spearman"] is not None and p["n"] < few
        rho.add_row(
            p["placement_class"],
            str(p["n"]),
            _text(p["spearman"]) + (" †" if small else ""),
            p["reading"],
        )
    parts: list[Table | Text] = [rows, summary, rho]
    if any(p["spearman"] is not None and p["n"] < few for p in doc["prediction"]):
        parts.append(data_text(f"† over fewer than {few} points: a hint, not a measure"))
    return parts


def _serving_table(doc: dict[str, Any]) -> Table:
    """Per tenant and concurrency: rates, the worst window's TTFT and latency, the cost of an
    accepted response."""
    table = DataTable(
        "tenant",
        "concurrency",
        "windows",
        "requests",
        "accepted",
        "cancelled",
        "req/s",
        "TTFT p50/p95/p99 ms",
        "latency p50/p95/p99 ms",
        "output tok/s",
        "cost / accepted response",
        title="serving: per concurrency level (percentiles: the worst window's)",
    )
    for r in doc["serving"]:

        def triple(d: dict[str, Any]) -> str:
            return " / ".join(_text(d[k]) for k in ("p50", "p95", "p99"))

        table.add_row(
            r["tenant"],
            "none stated" if r["concurrency"] is None else str(r["concurrency"]),
            str(r["windows"]),
            str(r["requests"]),
            str(r["accepted"]),
            _text(r["cancelled"]),
            _text(r["request_rate_per_s"]),
            triple(r["ttft_ms"]),
            triple(r["latency_ms"]),
            _text(r["output_tokens_per_s"]),
            " ".join(
                f"{_text(c['cost_per_accepted_response'])} {cur}" for cur, c in r["cost"].items()
            )
            or "–",
            style="bold" if r["concurrency"] == "all" else "",
        )
    return table
