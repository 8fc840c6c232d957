"""Dispute packets (issue 7): a customer's evidence for one invoice, checked offline with
the ledger's public key alone.

A packet is one JSON object:

    version     1
    kind        "gpuledger-dispute"
    tenant      the tenant it is for
    invoice_id  the invoice it is about
    findings    Reconciliation.as_json() of that invoice's lines (DESIGN.md §6), computed
                from the ledger as the bundle's checkpoint saw it
    bundle      ledger.evidence's bundle: the signed checkpoint; every entry of the tenant up
                to it (canonical event, salt, all hashed columns); the fleet's `health.fault`
                and `health.cleared` entries that touch one of the tenant's allocations
                (RULES.md §7 "touches": node, device, fabric_domain); one multi-leaf
                inclusion proof of them all; and the tenant-head proof

Other tenants appear only as hashes in the proofs. Verification, in this order, names the
first check that fails: the packet's shape, the bundle (signature, inclusion, the
tenant's entries complete up to the checkpoint), that the fleet entries are health
events and every event agrees with its entry's type and tenant, that the findings speak
of this tenant's lines on this invoice only, and that the engine run on the packet's own
entries gives the findings exactly.

What a packet cannot prove: that it holds *every* fleet fault touching the tenant's
allocations (the checkpoint commits to tenants' heads, not to the fleet's). A provider
that left one out would still have to present findings that the remaining events give.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from sqlalchemy import select

from ledger import LedgerError, Store
from ledger.checkpoint import sign_checkpoint
from ledger.witness import latest_cosigned_checkpoint
from ledger.evidence import BUNDLE_VERSION, build_bundle, verify_bundle
from ledger.note import Signer, Verifier
from ledger.proofs import Checkpoint, ProofError
from ledger.tables import entries as entries_table
from reconcile import MoneyOverflow, reconcile_entries, reconcile_store
from reconcile.untrusted import PacketError, first_difference, hex_string, member, no_other_members, show, typed

__all__ = ["PacketError", "PacketUnreadable", "VerifiedPacket", "build_dispute", "explaining_fleet_seqs", "read_packet",
           "touches", "verify_dispute", "write_packet"]

PACKET_VERSION = 1
PACKET_KIND = "gpuledger-dispute"
FLEET_TYPES = ("health.fault", "health.cleared")


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


# -- building -------------------------------------------------------------------------


def build_dispute(store: Store, tenant: str, invoice: str, signer: Signer, stored_checkpoint: bool = False) -> dict[str, Any]:
    """Sign the head (or, with `stored_checkpoint`, take the stored checkpoint of the head
    with its witnesses' cosignatures), reconcile `invoice` as that checkpoint sees it, and
    bundle the tenant's entries with the fleet faults that touch its allocations."""
    _require_invoice(store, tenant, invoice)
    signed = latest_cosigned_checkpoint(store) if stored_checkpoint else sign_checkpoint(store, signer)
    size = signed.body.size
    findings = reconcile_store(store, tenant=tenant, invoice=invoice, upto_seq=size)
    if not findings.cells:
        raise LedgerError(f"--invoice: tenant {tenant!r} has no billing line left on invoice {invoice!r} "
                          f"after corrections, up to seq {size}")
    bundle = build_bundle(store, tenant, explaining_fleet_seqs(store, tenant, size), signed.checkpoint_seq)
    bundle["checkpoint"] = signed.note  # the signed note, with any cosignatures gathered for it
    return {"version": PACKET_VERSION, "kind": PACKET_KIND, "tenant": tenant, "invoice_id": invoice,
            "findings": json.loads(json.dumps(findings.as_json())), "bundle": bundle}


def _require_invoice(store: Store, tenant: str, invoice: str) -> None:
    query = select(entries_table.c.event).where(entries_table.c.tenant == tenant,
                                                entries_table.c.type == "billing.line")
    with store.reading() as conn:
        for (event,) in conn.execute(query):
            if json.loads(event).get("data", {}).get("invoice_id") == invoice:
                return
    raise LedgerError(f"--invoice: tenant {tenant!r} has no billing line on invoice {invoice!r}")


def explaining_fleet_seqs(store: Store, tenant: str, size: int) -> list[int]:
    """Seqs (≤ size) of the fleet's health entries that touch one of `tenant`'s allocations."""
    def rows(*where: Any) -> list[tuple[int, dict[str, Any]]]:
        query = select(entries_table.c.seq, entries_table.c.event).where(entries_table.c.seq <= size, *where)
        with store.reading() as conn:
            return [(int(seq), json.loads(event).get("data", {})) for seq, event in conn.execute(query)]

    grants = [data for _, data in rows(entries_table.c.tenant == tenant, entries_table.c.type == "allocation.granted")]
    health = rows(entries_table.c.tenant.is_(None), entries_table.c.type.in_(FLEET_TYPES))
    return [seq for seq, data in health if any(touches(data, grant) for grant in grants)]


def touches(fault: dict[str, Any], grant: dict[str, Any]) -> bool:
    """RULES.md §7: a health event touches an allocation by fabric domain, by node (when
    it names no device, the allocation lists none, or the device is one of the
    allocation's), or by device alone. Devices compare as text; a cleared event matches its
    fault on these same fields, so it touches whatever the fault touches."""
    devices = grant.get("devices")
    held = None if devices is None else {str(d) for d in devices}
    device = None if fault.get("device") is None else str(fault["device"])
    if fault.get("fabric_domain") is not None and fault["fabric_domain"] == grant.get("fabric_domain"):
        return True
    if fault.get("node") is not None:
        return bool(fault["node"] == grant.get("node") and (device is None or held is None or device in held))
    return device is not None and held is not None and device in held


# -- files ----------------------------------------------------------------------------


def write_packet(packet: dict[str, Any], path: Path) -> None:
    try:
        path.write_text(json.dumps(packet, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise LedgerError(f"--out: cannot write {path}: {exc.strerror}") from None


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


# -- verifying ------------------------------------------------------------------------


def verify_dispute(packet: Any, verifier: Verifier) -> VerifiedPacket:
    """Check a packet with the public key alone; raise PacketError naming what fails."""
    tenant, invoice, findings, bundle = _packet_parts(packet)
    try:
        checkpoint = verify_bundle(bundle, verifier)
    except ProofError as exc:
        raise PacketError(f"bundle: {exc}") from None
    items: list[dict[str, Any]] = bundle["entries"]
    _check_events(items)
    _check_scope(findings, tenant, invoice)
    recomputed = _recompute(items, invoice)
    difference = (first_difference(findings["lines"], recomputed["lines"], "findings.lines")
                  or first_difference(findings, recomputed, "findings"))
    if difference is not None:
        raise PacketError(f"{difference} (recomputed from the packet's own entries)")
    fleet = sum(1 for e in items if e["tenant"] is None)
    return VerifiedPacket(tenant, invoice, len(findings["lines"]), len(items) - fleet, fleet, checkpoint)


def _packet_parts(packet: Any) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    obj = typed(packet, dict, "packet")
    no_other_members(obj, ("version", "kind", "tenant", "invoice_id", "findings", "bundle"), "packet")
    if member(obj, "version", int, "packet") != PACKET_VERSION:
        raise PacketError(f"packet.version: {obj['version']!r} is not {PACKET_VERSION}, the version this verifier reads")
    if member(obj, "kind", str, "packet") != PACKET_KIND:
        raise PacketError(f"packet.kind: {obj['kind']!r} is not {PACKET_KIND!r}")
    tenant, invoice = member(obj, "tenant", str, "packet"), member(obj, "invoice_id", str, "packet")
    findings = member(obj, "findings", dict, "packet")
    member(findings, "lines", list, "packet.findings")
    bundle = member(obj, "bundle", dict, "packet")
    _check_bundle_shape(bundle)
    if bundle["tenant"] != tenant:
        raise PacketError(f"packet.tenant: {tenant!r}, but the bundle is for {bundle['tenant']!r}")
    return tenant, invoice, findings, bundle


def _check_bundle_shape(bundle: dict[str, Any]) -> None:
    where = "packet.bundle"
    no_other_members(bundle, ("version", "tenant", "checkpoint", "entries", "inclusion", "tenant_head"), where)
    for key, kind in (("version", int), ("tenant", str), ("checkpoint", str), ("entries", list), ("inclusion", list)):
        member(bundle, key, kind, where)
    if bundle["version"] != BUNDLE_VERSION:
        raise PacketError(f"{where}.version: {bundle['version']} is not {BUNDLE_VERSION}, the version this verifier reads")
    for i, item in enumerate(bundle["inclusion"]):
        hex_string(item, f"{where}.inclusion[{i}]")
    head = member(bundle, "tenant_head", dict, where)
    no_other_members(head, ("tenant_seq", "leaf", "index", "proof"), f"{where}.tenant_head")
    for key in ("tenant_seq", "index"):
        member(head, key, int, f"{where}.tenant_head")
    hex_string(member(head, "leaf", str, f"{where}.tenant_head"), f"{where}.tenant_head.leaf")
    for i, item in enumerate(member(head, "proof", list, f"{where}.tenant_head")):
        hex_string(item, f"{where}.tenant_head.proof[{i}]")
    for i, entry in enumerate(bundle["entries"]):
        _check_entry_shape(typed(entry, dict, f"{where}.entries[{i}]"), f"{where}.entries[{i}]")


_ENTRY_SHAPE: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("seq", int), ("recorded_at", str), ("source", str), ("id", str), ("type", str),
    ("tenant", (str, type(None))), ("tenant_seq", (int, type(None))), ("event", str), ("salt", str),
)


def _check_entry_shape(entry: dict[str, Any], where: str) -> None:
    no_other_members(entry, tuple(name for name, _ in _ENTRY_SHAPE), where)
    for key, kind in _ENTRY_SHAPE:
        member(entry, key, kind, where)
    if len(entry["salt"]) != 32:
        raise PacketError(f"{where}.salt: expected 16 bytes in hex, got {len(entry['salt'])} characters")
    hex_string(entry["salt"], f"{where}.salt")


def _check_events(items: list[dict[str, Any]]) -> None:
    """Fleet entries are health events; each event's type and tenant are its entry's."""
    for entry in items:
        where = f"seq {entry['seq']}"
        if entry["tenant"] is None and entry["type"] not in FLEET_TYPES:
            raise PacketError(f"{where}: a fleet entry of type {entry['type']!r}; a packet's fleet entries are "
                              f"{' and '.join(FLEET_TYPES)}")
        try:
            event = json.loads(entry["event"])
        except json.JSONDecodeError as exc:
            raise PacketError(f"{where}: event: not JSON: {exc.msg}") from None
        data = event.get("data") if isinstance(event, dict) else None
        if not isinstance(data, dict) or event.get("type") != entry["type"]:
            raise PacketError(f"{where}: event: not an event of type {entry['type']!r}")
        if data.get("tenant") != entry["tenant"]:
            raise PacketError(f"{where}: event: data.tenant {data.get('tenant')!r} is not the entry's tenant")


def _check_scope(findings: dict[str, Any], tenant: str, invoice: str) -> None:
    if not findings["lines"]:
        raise PacketError(f"findings: no line of invoice {invoice!r}: there is nothing to dispute")
    for i, line in enumerate(findings["lines"]):
        where = f"findings.lines[{i}]"
        typed(line, dict, where)
        if line.get("invoice_id") != invoice:
            raise PacketError(f"{where}.invoice_id: {show(line.get('invoice_id'))}, the packet is about {invoice!r}")
        if line.get("tenant") != tenant:
            raise PacketError(f"{where}.tenant: {show(line.get('tenant'))}, the packet is for {tenant!r}")


def _recompute(items: Iterable[dict[str, Any]], invoice: str) -> Any:
    try:
        result = reconcile_entries(items, invoice=invoice)
    except (duckdb.Error, MoneyOverflow) as exc:
        raise PacketError(f"findings: the engine cannot reconcile the packet's entries: {str(exc)[:200]}") from None
    return json.loads(json.dumps(result.as_json()))
