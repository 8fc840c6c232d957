"""Tenant-scoped evidence bundles: they verify offline, prove completeness, leak nothing
of other tenants, and fail for each way a dishonest party might alter them."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from ledger import Appender, Store, append_stream
from ledger.checkpoint import sign_checkpoint
from ledger.evidence import build_bundle, verify_bundle
from ledger.note import Signer
from ledger.proofs import ProofError
from schemas import Accepted, Origin, validate_event
from tests.conftest import event, progress

SIGNER = Signer.generate("ledger.test")


def secret(i: int) -> dict[str, Any]:
    return event(
        "job.progress",
        f"zeta-secret-{i}",
        {"tenant": "zeta", "job_id": "zeta-job-name", "step": i},
        source="test://zeta-cluster",
    )


def append(store: Store, events: list[dict[str, Any]]) -> None:
    append_stream(
        Appender(store),
        [Accepted.of(validate_event(e), Origin("t", i)) for i, e in enumerate(events, 1)],
        batch_size=9,
    )


@pytest.fixture
def ledger_with_two_checkpoints(store: Store) -> tuple[Store, str, int]:
    fault = event(
        "health.fault",
        "f1",
        {"node": "n1", "code": "xid-79", "severity": "critical"},
        source="dcgm://n1",
    )
    first = [progress(i, "acme") if i % 2 else secret(i) for i in range(1, 40)] + [fault]
    append(store, first)
    early = sign_checkpoint(store, SIGNER)
    append(store, [progress(i, "acme") if i % 3 else secret(i) for i in range(40, 75)])
    sign_checkpoint(store, SIGNER)
    with store.reading() as conn:
        fault_seq = conn.execute(text("SELECT seq FROM entries WHERE id = 'f1'")).scalar_one()
    return store, early.note, int(fault_seq)


@pytest.fixture
def bundle(ledger_with_two_checkpoints: tuple[Store, str, int]) -> dict[str, Any]:
    store, _, fault_seq = ledger_with_two_checkpoints
    as_sent: dict[str, Any] = json.loads(
        json.dumps(build_bundle(store, "acme", fleet_seqs=[fault_seq], since_checkpoint_seq=1))
    )
    return as_sent


def test_bundle_verifies_with_the_public_key_alone(
    bundle: dict[str, Any], ledger_with_two_checkpoints: tuple[Store, str, int]
) -> None:
    _, early_note, _ = ledger_with_two_checkpoints
    checkpoint = verify_bundle(bundle, SIGNER.verifier, earlier_checkpoint=early_note)
    assert checkpoint.size == 75
    # acme has the odd steps below 40 and the steps from 40 not divisible by 3.
    expected = len([i for i in range(1, 40) if i % 2]) + len([i for i in range(40, 75) if i % 3])
    assert len([e for e in bundle["entries"] if e["tenant"] == "acme"]) == expected
    assert [e["id"] for e in bundle["entries"] if e["tenant"] is None] == ["f1"]


def test_bundle_holds_nothing_of_another_tenant(bundle: dict[str, Any]) -> None:
    text_ = json.dumps(bundle)
    for needle in ("zeta", "zeta-secret", "zeta-job-name", "test://zeta-cluster"):
        assert needle not in text_


def drop_an_entry(b: dict[str, Any]) -> None:
    del b["entries"][3]


def drop_the_last_tenant_entry_and_its_proof(b: dict[str, Any]) -> None:
    b["entries"] = [
        e for e in b["entries"] if e is not max(b["entries"], key=lambda e: e["tenant_seq"] or 0)
    ]


def change_a_number(b: dict[str, Any]) -> None:
    b["entries"][2]["event"] = b["entries"][2]["event"].replace('"step":5', '"step":6')


def change_a_salt(b: dict[str, Any]) -> None:
    b["entries"][0]["salt"] = "00" * 16


def flip_a_proof_hash(b: dict[str, Any]) -> None:
    b["inclusion"][1] = ("f" if b["inclusion"][1][0] != "f" else "e") + b["inclusion"][1][1:]


def lower_the_tenant_head(b: dict[str, Any]) -> None:
    b["tenant_head"]["tenant_seq"] -= 1


def edit_the_checkpoint_text(b: dict[str, Any]) -> None:
    b["checkpoint"] = b["checkpoint"].replace("\n75\n", "\n74\n")


def claim_another_tenant(b: dict[str, Any]) -> None:
    b["tenant"] = "zeta"


ALTERATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "an entry dropped": drop_an_entry,
    "the newest entry dropped": drop_the_last_tenant_entry_and_its_proof,
    "a number changed": change_a_number,
    "a salt changed": change_a_salt,
    "a proof hash flipped": flip_a_proof_hash,
    "the tenant head lowered": lower_the_tenant_head,
    "the checkpoint text edited": edit_the_checkpoint_text,
    "another tenant claimed": claim_another_tenant,
}


@pytest.mark.parametrize("name", list(ALTERATIONS), ids=list(ALTERATIONS))
def test_each_alteration_fails(bundle: dict[str, Any], name: str) -> None:
    altered = copy.deepcopy(bundle)
    ALTERATIONS[name](altered)
    with pytest.raises(ProofError):
        verify_bundle(altered, SIGNER.verifier)


def test_swapping_in_the_earlier_checkpoint_fails(
    bundle: dict[str, Any], ledger_with_two_checkpoints: tuple[Store, str, int]
) -> None:
    _, early_note, _ = ledger_with_two_checkpoints
    altered = dict(bundle, checkpoint=early_note)
    with pytest.raises(ProofError):
        verify_bundle(altered, SIGNER.verifier)


def test_a_consistency_proof_to_a_foreign_checkpoint_fails(bundle: dict[str, Any]) -> None:
    other = Signer.generate("ledger.test")
    with pytest.raises(ProofError):
        verify_bundle(
            bundle,
            SIGNER.verifier,
            earlier_checkpoint=other.sign(
                "gpuledger.local/ledger\n40\n" + "A" * 43 + "=\nchain 00\ntenants 0 AA==\ntime t\n"
            ),
        )
