"""Complete fleet evidence (ledger/fleet_heads.py, docs/packets.md): each checkpoint commits
to the count and chain head of every fleet key, and `verify-packet`, with the public key
alone, refuses a packet that leaves out a fleet entry of its allocations' keys.

The keeper's attack (issue 28): a packet built without the xid-79 fault that made acme's
restart the provider's, with findings recomputed from what is left, used to verify. The
scenario is tests/test_reconcile_rules.py's restart, worked by hand there and below.
"""

from __future__ import annotations

import copy
import json
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import insert, select, text

from ledger import Appender, LedgerError, Store, append_stream, verify_ledger
from ledger.checkpoint import sign_checkpoint
from ledger.evidence import build_bundle
from ledger.fleet_heads import allocation_keys, event_keys, fleet_head_leaf
from ledger.fleet_store import stored_fleet_heads
from ledger.merkle import inclusion_path
from ledger.note import Signer
from ledger.proofs import Checkpoint
from ledger.tables import checkpoints, entries
from ledger.tree import TreeReader
from reconcile.engine.rules import touching_health
from reconcile.packets.claims import reconcile_claims
from reconcile.packets.dispute import PacketError, build_dispute, verify_dispute, write_packet
from schemas import Accepted, Origin, validate_event
from tests.conftest import event, run_cli
from tests.reconcile_helpers import C, P, cats, line, tenant
from tests.test_verify_tamper import drop_guards

SIGNER = Signer.generate("gpuledger")


def at(clock: str) -> str:
    return f"2026-01-05T{clock}:00Z"


def acme(type_: str, id_: str, clock: str, **data: Any) -> dict[str, Any]:
    source = "billing://acme-cloud" if type_ == "billing.line" else "slurm://acme-cluster"
    return event(type_, id_, {"tenant": "acme", **data}, source=source, time=at(clock))


def fleet(type_: str, id_: str, clock: str, source: str, **data: Any) -> dict[str, Any]:
    return event(type_, id_, data, source=source, time=at(clock))


def progress(id_: str, clock: str, step: int) -> dict[str, Any]:
    return acme("job.progress", id_, clock, job_id="j1", step=step)


# acme: 4 GPUs on n1 (devices 0-3, fabric fd-a), 10:00-11:00, L1 bills 14.40 for 14 400
# GPU-s: 0.001 a GPU-second. j1 fails at 10:22 (cause application) after a save at 10:12
# and restarts at 10:25. Seqs 1-16.
ACME = [
    acme(
        "allocation.granted",
        "a-grant",
        "10:00",
        allocation_id="A1",
        gpus=4,
        node="n1",
        devices=[0, 1, 2, 3],
        fabric_domain="fd-a",
    ),
    acme("job.started", "a-start-1", "10:00", job_id="j1", allocation_id="A1"),
    progress("a-p1", "10:05", 1),
    progress("a-p2", "10:10", 2),
    acme("checkpoint.started", "a-c1-start", "10:10", job_id="j1", checkpoint_id="c1", step=2),
    acme("checkpoint.saved", "a-c1", "10:12", job_id="j1", checkpoint_id="c1", step=2),
    progress("a-p3", "10:15", 3),
    progress("a-p4", "10:20", 4),
    acme("job.failed", "a-fail", "10:22", job_id="j1", cause="application"),
    acme("job.started", "a-start-2", "10:25", job_id="j1", allocation_id="A1", attempt=2),
    acme("checkpoint.restored", "a-restore", "10:26", job_id="j1", checkpoint_id="c1", step=2),
    progress("a-p5", "10:30", 3),
    progress("a-p6", "10:35", 4),
    acme("job.completed", "a-done", "10:40", job_id="j1"),
    acme("allocation.released", "a-release", "11:00", allocation_id="A1"),
    acme(
        "billing.line",
        "a-line",
        "11:00",
        invoice_id="INV-1",
        line_id="L1",
        allocation_id="A1",
        period_start=at("10:00"),
        period_end=at("11:00"),
        gpus=4,
        amount="14.40",
        currency="USD",
    ),
]
# Seqs 17-20. The xid-79 on device 2 of n1, 2 minutes before the failure, makes the restart
# the provider's; the node-down is on n2, which acme does not use; the fabric warning and
# the drain of n1 change no figure, but they are n1's and fd-a's fleet evidence.
XID, OTHER_NODE, FABRIC, DRAIN = 17, 18, 19, 20
FLEET = [
    fleet(
        "health.fault",
        "n1-xid79",
        "10:20",
        "dcgm://n1",
        node="n1",
        device=2,
        code="xid-79",
        severity="critical",
    ),
    fleet(
        "health.fault",
        "n2-down",
        "10:20",
        "dcgm://n2",
        node="n2",
        code="node-down",
        severity="critical",
    ),
    fleet(
        "health.fault",
        "fd-a-warn",
        "10:45",
        "fabric://fd-a",
        fabric_domain="fd-a",
        code="nvlink-down",
        severity="warning",
    ),
    fleet(
        "fleet.change",
        "n1-drain",
        "10:50",
        "fleet://ops",
        change_id="drain-7",
        kind="drain",
        nodes=["n1"],
        started_at=at("10:50"),
    ),
]
# Worked in tests/test_reconcile_rules.py (restart_base, "one of a's devices"), 4 GPUs:
#   startup [10:00, 10:05) 1200; productive [10:05, 10:10) + [10:30, 10:40) 3600;
#   checkpoint [10:10, 10:12) 480; restart_lost [10:12, 10:22) 2400; restart_recovery
#   [10:22, 10:30) 1920; idle_reserved [10:40, 11:00) 4800.
# The restart is the provider's with the xid-79 (4.32), the customer's without it.
FINDINGS = {
    "startup": (1200, "1.20", C),
    "productive": (3600, "3.60", C),
    "checkpoint": (480, "0.48", C),
    "restart_lost": (2400, "2.40", P),
    "restart_recovery": (1920, "1.92", P),
    "idle_reserved": (4800, "4.80", C),
}


def append(store: Store, events: list[dict[str, Any]]) -> None:
    records = [
        Accepted.of(validate_event(e), Origin("t.jsonl", i)) for i, e in enumerate(events, 1)
    ]
    assert append_stream(Appender(store), records, batch_size=50).appended == len(events)


@pytest.fixture
def packet(store: Store) -> dict[str, Any]:
    append(store, ACME + FLEET)
    built: dict[str, Any] = json.loads(json.dumps(build_dispute(store, "acme", "INV-1", SIGNER)))
    return built


def leaf_of(store: Store, seq: int) -> bytes:
    with store.reading() as conn:
        return bytes(
            conn.execute(select(entries.c.leaf_hash).where(entries.c.seq == seq)).scalar_one()
        )


def fleet_seqs(p: dict[str, Any]) -> list[int]:
    return [e["seq"] for e in p["bundle"]["entries"] if e["tenant"] is None]


def heads(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["key"]: h for h in p["bundle"]["fleet"]["heads"]}


def refused(p: dict[str, Any]) -> str:
    with pytest.raises(PacketError) as caught:
        verify_dispute(p, SIGNER.verifier)
    return str(caught.value)


def keeper_rebuilds(p: dict[str, Any], store: Store) -> dict[str, Any]:
    """What the keeper, holding the store, can do without signing anything: a valid
    inclusion proof of what it kept, and findings recomputed from it."""
    bundle = p["bundle"]
    size = Checkpoint.parse(bundle["checkpoint"].partition("\n\n")[0] + "\n").size
    proven = sorted(
        [e["seq"] - 1 for e in bundle["entries"]]
        + [w["seq"] - 1 for w in bundle.get("withheld", [])]
    )
    with store.reading() as conn:
        bundle["inclusion"] = [h.hex() for h in TreeReader(conn).multiproof(proven, size)]
    findings, claims = reconcile_claims(bundle["entries"], p["invoice_id"])
    p["findings"], p["claims"] = json.loads(json.dumps(findings.as_json())), claims
    return p


def drop_entry(p: dict[str, Any], seq: int, *, from_heads: bool = True) -> dict[str, Any]:
    altered = copy.deepcopy(p)
    bundle = altered["bundle"]
    bundle["entries"] = [e for e in bundle["entries"] if e["seq"] != seq]
    if from_heads:
        for item in bundle["fleet"]["heads"]:
            if "seqs" in item:
                item["seqs"] = [s for s in item["seqs"] if s != seq]
    return altered


# -- what an honest packet holds ----------------------------------------------------------


def test_the_packet_holds_every_fleet_entry_of_its_keys_and_verifies(
    packet: dict[str, Any],
) -> None:
    checked = verify_dispute(packet, SIGNER.verifier)
    assert cats(line(checked.findings, "L1")) == FINDINGS
    assert tenant(checked.findings)["by_bearer"]["provider"] == "4.32"
    # acme's keys: node:n1, fabric:fd-a, device:0-3. The fleet-head tree holds fabric:fd-a
    # (index 0), node:n1 (1), node:n2 (2); the devices sort before fabric:fd-a, so index 0
    # alone proves they have no entry.
    assert fleet_seqs(packet) == [XID, FABRIC, DRAIN]
    assert [
        (h["key"], h["count"], h["index"], h.get("seqs"))
        for h in packet["bundle"]["fleet"]["heads"]
    ] == [("fabric:fd-a", 1, 0, [FABRIC]), ("node:n1", 2, 1, [XID, DRAIN])]
    assert "fleet 3 " in packet["bundle"]["checkpoint"]


def test_a_fault_on_a_node_the_tenant_does_not_use_is_not_in_the_packet(
    packet: dict[str, Any],
) -> None:
    assert OTHER_NODE not in fleet_seqs(packet)
    assert "node:n2" not in heads(packet) and "n2-down" not in json.dumps(packet)
    verify_dispute(packet, SIGNER.verifier)


def test_the_committed_head_is_the_documented_chain(store: Store, packet: dict[str, Any]) -> None:
    # head_i = SHA-256(0x04 ‖ head_{i-1} ‖ leaf_i) from 32 zero bytes, n1's entries in seq order
    first = sha256(b"\x04" + bytes(32) + leaf_of(store, XID)).digest()
    assert (
        heads(packet)["node:n1"]["head"]
        == sha256(b"\x04" + first + leaf_of(store, DRAIN)).hexdigest()
    )


def test_a_fleet_change_of_the_allocations_node_is_in_the_packet_and_cannot_be_left_out(
    store: Store, packet: dict[str, Any]
) -> None:
    drain = next(e for e in packet["bundle"]["entries"] if e["seq"] == DRAIN)
    assert (drain["type"], json.loads(drain["event"])["data"]["nodes"]) == ("fleet.change", ["n1"])
    attack = keeper_rebuilds(drop_entry(packet, DRAIN), store)
    assert refused(attack) == (
        "bundle: fleet key 'node:n1': the checkpoint commits to 2 entries, the packet "
        "holds 1: fleet entries were left out"
    )


# -- the keeper's attack --------------------------------------------------------------------


def test_the_keeper_cannot_drop_the_fault_that_makes_the_restart_the_providers(
    store: Store, packet: dict[str, Any], tmp_path: Path
) -> None:
    attack = keeper_rebuilds(drop_entry(packet, XID), store)
    # what the attack is worth: recomputed without the fault, the restart is the customer's
    assert tenant(attack["findings"])["by_bearer"]["provider"] == "0.00"
    assert refused(attack) == (
        "bundle: fleet key 'node:n1': the checkpoint commits to 2 entries, the packet "
        "holds 1: fleet entries were left out"
    )
    # the same through the command line, with the public key alone
    pub = tmp_path / "ledger-key.pub"
    pub.write_text(SIGNER.verifier.text() + "\n")
    path = tmp_path / "attack.json"
    write_packet(attack, path)
    code, out, err = run_cli("verify-packet", str(path), "--pubkey", str(pub))
    assert (code, out, err) == (
        1,
        "",
        "FAILED: bundle: fleet key 'node:n1': the checkpoint commits to 2 entries, "
        "the packet holds 1: fleet entries were left out\n",
    )


def test_the_fault_dropped_but_still_listed_is_named(store: Store, packet: dict[str, Any]) -> None:
    attack = keeper_rebuilds(drop_entry(packet, XID, from_heads=False), store)
    assert refused(attack) == (
        f"bundle: fleet key 'node:n1': the checkpoint commits to 2 entries, the packet "
        f"lacks seq {XID}: a fleet entry was left out"
    )


def test_the_key_dropped_whole_is_refused_even_with_a_neighbour(
    store: Store, packet: dict[str, Any]
) -> None:
    attack = drop_entry(drop_entry(packet, XID), DRAIN)
    attack["bundle"]["fleet"]["heads"] = [
        h for h in attack["bundle"]["fleet"]["heads"] if h["key"] != "node:n1"
    ]
    keeper_rebuilds(attack, store)
    message = (
        "bundle: fleet key 'node:n1': the packet holds neither the checkpoint's head for it "
        "nor neighbours proving it has none: its fleet entries cannot be shown complete"
    )
    assert refused(attack) == message
    # node:n2 (index 2) sorts after node:n1, but index 0 and 2 are not adjacent: not a gap
    with store.reading() as conn:
        stored = stored_fleet_heads(conn, 1)
    assert [h.key for h in stored] == ["fabric:fd-a", "node:n1", "node:n2"]
    leaves = [fleet_head_leaf(h.key, h.count, h.head) for h in stored]
    n2 = stored[2]
    attack["bundle"]["fleet"]["heads"].append(
        {
            "key": n2.key,
            "count": n2.count,
            "head": n2.head.hex(),
            "index": 2,
            "proof": [h.hex() for h in inclusion_path(2, leaves)],
        }
    )
    assert refused(attack) == message


@pytest.mark.parametrize("change", ["count", "count and head"])
def test_a_tampered_committed_count_or_head_is_refused(
    store: Store, packet: dict[str, Any], change: str
) -> None:
    """The keeper drops the xid-79 and claims node:n1 has one entry: the committed count
    alone, or with the head the drain alone gives; neither is a leaf of the signed tree."""
    attack = drop_entry(packet, XID)
    item = heads(attack)["node:n1"]
    item["count"] = 1
    if change == "count and head":
        item["head"] = sha256(b"\x04" + bytes(32) + leaf_of(store, DRAIN)).hexdigest()
    keeper_rebuilds(attack, store)
    assert refused(attack).startswith(
        f"bundle: fleet key 'node:n1': the checkpoint does not commit to count 1, "
        f"head {item['head']}: inclusion proof for leaf 1 of 3: computed root "
    )


def old_style_note(note: str) -> str:
    """The same checkpoint as signed before checkpoints committed to fleet heads."""
    body = Checkpoint.parse(note.partition("\n\n")[0] + "\n")
    old = Checkpoint(
        body.origin,
        body.size,
        body.root,
        body.chain_head,
        body.tenant_count,
        body.tenant_root,
        body.time,
        body.quarantine_count,
        body.quarantine_head,
    )
    return SIGNER.sign(old.text())


def test_a_packet_on_a_checkpoint_without_fleet_heads_is_refused(packet: dict[str, Any]) -> None:
    packet["bundle"]["checkpoint"] = old_style_note(packet["bundle"]["checkpoint"])
    del packet["bundle"]["fleet"]
    assert refused(packet) == (
        "bundle: fleet: the checkpoint of tree size 20 commits to no fleet heads (signed before "
        "checkpoints did): the packet cannot prove it holds every fleet event touching the "
        "tenant's allocations; a packet on a newer checkpoint can"
    )


def test_an_old_stored_checkpoint_gives_no_bundle_and_verify_still_passes(store: Store) -> None:
    append(store, ACME + FLEET[:2])
    signed = sign_checkpoint(store, SIGNER)
    with store.writing() as conn:  # a checkpoint as signed before fleet heads existed
        conn.execute(
            insert(checkpoints).values(
                checkpoint_seq=2,
                origin=signed.body.origin,
                tree_size=signed.body.size,
                root_hash=signed.body.root,
                chain_head=signed.body.chain_head,
                tenant_root=signed.body.tenant_root,
                signed_at=signed.body.time,
                key_name=SIGNER.name,
                note=old_style_note(signed.note),
            )
        )
        conn.execute(
            text(
                "INSERT INTO checkpoint_tenants SELECT 2, tenant, tenant_seq, leaf_hash "
                "FROM checkpoint_tenants WHERE checkpoint_seq = 1"
            )
        )
    with pytest.raises(
        LedgerError,
        match="checkpoint #2 was signed before checkpoints committed to the fleet's heads",
    ):
        build_bundle(store, "acme", [XID], checkpoint_seq=2)
    with pytest.raises(
        LedgerError,
        match="checkpoint #2 was signed before checkpoints committed to the fleet's heads",
    ):
        build_dispute(
            store, "acme", "INV-1", SIGNER, stored_checkpoint=True
        )  # dispute --stored-checkpoint
    assert verify_ledger(store, [SIGNER.verifier]).ok
    append(store, FLEET[2:])
    build_dispute(
        store, "acme", "INV-1", SIGNER
    )  # a new checkpoint (#3), its heads recomputed from seq 1
    assert verify_ledger(store, [SIGNER.verifier]).ok
    with store.reading() as conn:
        rows = conn.execute(
            text(
                "SELECT fleet_key, entry_count FROM checkpoint_fleet WHERE checkpoint_seq = 3 "
                "ORDER BY fleet_key"
            )
        ).all()
    assert [tuple(r) for r in rows] == [("fabric:fd-a", 1), ("node:n1", 2), ("node:n2", 1)]


def test_init_adds_the_table_to_a_store_made_before_it(store: Store) -> None:
    append(store, ACME + FLEET)
    with store.writing() as conn:
        conn.execute(text("DROP TABLE checkpoint_fleet"))
    with pytest.raises(LedgerError, match="run `gpuledger init` once to upgrade it"):
        sign_checkpoint(store, SIGNER)
    store.init()
    store.init()
    sign_checkpoint(store, SIGNER)
    assert verify_ledger(store, [SIGNER.verifier]).ok


# -- verify ----------------------------------------------------------------------------------


EDITS = {
    "a count edited": (
        "UPDATE checkpoint_fleet SET entry_count = 1 WHERE fleet_key = 'node:n1'",
        "fleet key 'node:n1': the entries give count 2, head {n1}; "
        "checkpoint_fleet holds count 1, head {n1}",
    ),
    "a row deleted": (
        "DELETE FROM checkpoint_fleet WHERE fleet_key = 'node:n1'",
        "fleet key 'node:n1': the entries give count 2, head {n1}; checkpoint_fleet holds no row",
    ),
    "a row added": (
        "INSERT INTO checkpoint_fleet VALUES (1, 'node:n9', 1, {zero})",
        "fleet key 'node:n9': checkpoint_fleet holds a row, but no fleet entry touches it",
    ),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_verify_finds_an_edited_fleet_heads_row(store: Store, edit: str) -> None:
    append(store, ACME + FLEET)
    sign_checkpoint(store, SIGNER)
    assert verify_ledger(store, [SIGNER.verifier]).ok
    n1 = sha256(
        b"\x04"
        + sha256(b"\x04" + bytes(32) + leaf_of(store, XID)).digest()
        + leaf_of(store, DRAIN)
    ).hexdigest()
    statement, message = EDITS[edit]
    zero = "X'" + "00" * 32 + "'" if store.dialect == "sqlite" else "'\\x" + "00" * 32 + "'::bytea"
    with store.engine.begin() as conn:
        drop_guards(conn)
        conn.execute(text(statement.format(zero=zero)))
    problem = verify_ledger(store, [SIGNER.verifier]).problem
    assert problem is not None
    assert (problem.seq, problem.kind, problem.message) == (
        20,
        "checkpoint",
        "checkpoint #1: " + message.format(n1=n1),
    )


# -- keys ------------------------------------------------------------------------------------


def test_keys_by_hand() -> None:
    assert event_keys("health.fault", {"node": "n1", "device": 2, "fabric_domain": "fd"}) == {
        "node:n1",
        "fabric:fd",
    }
    assert event_keys("health.cleared", {"device": "GPU-77"}) == {"device:GPU-77"}
    assert event_keys("fleet.change", {"nodes": ["a", "b"]}) == {"node:a", "node:b"}
    assert event_keys("device.discovered", {"node": "n1", "device": 0}) == set()
    assert allocation_keys(
        {"node": "n1", "nodes": ["n2"], "devices": [3, "0/13"], "fabric_domain": "fd"}
    ) == {"node:n1", "node:n2", "fabric:fd", "device:3", "device:0/13", "device:0"}
    assert allocation_keys({"gpus": 1}) == set()


NAMES = st.sampled_from(["n1", "n2", "0", "1", "0/13", "fd"])
MAYBE = st.one_of(st.none(), NAMES)


@settings(max_examples=50, deadline=None)
@given(
    grant=st.fixed_dictionaries(
        {
            "node": MAYBE,
            "fabric_domain": MAYBE,
            "devices": st.one_of(st.none(), st.lists(NAMES, max_size=3)),
        }
    ),
    fault=st.fixed_dictionaries(
        {"node": MAYBE, "device": st.one_of(MAYBE, st.integers(0, 1)), "fabric_domain": MAYBE}
    ),
)
def test_every_fault_the_engine_says_touches_shares_a_key(
    grant: dict[str, Any], fault: dict[str, Any]
) -> None:
    """The engine's own touch rule (reconcile/engine/rules.py): whatever it says touches an
    allocation shares a fleet key with it, so a packet complete by keys holds it."""
    if touching_health([grant], [(1, fault)]):
        assert event_keys("health.fault", fault) & allocation_keys(grant)


def test_dropping_any_fleet_entry_of_the_packet_is_refused(
    store: Store, packet: dict[str, Any]
) -> None:
    expected = {XID: ("node:n1", 2), FABRIC: ("fabric:fd-a", 1), DRAIN: ("node:n1", 2)}
    for seq in fleet_seqs(packet):
        key, count = expected[seq]
        attack = keeper_rebuilds(drop_entry(packet, seq), store)
        assert refused(attack) == (
            f"bundle: fleet key {key!r}: the checkpoint commits to {count} entries, the "
            f"packet holds {count - 1}: fleet entries were left out"
        ), seq


def test_keys_with_no_entry_are_proven_empty_by_their_neighbours(store: Store) -> None:
    """acme's grant also names nodes n15 and n3 (`nodes`): node:n15 sorts between node:n1
    (index 1) and node:n2 (index 2), node:n3 after the last leaf (index 2 of 3)."""
    grant = copy.deepcopy(ACME[0])
    grant["data"]["nodes"] = ["n15", "n3"]
    append(store, [grant, *ACME[1:], *FLEET])
    built = json.loads(json.dumps(build_dispute(store, "acme", "INV-1", SIGNER)))
    assert [(h["key"], h["index"], h.get("seqs")) for h in built["bundle"]["fleet"]["heads"]] == [
        ("fabric:fd-a", 0, [FABRIC]),
        ("node:n1", 1, [XID, DRAIN]),
        ("node:n2", 2, None),
    ]
    assert OTHER_NODE not in fleet_seqs(built)  # n2's head is shown, not its entries
    verify_dispute(built, SIGNER.verifier)
    heads(built)["node:n2"]["index"] = 1  # a neighbour moved: its proof no longer holds
    assert refused(built).startswith(
        "bundle: fleet key 'node:n2': the checkpoint does not commit to count 1"
    )
    built["bundle"]["fleet"]["heads"] = built["bundle"]["fleet"]["heads"][:2]
    assert refused(built) == (
        "bundle: fleet key 'node:n15': the packet holds neither the checkpoint's head for it "
        "nor neighbours proving it has none: its fleet entries cannot be shown complete"
    )


def test_verify_names_a_dropped_fleet_heads_table(store: Store) -> None:
    append(store, ACME + FLEET)
    sign_checkpoint(store, SIGNER)
    with store.writing() as conn:
        conn.execute(text("DROP TABLE checkpoint_fleet"))
    problem = verify_ledger(store, [SIGNER.verifier]).problem
    assert problem is not None
    assert (problem.seq, problem.kind, problem.message) == (
        20,
        "checkpoint",
        "checkpoint #1: its note commits to fleet heads; no checkpoint_fleet is stored",
    )
