"""Dispute packets: a customer's evidence for one invoice, checked offline with
the ledger's public key alone (docs/packets.md is the newcomer's account).

A packet is one JSON object:

    version     1
    kind        "gpuledger-dispute"
    tenant      the tenant it is for
    invoice_id  the invoice it is about
    findings    Reconciliation.as_json() of that invoice's lines (docs/cli.md), computed
                by the engine from exactly the entries the bundle carries
    claims      each provider-borne or disputed cell of the findings with its time stretches
                and the seqs of the entries that decided it (reconcile/packets/claims.py);
                optional, so packets written before it still verify; checked like the findings
    placement_claims
                each line whose placement was not as sold (RULES.md 13) with its share,
                customer-borne amount and claim, citing the line, the grant, the topology
                captures and the terms (reconcile/packets/placement_claims.py); optional, so
                packets written before it still verify; checked like the findings
    answers     the provider's signed answers to the findings (reconcile/packets/answers.py),
                each with its entry's seq and its status (current, superseded, stale);
                optional, so packets written before answers still verify; recomputed from the
                bundle's dispute.answer entries and each signature checked
    bundle      ledger.evidence's bundle: the signed checkpoint; every entry of the tenant up
                to it (canonical event, salt, all hashed columns); every fleet entry (faults,
                clearings, fleet changes) of the fleet keys of the tenant's allocations
                (ledger/fleet_heads.py) that holds no other tenant's identifier; `withheld`:
                the seq and leaf hash of each such fleet entry that does hold one; `fleet`:
                the checkpoint's heads of those keys, proving the set complete; one
                multi-leaf inclusion proof of them all; the tenant-head proof; and, with
                `dispute --since-size N`, `consistency`: the RFC 9162 proof from tree size N
                to the checkpoint's

Other tenants appear only as hashes in the proofs; `build_dispute` refuses (IsolationError)
a packet any string of which holds another tenant's identifier (reconcile/packets/isolation.py).
Verification, in this order, names the first check that fails: the packet's shape, the
bundle (signature, inclusion, the tenant's entries and its allocations' fleet entries
complete up to the checkpoint, and, given a previous checkpoint, that this one is the same
tree or extends it), that the fleet entries are faults, clearings or fleet changes and
every event agrees with its entry's type and tenant, that the findings speak of this
tenant's lines on this invoice only, and that the engine run on the packet's own entries
gives the findings exactly.

Fleet evidence is complete: the bundle carries every fleet entry (faults, clearings, fleet
changes) of the fleet keys of the tenant's allocations (ledger/fleet_heads.py), and the
checkpoint commits to each key's count and chain head, so a packet that leaves one out
fails verification with the key and counts named.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from ledger import LedgerError, Store, read
from ledger.checkpoint import sign_checkpoint
from ledger.evidence import build_bundle, verify_bundle
from ledger.fleet_heads import KEYED_TYPES
from ledger.fleet_store import covering_fleet_seqs
from ledger.note import Signer, Verifier
from ledger.proofs import Checkpoint, ProofError
from ledger.witness import latest_cosigned_checkpoint
from reconcile.engine import MoneyOverflow, Reconciliation
from reconcile.engine.rules import touching_health
from reconcile.packets.answers import answer_problems, derive_answers
from reconcile.packets.claims import ClaimMismatch, reconcile_packet
from reconcile.packets.difference import first_difference
from reconcile.packets.isolation import (
    Isolation,
    IsolationError,
    Leak,
    check_packet,
    tenant_identifiers,
)
from schemas.documents.base import InvalidDocument, show
from schemas.documents.bundle import Entry
from schemas.documents.dispute import PACKET_KIND, PACKET_VERSION, DisputePacket

__all__ = [
    "IsolationError",
    "PacketError",
    "PacketUnreadable",
    "VerifiedPacket",
    "build_dispute",
    "check_pinned",
    "check_writable",
    "choose_fleet",
    "current_findings",
    "explaining_fleet_seqs",
    "read_packet",
    "read_previous",
    "touches",
    "verify_dispute",
    "write_packet",
]

FLEET_TYPES = ("health.fault", "health.cleared")


class PacketError(InvalidDocument):
    """A packet that does not verify; the message (one line) says which check failed: the
    dispute-packet model's (schemas/documents/dispute.py) for its shape, named by place."""


class PacketUnreadable(LedgerError):
    """The packet file cannot be read, or is not JSON: an input error, not a verdict."""


@dataclass(frozen=True)
class VerifiedPacket:
    tenant: str
    invoice_id: str
    lines: int
    tenant_entries: int
    fleet_entries: int
    checkpoint: Checkpoint
    withheld: int = (
        0  # fleet entries proven by leaf hash alone: they hold another tenant's identifiers
    )
    previous_size: int | None = None  # the tree size of the previous checkpoint this one extends
    # the verifier's own recomputation from the packet's entries (what the letter is written from)
    findings: dict[str, Any] = field(default_factory=dict)
    claims: list[dict[str, Any]] = field(default_factory=list)
    cited: dict[int, Entry] = field(default_factory=dict)  # the claims' entries, by seq
    placement_claims: list[dict[str, Any]] = field(default_factory=list)
    # the provider's answers, recomputed from the bundle (reconcile/packets/answers.py)
    answers: list[dict[str, Any]] = field(default_factory=list)


# -- building -------------------------------------------------------------------------


def build_dispute(
    store: Store,
    tenant: str,
    invoice: str,
    signer: Signer,
    since_size: int | None = None,
    stored_checkpoint: bool = False,
) -> dict[str, Any]:
    """Bundle the tenant's entries with the clean fleet faults that touch its allocations,
    sign the head (or, with `stored_checkpoint`, take the stored checkpoint of the head with
    its witnesses' cosignatures), and reconcile `invoice` from exactly what the packet carries.

    Isolation (reconcile/packets/isolation.py) is checked twice: on the material before anything
    is signed, and on the whole packet before it is returned; IsolationError names the
    first identifier of another tenant found."""
    _require_invoice(store, tenant, invoice)
    before = _head_size(store)
    if since_size is not None and not 0 < since_size <= before:
        raise LedgerError(
            f"{since_size} is not a tree size of this ledger, [1, {before}]", option="since_size"
        )
    isolation = Isolation(tenant_identifiers(store, before), tenant)
    _check_material(store, isolation, before)
    # Sign last: the findings and claims of the material as it stands are computed, and
    # gated, before anything is signed, so a dispute that cannot finish signs nothing.
    material = _material(store, tenant, choose_fleet(store, isolation, before)[0], before)
    findings, claims, placed = _findings(material, tenant, invoice, before)
    check_packet(
        isolation,
        {
            "tenant": tenant,
            "invoice_id": invoice,
            "findings": findings_json(findings),
            "claims": claims,
            "placement_claims": placed,
        },
    )
    signed = (
        latest_cosigned_checkpoint(store) if stored_checkpoint else sign_checkpoint(store, signer)
    )
    size = signed.body.size
    if size != before:  # appends landed in between: what they add is checked by the gate below
        isolation = Isolation(tenant_identifiers(store, size), tenant)
    carried, withheld = choose_fleet(store, isolation, size)
    bundle = build_bundle(
        store,
        tenant,
        carried,
        signed.checkpoint_seq,
        withheld_seqs=withheld,
        since_size=since_size,
    )
    if [e["seq"] for e in bundle["entries"]] != [e["seq"] for e in material]:
        findings, claims, placed = _findings(bundle["entries"], tenant, invoice, size)
    bundle["checkpoint"] = signed.note  # the signed note, with any cosignatures gathered for it
    packet = {
        "version": PACKET_VERSION,
        "kind": PACKET_KIND,
        "tenant": tenant,
        "invoice_id": invoice,
        "findings": json.loads(json.dumps(findings_json(findings))),
        "claims": claims,
        "placement_claims": placed,
        "answers": derive_answers(bundle["entries"], invoice, claims),
        "bundle": bundle,
    }
    check_packet(isolation, packet)
    return packet


def current_findings(
    store: Store, tenant: str, invoice: str
) -> tuple[int, list[dict[str, Any]], set[int]]:
    """The invoice's claims as a packet made now would hold them, the tree size they are
    of, and the seqs of the entries such a packet carries (the tenant's and its fleet's)."""
    _require_invoice(store, tenant, invoice)
    size = _head_size(store)
    material = _material(store, tenant, covering_seqs(store, tenant, size), size)
    _, claims, _ = _findings(material, tenant, invoice, size)
    return size, claims, {int(e["seq"]) for e in material}


def _findings(
    entries: list[dict[str, Any]], tenant: str, invoice: str, size: int
) -> tuple[Reconciliation, list[dict[str, Any]], list[dict[str, Any]]]:
    findings, claims, placed = reconcile_packet(entries, invoice)
    if not findings.cells:
        raise LedgerError(
            f"tenant {tenant!r} has no billing line left on invoice {invoice!r} "
            f"after corrections, up to seq {size}",
            option="invoice",
        )
    return findings, claims, placed


def _material(store: Store, tenant: str, fleet_seqs: list[int], size: int) -> list[dict[str, Any]]:
    """What the engine reads of the entries a bundle at `size` would carry, in seq order."""
    found = read.entries(store, tenant=tenant, last_seq=size)
    if fleet_seqs:
        found += read.entries(store, last_seq=size, seqs=fleet_seqs)
    rows = [{"seq": e.seq, "type": e.type, "tenant": e.tenant, "event": e.event} for e in found]
    return sorted(rows, key=lambda r: int(r["seq"]))


def _head_size(store: Store) -> int:
    return read.head(store)


def _check_material(store: Store, isolation: Isolation, size: int) -> None:
    """The tenant's own entries up to `size` hold no other tenant's identifier (the fleet
    entries are chosen clean): checked before a checkpoint is signed for the packet."""
    for e in read.each_entry(
        store, tenant=isolation.tenant, last_seq=size
    ):  # seq order: tenant_seq's
        _raise_leak(
            isolation,
            isolation.leak_in_entry(
                {"seq": e.seq, "source": e.source, "id": e.id, "event": e.event}
            ),
        )


def _raise_leak(isolation: Isolation, leak: Leak | None) -> None:
    if leak is not None:
        raise IsolationError(leak.message(isolation.tenant))


def choose_fleet(store: Store, isolation: Isolation, size: int) -> tuple[list[int], list[int]]:
    """Every fleet entry (seq ≤ size) of the keys of the tenant's allocations, as the
    checkpoint's fleet heads commit to them: all carried, none withheld. Fleet entries hold
    no tenant's data (isolation.py says why withholding one would be the attack, not the
    defence); the split stays for packets that carry `withheld` leaves."""
    return covering_seqs(store, isolation.tenant, size), []


def covering_seqs(store: Store, tenant: str, size: int) -> list[int]:
    """Seqs (≤ size) of every fleet entry of the keys of `tenant`'s allocations
    (ledger/fleet_heads.py): faults and clearings of their nodes, devices and fabric
    domains, and fleet changes of their nodes. The checkpoint's fleet heads commit to
    exactly these, so a packet that leaves one out fails verification."""
    with store.reading() as conn:
        by_key = covering_fleet_seqs(conn, tenant, size)
    return sorted({seq for seqs in by_key.values() for seq in seqs})


def _require_invoice(store: Store, tenant: str, invoice: str) -> None:
    for entry in read.each_entry(store, tenant=tenant, type="billing.line"):
        if json.loads(entry.event).get("data", {}).get("invoice_id") == invoice:
            return
    raise LedgerError(
        f"tenant {tenant!r} has no billing line on invoice {invoice!r}", option="invoice"
    )


def explaining_fleet_seqs(store: Store, tenant: str, size: int) -> list[int]:
    """Seqs (≤ size) of the fleet's health entries that touch one of `tenant`'s allocations."""

    def rows(tenant: str | None, types: str | tuple[str, ...]) -> list[tuple[int, dict[str, Any]]]:
        return [
            (e.seq, json.loads(e.event).get("data", {}))
            for e in read.each_entry(store, tenant=tenant, type=types, last_seq=size)
        ]

    grants = [data for _, data in rows(tenant, "allocation.granted")]
    health = rows(None, FLEET_TYPES)
    return touching_health(grants, health)


def touches(fault: dict[str, Any], grant: dict[str, Any]) -> bool:
    """RULES.md §7, as the engine applies it (reconcile/engine/rules.py): does the health
    event `fault` (its data) touch the allocation `grant` (its allocation.granted data)? A
    cleared event matches its fault on the same fields, so it touches what the fault touches."""
    return bool(touching_health([grant], [(0, fault)]))


# -- files ----------------------------------------------------------------------------


def check_writable(path: Path) -> None:
    """Before anything is signed: the packet and the letter beside it can be written
    (a dispute that cannot finish signs nothing)."""
    for target in (path, path.with_suffix(".letter.html")):
        if target.is_dir():
            raise LedgerError(f"{target} is a folder", option="out")
        folder = target.parent
        if not folder.is_dir():
            raise LedgerError(f"{folder} is not a folder", option="out")
        if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
            raise LedgerError(f"cannot write {target}: permission denied", option="out")


def packet_json(packet: dict[str, Any]) -> str:
    """The packet's text, through its document: compact, since the packet is for machines
    (the letter is for people); indenting the demo's 16,000 entries added 1.9 MB to 9.8."""
    return DisputePacket.model_validate(packet).to_json()


def write_packet(packet: dict[str, Any], path: Path) -> None:
    try:
        path.write_text(packet_json(packet), encoding="utf-8")
    except OSError as exc:
        raise LedgerError(f"cannot write {path}: {exc.strerror}", option="out") from None


def read_packet(path: Path) -> Any:
    """The JSON value in `path`; PacketUnreadable (exit 2) when it cannot be read as JSON."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise PacketUnreadable(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PacketUnreadable(f"{path}: byte {exc.start}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise PacketUnreadable(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    except RecursionError:
        raise PacketUnreadable(f"{path}: not a packet: JSON nested too deeply") from None


def read_previous(path: Path) -> str:
    """The signed checkpoint note in `path`: an older dispute packet's, or the note itself
    (as `gpuledger checkpoint` prints it); PacketUnreadable (exit 2) when it holds neither."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise PacketUnreadable(f"{path}: cannot read: {exc.strerror}", option="previous") from None
    except UnicodeDecodeError as exc:
        raise PacketUnreadable(
            f"{path}: byte {exc.start}: not UTF-8 text", option="previous"
        ) from None
    if not text.lstrip().startswith("{"):
        return text
    try:
        note = json.loads(text).get("bundle", {}).get("checkpoint")
    except (json.JSONDecodeError, AttributeError, RecursionError):
        note = None
    if not isinstance(note, str):
        raise PacketUnreadable(
            f"{path}: neither a checkpoint note nor a packet with bundle.checkpoint",
            option="previous",
        )
    return note


# -- verifying ------------------------------------------------------------------------


def verify_dispute(packet: Any, verifier: Verifier, previous: str | None = None) -> VerifiedPacket:
    """Check a packet with the public key alone; raise PacketError naming what fails.
    With `previous` (a signed checkpoint note the customer holds, from an older packet or
    saved by itself), the packet's checkpoint must be that tree or extend it."""
    parsed = _parse(packet)
    tenant, invoice = parsed.tenant, parsed.invoice_id
    bundle = parsed.bundle.to_dict()
    try:
        checkpoint = verify_bundle(bundle, verifier, previous)
    except ProofError as exc:
        raise PacketError(f"bundle: {exc}") from None
    items: list[dict[str, Any]] = bundle["entries"]
    _check_events(parsed.bundle.entries)
    _check_scope(parsed, tenant, invoice)
    findings = parsed.findings.to_dict()
    recomputed, claims, placed = _recompute(items, invoice)
    difference = (
        first_difference(findings["lines"], recomputed["lines"], "findings.lines")
        or first_difference(findings, _as_written(recomputed, findings), "findings")
        or (
            "claims" in parsed.model_fields_set
            and first_difference([c.to_dict() for c in parsed.claims], claims, "claims")
        )
        or (
            "placement_claims" in parsed.model_fields_set
            and first_difference(
                [c.to_dict() for c in parsed.placement_claims], placed, "placement_claims"
            )
        )
        or None
    )
    answers = derive_answers(items, invoice, claims)
    if difference is None and "answers" in parsed.model_fields_set:
        difference = first_difference([a.to_dict() for a in parsed.answers], answers, "answers")
    if difference is not None:
        raise PacketError(f"{difference} (recomputed from the packet's own entries)")
    signatures = answer_problems(items, invoice, verifier)
    if signatures:
        raise PacketError(f"answers: {signatures[0]}")
    fleet = sum(1 for e in items if e["tenant"] is None)
    previous_size = None if previous is None else Checkpoint.parse(verifier.verify(previous)).size
    cites = {seq for claim in [*claims, *placed] for seq in claim["cites"]}
    return VerifiedPacket(
        tenant,
        invoice,
        len(findings["lines"]),
        len(items) - fleet,
        fleet,
        checkpoint,
        len(parsed.bundle.withheld),
        previous_size,
        recomputed,
        claims,
        {e.seq: e for e in parsed.bundle.entries if e.seq in cites},
        placed,
        answers,
    )


def _as_written(recomputed: dict[str, Any], findings: dict[str, Any]) -> dict[str, Any]:
    """The recomputed findings as a packet written before lines had a placement state
    (RULES.md 13) states them: without `placement` where its tenant has none. The letter
    and the verification's result keep the recomputed placement either way."""
    tenants = {
        name: {
            k: v
            for k, v in tenant.items()
            if k != "placement" or "placement" in findings["tenants"].get(name, {})
        }
        for name, tenant in recomputed["tenants"].items()
    }
    return recomputed | {"tenants": tenants}


def check_pinned(checked: VerifiedPacket, tenant: str | None, invoice: str | None) -> None:
    """What the customer expects (`verify-packet --tenant --invoice`), compared exactly: a
    look-alike is another tenant or invoice. Values are shown escaped (`ascii`), so that
    `'INV-\\u0430cme'` and `'INV-acme'` differ on the screen too."""
    for name, expected, found in (
        ("tenant", tenant, checked.tenant),
        ("invoice_id", invoice, checked.invoice_id),
    ):
        if expected is not None and expected != found:
            raise PacketError(f"packet.{name}: expected {ascii(expected)}, found {ascii(found)}")


def _parse(packet: Any) -> DisputePacket:
    """The packet's shape, by the dispute-packet model: PacketError names the first member
    that is wrong by its place (`packet.bundle.entries[3].seq: expected an integer, got a
    string`); then the bundle must be the packet's tenant's."""
    try:
        parsed = DisputePacket.parse(packet)
    except InvalidDocument as exc:
        raise PacketError(str(exc)) from None
    if parsed.bundle.tenant != parsed.tenant:
        raise PacketError(
            f"packet.tenant: {parsed.tenant!r}, but the bundle is for {parsed.bundle.tenant!r}"
        )
    return parsed


def _check_events(entries: list[Entry]) -> None:
    """Fleet entries are health events; each event's type and tenant are its entry's."""
    for entry in entries:
        where = f"seq {entry.seq}"
        if entry.tenant is None and entry.type not in KEYED_TYPES:
            raise PacketError(
                f"{where}: a fleet entry of type {entry.type!r}; "
                f"a packet's fleet entries are {', '.join(KEYED_TYPES)}"
            )
        try:
            event = json.loads(entry.event)
        except json.JSONDecodeError as exc:
            raise PacketError(f"{where}: event: not JSON: {exc.msg}") from None
        data = event.get("data") if isinstance(event, dict) else None
        if not isinstance(data, dict) or event.get("type") != entry.type:
            raise PacketError(f"{where}: event: not an event of type {entry.type!r}")
        if data.get("tenant") != entry.tenant:
            raise PacketError(
                f"{where}: event: data.tenant {data.get('tenant')!r} is not the entry's tenant"
            )


def _check_scope(packet: DisputePacket, tenant: str, invoice: str) -> None:
    if not packet.findings.lines:
        raise PacketError(f"findings: no line of invoice {invoice!r}: there is nothing to dispute")
    for i, line in enumerate(packet.findings.lines):
        where = f"findings.lines[{i}]"
        if line.invoice_id != invoice:
            raise PacketError(
                f"{where}.invoice_id: {show(line.invoice_id)}, the packet is about {invoice!r}"
            )
        if line.tenant != tenant:
            raise PacketError(f"{where}.tenant: {show(line.tenant)}, the packet is for {tenant!r}")


def _recompute(
    items: Iterable[dict[str, Any]], invoice: str
) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    try:
        result, claims, placed = reconcile_packet(items, invoice)
    except (duckdb.Error, MoneyOverflow, ClaimMismatch) as exc:
        raise PacketError(
            f"findings: the engine cannot reconcile the packet's entries: {str(exc)[:200]}"
        ) from None
    return json.loads(json.dumps(findings_json(result))), claims, placed


def findings_json(result: Reconciliation) -> dict[str, Any]:
    """The packet's findings: the reconciliation's object of its invoice's lines, every
    period's (a packet covers its invoice whole), so without the `period` member that
    `reconcile --format json` adds: packets signed before it verify as they did."""
    doc = result.as_json()
    doc.pop("period", None)
    return doc
