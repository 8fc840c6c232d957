"""Generated source files for the benchmarks, in the real formats, deterministic by seed.

The native stream mixes what a fleet emits: mostly `job.progress`, with allocations, job
starts, billing lines (money and times to validate) and fleet-wide health faults (no
tenant), over 50 tenants. FOCUS and sacct files follow the columns of the real samples in
../shared/realdata (which are never copied here).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

START = datetime(2026, 1, 5, tzinfo=timezone.utc)
TENANTS = 50


def _time(seconds: int) -> str:
    return (START + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def native_events(count: int, seed: int = 1) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    for n in range(count):
        tenant = f"tenant-{n % TENANTS}"
        kind = rng.random()
        if kind < 0.02:
            yield _event(
                n,
                "billing.line",
                "sim://billing",
                {
                    "tenant": tenant,
                    "invoice_id": "INV-2026-01",
                    "line_id": f"L{n}",
                    "allocation_id": f"A{n % 997}",
                    "period_start": _time(n),
                    "period_end": _time(n + 3600),
                    "gpus": 8,
                    "amount": f"{rng.randint(1, 99999) / 100:.2f}",
                    "currency": "USD",
                    "unit_price": "2.50",
                },
            )
        elif kind < 0.03:
            yield _event(
                n,
                "health.fault",
                f"dcgm://node-{n % 64}",
                {
                    "node": f"node-{n % 64}",
                    "device": n % 8,
                    "code": "xid-79",
                    "severity": "critical",
                },
            )
        elif kind < 0.06:
            yield _event(
                n,
                "allocation.granted",
                "sim://scheduler",
                {
                    "tenant": tenant,
                    "allocation_id": f"A{n}",
                    "gpus": 8,
                    "node": f"node-{n % 64}",
                },
            )
        elif kind < 0.09:
            yield _event(
                n,
                "job.started",
                "sim://scheduler",
                {"tenant": tenant, "job_id": f"J{n % 997}", "allocation_id": f"A{n % 997}"},
            )
        else:
            yield _event(
                n,
                "job.progress",
                f"sim://node-{n % 64}",
                {
                    "tenant": tenant,
                    "job_id": f"J{n % 997}",
                    "step": n,
                    "units": n * 4096,
                },
            )


def _event(n: int, type_: str, source: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": f"e{n}",
        "source": source,
        "type": type_,
        "time": _time(n),
        "data": data,
    }


def write_native(path: Path, count: int, seed: int = 1) -> int:
    with path.open("wb") as out:
        for event in native_events(count, seed):
            out.write(orjson.dumps(event) + b"\n")
    return count


FOCUS_HEADER = [
    "BilledCost",
    "BillingAccountId",
    "SubAccountId",
    "BillingCurrency",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "PricingQuantity",
    "PricingUnit",
    "ListUnitPrice",
    "ResourceId",
    "ProviderName",
    "InvoiceId",
    "Tags",
]


def write_focus(path: Path, rows: int, seed: int = 1) -> int:
    """FOCUS 1.0 CSV as the real sample writes it: NULL literals, space-separated times,
    money with many decimals; GPU rows priced in GPU-hours. One billing.line a row."""
    rng = random.Random(seed)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_ALL)
        writer.writerow(FOCUS_HEADER)
        for n in range(rows):
            start = START + timedelta(
                minutes=n
            )  # within the year: the ingest refuses times past tomorrow
            gpu = n % 4 != 3
            writer.writerow(
                [
                    f"{rng.randint(1, 10**9) / 10**7:.11f}",
                    "BA1",
                    f"tenant-{n % TENANTS}",
                    "USD",
                    "2026-01-01 00:00:00",
                    "Usage",
                    "NULL",
                    start.strftime("%Y-%m-%d %H:%M:%S"),
                    (start + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S"),
                    "8" if gpu else "NULL",
                    "GPU-Hours" if gpu else "NULL",
                    "2.50" if gpu else "NULL",
                    f"A{n}" if gpu else "NULL",
                    "Neo",
                    "INV-1",
                    '{"team":"ml"}',
                ]
            )
    return rows


SACCT_FIELDS = (
    "JobID|JobName|Account|User|Partition|NodeList|State|Submit|Start|End|Elapsed|Timelimit|"
    "AllocTRES"
)


def write_sacct(path: Path, jobs: int) -> int:
    """`sacct --parsable2` with a header: each GPU job row, then its batch step. Returns the
    number of events the sacct ingestor makes of them (five a completed GPU job)."""
    with path.open("w") as out:
        out.write(SACCT_FIELDS + "\n")
        for n in range(jobs):
            submit = START + timedelta(minutes=n)
            start, end = submit + timedelta(minutes=2), submit + timedelta(hours=2, minutes=2)
            times = "|".join(t.strftime("%Y-%m-%dT%H:%M:%S") for t in (submit, start, end))
            out.write(
                f"{n}|train|acct-{n % TENANTS}|u{n % 7}|gpu|node{n % 64}|COMPLETED|{times}|"
                "02:00:00|1-00:00:00|cpu=8,gres/gpu:a100=4,gres/gpu=4\n"
            )
            out.write(f"{n}.batch|||||node{n % 64}|COMPLETED|{times}|02:00:00||cpu=8,gres/gpu=4\n")
    return jobs * 5
