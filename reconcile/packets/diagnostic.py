"""`gpuledger packet`: the operator's diagnostic packet for a promise (docs/reports.md).

`packet.json` holds, for the promise's job and every allocation it ran on or was
decided onto (its *allocations*), over the packet's *window*:
- `promise`: what was promised and what happened (reconcile/reports/promises.py's definitions);
- `why`, `path` and `zoom`: the story of the miss (reconcile/packets/story.py): one sentence,
  the job's steps from submission to first progress with each wait, and the span the
  page draws zoomed (with its own progress histogram);
- `decisions`: every `policy.decision` naming the job, one of its Pods (a `job.started`
  `pod`) or one of its allocations, in order (time, then ledger order), numbered;
- `reservations` and `preemptions`: each allocation's grant and release, and the
  decisions preempted / reclaimed / evicted;
- `health`: the devices discovered on the allocations' nodes, and every `health.fault`
  that touches an allocation (RULES.md §7: fabric domain, node and device) and is open
  at some moment of the window (open until the first matching `health.cleared`);
- `application`: the attempts (start, end, outcome, cause, detail), restarts, failures,
  and per attempt a progress summary (marks, steps, units, step time p50/p95 and the
  longest gap), and a histogram of progress marks over the window;
- `checkpoints`: each checkpoint's start and save (paired by checkpoint_id), restores,
  and the last save;
- `billing`: the lines naming the allocations (replaced ones flagged), each with the
  reconciliation's categories, and the job's apportioned cost (reconcile/reports/outcomes.py);
- `evidence`: every entry the sections cite (by `seq`), as stored: source, id, type,
  time and data (progress marks are summarised, not listed).

The **window** runs from the earliest to the latest time among the promise, the job's
events, its decisions and its allocations' events (billing periods included), and
start_by / complete_by. `packet.html` is the same packet on one self-contained page
(inline CSS, server-drawn SVG timelines of the zoom and the whole job, a legend; no
script, no network).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import orjson

from ledger import Store, read
from reconcile.engine.figures import iso, parse_time, seconds
from reconcile.engine.pipeline import Pipeline
from reconcile.packets import story
from reconcile.packets.packet_sql import (
    ALLOCATIONS,
    ATTEMPTS,
    BILLING,
    CHECKPOINTS,
    DECISIONS,
    DEVICES,
    FAULTS,
    HISTOGRAM,
    PROGRESS,
    RESTORES,
    SUBMITTED,
)
from reconcile.packets.timeline import timeline
from reconcile.reports import loaded, outcomes, promises
from reconcile.reports.pages import environment
from schemas.documents.diagnostic import DiagnosticPacket
from schemas.errors import BadInput
from schemas.money import Money

HISTOGRAM_BINS = 120
#: The timeline's legend: (CSS classes of the swatch, what it means), in lane order.
LEGEND = (
    ("lane-path wait-queue", "queue wait: submitted → admitted (Slurm: → started)"),
    ("lane-path wait-placement", "placement: admitted → placed"),
    ("lane-path wait-startup", "start-up: placed → started"),
    ("lane-path wait-first-progress", "started → first progress mark"),
    ("lane-allocation held", "allocation held (grant → release)"),
    ("lane-attempts completed", "attempt completed"),
    ("lane-attempts failed", "attempt failed"),
    ("lane-attempts cancelled", "attempt cancelled"),
    ("lane-attempts running", "attempt still running"),
    ("lane-progress density", "progress marks (height: how many)"),
    ("lane-checkpoints saved", "checkpoint saved"),
    ("lane-checkpoints restored", "checkpoint restored"),
    ("lane-decisions decision-admitted", "decision: admitted / placed"),
    ("lane-decisions decision-preempted", "decision: preempted / reclaimed / evicted"),
    ("lane-decisions", "other decision (queued, ...)"),
    ("lane-faults fault-critical", "critical fault (open → cleared)"),
    ("lane-faults fault-warning", "warning fault"),
    ("lane-billed line", "billed period"),
    ("lane-billed replaced", "billed period replaced by a correction"),
)
TEMPLATES = Path(__file__).resolve().parent / "templates"


class PromiseNotFound(BadInput, LookupError):
    """The promise asked for is not in the ledger, or not only one tenant's."""


def find_promise_tenant(store: Store, promise_id: str, tenant: str | None = None) -> str:
    """The tenant whose `policy.promise` has `promise_id` (`tenant`, when given, must be one)."""
    promises = read.entries(store, type="policy.promise")
    tenants = sorted(
        {
            str(e.tenant)
            for e in promises
            if orjson.loads(e.event)["data"].get("promise_id") == promise_id
        }
    )
    if tenant is not None:
        tenants = [t for t in tenants if t == tenant]
    if not tenants:
        whose = f" of tenant {tenant!r}" if tenant is not None else ""
        raise PromiseNotFound(
            f"no policy.promise{whose} with promise_id {promise_id!r} in the ledger "
            "(`gpuledger report promises` lists them)",
            option="promise",
        )
    if len(tenants) > 1:
        raise PromiseNotFound(
            f"{promise_id!r} is promised by {', '.join(tenants)}: name one", option="tenant"
        )
    found: str = tenants[0]
    return found


def build_packet(store: Store, promise_id: str, tenant: str | None = None) -> dict[str, Any]:
    """The diagnostic packet of one promise, as plain dicts and lists (see the module
    docstring)."""
    tenant = find_promise_tenant(store, promise_id, tenant)
    with loaded(store, tenant) as data:
        packet = assemble(data, tenant, promise_id)
        job = {"tenant": tenant, "job": packet["job"]["job_id"]}
        submitted = data.con.execute(SUBMITTED, job).fetchone()
        steps = story.path(
            packet, None if submitted is None else (iso(submitted[0]) or "", int(submitted[1]))
        )
        zoom = story.zoom(packet, steps)
        zoom["progress_histogram"] = _zoom_histogram(data.con, job, zoom)
    cause = _cause(store, packet["promise"])
    packet["evidence"] = evidence(
        store, _cited(packet) | {s["seq"] for s in steps if s["seq"] is not None}
    )
    _details(packet)
    told = {
        "promise": packet["promise"],
        "why": story.why(packet, steps, cause),
        "path": steps,
        "zoom": zoom,
    }
    return told | packet  # the story first: what an operator reads before the sections


def _cause(store: Store, promise: dict[str, Any]) -> dict[str, Any] | None:
    """A missed start's cause, judged on the whole fleet (every tenant's grants hold
    devices), not on the tenant's snapshot the packet is built from; its cause fields are
    set on `promise`, its figures returned for the why-sentence."""
    if promise["start_status"] not in ("late", "not_started"):
        return None
    with loaded(store) as fleet:
        found = promises.miss_detail(fleet, promise["tenant"], promise["promise_id"])
    if found is not None:
        promise.update({k: found[k] for k in ("cause", "cause_seconds", "cause_bearer")})
    return found


def _zoom_histogram(
    con: duckdb.DuckDBPyConnection, job: dict[str, Any], zoom: dict[str, Any]
) -> dict[str, Any]:
    """The progress marks in the zoom, in bins of its own (the whole window's may be wider than
    it)."""
    w0, w1 = parse_time(zoom["from"]), parse_time(zoom["to"])
    params = job | {"w0": w0, "w1": w1, "bins": HISTOGRAM_BINS}
    return {
        "bins": HISTOGRAM_BINS,
        "bin_seconds": seconds(max(1, (w1 - w0) // HISTOGRAM_BINS)),
        "counts": _histogram(con, params),
    }


def write_packet(
    store: Store, promise_id: str, out_dir: Path, tenant: str | None = None
) -> list[Path]:
    """`packet.json` and `packet.html` of the promise under `out_dir` (created)."""
    packet = build_packet(store, promise_id, tenant)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out_dir / "packet.json", out_dir / "packet.html"
    json_path.write_text(DiagnosticPacket.parse(packet).to_json())
    html_path.write_text(render_html(packet))
    return [json_path, html_path]


def render_html(packet: dict[str, Any]) -> str:
    env = environment(TEMPLATES, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("packet.html.j2").render(
        p=packet,
        tl=timeline(packet),
        zoom=timeline(packet, packet["zoom"]),
        zoom_span=packet["zoom"],
        legend=LEGEND,
    )


# -- assembly ---------------------------------------------------------------------------


def _rows(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    cursor = con.execute(sql, {k: v for k, v in params.items() if f"${k}" in sql})
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _times(row: dict[str, Any], *names: str) -> dict[str, Any]:
    """The row with the named µs columns as RFC 3339 text."""
    return {k: (iso(v) if k in names else v) for k, v in row.items()}


def assemble(data: Pipeline, tenant: str, promise_id: str) -> dict[str, Any]:
    promise = promises.promise_rows(data, tenant, promise_id, causes=False)[0]
    params: dict[str, Any] = {"tenant": tenant, "job": promise["job_id"], "pid": promise_id}
    con = data.need("packet_scope", **params)  # the job's Pods, allocations and window
    w0, w1 = con.execute("SELECT w0, w1 FROM packet_window").fetchone() or (0, 1)
    params |= {"w0": w0, "w1": w1, "bins": HISTOGRAM_BINS}
    data.need("job_facts")  # ATTEMPTS reads its job_attempts
    decisions = [
        _times(r, "t") | {"order": i} for i, r in enumerate(_rows(con, DECISIONS, params), 1)
    ]
    return {
        "promise": promise,
        "job": {
            "tenant": tenant,
            "job_id": promise["job_id"],
            "pods": [
                p for (p,) in con.execute("SELECT pod FROM packet_pods ORDER BY pod").fetchall()
            ],
        },
        "window": {"from": iso(w0), "to": iso(w1), "seconds": seconds(w1 - w0)},
        "decisions": decisions,
        "reservations": [
            _times(r, "granted", "released") for r in _rows(con, ALLOCATIONS, params)
        ],
        "preemptions": [
            d for d in decisions if d["decision"] in ("preempted", "reclaimed", "evicted")
        ],
        "health": {
            "devices": _rows(con, DEVICES, params),
            "faults": [_times(r, "opened", "cleared") for r in _rows(con, FAULTS, params)],
        },
        "application": _application(con, params),
        "checkpoints": _checkpoints(con, params),
        "billing": _billing(data, params),
    }


def _application(con: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> dict[str, Any]:
    attempts = [_times(r, "started", "ended") for r in _rows(con, ATTEMPTS, params)]
    progress = [
        {
            "attempt_seq": r["attempt_seq"],
            "marks": r["marks"],
            "first": iso(r["first"]),
            "last": iso(r["last"]),
            "first_step": r["first_step"],
            "last_step": r["last_step"],
            "units": r["units"],
            "step_time_p50_s": seconds(r["step_time_p50"]),
            "step_time_p95_s": seconds(r["step_time_p95"]),
            "longest_gap_s": seconds(r["longest_gap"]),
            "longest_gap_end": iso(r["longest_gap_end"]),
        }
        for r in _rows(con, PROGRESS, params)
    ]
    bin_us = max(1, (params["w1"] - params["w0"]) // HISTOGRAM_BINS)
    return {
        "attempts": attempts,
        "restarts": max(0, len(attempts) - 1),
        "failures": [a for a in attempts if a["outcome"] == "failed"],
        "progress": progress,
        "progress_histogram": {
            "bins": HISTOGRAM_BINS,
            "bin_seconds": seconds(bin_us),
            "counts": _histogram(con, params),
        },
    }


def _histogram(con: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> list[int]:
    counts = [0] * HISTOGRAM_BINS
    for b, n in con.execute(
        HISTOGRAM, {k: params[k] for k in ("tenant", "job", "w0", "w1", "bins")}
    ).fetchall():
        counts[min(max(int(b), 0), HISTOGRAM_BINS - 1)] += int(n)
    return counts


def _checkpoints(con: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> dict[str, Any]:
    saves = [_times(r, "started", "saved") for r in _rows(con, CHECKPOINTS, params)]
    restores = [_times(r, "t") for r in _rows(con, RESTORES, params)]
    saved = [c for c in saves if c["saved"] is not None]
    return {
        "checkpoints": saves,
        "restores": restores,
        "last_saved": max(saved, key=lambda c: (c["saved"], c["saved_seq"])) if saved else None,
    }


def _billing(data: Pipeline, params: dict[str, Any]) -> dict[str, Any]:
    lines = [_times(r, "period_start", "period_end") for r in _rows(data.con, BILLING, params)]
    tallies = data.recon.lines()
    for line in lines:
        found = tallies.get((params["tenant"], line["invoice_id"], line["line_id"]))
        line["categories"] = found[1].categories() if found and not line["replaced"] else {}
    cost = outcomes.job_costs(data).get((params["tenant"], params["job"]), {})
    job_cost = {c: str(Money.of(v, currency=c)) for c, v in sorted(cost.items())}
    return {"lines": lines, "job_cost": job_cost}


# -- evidence -----------------------------------------------------------------------------


def _cited(packet: dict[str, Any]) -> set[int]:
    """Every `seq` (and `*_seq`) the sections cite."""
    found: set[int] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if (key == "seq" or key.endswith("_seq")) and isinstance(value, int):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in packet.items() if k != "evidence"})
    return found


def evidence(store: Store, seqs: Iterable[int]) -> list[dict[str, Any]]:
    """The cited entries as stored: seq, source, id, type, time and data."""
    out: list[dict[str, Any]] = []
    for entry in read.entries(store, seqs=seqs):
        doc = orjson.loads(entry.event)
        out.append(
            {
                "seq": entry.seq,
                "source": entry.source,
                "id": entry.id,
                "type": doc["type"],
                "time": doc["time"],
                "data": doc["data"],
            }
        )
    return out


def _details(packet: dict[str, Any]) -> None:
    """Failure details and fault details, which `ev` does not carry, from the evidence."""
    data = {e["seq"]: e["data"] for e in packet["evidence"]}
    for attempt in packet["application"]["attempts"]:
        attempt["detail"] = (
            data.get(attempt["end_seq"], {}).get("detail") if attempt["end_seq"] else None
        )
    for fault in packet["health"]["faults"]:
        fault["detail"] = data.get(fault["seq"], {}).get("detail")
