"""The second half of `gpuledger demo`: reconcile the demo's ledger, write every output a
user of each kind takes away, and summarise the findings for the terminal.

    finance   reconcile.json / .csv / .parquet     the invoices, line by line and category;
              reconcile.html                       the finance page, with pictures
    customers dispute-<tenant>-<invoice>.json      verified here with the public key alone,
              ….letter.html                        and the dispute letter beside it, after
                                                   the provider's answers (`demo_answers`)
              credit-note-<tenant>-<invoice>.csv   the accepted money as FOCUS credit rows
    operators packet-<promise>/packet.{json,html}  for the first missed promise
    everyone  reports/promises|capacity|outcomes|placement|envelope.{json,csv}
              reports/serving.csv                  outcomes' serving view, per concurrency
              reports/capacity_changes.csv         the fleet changes' windows
              reports/promise_causes.csv           the missed starts grouped by cause
              reports/envelope.html                providers side by side, with pictures
              reports/envelope_by_class.{json,csv} the same per placement class alone
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.table import Table

from ledger import Store
from ledger.note import Signer, Verifier
from reconcile.engine import reconcile_store
from reconcile.engine.money import major_units
from reconcile.engine.placement import NOT_AS_SOLD
from reconcile.engine.result import Reconciliation
from reconcile.engine.rules import CATEGORY_ORDER
from reconcile.packets.answers import Asked, record_answers, stored_cell_answers
from reconcile.packets.credit_note import build_credit_note, write_credit_note
from reconcile.packets.diagnostic import write_packet
from reconcile.packets.dispute import build_dispute, current_findings, verify_dispute
from reconcile.packets.dispute import write_packet as write_dispute
from reconcile.packets.letter import write_letter_beside
from reconcile.reports import write_reports
from reconcile.reports.envelope import missed_text
from reconcile.reports.numbers import money, percent, rate
from reconcile.reports.output import write
from schemas.display import DataTable

BIGGEST = 5


@dataclass
class DemoOutputs:
    result: Reconciliation
    files: list[Path] = field(default_factory=list)
    missed_promises: list[dict[str, Any]] = field(default_factory=list)
    dispute: str = ""
    packet: str = ""
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)


def run_demo_outputs(store: Store, out: Path, signer: Signer, verifier: Verifier) -> DemoOutputs:
    """Reconcile, then write the reports, one dispute packet and one diagnostic packet."""
    result = reconcile_store(store)
    done = DemoOutputs(result)
    for fmt in ("json", "csv", "parquet"):
        path = out / f"reconcile.{fmt}"
        write(result, fmt, path)
        done.files.append(path)
    written = write_reports(store, out / "reports")
    done.files += written.paths
    done.missed_promises = written.missed_promises
    done.reports = written.docs
    done.dispute = _dispute(store, out, signer, verifier, result, done.files)
    # the finance page after the provider's answers, so that it shows them (the answers
    # are not billing: the reconciliation stays as it was)
    write(result, "html", out / "reconcile.html", answers=stored_cell_answers(store, result.cells))
    done.files.append(out / "reconcile.html")
    if done.missed_promises:
        first = done.missed_promises[0]
        folder = out / f"packet-{first['promise_id']}"
        pages = write_packet(store, first["promise_id"], folder, first.get("tenant"))
        done.files += pages
        why = json.loads(pages[0].read_text())["why"]
        done.packet = (
            f"diagnostic packet for missed promise {first['promise_id']}: "
            f"{folder / 'packet.html'}\nwhy: {why}"
        )
    return done


def _dispute(
    store: Store,
    out: Path,
    signer: Signer,
    verifier: Verifier,
    result: Reconciliation,
    files: list[Path],
) -> str:
    """The packet of the invoice with the most provider-borne and disputed money."""
    owed: dict[tuple[str, str], int] = defaultdict(int)
    for cell in result.cells:
        if cell.bearer in ("provider", "disputed"):
            owed[(cell.tenant, cell.invoice_id)] += cell.cents
    if not owed:
        return "no invoice has provider-borne or disputed money: no dispute to file"
    tenant, invoice = max(owed, key=lambda k: (owed[k], k))
    asked = demo_answers(current_findings(store, tenant, invoice)[1])
    answered = record_answers(store, tenant, invoice, signer, asked, origin="demo")
    note = build_credit_note(store, tenant, invoice)
    credit = out / f"credit-note-{tenant}-{invoice}.csv"
    write_credit_note(note, credit)
    files.append(credit)
    packet = build_dispute(store, tenant, invoice, signer)
    path = out / f"dispute-{tenant}-{invoice}.json"
    write_dispute(packet, path)
    files.append(path)
    checked = verify_dispute(packet, verifier)
    letter = write_letter_beside(packet, verifier, path)
    files.append(letter)
    return (
        f"dispute packet for {tenant} / {invoice}: {path} — verified with the public key alone: "
        f"{checked.tenant_entries} entries, {checked.fleet_entries} fleet entries, findings "
        "recomputed\n"
        f"  the dispute letter: {letter}\n"
        f"  the provider's answers: "
        + ", ".join(f"{state} {n}" for state, n in sorted(answered.states.items()))
        + f", {len(packet['claims']) - len(asked)} open; credit note {credit}: "
        f"{len(note.rows)} rows, {-note.total} {note.currency}"
    )


def demo_answers(claims: list[dict[str, Any]]) -> list[Asked]:
    """The provider's answers in the demo: every provider-borne finding accepted but the
    last, which is rejected citing the entries it was decided from; the largest disputed
    finding accepted half (rounded down to the cent); the other disputed ones left open."""
    provider = [c for c in claims if c["bearer"] == "provider"]
    disputed = [c for c in claims if c["bearer"] == "disputed" and Decimal(c["amount"]) > 0]
    asked = [Asked(c["line_id"], c["category"], "accepted") for c in provider[:-1]]
    if provider:
        last = provider[-1]
        reason = "the provider's records put this time on the customer's own job"
        asked.append(
            Asked(last["line_id"], last["category"], "rejected", reason, tuple(last["cites"][:2]))
        )
    if disputed:
        largest = max(disputed, key=lambda c: (Decimal(c["amount"]), c["line_id"]))
        half = (Decimal(largest["amount"]) / 2).quantize(Decimal("0.01"), rounding="ROUND_DOWN")
        if 0 < half < Decimal(largest["amount"]):
            asked.append(
                Asked(largest["line_id"], largest["category"], "partly", None, None, str(half))
            )
    return asked


def category_table(result: Reconciliation) -> Table:
    """The whole fleet's billed time and money by category and bearer."""
    hours: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    money: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    for cell in result.cells:
        hours[(cell.category, cell.bearer)] += Decimal(cell.gpu_us) / 3_600_000_000
        money[(cell.category, cell.bearer, cell.currency or "")] += major_units(
            cell.cents, cell.minor
        )
    billed = sum(hours.values(), Decimal(0))
    table = DataTable(
        "category",
        "bearer",
        "GPU-hours",
        "share",
        "amount",
        title="what every billed GPU-second was",
    )
    for category, bearer in sorted(hours, key=lambda k: (CATEGORY_ORDER.index(k[0]), k[1])):
        amounts = ", ".join(
            f"{a:,} {c}"
            for (cat, b, c), a in sorted(money.items())
            if (cat, b) == (category, bearer)
        )
        share = hours[(category, bearer)] / billed if billed else Decimal(0)
        style = {"provider": "red", "disputed": "yellow"}.get(bearer, "")
        table.add_row(
            category,
            bearer,
            f"{hours[(category, bearer)]:,.1f}",
            percent(share),
            amounts,
            style=style,
        )
    return table


def biggest_findings(result: Reconciliation, count: int = BIGGEST) -> Table:
    """The lines with the most provider-borne or disputed money, each with its category."""
    rows = sorted(
        (c for c in result.cells if c.bearer in ("provider", "disputed") and c.cents > 0),
        key=lambda c: (-c.cents, c.tenant, c.line_id),
    )[:count]
    table = DataTable(
        "tenant / line", "category", "GPU-h", "amount", title=f"the {len(rows)} biggest findings"
    )
    for c in rows:
        table.add_row(
            f"{c.tenant} / {c.line_id}",
            f"{c.category} ({c.bearer})",
            f"{c.gpu_us / 3.6e9:,.2f}",
            f"{major_units(c.cents, c.minor):,} {c.currency or ''}",
        )
    return table


def totals_line(result: Reconciliation) -> str:
    doc = result.as_json()["tenants"]

    def total(values: Any) -> Decimal:
        return sum((Decimal(str(v)) for v in values), Decimal(0))

    billed = total(t["billed_gpu_seconds"] for t in doc.values()) / 3600
    productive = (
        total(t["categories"].get("productive", {}).get("gpu_seconds", 0) for t in doc.values())
        / 3600
    )
    money = {
        b: total(t["by_bearer"][b] for t in doc.values())
        for b in ("customer", "provider", "disputed")
    }
    unbilled = total(t["unbilled_gpu_seconds"] for t in doc.values()) / 3600
    share = productive / billed if billed else Decimal(0)
    return (
        f"billed {billed:,.1f} GPU-h, of which productive {productive:,.1f} GPU-h "
        f"({percent(share)}); money: customer {money['customer']:,}, "
        f"provider-borne {money['provider']:,}, disputed {money['disputed']:,}; unbilled "
        f"{unbilled:,.1f} GPU-h"
    )


# -- the evidence around the billed time: envelope, receipts, changes, placement, serving --


def envelope_table(doc: dict[str, Any]) -> Table:
    """The envelope per placement class (`report envelope --by placement_class`): a few key
    figures."""
    table = DataTable(
        "class",
        "jobs started/completed",
        "start p95 s promised → observed",
        "missed of decided",
        "restart rate",
        "checkpoint overhead",
        "cost / completed run",
        title="the envelope per placement class (p95 start: over the promised jobs)",
    )
    for g in doc["groups"]:
        made = g["promises"]
        ratio = g["checkpoint_overhead"]["ratio"]
        start = (
            "–"
            if made is None
            else f"{_text(made['promised_start_s']['p95'])} → "
            f"{_text(made['observed_start_s']['p95'])}"
        )
        table.add_row(
            g["placement_class"],
            f"{g['started']}/{g['completed']}",
            start,
            "–" if made is None else missed_text(made),
            rate(g["restart_rate"]),
            percent(ratio),
            " ".join(f"{money(c['cost_per_completed_run'])} {cur}" for cur, c in g["cost"].items())
            or "–",
        )
    return table


def receipts_line(capacity: dict[str, Any]) -> str:
    """Start receipts per class beside the devices discovered, and the gap."""
    rows = capacity["receipts"]
    if not rows:
        return "no start receipts"
    each = ", ".join(
        f"{r['placement_class']} {r['receipts']} "
        f"({r['devices_receipted']}/{r['devices_discovered']})"
        for r in rows
    )
    gap = sum(r["devices_without_receipt"] for r in rows)
    failed = ", ".join(
        f"{r['placement_class']} {r['failed_starts']} of {r['start_attempts']}"
        for r in rows
        if r.get("failed_starts")
    )
    return (
        f"start receipts per class (devices receipted/discovered): {each}; {gap} devices "
        f"without a receipt; failed starts of attempts: {failed or 'none'}"
    )


def change_lines(capacity: dict[str, Any]) -> list[str]:
    """Each fleet change: starts, queue delay and interruptions before / during / after."""
    out = []
    for c in capacity["changes"]:
        windows = c["windows"]
        out.append(
            f"{c['kind']} {c['change_id']} of {' '.join(c['nodes'] or []) or 'the fleet'}, "
            f"{c['started_at']} → {c['ended_at'] or 'open'} ({c['window_s']} s): "
            + " / ".join(w["phase"] for w in windows)
        )
        out.append(
            f"  starts {_each(windows, 'starts')}; queue delay p50 "
            f"{_each(windows, 'queue_delay_s', 'p50')} s, "
            f"p95 {_each(windows, 'queue_delay_s', 'p95')} s; interrupted "
            f"{_each(windows, 'interrupted')}; "
            f"{len(c['held_past_end'])} held past its end"
        )
    return out


def _each(windows: list[dict[str, Any]], name: str, part: str | None = None) -> str:
    """One figure of every window, as `before / during / after`."""
    return " / ".join(_text(w[name] if part is None else w[name][part]) for w in windows)


def placement_claim_line(result: Reconciliation) -> str:
    """RULES.md 13: the claim on the lines whose placement was not as sold, per currency
    (each tenant's rounded as `reconcile --format json` reports it), and how many lines."""
    money: dict[str, Decimal] = defaultdict(Decimal)
    for (_tenant, currency), sums in result.placement_sums().items():
        money[currency] += Decimal(str(sums.money(sums.claim)))
    lines = sum(1 for state, _share in result.placed().values() if state == NOT_AS_SOLD)
    claimed = ", ".join(f"{v:,} {c}" for c, v in sorted(money.items()) if v) or "nothing"
    return f"placement claim: {claimed} on {lines} line(s)"


def placement_lines(doc: dict[str, Any]) -> list[str]:
    """Mismatched placements and their money; per class, whether probe bus bandwidth predicts step
    time."""
    rows = doc["allocations"]
    observed = [a for a in rows if a["status"] != "unobserved"]
    mismatched = [a for a in rows if a["status"] == "mismatch"]
    money: dict[str, Decimal] = defaultdict(Decimal)
    for s in doc["summary"]:
        for currency, amount in s["billed_on_mismatch"].items():
            money[currency] += Decimal(amount)
    billed = ", ".join(f"{v:,} {c}" for c, v in sorted(money.items())) or "nothing"
    first = (
        f"; first: {mismatched[0]['tenant']} {mismatched[0]['allocation_id']}: "
        f"{mismatched[0]['reasons'][0]}"
        if mismatched
        else ""
    )
    rho = ", ".join(
        f"{p['placement_class']} {_text(p['spearman'])} (n={p['n']}: {p['reading']})"
        for p in doc["prediction"]
        if p["n"]
    )
    return [
        f"{len(observed)} of {len(rows)} allocations observed, {len(mismatched)} mismatched, "
        f"billed {billed} on them{first}",
        "probe bus bandwidth against step time p50, Spearman's rho per class: "
        f"{rho or 'no probes'}",
    ]


def serving_table(outcomes: dict[str, Any]) -> Table:
    """The serving view of `report outcomes`, per tenant and concurrency level."""
    table = DataTable(
        "tenant",
        "concurrency",
        "requests (accepted)",
        "requests/s",
        "TTFT p50/p99 ms",
        "latency p95 ms",
        "output tokens/s",
        "cancelled",
        "cost / accepted response",
        title="serving: per tenant and concurrency (vLLM benchmark and gateway windows)",
    )
    for r in outcomes.get("serving", []):
        if r["concurrency"] == "all":
            continue
        table.add_row(
            r["tenant"],
            _text(r["concurrency"]),
            f"{r['requests']} ({r['accepted']})",
            _text(r["request_rate_per_s"]),
            f"{_text(r['ttft_ms'].get('p50'))} / {_text(r['ttft_ms'].get('p99'))}",
            _text(r["latency_ms"].get("p95")),
            _text(r["output_tokens_per_s"]),
            _text(r["cancelled"]),
            " ".join(
                f"{_text(c['cost_per_accepted_response'])} {cur}" for cur, c in r["cost"].items()
            )
            or "–",
        )
    return table


def _text(value: Any) -> str:
    return "–" if value is None else str(value)
