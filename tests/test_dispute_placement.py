"""Placement not as sold in the dispute (RULES.md 13): each not_as_sold line of the invoice
is a placement claim that cites the topology capture; `verify-packet` recomputes it from
the packet's own entries, and the letter has a section "Placement not as sold".

The scenario is tests/multinode_scenarios.py `placements`: three tenants with
placement_credit_share 0, 0.5 and 1 (the last by default: no share given), each with AS
(as sold), NOT (not as sold: GPU0/GPU1 over SYS to GPU2/GPU3) and UN (no capture), idle
4 GPUs granted 10:00-11:00 and billed 10:00-11:30 at 21.60, and a credit of -1.00 on NOT.
Worked by hand: L-NOT has 4 x 3600 = 14400 GPU-s idle_reserved (customer) of its
4 x 5400 = 21600 billed, so 21.60 x 14400 / 21600 = 14.40 is customer-borne (the other
7200 GPU-s are unallocated, the provider's); CR-NOT's -1.00 is money only, the customer's.
Claims: share x 14.40 and share x -1.00.
"""

from __future__ import annotations

import copy
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ledger import Store
from ledger.note import Signer
from reconcile.packets.dispute import PacketError, build_dispute, verify_dispute
from reconcile.packets.letter import build_letter, render_html, summary
from schemas.canonical import canonical_event
from schemas.events import validate_event
from tests import multinode_scenarios as sc
from tests.reconcile_helpers import ingest

#: tenant -> (share text in the claim, L-NOT's claim, CR-NOT's claim), by hand
EXPECTED = {
    "zero": ("0", "0.00", "0.00"),
    "half": ("0.5", "7.20", "-0.50"),
    "one": ("1", "14.40", "-1.00"),
}


@pytest.fixture(scope="module")
def packets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each tenant's packet of INV-1, the store's seqs by event id, and the signer."""
    path = tmp_path_factory.mktemp("placement") / "ledger.db"
    store = Store(f"sqlite:///{path}")
    store.init()
    signer = Signer.generate("placement.test")
    try:
        ingest(store, sc.placements())
        built = {tenant: build_dispute(store, tenant, "INV-1", signer) for tenant in EXPECTED}
    finally:
        store.close()
    return {"packets": built, "signer": signer}


def seqs_of(packet: dict[str, Any], type_: str, **data: Any) -> list[int]:
    """The seqs of the packet's entries of `type_` whose data has `data`."""
    out = []
    for entry in packet["bundle"]["entries"]:
        event = json.loads(entry["event"])
        if entry["type"] == type_ and all(event["data"].get(k) == v for k, v in data.items()):
            out.append(int(entry["seq"]))
    return out


@pytest.mark.parametrize("tenant", list(EXPECTED))
def test_each_not_as_sold_line_is_a_placement_claim(packets: dict[str, Any], tenant: str) -> None:
    packet = packets["packets"][tenant]
    share, claim_line, claim_credit = EXPECTED[tenant]
    got = [
        (c["line_id"], c["allocation_id"], c["state"], c["share"], c["customer_amount"])
        for c in packet["placement_claims"]
    ]
    # AS (as sold) and UN (unobserved) have no claim; both lines of NOT do
    assert got == [
        ("L-NOT", "NOT", "not_as_sold", share, "14.40"),
        ("CR-NOT", "NOT", "not_as_sold", share, "-1.00"),
    ]
    assert [(c["amount"], c["currency"]) for c in packet["placement_claims"]] == [
        (claim_line, "USD"),
        (claim_credit, "USD"),
    ]
    # the findings' per-tenant claim is the sum of the lines' claims
    total = packet["findings"]["tenants"][tenant]["placement"]["not_as_sold"]["claim"]
    assert total == {"zero": "0.00", "half": "6.70", "one": "13.40"}[tenant]


@pytest.mark.parametrize("tenant", list(EXPECTED))
def test_a_placement_claim_cites_the_capture_the_line_and_the_terms(
    packets: dict[str, Any], tenant: str
) -> None:
    packet = packets["packets"][tenant]
    capture = seqs_of(packet, "placement.observed", allocation_id="NOT")
    grant = seqs_of(packet, "allocation.granted", allocation_id="NOT")
    terms = seqs_of(packet, "policy.terms")  # none for "one": the default share
    for claim in packet["placement_claims"]:
        line = seqs_of(packet, "billing.line", line_id=claim["line_id"])
        assert len(capture) == 1 and len(line) == 1
        assert claim["cites"] == sorted([*capture, *grant, *line, *terms])
    # no capture of another allocation is cited
    other = seqs_of(packet, "placement.observed", allocation_id="AS")
    assert not set(other) & {s for c in packet["placement_claims"] for s in c["cites"]}


@pytest.mark.parametrize("tenant", list(EXPECTED))
def test_verify_packet_recomputes_the_placement_claims(
    packets: dict[str, Any], tenant: str
) -> None:
    packet = packets["packets"][tenant]
    checked = verify_dispute(packet, packets["signer"].verifier)
    assert checked.placement_claims == packet["placement_claims"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("amount", "99.99"), ("amount_exact", "7.21"), ("share", "1"), ("customer_amount", "1.00")],
)
def test_verify_packet_rejects_a_tampered_placement_claim(
    packets: dict[str, Any], field: str, value: str
) -> None:
    packet = copy.deepcopy(packets["packets"]["half"])
    packet["placement_claims"][0][field] = value
    with pytest.raises(PacketError, match=rf"placement_claims\[0\] \(line L-NOT\)\.{field}: "):
        verify_dispute(packet, packets["signer"].verifier)


def test_verify_packet_rejects_a_dropped_or_added_placement_claim(
    packets: dict[str, Any],
) -> None:
    packet = copy.deepcopy(packets["packets"]["half"])
    dropped = copy.deepcopy(packet)
    dropped["placement_claims"].pop()
    with pytest.raises(PacketError, match="placement_claims"):
        verify_dispute(dropped, packets["signer"].verifier)
    added = copy.deepcopy(packet)
    added["placement_claims"].append(dict(added["placement_claims"][0], line_id="L-AS"))
    with pytest.raises(PacketError, match="placement_claims"):
        verify_dispute(added, packets["signer"].verifier)


def test_a_packet_written_before_placement_claims_verifies_as_written(
    packets: dict[str, Any],
) -> None:
    packet = copy.deepcopy(packets["packets"]["half"])
    del packet["placement_claims"]
    checked = verify_dispute(packet, packets["signer"].verifier)
    # the letter keeps the verifier's own recomputation either way
    assert [c["amount"] for c in checked.placement_claims] == ["7.20", "-0.50"]


def test_the_letter_has_a_section_placement_not_as_sold(packets: dict[str, Any]) -> None:
    signer = packets["signer"]
    checked = verify_dispute(packets["packets"]["half"], signer.verifier)
    letter = build_letter(checked, signer.verifier.name)
    page = render_html(letter)
    assert '<h2 id="placement">Placement not as sold</h2>' in page
    assert 'data-figure="placement">6.70 USD<' in page  # 7.20 - 0.50
    assert "0.5 × 14.40 USD (customer-borne) =" in page
    assert "SYS 4" in page  # the capture's four slow pairs
    text = summary(letter)
    assert "placement not as sold: line L-NOT, allocation NOT: 0.5 x 14.40 = 7.20 USD" in text


def test_a_letter_without_placement_claims_has_no_such_section(tmp_path: Path) -> None:
    events = [e for e in sc.placements() if e["type"] != "placement.observed"]
    store = Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    store.init()
    signer = Signer.generate("placement.test")
    try:
        ingest(store, events)
        packet = build_dispute(store, "half", "INV-1", signer)
    finally:
        store.close()
    assert packet["placement_claims"] == []
    page = render_html(build_letter(verify_dispute(packet, signer.verifier), "k"))
    assert "Placement not as sold" not in page


# -- placement_credit_share, a declared field of policy.terms (docs/events.md) ----------------


def terms(share: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"tenant": "acme"}
    if share is not None:
        data["placement_credit_share"] = share
    return {
        "specversion": "1.0",
        "id": "t1",
        "source": "billing://x",
        "type": "policy.terms",
        "time": "2026-01-05T09:00:00Z",
        "data": data,
    }


@pytest.mark.parametrize("share", ["0", "0.5", "1", "1.00", "0.125", 0, 1])
def test_placement_credit_share_in_zero_to_one_is_accepted(share: Any) -> None:
    stored = json.loads(canonical_event(validate_event(terms(share))))
    assert stored["data"]["placement_credit_share"] == str(share)


@pytest.mark.parametrize("share", ["1.5", "-0.1", "2", 0.5, "half", "0.123456789012"])
def test_placement_credit_share_out_of_bounds_or_not_decimal_text_is_refused(
    share: Any,
) -> None:
    with pytest.raises(ValidationError, match="placement_credit_share"):
        validate_event(terms(share))


def test_terms_without_a_share_keep_their_bytes() -> None:
    """Absent means "1" (docs/events.md), and is not filled in: terms written before the field
    was declared are stored as they were."""
    stored = json.loads(canonical_event(validate_event(terms(None))))
    assert "placement_credit_share" not in stored["data"]


def test_the_letter_asks_for_the_placement_claim_apart_rounded_once(
    packets: dict[str, Any],
) -> None:
    """The request names the placement claim beside what is disputed; the claim is summed
    exact over the lines and rounded once (7.20 - 0.50 = 6.70 USD), as the reconciliation
    rounds the tenant's claim."""
    signer = packets["signer"]
    letter = build_letter(verify_dispute(packets["packets"]["half"], signer.verifier), "k")
    asked = re.match(
        r"Please credit ([\d.]+) USD \(([\d.]+) USD disputed below and 6\.70 USD for placement "
        r"not as sold\) against invoice INV-1 by ",
        letter.request(),
    )
    assert asked is not None, letter.request()
    disputed = sum(Decimal(c["amount"]) for c in packets["packets"]["half"]["claims"])
    assert Decimal(asked[2]) == disputed and Decimal(asked[1]) == disputed + Decimal("6.70")
