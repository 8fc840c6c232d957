"""Tenant isolation of dispute packets (reconcile/packets/isolation.py, docs/packets.md).

On simulated fleets with shared nodes, MIG and time-sliced nodes, every tenant's packet
is scanned for every other tenant's identifiers, which this test collects itself from the
raw simulated source files (sacct, Kueue, Kubernetes Events, CloudEvents, FOCUS), never
from the engine. Small ledgers show the refusal: one line naming the identifier, its kind
and where it is, nothing written and nothing signed.
"""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import ingest
from fixtures.sim import Rates, SimConfig, simulate
from ledger import Appender, Store, append_stream
from ledger.note import Signer
from reconcile.packets.dispute import build_dispute, verify_dispute
from reconcile.packets.isolation import Isolation
from tests.conftest import event, write_jsonl
from tests.conftest import run_cli as run

#: tenant -> kind -> identifiers, as the raw source files give them.
Identifiers = dict[str, dict[str, set[str]]]
TOKEN = re.compile(r"[\w-]+")


def sacct_identifiers(path: Path, found: Identifiers) -> None:
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle, delimiter="|"):
            tenant = row["Account"] or row["User"]
            job = row["JobID"].split(".")[0]  # a step row belongs to its job
            found[tenant]["job"].add(job)
            found[tenant]["allocation"].add(job)
            if row["User"]:
                found[tenant]["user"].add(row["User"])


def kueue_identifiers(path: Path, found: Identifiers) -> None:
    for item in json.loads(path.read_text())["items"]:
        meta = item["metadata"]
        found[meta["namespace"]]["allocation"].add(meta["name"])
        found[meta["namespace"]]["job"].update(
            owner["name"] for owner in meta.get("ownerReferences", [])
        )


def k8s_identifiers(path: Path, found: Identifiers) -> None:
    for item in json.loads(path.read_text())["items"]:
        involved = item["involvedObject"]
        if involved["kind"] == "Pod":
            found[involved["namespace"]]["pod"].add(involved["name"])


def cloudevents_identifiers(path: Path, found: Identifiers) -> None:
    for line in path.read_text().splitlines():
        data = json.loads(line)["data"]
        if data.get("tenant") is None:
            continue
        for kind, field in (
            ("job", "job_id"),
            ("allocation", "allocation_id"),
            ("pod", "pod"),
            ("invoice", "invoice_id"),
        ):
            if data.get(field) is not None:
                found[data["tenant"]][kind].add(str(data[field]))


def focus_identifiers(path: Path, found: Identifiers) -> None:
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            tenant = row["SubAccountId"]
            found[tenant]["invoice"].add(row["InvoiceId"])
            if row["ResourceId"] not in ("", "NULL"):
                found[tenant]["allocation"].add(row["ResourceId"])


READERS = {
    "sacct": sacct_identifiers,
    "kueue": kueue_identifiers,
    "k8s-events": k8s_identifiers,
    "cloudevents": cloudevents_identifiers,
    "focus": focus_identifiers,
}


def raw_identifiers(folder: Path) -> Identifiers:
    found: Identifiers = defaultdict(lambda: defaultdict(set))
    for item in json.loads((folder / "manifest.json").read_text())["files"]:
        if item["format"] in READERS:
            READERS[item["format"]](folder / item["path"], found)
    for tenant in list(found):
        found[tenant]["tenant"].add(tenant)
    return found


def packet_strings(value: Any) -> list[str]:
    """Every string of a packet: keys and values, each entry's event parsed and walked."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for inner in value for s in packet_strings(inner)]
    if isinstance(value, dict):
        out = list(value)
        for key, inner in value.items():
            out += packet_strings(json.loads(inner) if key == "event" else inner)
        return out
    return []


FLEETS = {  # seed, GPUs, tenants: 8-GPU nodes, a share of the Kubernetes ones MIG or time-sliced
    "4 tenants on 64 GPUs": (29, 64, 4),
    "6 tenants on 48 GPUs": (31, 48, 6),
}


@pytest.fixture(scope="module", params=list(FLEETS))
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Store, Path, int]:
    out = tmp_path_factory.mktemp("shared-fleet")
    seed, gpus, tenants = FLEETS[request.param]
    rates = Rates(
        mig=0.4,
        timeslice=0.4,
        hardware_failure=0.3,
        fault_stall=0.3,
        fabric_fault=0.5,
        node_down=0.3,
    )
    simulate(SimConfig(seed=seed, gpus=gpus, days=1, tenants=tenants, rates=rates), out)
    store = Store(f"sqlite:///{out / 'ledger.db'}")
    store.init()
    appender = Appender(store)
    for item in json.loads((out / "manifest.json").read_text())["files"]:
        records = ingest.extract(out / item["path"], item["format"], **item.get("options", {}))
        assert append_stream(appender, records, 5000).quarantined == 0
    records = ingest.extract(
        write_jsonl(out / "dirty.jsonl", dirty_faults(store, raw_identifiers(out))), "cloudevents"
    )
    assert append_stream(appender, records, 5000).appended == 2
    return store, out, tenants


def dirty_faults(store: Store, ids: Identifiers) -> list[dict[str, Any]]:
    """A fault as a per-job dcgmi ingest would write it, whatever the ingestors do now: on
    the node of a time-sliced or MIG allocation, naming another tenant's pod."""
    with store.reading() as conn:
        rows = conn.execute(
            text(
                "SELECT tenant, event FROM entries WHERE type = 'allocation.granted' ORDER BY seq"
            )
        ).all()
    tenant, grant = next(
        (t, json.loads(e))
        for t, e in rows
        if json.loads(e)["data"].get("placement_class") in ("timeslice", "mig")
    )
    other = min(t for t in ids if t != tenant and (ids[t]["pod"] or ids[t]["job"]))
    pod = min(ids[other]["pod"] or ids[other]["job"])
    node, at = grant["data"]["node"], grant["time"]
    fault = event(
        "health.fault",
        f"{pod}:xid-79:{at}",
        {"node": node, "code": "xid-79", "severity": "critical", "dcgm_job": pod},
        source=f"dcgm://{node}",
        time=at,
    )
    cleared = event(
        "health.cleared",
        f"{pod}:xid-79:{at}:cleared",
        {"node": node, "code": "xid-79"},
        source=f"dcgm://{node}",
        time=at,
    )
    return [fault, cleared]


def test_no_packet_holds_another_tenants_identifier(fleet: tuple[Store, Path, int]) -> None:
    store, folder, tenants = fleet
    ids = raw_identifiers(folder)
    flat = {tenant: set().union(*kinds.values()) for tenant, kinds in ids.items()}
    assert len(flat) == tenants
    assert all(
        TOKEN.fullmatch(i) for values in flat.values() for i in values
    )  # so a token check sees them all
    classes = {
        json.loads(e)["data"].get("placement_class")
        for (e,) in store.engine.connect().execute(
            text("SELECT event FROM entries WHERE type = 'allocation.granted'")
        )
    }
    assert {"whole", "mig", "timeslice"} <= classes
    signer = Signer.generate("fleet.test")
    carried = dirty_carried = 0
    for tenant in sorted(flat):
        foreign = set().union(*(v for t, v in flat.items() if t != tenant)) - flat[tenant]
        for invoice in sorted(ids[tenant]["invoice"]):
            packet = json.loads(json.dumps(build_dispute(store, tenant, invoice, signer)))
            assert verify_dispute(packet, signer.verifier).tenant == tenant
            assert "withheld" not in packet["bundle"]
            entries = packet["bundle"]["entries"]
            dirty = [e for e in entries if e["tenant"] is None and leaks(store, e["seq"], foreign)]
            clean = {
                **packet,
                "bundle": {**packet["bundle"], "entries": [e for e in entries if e not in dirty]},
            }
            tokens = {t for s in packet_strings(clean) for t in TOKEN.findall(s)}
            assert sorted(tokens & foreign) == [], (tenant, invoice)
            carried += sum(1 for e in entries if e["tenant"] is None)
            dirty_carried += len(dirty)
    # Not vacuous: faults on shared nodes touched these tenants. The two written above as a
    # per-job dcgmi ingest once wrote them (naming another tenant's pod) are carried whole,
    # like every fleet entry: none is ever withheld (docs/packets.md says why).
    assert carried > 0 and dirty_carried > 0


def leaks(store: Store, seq: int, foreign: set[str]) -> bool:
    with store.reading() as conn:
        row = conn.execute(
            text("SELECT source, id, event FROM entries WHERE seq = :s"), {"s": seq}
        ).one()
    return bool(
        {t for s in packet_strings(dict(row._mapping)) for t in TOKEN.findall(s)} & foreign
    )


# -- the gate and the choice on a small ledger -------------------------------------------


def _at(clock: str) -> str:
    return f"2026-01-05T{clock}Z"


def _acme(type_: str, id_: str, clock: str, **data: Any) -> dict[str, Any]:
    return event(type_, id_, {"tenant": "acme", **data}, source="slurm://c", time=_at(clock))


ZETA = [
    event(
        "job.started",
        "z1",
        {"tenant": "zeta", "job_id": "zeta-secret-job", "allocation_id": "Z-9"},
        source="slurm://c",
        time=_at("10:00:00"),
    )
]
ACME = [
    _acme(
        "allocation.granted",
        "g",
        "10:00:00",
        allocation_id="A-1",
        gpus=2,
        node="n1",
        devices=[0, 1],
    ),
    _acme("job.started", "s", "10:00:30", job_id="acme-train", allocation_id="A-1"),
    _acme("job.progress", "p1", "10:02:00", job_id="acme-train", step=1),
    _acme("job.completed", "c", "10:05:00", job_id="acme-train"),
    _acme("allocation.released", "r", "10:10:00", allocation_id="A-1"),
    event(
        "billing.line",
        "l",
        {
            "tenant": "acme",
            "invoice_id": "INV-1",
            "line_id": "L-1",
            "allocation_id": "A-1",
            "period_start": _at("10:00:00"),
            "period_end": _at("10:10:00"),
            "gpus": 2,
            "amount": "1.00",
            "currency": "USD",
        },
        source="billing://c",
        time=_at("10:10:00"),
    ),
]
CLEAN_FAULT = event(
    "health.fault",
    "f-clean",
    {"node": "n1", "device": 0, "code": "xid-79", "severity": "critical"},
    source="dcgm://n1",
    time=_at("10:03:00"),
)
DIRTY_FAULT = event(
    "health.fault",
    "f-dirty",
    {
        "node": "n1",
        "device": 1,
        "code": "xid-48",
        "severity": "critical",
        "dcgm_job": "zeta-secret-job",
    },
    source="dcgm://n1",
    time=_at("10:04:00"),
)


def ledger_of(folder: Path, url: str, records: list[dict[str, Any]]) -> str:
    assert run("keygen", "--out", str(folder / "key"))[0] == 0
    assert run("ingest", "--db", url, str(write_jsonl(folder / "e.jsonl", records)))[0] == 0
    return url


def checkpoints(url: str) -> int:
    store = Store(url)
    with store.reading() as conn:
        count = int(conn.execute(text("SELECT count(*) FROM checkpoints")).scalar_one())
    store.close()
    return count


def dispute(folder: Path, url: str) -> tuple[int, str, str]:
    return run(
        "dispute",
        "--db",
        url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-1",
        "--key",
        str(folder / "key"),
        "--out",
        str(folder / "packet.json"),
    )


def test_every_touching_fault_is_carried_none_withheld(tmp_path: Path, db_url: str) -> None:
    """The dirty fault names zeta's job as a per-job dcgmi ingest once wrote it: it is
    carried all the same (a fleet entry is never withheld, docs/packets.md)."""
    url = ledger_of(tmp_path, db_url, ZETA + ACME[:3] + [CLEAN_FAULT, DIRTY_FAULT] + ACME[3:])
    code, out, err = dispute(tmp_path, url)
    assert (code, err) == (0, "")
    assert out.splitlines()[0].endswith(
        "; 6 entries of acme and 2 fleet entries; checkpoint of tree size 9"
    )
    packet = json.loads((tmp_path / "packet.json").read_text())
    assert "withheld" not in packet["bundle"]
    assert [e["seq"] for e in packet["bundle"]["entries"] if e["tenant"] is None] == [5, 6]
    code, out, err = run(
        "verify-packet", str(tmp_path / "packet.json"), "--pubkey", str(tmp_path / "key.pub")
    )
    assert (code, err) == (0, "") and out.startswith(
        "ok: invoice INV-1 of acme, 1 lines; 6 entries of acme"
    )


def _preempted_by(**preemptor: Any) -> dict[str, Any]:
    """A decision on acme's allocation that records who preempted it (an ingestor kept it)."""
    return _acme(
        "policy.decision",
        "d",
        "10:01:00",
        decision="preempted",
        allocation_id="A-1",
        reason="preempted",
        preempted_by=preemptor,
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("zeta-secret-job", "'zeta-secret-job',"),
        ("Zeta-Secret-JOB", "'Zeta-Secret-JOB', a look-alike of 'zeta-secret-job',"),  # case
        (
            "ｚｅｔａ-secret-job",
            "'ｚｅｔａ-secret-job', a look-alike of 'zeta-secret-job',",
        ),  # fullwidth
        (
            "zeta\u200b-secret\u00ad-job",
            "'zeta\\u200b-secret\\xad-job', a look-alike of 'zeta-secret-job',",
        ),
        (
            "zеta-sеcrеt-jоb",
            "'zеta-sеcrеt-jоb', a look-alike of 'zeta-secret-job',",
        ),  # Cyrillic е, о
        (
            "ΖΕΤΑ-secret-job",
            "'ΖΕΤΑ-secret-job', a look-alike of 'zeta-secret-job',",
        ),  # Greek capitals
    ],
)
def test_another_tenants_identifier_in_an_identifier_field_refuses_the_packet(
    tmp_path: Path, db_url: str, value: str, shown: str
) -> None:
    url = ledger_of(tmp_path, db_url, ZETA + ACME[:2] + [_preempted_by(job_id=value)] + ACME[2:])
    code, out, err = dispute(tmp_path, url)
    assert (code, out) == (1, "")
    assert err == (
        f"REFUSED: seq 4 event.data.preempted_by.job_id: the packet for 'acme' would hold {shown} "
        "a job id of tenant 'zeta'; nothing written\n"
    )
    assert not (tmp_path / "packet.json").exists()
    assert checkpoints(url) == 0  # refused before anything was signed


def test_an_nfd_variant_is_caught() -> None:
    isolation = Isolation({"zeta": {"café-job": "job"}, "acme": {"acme-train": "job"}}, "acme")
    leak = isolation.leak_in({"data": {"x": {"job_id": "cafe\u0301-job"}}}, "e")
    assert leak is not None and (leak.identifier, leak.where) == ("café-job", "e.data.x.job_id")


def test_free_text_and_common_words_are_not_compared(tmp_path: Path, db_url: str) -> None:
    """zeta names its jobs after acme's currency, placement class, node, fault code, queue,
    category and severity, and an allocation after acme's invoice; acme's reason text names
    one of zeta's jobs. None of it is in an identifier field of acme's packet: the packet
    is written, verifies, and carries the fault."""
    common = ["USD", "whole", "n1", "xid-79", "default", "usage", "critical", "zeta-train-x"]
    zeta = [
        event(
            "job.started",
            f"z{i}",
            {"tenant": "zeta", "job_id": word, "allocation_id": "Z-9"},
            source="slurm://c",
            time=_at("10:00:00"),
        )
        for i, word in enumerate(common)
    ]
    zeta.append(
        event(
            "allocation.granted",
            "zg",
            {"tenant": "zeta", "allocation_id": "INV-1", "gpus": 1},
            source="slurm://c",
            time=_at("10:00:00"),
        )
    )
    naming = _acme(
        "policy.decision",
        "d",
        "10:01:00",
        decision="queued",
        allocation_id="A-1",
        queue="default",
        reason="held for zeta-train-x on n1",
    )
    url = ledger_of(
        tmp_path, db_url, zeta + ACME[:2] + [naming] + ACME[2:3] + [CLEAN_FAULT] + ACME[3:]
    )
    code, out, err = dispute(tmp_path, url)
    assert (code, err) == (0, ""), err
    packet = json.loads((tmp_path / "packet.json").read_text())
    fleet_codes = [
        json.loads(e["event"])["data"]["code"]
        for e in packet["bundle"]["entries"]
        if e["tenant"] is None
    ]
    assert fleet_codes == ["xid-79"]
    code, out, err = run(
        "verify-packet", str(tmp_path / "packet.json"), "--pubkey", str(tmp_path / "key.pub")
    )
    assert (code, err) == (0, "")


def test_fleet_entries_are_never_scanned_and_own_identifiers_are_not_foreign() -> None:
    isolation = Isolation(
        {
            "zeta": {"shared-name": "job", "zeta": "tenant", "Other": "job"},
            "acme": {"shared-name": "job", "other": "job"},
        },
        "acme",
    )
    fleet_entry = {
        "seq": 7,
        "tenant": None,
        "event": json.dumps({"data": {"dcgm_job": "zeta", "tenant": None}}),
    }
    assert isolation.leak_in_entry(fleet_entry, "p") is None
    assert isolation.leak_in({"data": {"job_id": "shared-name"}}, "p") is None  # acme's own too
    assert (
        isolation.leak_in({"data": {"job_id": "OTHER"}}, "p") is None
    )  # a look-alike of acme's own
    own_entry = {
        "seq": 3,
        "tenant": "acme",
        "event": json.dumps({"data": {"tenant": "acme", "x": {"tenant": "zeta"}}}),
    }
    leak = isolation.leak_in_entry(own_entry, "")
    assert leak is not None and (leak.where, leak.kind, leak.owner) == (
        "seq 3 event.data.x.tenant",
        "tenant",
        "zeta",
    )
    assert (
        isolation.leak_in({"data": {"zeta": "zeta-ish", "reason": "zeta"}}, "p") is None
    )  # keys and free text
