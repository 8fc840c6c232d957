"""Dispute packets: `gpuledger dispute` writes one, `gpuledger verify-packet`
checks it with the public key alone. A two-tenant ledger with faults on each tenant's
node; the packet for acme's invoice must verify, hold nothing of zeta, and fail for each
way a dishonest party might alter it. Expected figures are worked by hand from RULES.md.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as note_outcome
from hypothesis import strategies as st
from sqlalchemy import text

import ingest
from fixtures.sim import Rates, SimConfig, simulate
from ledger import Appender, Store, append_stream
from ledger.checkpoint import sign_checkpoint
from ledger.evidence import build_bundle
from ledger.note import Signer, read_signer
from ledger.tree import TreeReader
from reconcile import reconcile_store
from reconcile.packets.dispute import build_dispute, findings_json, touches, verify_dispute
from tests.conftest import SLOW, event, write_jsonl
from tests.conftest import run_cli as run

DAY = "2026-01-05T"


def at(clock: str) -> str:
    return f"{DAY}{clock}Z"


def acme(type_: str, id_: str, clock: str, **data: Any) -> dict[str, Any]:
    source = "billing://acme-cloud" if type_ == "billing.line" else "slurm://acme-cluster"
    return event(type_, id_, {"tenant": "acme", **data}, source=source, time=at(clock))


def zeta(type_: str, id_: str, clock: str, **data: Any) -> dict[str, Any]:
    source = "billing://zeta-cloud" if type_ == "billing.line" else "slurm://zeta-cluster"
    return event(type_, id_, {"tenant": "zeta", **data}, source=source, time=at(clock))


def fleet(type_: str, id_: str, clock: str, source: str, **data: Any) -> dict[str, Any]:
    return event(type_, id_, data, source=source, time=at(clock))


# acme: 4 GPUs on gpu-n1 (devices 0-3, fabric nvl-1) from 10:00 to 10:20; progress every
# minute from 10:02 to 10:05, then nothing until 10:15 while xid-79 is open on device 2
# (10:06-10:14); completed 10:17. Line L-acme-1 bills 10:00-10:20 at 4 GPUs for 8.00.
ACME_BEFORE = [
    acme(
        "allocation.granted",
        "acme-grant",
        "10:00:00",
        allocation_id="A-acme-1",
        gpus=4,
        node="gpu-n1",
        devices=[0, 1, 2, 3],
        fabric_domain="nvl-1",
    ),
    acme("job.started", "acme-start", "10:00:30", job_id="acme-train", allocation_id="A-acme-1"),
    *[
        acme("job.progress", f"acme-p{step}", f"10:0{step + 1}:00", job_id="acme-train", step=step)
        for step in range(1, 5)
    ],
]
ACME_AFTER = [
    acme("job.progress", "acme-p5", "10:15:00", job_id="acme-train", step=5),
    acme("job.progress", "acme-p6", "10:16:00", job_id="acme-train", step=6),
    acme("job.completed", "acme-done", "10:17:00", job_id="acme-train"),
    acme("allocation.released", "acme-release", "10:20:00", allocation_id="A-acme-1"),
    acme(
        "billing.line",
        "acme-line-1",
        "10:20:00",
        invoice_id="INV-acme-01",
        line_id="L-acme-1",
        allocation_id="A-acme-1",
        period_start=at("10:00:00"),
        period_end=at("10:20:00"),
        gpus=4,
        amount="8.00",
        currency="USD",
    ),
    acme(
        "billing.line",
        "acme-line-2",
        "10:30:00",
        invoice_id="INV-acme-02",
        line_id="L-acme-2",
        allocation_id="A-acme-1",
        period_start=at("10:20:00"),
        period_end=at("10:30:00"),
        gpus=4,
        amount="2.00",
        currency="USD",
    ),
]
ZETA = [
    zeta(
        "allocation.granted",
        "zeta-grant",
        "10:00:00",
        allocation_id="Z-alloc-9",
        gpus=2,
        node="gpu-n9",
        devices=[0, 1],
        fabric_domain="nvl-9",
    ),
    zeta(
        "job.started",
        "zeta-start",
        "10:01:00",
        job_id="zeta-secret-job",
        allocation_id="Z-alloc-9",
    ),
    zeta("job.progress", "zeta-p1", "10:03:00", job_id="zeta-secret-job", step=1),
    zeta("job.failed", "zeta-fail", "10:11:00", job_id="zeta-secret-job", cause="unknown"),
    zeta("allocation.released", "zeta-release", "10:12:00", allocation_id="Z-alloc-9"),
    zeta(
        "billing.line",
        "zeta-line",
        "10:12:00",
        invoice_id="INV-zeta-77",
        line_id="L-zeta-1",
        allocation_id="Z-alloc-9",
        period_start=at("10:00:00"),
        period_end=at("10:12:00"),
        gpus=2,
        amount="3.00",
        currency="USD",
    ),
]
FLEET = [
    fleet(
        "health.fault",
        "n1-dev2-xid",
        "10:06:00",
        "dcgm://gpu-n1",
        node="gpu-n1",
        device=2,
        code="xid-79",
        severity="critical",
    ),
    fleet(
        "health.cleared",
        "n1-dev2-ok",
        "10:14:00",
        "dcgm://gpu-n1",
        node="gpu-n1",
        device=2,
        code="xid-79",
    ),
    fleet(
        "health.fault",
        "nvl1-warn",
        "10:08:00",
        "fabric://nvl-1",
        fabric_domain="nvl-1",
        code="nvlink-down",
        severity="warning",
    ),
    fleet(
        "health.fault",
        "n1-dev7-xid",
        "10:09:00",
        "dcgm://gpu-n1",
        node="gpu-n1",
        device=7,
        code="xid-48",
        severity="critical",
    ),
    fleet(
        "health.fault",
        "n9-node-down",
        "10:10:00",
        "k8s://zeta-node-watch",
        node="gpu-n9",
        code="node-down",
        severity="critical",
    ),
    fleet(
        "health.fault",
        "nvl9-fabric",
        "10:10:30",
        "fabric://nvl-9",
        fabric_domain="nvl-9",
        code="nvlink-down",
        severity="critical",
    ),
]
ZETA_ONLY_FLEET = FLEET[4:]
#: What the packet must carry of the fleet: every fleet entry of A-acme-1's node gpu-n1 (the
#: xid-48 on device 7, which A-acme-1 does not hold, too), fabric nvl-1 and devices 0-3.
TOUCHING_ACME = {"n1-dev2-xid", "n1-dev2-ok", "nvl1-warn", "n1-dev7-xid"}


@dataclass(frozen=True)
class Disputed:
    url: str
    folder: Path
    packet: dict[str, Any]
    older_note: str

    @property
    def key(self) -> Path:
        return self.folder / "ledger-key"


def make_ledger(folder: Path, url: str) -> Disputed:
    """Ingest half, sign (the older checkpoint), ingest the rest, write acme's packet."""
    code, _, err = run("keygen", "--out", str(folder / "ledger-key"))
    assert code == 0, err
    first = write_jsonl(folder / "first.jsonl", ACME_BEFORE + ZETA[:3] + FLEET[:1])
    rest = write_jsonl(folder / "rest.jsonl", ZETA[3:] + FLEET[1:] + ACME_AFTER)
    assert run("ingest", "--db", url, str(first))[0] == 0
    code, older_note, _ = run("checkpoint", "--db", url, "--key", str(folder / "ledger-key"))
    assert code == 0
    assert run("ingest", "--db", url, str(rest))[0] == 0
    out = folder / "packet.json"
    code, said, err = run(
        "dispute",
        "--db",
        url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-acme-01",
        "--key",
        str(folder / "ledger-key"),
        "--out",
        str(out),
    )
    assert code == 0, err
    total = len(ACME_BEFORE + ACME_AFTER + ZETA + FLEET)
    assert said == (
        f"wrote {out}: invoice INV-acme-01 of acme, 1 lines; "
        f"{len(ACME_BEFORE + ACME_AFTER)} entries of acme "
        f"and {len(TOUCHING_ACME)} fleet entries; checkpoint of tree size {total}\n"
        f"wrote {folder / 'packet.letter.html'}: the dispute letter, from verify-packet's "
        "recomputation of the packet\n"
    )
    return Disputed(url, folder, json.loads(out.read_text()), older_note)


@pytest.fixture(scope="module")
def disputed(tmp_path_factory: pytest.TempPathFactory) -> Disputed:
    folder = tmp_path_factory.mktemp("dispute")
    return make_ledger(folder, f"sqlite:///{folder / 'ledger.db'}")


def verify(
    d: Disputed, packet: dict[str, Any] | str, name: str = "check.json"
) -> tuple[int, str, str]:
    path = d.folder / name
    path.write_text(packet if isinstance(packet, str) else json.dumps(packet))
    return run("verify-packet", str(path), "--pubkey", f"{d.key}.pub")


def test_the_packet_verifies_with_the_public_key_alone(disputed: Disputed) -> None:
    code, out, err = verify(disputed, disputed.packet)
    total = len(ACME_BEFORE + ACME_AFTER + ZETA + FLEET)
    assert (code, err) == (0, "")
    said = out.splitlines()
    assert said[0] == (
        f"ok: invoice INV-acme-01 of acme, 1 lines; {len(ACME_BEFORE + ACME_AFTER)} "
        "entries of acme complete "
        f"up to tree size {total} and 4 fleet entries, signed by gpuledger; findings "
        "recomputed and equal"
    )
    # then the letter (tests/test_letter.py): stalled_fault 10:05-10:15 at 4 GPUs is 2 400 of 4 800
    # GPU-s, 4.00 of 8.00
    assert said[1] == (
        "acme disputes 4.00 USD of the 8.00 USD billed on invoice INV-acme-01: 4.00 USD that the "
        "provider's own records put on the provider (1 finding below)."
    )


def test_a_packet_written_before_placement_states_still_verifies(disputed: Disputed) -> None:
    """Packets written before lines had a placement state (RULES.md 13) carry findings
    without `placement`: they verify as they were written. A placement stated wrongly fails."""
    tenants = disputed.packet["findings"]["tenants"]
    assert all("placement" in t for t in tenants.values())
    older = json.loads(json.dumps(disputed.packet))
    for tenant in older["findings"]["tenants"].values():
        del tenant["placement"]
    assert verify(disputed, older, "older.json")[0] == 0
    wrong = json.loads(json.dumps(disputed.packet))
    for tenant in wrong["findings"]["tenants"].values():
        tenant["placement"]["unobserved"]["amount"] = "0.01"
    code, _, err = verify(disputed, wrong, "wrong-placement.json")
    assert code == 1 and "placement" in err


def test_the_findings_are_the_hand_worked_ones(disputed: Disputed) -> None:
    # 4 GPUs: startup 10:00-10:02 (120 s), productive 10:02-10:05 and 10:15-10:17 (300 s),
    # stalled_fault 10:05-10:15 (600 s, xid-79 open on device 2), idle_reserved 10:17-10:20
    # (180 s); 8.00 for 4 800 GPU-s is 1/600 a GPU-second.
    [line] = disputed.packet["findings"]["lines"]
    assert (line["line_id"], line["gpu_seconds"], line["amount"]) == ("L-acme-1", 4800, "8.00")
    assert {
        c: (v["gpu_seconds"], v["amount"], v["bearer"]) for c, v in line["categories"].items()
    } == {
        "startup": (480, "0.80", "customer"),
        "productive": (1200, "2.00", "customer"),
        "stalled_fault": (2400, "4.00", "provider"),
        "idle_reserved": (720, "1.20", "customer"),
    }
    assert list(disputed.packet["findings"]["tenants"]) == ["acme"]


def test_the_packet_holds_acme_entries_and_only_the_faults_that_touch_them(
    disputed: Disputed,
) -> None:
    entries = disputed.packet["bundle"]["entries"]
    assert {json.loads(e["event"])["id"] for e in entries if e["tenant"] is None} == TOUCHING_ACME
    assert [json.loads(e["event"])["id"] for e in entries if e["tenant"] == "acme"] == [
        e["id"] for e in ACME_BEFORE + ACME_AFTER
    ]


def zeta_needles() -> set[str]:
    """Every id, source and name of zeta's events and of the faults on zeta's node and fabric."""
    needles = {"zeta"}
    for e in ZETA + ZETA_ONLY_FLEET:
        needles |= {e["id"], e["source"]}
        needles |= {
            str(e["data"][k])
            for k in (
                "allocation_id",
                "job_id",
                "line_id",
                "invoice_id",
                "node",
                "fabric_domain",
                "code",
            )
            if k in e["data"]
        }
    return needles - {"nvlink-down"}  # a fault code acme's fabric shares


def test_no_other_tenant_data_appears_in_the_packet(disputed: Disputed) -> None:
    packet_text = (disputed.folder / "packet.json").read_text()
    needles = zeta_needles()
    assert {
        "Z-alloc-9",
        "zeta-secret-job",
        "L-zeta-1",
        "INV-zeta-77",
        "gpu-n9",
        "nvl-9",
        "n9-node-down",
        "slurm://zeta-cluster",
        "billing://zeta-cloud",
        "k8s://zeta-node-watch",
        "node-down",
    } <= needles
    assert [n for n in needles if n in packet_text] == []
    # A fleet fault on another device of acme's node gpu-n1 is the node's fleet evidence, which
    # names no tenant: carried, so that the node's faults are provably all there.
    assert "n1-dev7-xid" in packet_text and "xid-48" in packet_text


def drop_a_tenant_entry(p: dict[str, Any], _: Disputed) -> None:
    entries = p["bundle"]["entries"]
    entries.remove(next(e for e in entries if json.loads(e["event"])["id"] == "acme-p3"))


def rebuild_proof(p: dict[str, Any], d: Disputed) -> None:
    """What a dishonest provider can do: a valid inclusion proof for what it kept."""
    store = Store(d.url)
    size = int(p["bundle"]["checkpoint"].splitlines()[1])
    with store.reading() as conn:
        proof = TreeReader(conn).multiproof(
            sorted(e["seq"] - 1 for e in p["bundle"]["entries"]), size
        )
    store.close()
    p["bundle"]["inclusion"] = [h.hex() for h in proof]


def drop_a_tenant_entry_and_prove_the_rest(p: dict[str, Any], d: Disputed) -> None:
    drop_a_tenant_entry(p, d)
    rebuild_proof(p, d)


def drop_the_fault(p: dict[str, Any], _: Disputed) -> None:
    p["bundle"]["entries"] = [
        e for e in p["bundle"]["entries"] if json.loads(e["event"])["id"] != "n1-dev2-xid"
    ]


def drop_the_fault_and_prove_the_rest(p: dict[str, Any], d: Disputed) -> None:
    drop_the_fault(p, d)
    rebuild_proof(p, d)


def change_the_granted_gpus(p: dict[str, Any], _: Disputed) -> None:
    grant = next(e for e in p["bundle"]["entries"] if e["type"] == "allocation.granted")
    grant["event"] = grant["event"].replace('"gpus":4', '"gpus":8')


def change_the_billed_amount(p: dict[str, Any], _: Disputed) -> None:
    line = next(e for e in p["bundle"]["entries"] if e["type"] == "billing.line")
    line["event"] = line["event"].replace('"amount":"8.00"', '"amount":"6.00"')


def change_a_finding_gpu_seconds(p: dict[str, Any], _: Disputed) -> None:
    p["findings"]["lines"][0]["categories"]["stalled_fault"]["gpu_seconds"] = 2401


def inflate_a_finding_amount(p: dict[str, Any], _: Disputed) -> None:
    p["findings"]["lines"][0]["categories"]["stalled_fault"]["amount"] = "6.00"


def inflate_the_tenant_provider_total(p: dict[str, Any], _: Disputed) -> None:
    p["findings"]["tenants"]["acme"]["by_bearer"]["provider"] = "7.00"


def swap_in_the_older_checkpoint(p: dict[str, Any], d: Disputed) -> None:
    p["bundle"]["checkpoint"] = d.older_note


def swap_in_another_keys_checkpoint(p: dict[str, Any], _: Disputed) -> None:
    body = p["bundle"]["checkpoint"].rpartition("\n\n")[0] + "\n"
    p["bundle"]["checkpoint"] = Signer.generate("gpuledger").sign(body)


def change_a_salt(p: dict[str, Any], _: Disputed) -> None:
    p["bundle"]["entries"][0]["salt"] = "00" * 16


def claim_another_tenant(p: dict[str, Any], _: Disputed) -> None:
    p["tenant"] = "zeta"


def claim_another_tenant_throughout(p: dict[str, Any], _: Disputed) -> None:
    p["tenant"] = p["bundle"]["tenant"] = "zeta"


def change_the_invoice_id(p: dict[str, Any], _: Disputed) -> None:
    p["invoice_id"] = "INV-acme-02"


def change_the_invoice_id_throughout(p: dict[str, Any], _: Disputed) -> None:
    p["invoice_id"] = p["findings"]["lines"][0]["invoice_id"] = "INV-acme-02"


def lower_the_tenant_head(p: dict[str, Any], _: Disputed) -> None:
    p["bundle"]["tenant_head"]["tenant_seq"] -= 1


#: Each alteration, and the start of the one-line reason verify-packet must give.
TAMPERS: dict[str, tuple[Callable[[dict[str, Any], Disputed], None], str]] = {
    "a tenant entry dropped": (
        drop_a_tenant_entry,
        "bundle: multi-leaf proof for 15 leaves of 24:",
    ),
    "a tenant entry dropped, the rest proven": (
        drop_a_tenant_entry_and_prove_the_rest,
        "bundle: the tenant's entries are incomplete: the checkpoint commits to 12, "
        "missing tenant_seq [5]",
    ),
    "the fleet fault dropped": (drop_the_fault, "bundle: multi-leaf proof for 15 leaves of 24:"),
    "the fleet fault dropped, the rest proven": (
        drop_the_fault_and_prove_the_rest,
        "bundle: fleet key 'node:gpu-n1': the checkpoint commits to 3 entries, the "
        "packet lacks seq",
    ),
    "the granted gpus changed": (
        change_the_granted_gpus,
        "bundle: multi-leaf proof of 16 leaves: computed root",
    ),
    "the billed amount changed": (
        change_the_billed_amount,
        "bundle: multi-leaf proof of 16 leaves: computed root",
    ),
    "a finding's gpu_seconds changed": (
        change_a_finding_gpu_seconds,
        "findings.lines[0] (line L-acme-1).categories.stalled_fault.gpu_seconds: the "
        "packet says 2401, recomputed 2400",
    ),
    "a finding's amount inflated": (
        inflate_a_finding_amount,
        "findings.lines[0] (line L-acme-1).categories.stalled_fault.amount: the packet "
        'says "6.00", recomputed "4.00"',
    ),
    "the tenant's provider total inflated": (
        inflate_the_tenant_provider_total,
        'findings.tenants.acme.by_bearer.provider: the packet says "7.00", recomputed "4.00"',
    ),
    "the older checkpoint swapped in": (
        swap_in_the_older_checkpoint,
        "bundle: seq 14 is outside the checkpoint's tree of 10",
    ),
    "another key's checkpoint swapped in": (
        swap_in_another_keys_checkpoint,
        "bundle: checkpoint: the note carries no signature by gpuledger (key id",
    ),
    "a salt changed": (change_a_salt, "bundle: multi-leaf proof of 16 leaves: computed root"),
    "another tenant claimed": (
        claim_another_tenant,
        "packet.tenant: 'zeta', but the bundle is for 'acme'",
    ),
    "another tenant claimed, bundle too": (
        claim_another_tenant_throughout,
        "bundle: seq 1 belongs to another tenant",
    ),
    "the invoice id changed": (
        change_the_invoice_id,
        "findings.lines[0].invoice_id: \"INV-acme-01\", the packet is about 'INV-acme-02'",
    ),
    "the invoice id changed, findings relabelled": (
        change_the_invoice_id_throughout,
        'findings.lines[0] (line L-acme-2).line_id: the packet says "L-acme-1", '
        'recomputed "L-acme-2"',
    ),
    "the tenant head lowered": (
        lower_the_tenant_head,
        "bundle: inclusion proof for leaf 0 of 2: computed root",
    ),
}


@pytest.mark.parametrize("name", list(TAMPERS), ids=list(TAMPERS))
def test_each_alteration_fails_with_its_reason(disputed: Disputed, name: str) -> None:
    alter, reason = TAMPERS[name]
    altered = copy.deepcopy(disputed.packet)
    alter(altered, disputed)
    code, out, err = verify(disputed, altered)
    assert (code, out) == (1, "")
    assert err.startswith(f"FAILED: {reason}"), err
    assert len(err.splitlines()) == 1


def test_a_fleet_entry_that_is_no_health_event_is_refused(disputed: Disputed) -> None:
    discovered = fleet(
        "device.discovered", "n1-gpu0", "09:00:00", "dcgm://gpu-n1", node="gpu-n1", device=0
    )
    folder = disputed.folder / "discovered"
    folder.mkdir()
    url = f"sqlite:///{folder / 'ledger.db'}"
    run(
        "ingest",
        "--db",
        url,
        str(write_jsonl(folder / "e.jsonl", [discovered] + ACME_BEFORE + ACME_AFTER)),
    )
    signer = read_signer(disputed.key)
    store = Store(url)
    signed = sign_checkpoint(store, signer)
    findings = findings_json(reconcile_store(store, tenant="acme", invoice="INV-acme-01"))
    bundle = build_bundle(
        store, "acme", [1], signed.checkpoint_seq
    )  # seq 1: the device.discovered
    store.close()
    packet = {
        "version": 1,
        "kind": "gpuledger-dispute",
        "tenant": "acme",
        "invoice_id": "INV-acme-01",
        "findings": findings,
        "bundle": bundle,
    }
    code, _, err = verify(disputed, json.loads(json.dumps(packet)))
    assert (code, err) == (
        1,
        "FAILED: seq 1: a fleet entry of type 'device.discovered'; a packet's fleet entries "
        "are health.fault, health.cleared, fleet.change\n",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--tenant", "acme", "--invoice", "INV-nope"],
            "Error: --invoice: tenant 'acme' has no billing line on invoice 'INV-nope'\n",
        ),
        (
            ["--tenant", "nobody", "--invoice", "INV-acme-01"],
            "Error: --invoice: tenant 'nobody' has no billing line on invoice 'INV-acme-01'\n",
        ),
    ],
)
def test_dispute_of_an_unknown_invoice_is_an_input_error(
    disputed: Disputed, args: list[str], message: str
) -> None:
    code, out, err = run(
        "dispute",
        "--db",
        disputed.url,
        *args,
        "--key",
        str(disputed.key),
        "--out",
        str(disputed.folder / "never.json"),
    )
    assert (code, out, err) == (2, "", message)
    assert not (disputed.folder / "never.json").exists()


def test_unreadable_packets_are_input_errors(disputed: Disputed) -> None:
    code, _, err = verify(disputed, '{"version": 1,\n "kind": ', "cut.json")
    assert (code, err) == (
        2,
        f"Error: {disputed.folder / 'cut.json'}:2:10: not JSON: Expecting value\n",
    )
    (disputed.folder / "latin1.json").write_bytes(b'{"tenant": "\xe9"}')
    code, _, err = run(
        "verify-packet", str(disputed.folder / "latin1.json"), "--pubkey", f"{disputed.key}.pub"
    )
    assert (code, err) == (
        2,
        f"Error: {disputed.folder / 'latin1.json'}: byte 12: not UTF-8 text\n",
    )
    code, _, err = run(
        "verify-packet", str(disputed.folder / "absent.json"), "--pubkey", f"{disputed.key}.pub"
    )
    assert code == 2 and "does not exist" in err


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda p: p.pop("findings"), "packet.findings: missing"),
        (
            lambda p: p.update(version=2),
            "packet.version: 2 is not 1, the version this verifier reads",
        ),
        (
            lambda p: p.update(kind="gpuledger-diagnostic"),
            "packet.kind: 'gpuledger-diagnostic' is not 'gpuledger-dispute'",
        ),
        (
            lambda p: p["bundle"].update(version=0),
            "packet.bundle.version: 0 is not 1, the version this verifier reads",
        ),
        (
            lambda p: p.update(note="the provider agrees"),
            "packet.note: not a member of this format",
        ),
        (
            lambda p: p["bundle"]["entries"][4].update(leaf_hash="00"),
            "packet.bundle.entries[4].leaf_hash: not a member of this format",
        ),
        (
            lambda p: p["bundle"]["entries"][0].update(seq="1"),
            "packet.bundle.entries[0].seq: expected an integer, got a string",
        ),
        (
            lambda p: p["bundle"]["entries"][2].update(tenant_seq=True),
            "packet.bundle.entries[2].tenant_seq: expected an integer or null, got a boolean",
        ),
        (
            lambda p: p["bundle"]["inclusion"].__setitem__(0, "zz"),
            'packet.bundle.inclusion[0]: not hex: "zz"',
        ),
        (
            lambda p: p["bundle"]["tenant_head"].update(index=-1),
            "packet.bundle.tenant_head.index: -1 is out of range [0, 2^53)",
        ),
        (
            lambda p: p["findings"].update(lines=[]),
            "findings: no line of invoice 'INV-acme-01': there is nothing to dispute",
        ),
        (
            lambda p: p["findings"]["lines"][0].update(invoice_id="\ud800\n"),
            "findings.lines[0].invoice_id: \"\\ud800\\n\", the packet is about 'INV-acme-01'",
        ),
    ],
)
def test_malformed_packets_name_the_field(
    disputed: Disputed, change: Callable[[dict[str, Any]], Any], reason: str
) -> None:
    altered = copy.deepcopy(disputed.packet)
    change(altered)
    assert verify(disputed, altered) == (1, "", f"FAILED: {reason}\n")


@pytest.mark.parametrize(
    ("fault", "grant", "expected"),
    [
        ({"fabric_domain": "nvl-1"}, {"node": "n", "fabric_domain": "nvl-1"}, True),
        ({"fabric_domain": "nvl-2"}, {"node": "n", "fabric_domain": "nvl-1"}, False),
        ({"node": "n"}, {"node": "n", "devices": [0, 1]}, True),
        (
            {"node": "n", "device": "1"},
            {"node": "n", "devices": [0, 1]},
            True,
        ),  # devices compare as text
        ({"node": "n", "device": 7}, {"node": "n", "devices": [0, 1]}, False),
        ({"node": "n", "device": 7}, {"node": "n"}, True),  # the allocation lists no devices
        ({"node": "m", "device": 0}, {"node": "n", "devices": [0, 1]}, False),
        ({"device": 0}, {"node": "n", "devices": [0, 1]}, True),
        ({"device": 0}, {"node": "n"}, False),
    ],
)
def test_touches_follows_rules_md(
    fault: dict[str, Any], grant: dict[str, Any], expected: bool
) -> None:
    assert touches(fault, grant) is expected


@pytest.mark.postgres
def test_dispute_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    d = make_ledger(tmp_path, pg_url)
    assert verify(d, d.packet)[0] == 0
    assert [n for n in zeta_needles() if n in (tmp_path / "packet.json").read_text()] == []
    altered = copy.deepcopy(d.packet)
    drop_the_fault_and_prove_the_rest(altered, d)
    code, _, err = verify(d, altered)
    assert code == 1 and err.startswith(
        "FAILED: bundle: fleet key 'node:gpu-n1': the checkpoint commits to 3 entries"
    )


# -- fuzzing: whatever is done to a packet, a verdict or an input error, never a crash

FUZZ = settings(
    max_examples=3000 if SLOW else 200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ANY_JSON = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=6),
    st.lists(st.integers(-3, 3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key or index path inside a JSON value."""
    found = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else []
    )
    for key, inner in items:
        found.append(prefix + (key,))
        found.extend(paths_of(inner, prefix + (key,)))
    return found


def parent_of(packet: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        packet = packet[key]
    return packet


@st.composite
def mutated_packets(draw: st.DrawFn, packet: dict[str, Any]) -> str:
    kind = draw(
        st.sampled_from(["swap a type", "delete a key", "change characters", "flip bytes"])
    )
    note_outcome(kind)
    if kind in ("change characters", "flip bytes"):
        data = bytearray(json.dumps(packet, indent=1).encode())
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(data) - 1))
            if kind == "flip bytes":
                data[at] ^= draw(st.integers(1, 255))
            else:  # mostly inside strings and numbers: keeps the JSON valid more often than not
                data[at] = ord(draw(st.sampled_from("0123456789abcdefAZ-.:_ ")))
        return data.decode("utf-8", errors="surrogateescape")
    altered = copy.deepcopy(packet)
    path = draw(st.sampled_from(paths_of(altered)))
    parent = parent_of(altered, path)
    if kind == "delete a key":
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(ANY_JSON)
    return json.dumps(altered)


@FUZZ
@given(data=st.data())
def test_verify_packet_under_fuzzing_gives_a_verdict_never_a_crash(
    disputed: Disputed, data: st.DataObject
) -> None:
    mutated = data.draw(mutated_packets(disputed.packet))
    path = disputed.folder / "fuzzed.json"
    path.write_bytes(mutated.encode("utf-8", errors="surrogateescape"))
    code, out, err = run(
        "verify-packet", str(path), "--pubkey", f"{disputed.key}.pub"
    )  # raises on any crash
    assert "Traceback" not in out + err
    note_outcome(
        f"exit {code}: {err.split(':')[1] if code == 1 else ''}"
    )  # --hypothesis-show-statistics
    # only a change JSON does not see (whitespace, 4800 → 4800.0) may pass, or dropping an
    # optional member whole (`claims`, `placement_claims`, `answers`): a packet written
    # before it existed still verifies (docs/packets.md)
    if code == 0:
        optional = {"claims", "placement_claims", "answers"}
        parsed = json.loads(mutated)
        assert set(disputed.packet) - set(parsed) <= optional
        assert parsed == {k: v for k, v in disputed.packet.items() if k in parsed}
    else:
        assert code in (1, 2) and out == "" and len(err.splitlines()) == 1, (code, err)
        assert err.startswith("FAILED: " if code == 1 else "Error: ")


# -- a simulated fleet in the real source formats: every tenant's packet recomputes exactly


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Store:
    out = tmp_path_factory.mktemp("fleet")
    rates = Rates(fault_stall=0.3, hardware_failure=0.3, fabric_fault=0.5, node_down=0.3)
    simulate(SimConfig(seed=11, gpus=16, days=1, tenants=3, rates=rates), out)
    store = Store(f"sqlite:///{out / 'ledger.db'}")
    store.init()
    appender = Appender(store)
    for item in json.loads((out / "manifest.json").read_text())["files"]:
        records = ingest.extract(out / item["path"], item["format"], **item.get("options", {}))
        assert append_stream(appender, records, 5000).quarantined == 0
    return store


def test_every_tenants_packet_of_a_simulated_fleet_verifies(simulated: Store) -> None:
    signer = Signer.generate("fleet.test")
    with simulated.reading() as conn:
        lines = conn.execute(
            text("SELECT tenant, event FROM entries WHERE type = 'billing.line'")
        ).all()
    invoices = sorted({(tenant, json.loads(e)["data"]["invoice_id"]) for tenant, e in lines})
    tenants = {tenant for tenant, _ in invoices}
    assert len(tenants) == 3
    borne = set()
    for tenant, invoice in invoices:
        packet = json.loads(json.dumps(build_dispute(simulated, tenant, invoice, signer)))
        checked = verify_dispute(packet, signer.verifier)
        assert (checked.tenant, checked.invoice_id) == (tenant, invoice)
        packet_text = json.dumps(packet)
        assert [other for other in tenants - {tenant} if other in packet_text] == []
        borne |= {
            (c, v.get("bearer"))
            for line in packet["findings"]["lines"]
            for c, v in line["categories"].items()
        }
    # The faults in the packets mattered: time the provider bears because a fault was open.
    assert ("stalled_fault", "provider") in borne
    assert {("restart_lost", "provider"), ("restart_lost", "mixed")} & borne
