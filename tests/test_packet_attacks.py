"""Attacks on dispute packets from issue 28, each a test: the over-bill that crashed
`dispute`, a dispute that fails signing nothing, `verify-packet --tenant --invoice`
pinning what the customer expects, and two property tests: any billing line against any
allocation gives a packet that verifies, and over random tenants whose ids are common
words and look-alikes of each other's, every packet verifies, holds no other tenant's
identifier and carries every fault that touches the tenant's allocation.

Expected figures are worked by hand from reconcile/RULES.md; the properties check what the engine
cannot fake: verification recomputes the findings from the packet's entries.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import ingest
from ledger import Appender, Store, append_stream
from ledger.note import Signer
from reconcile import reconcile_store
from reconcile.packets.dispute import build_dispute, findings_json, verify_dispute
from tests.conftest import event, write_jsonl
from tests.conftest import run_cli as run

T0 = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)


def at(seconds: int) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def tenant_event(
    tenant: str, type_: str, id_: str, seconds: int, source: str = "slurm://c", **data: Any
) -> dict[str, Any]:
    return event(type_, id_, {"tenant": tenant, **data}, source=source, time=at(seconds))


def line(
    tenant: str,
    id_: str,
    invoice: str,
    line_id: str,
    allocation: str,
    start: int,
    end: int,
    gpus: int,
    amount: str,
    seconds: int | None = None,
) -> dict[str, Any]:
    return tenant_event(
        tenant,
        "billing.line",
        id_,
        end if seconds is None else seconds,
        "billing://c",
        invoice_id=invoice,
        line_id=line_id,
        allocation_id=allocation,
        period_start=at(start),
        period_end=at(end),
        gpus=gpus,
        amount=amount,
        currency="USD",
    )


def ledger_of(folder: Path, url: str, records: list[dict[str, Any]]) -> str:
    assert run("keygen", "--out", str(folder / "key"))[0] == 0
    code, _, err = run("ingest", "--db", url, str(write_jsonl(folder / "e.jsonl", records)))
    assert code == 0, err
    return url


def checkpoints(url: str) -> int:
    store = Store(url)
    with store.reading() as conn:
        count = int(conn.execute(text("SELECT count(*) FROM checkpoints")).scalar_one())
    store.close()
    return count


def dispute(
    folder: Path, url: str, invoice: str = "INV-1", out: Path | None = None
) -> tuple[int, str, str]:
    return run(
        "dispute",
        "--db",
        url,
        "--tenant",
        "acme",
        "--invoice",
        invoice,
        "--key",
        str(folder / "key"),
        "--out",
        str(out or folder / "packet.json"),
    )


def verify(folder: Path, *args: str) -> tuple[int, str, str]:
    return run(
        "verify-packet", str(folder / "packet.json"), "--pubkey", str(folder / "key.pub"), *args
    )


# -- the over-bill ----------------------------------------------------------------------

# acme holds 2 GPUs from 10:00 to 10:10; the line bills 4 GPUs from 10:00 to 10:20 for 1.00.
OVER_BILL = [
    tenant_event("acme", "allocation.granted", "g", 0, allocation_id="A-1", gpus=2, node="n1"),
    tenant_event("acme", "allocation.released", "r", 600, allocation_id="A-1"),
    line("acme", "l", "INV-1", "L-1", "A-1", 0, 1200, 4, "1.00"),
]


def test_an_over_bill_disputes_and_verifies(tmp_path: Path, db_url: str) -> None:
    """By hand: the line bills 4 × 1200 = 4800 GPU-s. Unallocated: the 2 GPUs beyond the
    grant over the whole window (2 × 1200) and the 2 granted ones after the release
    (2 × 600): 3600 GPU-s, 1.00 × 3600 / 4800 = 0.75, provider's; told as 2 GPUs over
    10:00-10:10 and 4 over 10:10-10:20. The rest, 2 × 600, is idle_reserved (no job)."""
    url = ledger_of(tmp_path, db_url, OVER_BILL)
    code, out, err = dispute(tmp_path, url)
    assert (code, err) == (0, ""), err
    packet = json.loads((tmp_path / "packet.json").read_text())
    [claim] = packet["claims"]
    assert (claim["category"], claim["bearer"], claim["gpu_seconds"], claim["amount"]) == (
        "unallocated",
        "provider",
        3600,
        "0.75",
    )
    assert claim["stretches"] == [[at(0), at(600), 2], [at(600), at(1200), 4]]
    code, out, err = verify(tmp_path)
    assert (code, err) == (0, "") and out.startswith("ok: invoice INV-1 of acme, 1 lines")


# -- nothing signed when the dispute does not finish ------------------------------------


def test_an_invoice_with_no_line_left_signs_nothing(tmp_path: Path, db_url: str) -> None:
    """L-1 on INV-1 is corrected by L-2 on INV-2: INV-1 has a line, but none left after
    corrections. The dispute stops before signing (it used to sign, then stop)."""
    corrected = line("acme", "l2", "INV-2", "L-2", "A-1", 0, 600, 2, "0.50")
    corrected["data"]["corrects"] = "L-1"
    url = ledger_of(tmp_path, db_url, OVER_BILL + [corrected])
    code, out, err = dispute(tmp_path, url)
    assert (code, out) == (2, "")
    assert "has no billing line left on invoice 'INV-1' after corrections" in err
    assert checkpoints(url) == 0 and not (tmp_path / "packet.json").exists()


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_an_output_that_cannot_be_written_signs_nothing(
    tmp_path: Path, db_url: str, where: str
) -> None:
    url = ledger_of(tmp_path, db_url, OVER_BILL)
    out = tmp_path / "nowhere" / "packet.json" if where == "missing folder" else tmp_path
    code, stdout, err = dispute(tmp_path, url, out=out)
    assert (code, stdout) == (2, "") and "--out: " in err and len(err.splitlines()) == 1, err
    assert checkpoints(url) == 0


# -- pinning ----------------------------------------------------------------------------


def test_verify_packet_pins_the_tenant_and_invoice_exactly(tmp_path: Path, db_url: str) -> None:
    records = [
        tenant_event("аcme", "allocation.granted", "g", 0, allocation_id="A-1", gpus=2, node="n1"),
        line("аcme", "l", "INV-аcme", "L-1", "A-1", 0, 600, 2, "1.00"),
    ]  # Cyrillic а in both
    url = ledger_of(tmp_path, db_url, records)
    code, _, err = run(
        "dispute",
        "--db",
        url,
        "--tenant",
        "аcme",
        "--invoice",
        "INV-аcme",
        "--key",
        str(tmp_path / "key"),
        "--out",
        str(tmp_path / "packet.json"),
    )
    assert (code, err) == (0, ""), err
    assert verify(tmp_path)[0] == 0
    assert verify(tmp_path, "--tenant", "аcme", "--invoice", "INV-аcme")[0] == 0
    code, out, err = verify(tmp_path, "--invoice", "INV-acme")
    assert (code, out, err) == (
        1,
        "",
        "FAILED: packet.invoice_id: expected 'INV-acme', found 'INV-\\u0430cme'\n",
    )
    code, out, err = verify(tmp_path, "--tenant", "acme", "--invoice", "INV-аcme")
    assert (code, out, err) == (
        1,
        "",
        "FAILED: packet.tenant: expected 'acme', found '\\u0430cme'\n",
    )


# -- any line against any allocation ----------------------------------------------------


@dataclass(frozen=True)
class Case:
    granted_gpus: int
    release: int | None  # seconds after the grant, or never released
    job: tuple[int, list[int], str] | None  # started at, progress marks, how it ends
    fault: tuple[int, int | None] | None  # a critical xid-79 on the node: opened, cleared
    line: tuple[int, int, int, str]  # gpus, period start, period end, amount
    earlier: tuple[int, int, int] | None  # an earlier line on the allocation: gpus, start, end


@st.composite
def cases(draw: st.DrawFn) -> Case:
    granted = draw(st.integers(1, 4))
    release = draw(st.none() | st.integers(60, 3600))
    horizon = release if release is not None else 3600
    job = None
    if draw(st.booleans()):
        start = draw(st.integers(0, horizon))
        marks = sorted(draw(st.sets(st.integers(start + 1, start + 3600), max_size=4)))
        job = (start, marks, draw(st.sampled_from(["completed", "failed", "running"])))
    fault = None
    if draw(st.booleans()):
        opened = draw(st.integers(-600, 3600))
        fault = (opened, draw(st.none() | st.integers(opened, opened + 1800)))
    start = draw(st.integers(-1800, 7200))
    end = draw(
        st.sampled_from([start, start + 1]) | st.integers(start, start + 7200)
    )  # empty windows too
    cents = draw(st.integers(0, 10**7))
    earlier = None
    if draw(st.booleans()):
        e_start = draw(st.integers(-600, 3600))
        earlier = (draw(st.integers(1, granted)), e_start, e_start + draw(st.integers(1, 3600)))
    return Case(
        granted,
        release,
        job,
        fault,
        (draw(st.integers(0, 2 * granted)), start, end, f"{cents // 100}.{cents % 100:02d}"),
        earlier,
    )


def case_events(case: Case) -> list[dict[str, Any]]:
    records = [
        tenant_event(
            "acme",
            "allocation.granted",
            "g",
            0,
            allocation_id="A-1",
            gpus=case.granted_gpus,
            node="n1",
            devices=list(range(case.granted_gpus)),
        )
    ]
    if case.release is not None:
        records.append(
            tenant_event("acme", "allocation.released", "r", case.release, allocation_id="A-1")
        )
    if case.job is not None:
        start, marks, ending = case.job
        records.append(
            tenant_event("acme", "job.started", "s", start, job_id="j", allocation_id="A-1")
        )
        records += [
            tenant_event("acme", "job.progress", f"p{i}", t, job_id="j", step=i + 1)
            for i, t in enumerate(marks)
        ]
        last = (marks[-1] if marks else start) + 1
        if ending == "completed":
            records.append(tenant_event("acme", "job.completed", "c", last, job_id="j"))
        elif ending == "failed":
            records.append(
                tenant_event("acme", "job.failed", "f", last, job_id="j", cause="hardware")
            )
    if case.fault is not None:
        opened, cleared = case.fault
        records.append(
            event(
                "health.fault",
                "x",
                {"node": "n1", "code": "xid-79", "severity": "critical"},
                source="dcgm://n1",
                time=at(opened),
            )
        )
        if cleared is not None:
            records.append(
                event(
                    "health.cleared",
                    "xc",
                    {"node": "n1", "code": "xid-79"},
                    source="dcgm://n1",
                    time=at(cleared),
                )
            )
    if case.earlier is not None:
        gpus, start, end = case.earlier
        records.append(
            line("acme", "l0", "INV-0", "L-0", "A-1", start, end, gpus, "3.00", seconds=-3600)
        )
    gpus, start, end, amount = case.line
    records.append(
        line("acme", "l", "INV-1", "L-1", "A-1", start, end, gpus, amount, seconds=max(end, 7200))
    )
    return records


def ingested(folder: Path, records: list[dict[str, Any]]) -> Store:
    store = Store(f"sqlite:///{folder / 'ledger.db'}")
    store.init()
    report = append_stream(
        Appender(store),
        ingest.extract(write_jsonl(folder / "e.jsonl", records), "cloudevents"),
        1000,
    )
    assert report.quarantined == 0, report.problems
    return store


PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SIGNER = Signer.generate("property.test")


@PROPERTY
@given(case=cases())
def test_any_line_against_any_allocation_gives_a_packet_that_verifies(case: Case) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = ingested(Path(folder), case_events(case))
        try:
            packet = json.loads(json.dumps(build_dispute(store, "acme", "INV-1", SIGNER)))
            checked = verify_dispute(packet, SIGNER.verifier)
            # The packet's findings are the whole ledger's: nothing that mattered was left out.
            whole = json.loads(
                json.dumps(findings_json(reconcile_store(store, tenant="acme", invoice="INV-1")))
            )
        finally:
            store.close()
    assert checked.findings == packet["findings"] == whole
    assert checked.claims == packet["claims"]
    gpus, start, end, _ = case.line
    claimed = sum(c["gpu_seconds"] for c in packet["claims"])
    assert claimed <= gpus * (end - start)  # nothing claimed beyond what the line bills
    if gpus > case.granted_gpus:  # the GPUs beyond the grant are the provider's whole window long
        assert claimed >= (gpus - case.granted_gpus) * (end - start)


# -- a tenant naming its job after a fault code moves no money ----------------------------


def test_a_job_named_after_a_fault_code_hides_no_fault(tmp_path: Path, db_url: str) -> None:
    """zeta names its job `xid-79`. acme (1 GPU on n1, 10:00-10:20, 12.00) stalls from
    10:02 to 10:12 while a critical xid-79 is open on n1 (10:03-10:11). By hand: startup
    10:00-10:01, productive 10:01-10:02 and 10:12-10:13, stalled_fault 10:02-10:12 (600 s
    over the 300 s threshold, with the fault open): 600 GPU-s, 12.00 × 600 / 1200 = 6.00,
    the provider's; idle_reserved 10:13-10:20."""
    zeta = [
        tenant_event(
            "zeta",
            "allocation.granted",
            "zg",
            0,
            "slurm://z",
            allocation_id="xid-79",
            gpus=1,
            node="n9",
        ),
        tenant_event(
            "zeta", "job.started", "zs", 0, "slurm://z", job_id="xid-79", allocation_id="xid-79"
        ),
    ]
    acme = [
        tenant_event("acme", "allocation.granted", "g", 0, allocation_id="A-1", gpus=1, node="n1"),
        tenant_event("acme", "job.started", "s", 30, job_id="j", allocation_id="A-1"),
        tenant_event("acme", "job.progress", "p1", 60, job_id="j", step=1),
        tenant_event("acme", "job.progress", "p2", 120, job_id="j", step=2),
        event(
            "health.fault",
            "x",
            {"node": "n1", "code": "xid-79", "severity": "critical"},
            source="dcgm://n1",
            time=at(180),
        ),
        event(
            "health.cleared",
            "xc",
            {"node": "n1", "code": "xid-79"},
            source="dcgm://n1",
            time=at(660),
        ),
        tenant_event("acme", "job.progress", "p3", 720, job_id="j", step=3),
        tenant_event("acme", "job.completed", "c", 780, job_id="j"),
        tenant_event("acme", "allocation.released", "r", 1200, allocation_id="A-1"),
        line("acme", "l", "INV-1", "L-1", "A-1", 0, 1200, 1, "12.00"),
    ]
    url = ledger_of(tmp_path, db_url, zeta + acme)
    code, out, err = dispute(tmp_path, url)
    assert (code, err) == (0, ""), err
    packet = json.loads((tmp_path / "packet.json").read_text())
    assert [
        (c["category"], c["bearer"], c["gpu_seconds"], c["amount"]) for c in packet["claims"]
    ] == [("stalled_fault", "provider", 600, "6.00")]
    assert "withheld" not in packet["bundle"]
    assert verify(tmp_path, "--tenant", "acme", "--invoice", "INV-1")[0] == 0


# -- random tenants, look-alike and common-word ids, small shared fleets ----------------

#: Strings any packet may hold as data that is no one's identifier: a tenant choosing one
#: of them as an id puts nothing of its own into another tenant's packet.
VOCABULARY = ["USD", "whole", "default", "n1", "n2", "xid-79", "critical", "usage"]
NODES = ["n1", "n2"]


def look_alike(value: str, how: str) -> str:
    if how == "case":
        return value.swapcase()
    if how == "fullwidth":
        return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value)
    if how == "zero-width":
        return value[:1] + "\u200b" + value[1:]
    if how == "nfd":
        return value.replace("e", "e\u0301") if "e" in value else value + "e\u0301"
    return value.replace("a", "\u0430").replace("e", "\u0435").replace("o", "\u043e")  # Cyrillic


@dataclass(frozen=True)
class Tenant:
    name: str
    job: str
    allocation: str
    invoice: str
    node: str
    gpus: int


def pick(draw: st.DrawFn, kind: str, index: int, taken: list[str]) -> str:
    """A fresh id, a common word, or a look-alike of an id an earlier tenant holds."""
    source = draw(st.sampled_from(["fresh", "word", "look-alike"] if taken else ["fresh", "word"]))
    if source == "fresh":
        return f"{kind}-{index}-{draw(st.integers(1000, 9999))}"
    if source == "word":
        return draw(st.sampled_from(VOCABULARY))
    how = draw(st.sampled_from(["case", "fullwidth", "zero-width", "nfd", "cyrillic"]))
    return look_alike(draw(st.sampled_from(taken)), how)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Tenant], list[tuple[str, int, int]]]:
    """2 or 3 tenants on 2 shared nodes, each id picked as `pick` does; and up to 3
    critical faults (node, opened, seconds until cleared)."""
    tenants: list[Tenant] = []
    taken: list[str] = []
    for index in range(draw(st.integers(2, 3))):
        name = pick(draw, "tenant", index, taken)
        if name in [t.name for t in tenants]:
            name = f"tenant-{index}"
        tenant = Tenant(
            name,
            pick(draw, "job", index, taken),
            pick(draw, "alloc", index, taken),
            pick(draw, "INV", index, taken),
            draw(st.sampled_from(NODES)),
            draw(st.integers(1, 2)),
        )
        tenants.append(tenant)
        taken += [tenant.name, tenant.job, tenant.allocation, tenant.invoice]
    faults = draw(
        st.lists(
            st.tuples(st.sampled_from(NODES), st.integers(0, 1500), st.integers(1, 900)),
            max_size=3,
        )
    )
    return tenants, faults


def fleet_events(
    tenants: list[Tenant], faults: list[tuple[str, int, int]]
) -> list[dict[str, Any]]:
    records = []
    for i, t in enumerate(tenants):
        src = f"slurm://c{i}"
        records += [
            tenant_event(
                t.name,
                "allocation.granted",
                "g",
                0,
                src,
                allocation_id=t.allocation,
                gpus=t.gpus,
                node=t.node,
            ),
            tenant_event(
                t.name, "job.started", "s", 30, src, job_id=t.job, allocation_id=t.allocation
            ),
            tenant_event(t.name, "job.progress", "p1", 60, src, job_id=t.job, step=1),
            tenant_event(t.name, "job.progress", "p2", 1000, src, job_id=t.job, step=2),
            tenant_event(t.name, "job.completed", "c", 1100, src, job_id=t.job),
            tenant_event(
                t.name, "allocation.released", "r", 1200, src, allocation_id=t.allocation
            ),
            tenant_event(
                t.name,
                "billing.line",
                "l",
                1200,
                f"billing://c{i}",
                invoice_id=t.invoice,
                line_id="L-1",
                allocation_id=t.allocation,
                period_start=at(0),
                period_end=at(1200),
                gpus=t.gpus,
                amount="12.00",
                currency="USD",
            ),
        ]
    for k, (node, opened, lasting) in enumerate(faults):
        records.append(
            event(
                "health.fault",
                f"f{k}",
                {"node": node, "code": "xid-79", "severity": "critical"},
                source=f"dcgm://{node}",
                time=at(opened),
            )
        )
        records.append(
            event(
                "health.cleared",
                f"f{k}c",
                {"node": node, "code": "xid-79"},
                source=f"dcgm://{node}",
                time=at(opened + lasting),
            )
        )
    return records


def strings_of(value: Any) -> set[str]:
    """Every string of a packet, keys and values, each entry's event parsed and walked."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return set().union(*(strings_of(v) for v in value)) if value else set()
    if isinstance(value, dict):
        found = set(value)
        for key, inner in value.items():
            found |= strings_of(json.loads(inner) if key == "event" else inner)
        return found
    return set()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets())
def test_every_packet_verifies_holds_no_other_tenants_id_and_omits_no_touching_fault(
    fleet: tuple[list[Tenant], list[tuple[str, int, int]]],
) -> None:
    tenants, faults = fleet
    with tempfile.TemporaryDirectory() as folder:
        store = ingested(Path(folder), fleet_events(tenants, faults))
        try:
            for t in tenants:
                packet = json.loads(json.dumps(build_dispute(store, t.name, t.invoice, SIGNER)))
                checked = verify_dispute(packet, SIGNER.verifier)
                whole = json.loads(
                    json.dumps(
                        findings_json(reconcile_store(store, tenant=t.name, invoice=t.invoice))
                    )
                )
                assert (checked.tenant, checked.invoice_id) == (t.name, t.invoice)
                assert (
                    checked.findings == packet["findings"] == whole
                )  # no money moved by what is carried
                own = {t.name, t.job, t.allocation, t.invoice}
                foreign = {
                    i for o in tenants if o != t for i in (o.name, o.job, o.allocation, o.invoice)
                }
                held = strings_of(packet)
                assert sorted((foreign - own - set(VOCABULARY)) & held) == [], t
                carried = {
                    (e["source"], e["id"])
                    for e in packet["bundle"]["entries"]
                    if e["tenant"] is None
                }
                touching = {
                    (f"dcgm://{node}", f"f{k}{end}")
                    for k, (node, _, _) in enumerate(faults)
                    for end in ("", "c")
                    if node == t.node
                }
                assert touching <= carried and "withheld" not in packet["bundle"]
        finally:
            store.close()
