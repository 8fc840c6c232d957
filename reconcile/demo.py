"""The second half of `gpuledger demo`: reconcile the demo's ledger, write every output a
user of each kind takes away, and summarise the findings for the terminal.

    finance   reconcile.json / .csv / .parquet     the invoices, line by line and category;
              reconcile.html                       the finance page, with pictures
    customers dispute-<tenant>-<invoice>.json      verified here with the public key alone,
              ….letter.html                        and the dispute letter beside it
    operators packet-<promise>/packet.{json,html}  for the first missed promise
    everyone  reports/promises|capacity|outcomes.{json,csv}
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
from reconcile.engine.result import Reconciliation
from reconcile.engine.rules import CATEGORY_ORDER
from reconcile.packets.diagnostic import write_packet
from reconcile.packets.dispute import build_dispute, verify_dispute
from reconcile.packets.dispute import write_packet as write_dispute
from reconcile.packets.letter import write_letter_beside
from reconcile.reports import write_reports
from reconcile.reports.output import write

BIGGEST = 5


@dataclass
class DemoOutputs:
    result: Reconciliation
    files: list[Path] = field(default_factory=list)
    missed_promises: list[dict[str, Any]] = field(default_factory=list)
    dispute: str = ""
    packet: str = ""


def run_demo_outputs(store: Store, out: Path, signer: Signer, verifier: Verifier) -> DemoOutputs:
    """Reconcile, then write the reports, one dispute packet and one diagnostic packet."""
    result = reconcile_store(store)
    done = DemoOutputs(result)
    for fmt in ("json", "csv", "parquet", "html"):
        path = out / f"reconcile.{fmt}"
        write(result, fmt, path)
        done.files.append(path)
    written = write_reports(store, out / "reports")
    done.files += written.paths
    done.missed_promises = written.missed_promises
    done.dispute = _dispute(store, out, signer, verifier, result, done.files)
    if done.missed_promises:
        first = done.missed_promises[0]
        folder = out / f"packet-{first['promise_id']}"
        pages = write_packet(store, first["promise_id"], folder, first.get("tenant"))
        done.files += pages
        why = json.loads(pages[0].read_text())["why"]
        done.packet = f"diagnostic packet for missed promise {first['promise_id']}: {folder / 'packet.html'}\n  why: {why}"
    return done


def _dispute(store: Store, out: Path, signer: Signer, verifier: Verifier, result: Reconciliation,
             files: list[Path]) -> str:
    """The packet of the invoice with the most provider-borne and disputed money."""
    owed: dict[tuple[str, str], int] = defaultdict(int)
    for cell in result.cells:
        if cell.bearer in ("provider", "disputed"):
            owed[(cell.tenant, cell.invoice_id)] += cell.cents
    if not owed:
        return "no invoice has provider-borne or disputed money: no dispute to file"
    tenant, invoice = max(owed, key=lambda k: (owed[k], k))
    packet = build_dispute(store, tenant, invoice, signer)
    path = out / f"dispute-{tenant}-{invoice}.json"
    write_dispute(packet, path)
    files.append(path)
    checked = verify_dispute(packet, verifier)
    letter = write_letter_beside(packet, verifier, path)
    files.append(letter)
    return (f"dispute packet for {tenant} / {invoice}: {path} — verified with the public key alone: "
            f"{checked.tenant_entries} entries, {checked.fleet_entries} fleet faults, findings recomputed\n"
            f"  the dispute letter: {letter}")


def category_table(result: Reconciliation) -> Table:
    """The whole fleet's billed time and money by category and bearer."""
    hours: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    money: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    for cell in result.cells:
        hours[(cell.category, cell.bearer)] += Decimal(cell.gpu_us) / 3_600_000_000
        money[(cell.category, cell.bearer, cell.currency or "")] += major_units(cell.cents, cell.minor)
    billed = sum(hours.values(), Decimal(0))
    table = Table("category", "bearer", "GPU-hours", "share", "amount", title="what every billed GPU-second was")
    for category, bearer in sorted(hours, key=lambda k: (CATEGORY_ORDER.index(k[0]), k[1])):
        amounts = ", ".join(f"{a:,} {c}" for (cat, b, c), a in sorted(money.items()) if (cat, b) == (category, bearer))
        share = hours[(category, bearer)] / billed if billed else Decimal(0)
        style = {"provider": "red", "disputed": "yellow"}.get(bearer, "")
        table.add_row(category, bearer, f"{hours[(category, bearer)]:,.1f}", f"{share:.1%}", amounts, style=style)
    return table


def biggest_findings(result: Reconciliation, count: int = BIGGEST) -> Table:
    """The lines with the most provider-borne or disputed money, each with its category."""
    rows = sorted((c for c in result.cells if c.bearer in ("provider", "disputed") and c.cents > 0),
                  key=lambda c: (-c.cents, c.tenant, c.line_id))[:count]
    table = Table("tenant / line", "category", "GPU-h", "amount", title=f"the {len(rows)} biggest findings")
    for c in rows:
        table.add_row(f"{c.tenant} / {c.line_id}", f"{c.category} ({c.bearer})", f"{c.gpu_us / 3.6e9:,.2f}",
                      f"{major_units(c.cents, c.minor):,} {c.currency or ''}")
    return table


def totals_line(result: Reconciliation) -> str:
    doc = result.as_json()["tenants"]
    def total(values: Any) -> Decimal:
        return sum((Decimal(str(v)) for v in values), Decimal(0))

    billed = total(t["billed_gpu_seconds"] for t in doc.values()) / 3600
    productive = total(t["categories"].get("productive", {}).get("gpu_seconds", 0) for t in doc.values()) / 3600
    money = {b: total(t["by_bearer"][b] for t in doc.values()) for b in ("customer", "provider", "disputed")}
    unbilled = total(t["unbilled_gpu_seconds"] for t in doc.values()) / 3600
    share = productive / billed if billed else Decimal(0)
    return (f"billed {billed:,.1f} GPU-h, of which productive {productive:,.1f} GPU-h "
            f"({share:.1%}); money: customer {money['customer']:,}, "
            f"provider-borne {money['provider']:,}, disputed {money['disputed']:,}; unbilled {unbilled:,.1f} GPU-h")
