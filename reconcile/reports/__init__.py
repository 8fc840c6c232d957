"""The operator's and finance's reports over the ledger: promises, capacity, outcomes, placement.

Each report is computed in DuckDB over `ev` (reconcile/engine/snapshot.py), loaded once from
the store; outcomes also take the reconciliation's money (reconcile/engine/__init__.py). Each
returns plain dicts and lists (JSON as is), and renders as rich tables or CSV rows.
Definitions are in the module docstrings of reconcile/reports/promises.py, capacity.py,
outcomes.py (with serving.py, its serving view), placement.py and envelope.py, in
docs/reports.md and docs/placement.md.

    with loaded(store) as data:            # one snapshot, one DuckDB
        promises.report(data.con)          # or report_promises(store) for one report
    write_reports(store, out_dir)          # every report, JSON and CSV, for `gpuledger demo`
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from rich.table import Table
from rich.text import Text

from ledger import Store
from reconcile.engine import run
from reconcile.engine.result import Reconciliation
from reconcile.engine.snapshot import load_store, open_engine
from reconcile.reports import capacity, envelope, envelope_page, fleet_changes, outcomes, placement, promises, serving
from schemas.display import DataTable, spreadsheet_safe, terminal_safe
from schemas.documents.reports import REPORT_DOCUMENTS
from schemas.errors import BadInput

REPORTS = ("promises", "capacity", "outcomes", "placement", "envelope")
FORMATS = ("table", "json", "csv", "tsv")


@dataclass
class Loaded:
    """A DuckDB with the store's entries as `ev`; the reconciliation made on first use."""

    con: duckdb.DuckDBPyConnection
    _recon: Reconciliation | None = field(default=None, repr=False)

    @property
    def recon(self) -> Reconciliation:
        if self._recon is None:
            self._recon = run(self.con)
        return self._recon


@contextmanager
def loaded(store: Store, tenant: str | None = None, threads: int | None = None) -> Iterator[Loaded]:
    """One consistent snapshot of the store (with `tenant`: its entries and the fleet's)."""
    con = open_engine(threads)
    try:
        with store.reading() as conn:
            load_store(con, conn, tenant)
        yield Loaded(con)
    finally:
        con.close()


def build_report(data: Loaded, name: str, tenant: str | None = None, since: int | None = None,
                 until: int | None = None, by: str = "both") -> dict[str, Any]:
    """One report by name, as plain dicts and lists (`by`: envelope's grouping)."""
    if name == "promises":
        return promises.report(data.con, tenant)
    if name == "capacity":
        return capacity.report(data.con, tenant, since, until)
    if name == "outcomes":
        return outcomes.report(data.con, data.recon, tenant) | {"serving": serving.view(data.con, data.recon, tenant)}
    if name == "serving":  # the serving view of outcomes alone (`report outcomes --view serving`)
        return {"serving": serving.view(data.con, data.recon, tenant)}
    if name == "placement":
        return placement.report(data.con, data.recon, tenant)
    if name == "envelope":
        return envelope.report(data.con, data.recon, tenant, by)
    raise ValueError(f"unknown report {name!r}")


def report(store: Store, name: str, tenant: str | None = None, since: int | None = None,
           until: int | None = None, by: str = "both") -> dict[str, Any]:
    """One report of the store (`name`: promises, capacity, outcomes, serving, placement or envelope)."""
    with loaded(store, tenant) as data:
        return build_report(data, name, tenant, since, until, by)


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
    paths.append(out_dir / "serving.csv")  # outcomes' serving view: rows of another shape than its jobs'
    paths[-1].write_text(to_csv("serving", docs["outcomes"]))
    paths.append(out_dir / "capacity_changes.csv")
    paths[-1].write_text(to_csv("capacity_changes", docs["capacity"]))
    paths.append(out_dir / "envelope.html")
    paths[-1].write_text(envelope_page.html(docs["envelope"]))
    return Written(paths, docs["promises"]["misses"], docs)


def report_json(name: str, doc: dict[str, Any]) -> str:
    """The report's JSON text, through its document (schemas/documents/reports.py)."""
    return REPORT_DOCUMENTS[name].parse(doc).to_json()


def render(name: str, doc: dict[str, Any], fmt: str) -> str | list[Table | Text]:
    """JSON, CSV or TSV text, or rich tables (and plain lines, printed unwrapped) for the terminal."""
    if fmt == "json":
        return report_json(name, doc)
    if fmt in ("csv", "tsv"):
        return to_csv(name, doc, "," if fmt == "csv" else "\t")
    if fmt == "table":
        return tables(name, doc)
    if fmt == "html" and name == "envelope":
        return envelope_page.html(doc)
    raise BadInput(f"unknown format {fmt!r}", option="format")


# -- CSV: the rows finance would load ---------------------------------------------------

def csv_rows(name: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """promises: one row per promise; capacity: one per placement class and the total;
    capacity_changes: one per fleet change and window; envelope: one per group and
    currency; outcomes: one per job and currency of its cost; serving: one per tenant,
    concurrency level and currency; placement: one per allocation and currency of its
    billed money."""
    if name == "serving":
        return [_flat({k: v for k, v in row.items() if k != "cost"}) | {"currency": currency} | figures
                for row in doc["serving"] for currency, figures in _currencies(row["cost"], SERVING_COST)]
    if name == "placement":
        return [_flat(_placement_row(row)) | {"currency": currency, "billed": amount}
                for row in doc["allocations"] for currency, amount in _currencies(row["billed"], "")]
    if name == "promises":
        return [{k: v for k, v in p.items() if k != "seq"} | {"packet_command": p.get("packet_command", "")}
                for p in doc["promises"]]
    if name == "capacity":
        return capacity.csv_rows(doc)
    if name == "capacity_changes":
        return fleet_changes.csv_rows(doc["changes"])
    if name == "envelope":
        return envelope.csv_rows(doc)
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
    return {k: v for k, v in row.items() if k not in ("billed", "reasons")} | {"links_observed": links}


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """Nested figures as columns: {"ttft_ms": {"p50": …}} → ttft_ms_p50; lists as text."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out |= {f"{k}_{name}": x for name, x in v.items()}
        else:
            out[k] = " ".join(map(str, v)) if isinstance(v, list) else v
    return out


def to_csv(name: str, doc: dict[str, Any], delimiter: str = ",") -> str:
    """The rows of csv_rows as CSV (or, with a tab delimiter, TSV: a table for `cut` and
    `column -t`), each text cell through `_cell` (both are opened in spreadsheets)."""
    rows = csv_rows(name, doc)
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n", delimiter=delimiter)
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
    if name == "promises":
        return _promise_tables(doc)
    if name == "capacity":
        return [_capacity_table(doc), *capacity.extra_tables(doc)]
    if name == "envelope":
        return envelope.tables(doc)
    if name == "placement":
        return _placement_tables(doc)
    if name == "serving":
        return [_serving_table(doc)]
    return [_outcome_table(doc), _serving_table(doc)] if doc.get("serving") else [_outcome_table(doc)]


def _text(value: Any) -> str:
    return "–" if value is None else str(value)


def _promise_tables(doc: dict[str, Any]) -> list[Table | Text]:
    summary = DataTable("tenant", "class", "promises", "met", "missed", "pending", "p50 start delay s",
                    "p95 start delay s", title="promises: start delay against start_by (negative: early)")
    for row in doc["summary"]:
        summary.add_row(row["tenant"], row["placement_class"], *(_text(row[k]) for k in (
            "promises", "met", "missed", "pending", "start_delay_p50_s", "start_delay_p95_s")),
            style="red" if row["missed"] else "")
    misses = DataTable("tenant", "promise", "job", "start_by", "started", "complete_by", "completed", "missed",
                   title=f"missed promises: {len(doc['misses'])}")
    for m in doc["misses"]:
        misses.add_row(m["tenant"], m["promise_id"], m["job_id"], _text(m["start_by"]), _text(m["started"]),
                       _text(m["complete_by"]), _text(m["completed"]), _what_missed(m))
    commands = Text("\n".join(["packets:", *(f"  {terminal_safe(m['packet_command'])}" for m in doc["misses"])]))
    return [summary, misses, commands] if doc["misses"] else [summary, misses]


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
    """Counts, then each rate as a share with the counts it divides (reconcile/reports/capacity.py)."""
    window = doc["window"]
    table = DataTable("class", "devices", "jobs admitted", "placed", "started", "started, no admission needed",
                  "devices admitted", "devices placed", "devices started", "admitted jobs started",
                  title=f"capacity [{window['since'] or '-∞'}, {window['until'] or '+∞'}): "
                        "shares of devices discovered, and of jobs admitted")
    for row in [*doc["classes"], doc["total"]]:
        counts = [str(row[k]) for k in ("devices_discovered", "jobs_admitted", "jobs_placed", "workloads_started",
                                        "started_without_admission")]
        shares = [_share(row[name], row[part], row[whole]) for name, part, whole in capacity.RATES]
        table.add_row(row["placement_class"], *counts, *shares, style="bold" if row is doc["total"] else "")
    return table


def _share(share: float | None, part: int, whole: int) -> str:
    return "–" if share is None else f"{share:.0%} ({part}/{whole})"


def _outcome_table(doc: dict[str, Any]) -> Table:
    table = DataTable("tenant", "jobs", "completed", "first usable p50/p95 s", "step p50/p95 s", "checkpoint overhead",
                  "run time p50/p95 s", "cost / completed run", "cost / accepted result", title="outcomes")
    for t in doc["tenants"]:
        def pair(d: dict[str, Any]) -> str:
            return f"{_text(d['p50'])} / {_text(d['p95'])}"
        ratio = t["checkpoint_overhead"]["ratio"]
        costs = t["cost"].items()
        table.add_row(t["tenant"], str(t["jobs"]), str(t["completed_runs"]), pair(t["time_to_first_usable_allocation_s"]),
                      pair(t["step_time_s"]), "–" if ratio is None else f"{ratio:.2%}", pair(t["completed_run_time_s"]),
                      " ".join(f"{_text(c['cost_per_completed_run'])} {cur}" for cur, c in costs),
                      " ".join(f"{_text(c['cost_per_accepted_result'])} {cur}" for cur, c in costs))
    return table


def _placement_tables(doc: dict[str, Any]) -> list[Table | Text]:
    """Each allocation's class sold against its topology; the mismatches' money; ρ per class."""
    rows = DataTable("tenant", "allocation", "class sold", "from", "nodes", "GPU links", "status", "why", "billed",
                 title="placement: class sold against nvidia-smi topo -m")
    for a in doc["allocations"]:
        rows.add_row(a["tenant"], a["allocation_id"], a["placement_class"], _text(a["class_from"]),
                     " ".join(a["nodes_observed"]) or "–",
                     " ".join(f"{k}×{n}" for k, n in a["links_observed"].items()) or "–", a["status"], a["reason"],
                     " ".join(f"{v} {c}" for c, v in a["billed"].items()) or "–",
                     style="red" if a["status"] == "mismatch" else "")
    summary = DataTable("tenant", "class", "allocations", "match", "mismatch", "undetermined", "unobserved",
                    "billed on mismatch", title="placement by tenant and class")
    for s in doc["summary"]:
        summary.add_row(s["tenant"], s["placement_class"], *(str(s[k]) for k in (
            "allocations", "match", "mismatch", "undetermined", "unobserved")),
            " ".join(f"{v} {c}" for c, v in s["billed_on_mismatch"].items()) or "–")
    rho = DataTable("class", "n", "Spearman ρ", "reading",
                title="does all_reduce busbw (largest size) rank the step-time p50? (ρ < 0: more bandwidth, shorter steps)")
    for p in doc["prediction"]:
        rho.add_row(p["placement_class"], str(p["n"]), _text(p["spearman"]), p["reading"])
    return [rows, summary, rho]


def _serving_table(doc: dict[str, Any]) -> Table:
    """Per tenant and concurrency: rates, the worst window's TTFT and latency, the cost of an accepted response."""
    table = DataTable("tenant", "concurrency", "windows", "requests", "accepted", "cancelled", "req/s", "TTFT p50/p95/p99 ms",
                  "latency p50/p95/p99 ms", "output tok/s", "cost / accepted response",
                  title="serving: per concurrency level (percentiles: the worst window's)")
    for r in doc["serving"]:
        def triple(d: dict[str, Any]) -> str:
            return " / ".join(_text(d[k]) for k in ("p50", "p95", "p99"))
        table.add_row(r["tenant"], "none stated" if r["concurrency"] is None else str(r["concurrency"]),
                      str(r["windows"]), str(r["requests"]), str(r["accepted"]), _text(r["cancelled"]),
                      _text(r["request_rate_per_s"]), triple(r["ttft_ms"]), triple(r["latency_ms"]),
                      _text(r["output_tokens_per_s"]),
                      " ".join(f"{_text(c['cost_per_accepted_response'])} {cur}" for cur, c in r["cost"].items()) or "–",
                      style="bold" if r["concurrency"] == "all" else "")
    return table
