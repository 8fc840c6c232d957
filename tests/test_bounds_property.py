"""Anything ingest accepts, every command can process (docs/events.md).

Random events of every type, built through the real validators with the edge value at
each bound drawn often (tests/event_strategies.py), are appended to a real SQLite store;
then `reconcile`, every `report`, `verify`, `packet` for every promise, and `dispute` +
`verify-packet` for every invoice the reconciliation shows are run through the CLI. None may exit 2
(the stored data
is not the user's input error) or raise: each exits 0, and the packets verify.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, example, given, settings
from hypothesis import event as note_outcome
from hypothesis import strategies as st

from cli import main
from ledger import Appender, Store, read
from schemas import Accepted, Origin, Unstorable, validate_event
from schemas.types import MAX_DURATION_S, MAX_GPUS, MAX_SAFE_INT
from tests.conftest import event
from tests.event_strategies import LAST_DEADLINE, LATEST, NOW, events

REPORTS = (
    ["report", "promises"],
    ["report", "capacity"],
    ["report", "outcomes"],
    ["report", "promises", "--format", "json"],
    ["report", "outcomes", "--format", "json"],
    ["report", "capacity", "--format", "json"],
    ["report", "envelope"],
    ["report", "envelope", "--format", "html"],
    ["report", "envelope", "--format", "csv"],
    ["report", "capacity", "--format", "csv"],
    ["report", "placement"],
    ["report", "placement", "--format", "csv"],
    ["report", "outcomes", "--view", "serving"],
)


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "ledger.key"
    assert CliRunner().invoke(main, ["keygen", "--out", str(path)]).exit_code == 0
    return path


def accepted(raw: list[dict[str, Any]]) -> list[Accepted]:
    """Through the real validators; the strategies draw only what they accept, but for a
    value no backend's column can store (a NUL in an id): ingest quarantines that record,
    so it is not among what ingest accepted."""
    found = []
    for i, e in enumerate(raw):
        try:
            found.append(Accepted.of(validate_event(e, now=NOW), Origin("drawn.jsonl", i + 1)))
        except Unstorable:
            continue
    return found


def run(db: str, *args: str) -> Result:
    result = CliRunner().invoke(main, [*args, "--db", db])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.output,
    )
    assert result.exit_code == 0, (args, result.output)
    return result


FIRST, LAST, WIDEST = "1970-01-01T00:00:00Z", LATEST.isoformat(), "9999999.99999999999"
WIDEST_MEASURE = "9" * 18 + "." + "9" * 18


def acme(type_: str, id_: str, time: str, **data: Any) -> dict[str, Any]:
    return event(type_, id_, {"tenant": "acme", **data}, time=time)


#: Every bound at its edge at once: a million GPUs held from 1970 to the clock plus a day,
#: the widest amounts on the longest lines, the furthest promise, the longest terms.
EXTREMES = [
    acme(
        "allocation.granted",
        "g",
        FIRST,
        allocation_id="a1",
        gpus=MAX_GPUS,
        devices=[MAX_SAFE_INT, -MAX_SAFE_INT],
    ),
    acme(
        "policy.terms",
        "t",
        FIRST,
        warmup_allowance_s=MAX_DURATION_S,
        stall_threshold_s=MAX_DURATION_S,
        reclaim_notice_s=MAX_DURATION_S,
    ),
    acme("job.submitted", "s", FIRST, job_id="j1", gpus=MAX_GPUS, priority=-MAX_SAFE_INT),
    acme(
        "policy.promise",
        "p",
        FIRST,
        promise_id="p1",
        job_id="j1",
        start_by=LAST_DEADLINE.isoformat(),
        complete_by=LAST_DEADLINE.isoformat(),
        gpus=MAX_GPUS,
    ),
    acme("job.started", "st", FIRST, job_id="j1", allocation_id="a1", attempt=MAX_SAFE_INT),
    acme("job.progress", "p0", FIRST, job_id="j1", step=0, units=0),
    acme("job.progress", "p1", LAST, job_id="j1", step=MAX_SAFE_INT, units=MAX_SAFE_INT),
    acme(
        "checkpoint.saved",
        "c",
        LAST,
        job_id="j1",
        checkpoint_id="c1",
        step=MAX_SAFE_INT,
        bytes=MAX_SAFE_INT,
    ),
    acme(
        "policy.decision",
        "d",
        LAST,
        decision="reclaimed",
        allocation_id="a1",
        notice_s=MAX_DURATION_S,
    ),
    acme("work.accepted", "w", LAST, job_id="j1", result_id="r1", units=MAX_SAFE_INT),
    event(
        "health.fault",
        "f",
        {"node": "n1", "device": MAX_SAFE_INT, "code": "xid-79", "severity": "critical"},
        time=LAST,
    ),
    # evidence at its bounds: every request of a microsecond's window, the widest figures
    acme(
        "placement.observed",
        "po",
        FIRST,
        allocation_id="a1",
        node="n1",
        topology={
            "gpus": [{"name": "GPU0"}, {"name": "GPU1"}],
            "nics": [],
            "links": [{"a": "GPU0", "b": "GPU1", "link": "SOC"}],
        },
    ),
    acme(
        "probe.result",
        "pr",
        FIRST,
        allocation_id="a1",
        probe="nccl-tests",
        test="all_reduce_perf",
        figures=[
            {"name": "busbw", "value": WIDEST_MEASURE, "unit": "GB/s", "size_bytes": MAX_SAFE_INT}
        ],
    ),
    acme(
        "inference.window",
        "iw",
        LAST,
        job_id="j1",
        allocation_id="a1",
        window_start="2026-01-05T10:00:00Z",
        window_end="2026-01-05T10:00:00.000001Z",
        requests=MAX_SAFE_INT,
        accepted=MAX_SAFE_INT,
        concurrency=MAX_SAFE_INT,
        output_tokens=MAX_SAFE_INT,
        ttft_ms={"p99": WIDEST_MEASURE},
        latency_ms={"p50": "0", "p99": WIDEST_MEASURE},
    ),
]
EXTREME_LINES = [
    acme(
        "billing.line",
        "b1",
        LAST,
        invoice_id="i1",
        line_id="l1",
        allocation_id="a1",
        gpus=MAX_GPUS,
        period_start="2026-01-05T10:00:00Z",
        period_end="2026-01-05T12:00:00Z",
        amount=WIDEST,
        currency="CLF",
    ),
    acme(
        "billing.line",
        "b2",
        LAST,
        invoice_id="i1",
        line_id="l2",
        gpus=0,
        period_start=FIRST,
        period_end=LAST,
        amount="-" + WIDEST,
        currency="USD",
        category="credit",
    ),
    acme(
        "billing.line",
        "b3",
        LAST,
        invoice_id="i1",
        line_id="l3",
        allocation_id="a1",
        gpus=1,
        period_start=FIRST,
        period_end="1970-03-25T08:00:00Z",
        amount="0.00000000001",
        currency="JPY",
    ),
]

#: A field of acme's that spells another tenant's name: acme's packet is refused (exit 1,
#: docs/packets.md), zeta's is written and verifies.
NAMING_ANOTHER = [
    acme("allocation.granted", "ga", FIRST, allocation_id="a1", gpus=1, note="zeta"),
    event(
        "allocation.granted",
        "gz",
        {"tenant": "zeta", "allocation_id": "z1", "gpus": 1},
        time=FIRST,
    ),
]
NAMING_ANOTHER_LINES = [
    acme(
        "billing.line",
        "ba",
        LAST,
        invoice_id="i1",
        line_id="l1",
        allocation_id="a1",
        gpus=1,
        period_start=FIRST,
        period_end="1970-01-01T01:00:00Z",
        amount="1.00",
        currency="USD",
    ),
    event(
        "billing.line",
        "bz",
        {
            "tenant": "zeta",
            "invoice_id": "i2",
            "line_id": "l2",
            "allocation_id": "z1",
            "gpus": 1,
            "period_start": FIRST,
            "period_end": "1970-01-01T01:00:00Z",
            "amount": "1.00",
            "currency": "USD",
        },
        time=LAST,
    ),
]

fleets = st.tuples(
    st.lists(events(), min_size=1, max_size=10),
    st.lists(events(st.just("billing.line")), min_size=1, max_size=3),
)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(fleets)
@example((EXTREMES, EXTREME_LINES))
@example((NAMING_ANOTHER, NAMING_ANOTHER_LINES))
def test_every_command_processes_whatever_ingest_accepted(
    key: Path, drawn: tuple[list[Any], list[Any]]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        db = f"sqlite:///{Path(folder) / 'ledger.db'}"
        store = Store(db)
        store.init()
        Appender(store).append(accepted(drawn[0] + drawn[1]))
        store.close()
        reconciled = json.loads(run(db, "reconcile", "--format", "json").output)
        run(db, "reconcile")
        for report in REPORTS:
            run(db, *report)
        run(db, "verify")
        # what the ledger holds, not what was drawn: two drawn events may share a key, and
        # the second is then a duplicate or a conflict, never stored
        promises = {
            (str(e.tenant), json.loads(e.event)["data"]["promise_id"])
            for e in read.entries(Store(db), type="policy.promise")
        }
        for tenant, promise in sorted(promises):
            run(
                db,
                "packet",
                "--promise",
                promise,
                "--tenant",
                tenant,
                "--out",
                str(Path(folder) / "packet"),
            )
        invoices = sorted({(line["tenant"], line["invoice_id"]) for line in reconciled["lines"]})
        note_outcome(f"invoices disputed: {len(invoices)}")
        for n, (tenant, invoice) in enumerate(invoices):
            packet = str(Path(folder) / f"packet-{n}.json")
            disputed = CliRunner().invoke(
                main,
                [
                    "dispute",
                    "--tenant",
                    tenant,
                    "--invoice",
                    invoice,
                    "--key",
                    str(key),
                    "--out",
                    packet,
                    "--db",
                    db,
                ],
            )
            assert disputed.exception is None or isinstance(disputed.exception, SystemExit), (
                disputed.output
            )
            if (
                disputed.exit_code == 1
                and disputed.output.startswith("REFUSED: ")
                and "nothing written" in disputed.output
            ):
                # documented (docs/packets.md): a random field of this tenant's may spell another
                # tenant's identifier; the packet is refused whole, and nothing is written or
                # signed
                assert not Path(packet).exists(), disputed.output
                note_outcome("a packet refused: it would name another tenant")
                continue
            assert disputed.exit_code == 0, (tenant, invoice, disputed.output)
            verified = CliRunner().invoke(
                main, ["verify-packet", packet, "--pubkey", f"{key}.pub"]
            )
            assert verified.exit_code == 0, (tenant, invoice, verified.output)
