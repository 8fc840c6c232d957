"""Tenant isolation of packets: a packet for one tenant holds no identifier of another.

A leak is another tenant's identifier in this packet's bytes. A packet carries the
tenant's own entries, the fleet entries touching its allocations, proofs (hashes only)
and what the engine computes from those. Other tenants' entries are never copied in, so
another tenant's identifier can only arrive where an entry *names* one: an identifier
field of the tenant's own entries (an ingestor that put another tenant's job on an
allocation's decision) or of the findings. That is what is compared, and only that:

- identifiers: the values each tenant's own entries give for its name and the fields in
  `IDENTIFIER_PATHS` (job, allocation, pod, invoice, user);
- against: the values under an identifier key (`IDENTIFIER_KEYS`, at any depth) of the
  tenant's entries and of the findings and claims. Never free text, currencies, fault
  codes, node names, categories or placement classes: a tenant naming its job `USD`,
  `xid-79`, `whole` or a node's name changes nothing in another tenant's packet;
- fleet entries (tenant null) are the provider's and carry no tenant's data (docs/evidence.md:
  only provider sources write them; the dcgmi ingestor splits per-job telemetry off as
  the tenant's own event). They are carried whole, never withheld and never scanned:
  withholding a fault would let whoever can name a job move money in another tenant's
  packet, and refusing would let it block every dispute, for good (the ledger is
  append-only).

A value is compared exactly and after `normalise` (NFKC, default-ignorable characters
removed, Latin look-alikes of Cyrillic and Greek letters mapped, casefolded), so that an
NFD, case, fullwidth, zero-width or homoglyph variant of another tenant's identifier is
caught. A value that is one of the packet tenant's own identifiers (exactly, or else
after normalising) is never a leak: it is in the tenant's own data.

The gate (`check_packet`) refuses a packet at the first leak, naming the value, whose
identifier it looks like, its kind, its owner and where it is.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, replace
from typing import Any

import duckdb
import pyarrow as pa

from ledger import Store
from ledger.sealed import entry_tables
from schemas.errors import CheckFailed

#: Each kind of tenant identifier and the JSON paths of an event that give it.
IDENTIFIER_PATHS: dict[str, tuple[str, ...]] = {
    "tenant": ("$.data.tenant",),
    "job": ("$.data.job_id",),
    "allocation": ("$.data.allocation_id",),
    "pod": ("$.data.pod",),
    "invoice": ("$.data.invoice_id",),
    "user": ("$.data.user", "$.data.sacct.User"),
}
#: The keys whose values are identifiers wherever they appear in an event, the findings or
#: the claims, with their kind. `dcgm_job` is what per-job dcgmi faults once carried.
IDENTIFIER_KEYS: dict[str, str] = {
    "tenant": "tenant",
    "job_id": "job",
    "dcgm_job": "job",
    "allocation_id": "allocation",
    "pod": "pod",
    "invoice_id": "invoice",
    "user": "user",
    "User": "user",
}
_KINDS = [kind for kind, paths in IDENTIFIER_PATHS.items() for _ in paths]
_PATHS = [path for paths in IDENTIFIER_PATHS.values() for path in paths]
_SQL_PATHS = "[" + ", ".join(f"'{path}'" for path in _PATHS) + "]"

#: Default-ignorable code points that are not of category Cf (those are all dropped):
#: variation selectors, the combining grapheme joiner, Hangul fillers, Khmer inherent vowels.
_IGNORABLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xE0000, 0xE0FFF),
)
#: Cyrillic and Greek letters that Unicode's confusables (UTS #39) map to a Latin letter.
_CONFUSABLES = str.maketrans(
    "АВЕЅІЈКМНОРСТХУҮԁаеһіјӏорԛсѕԝхуүΑΒΕΖΗΙΚΜΝΟΡΤΥΧαιοκνρυ",
    "ABESIJKMHOPCTXYYdaehijlopqcswxyyABEZHIKMNOPTYXaiokvpu",
)


def normalise(value: str) -> str:
    """The form look-alikes share: NFKC (fullwidth, ligatures, composed accents), no
    default-ignorable character (zero-width spaces and joiners, soft hyphen, BOM,
    variation selectors, bidi controls), homoglyphs mapped to Latin, casefolded."""
    text = "".join(c for c in unicodedata.normalize("NFKC", value) if not _ignorable(c))
    return unicodedata.normalize("NFKC", text.translate(_CONFUSABLES).casefold())


def _ignorable(char: str) -> bool:
    point = ord(char)
    return unicodedata.category(char) == "Cf" or any(
        low <= point <= high for low, high in _IGNORABLE_RANGES
    )


#: Identifiers by tenant: tenant -> {identifier: kind}.
TenantIdentifiers = dict[str, dict[str, str]]


class IsolationError(CheckFailed):
    """A packet would carry another tenant's identifier: it is not written."""

    verdict = "REFUSED"


@dataclass(frozen=True)
class Leak:
    identifier: str  # the other tenant's identifier
    kind: str
    owner: str
    where: str
    found: str = ""  # the value found, when it is a look-alike of `identifier`

    def message(self, tenant: str) -> str:
        held = (
            f"{self.identifier!r},"
            if not self.found or self.found == self.identifier
            else f"{self.found!r}, a look-alike of {self.identifier!r},"
        )
        return (
            f"{self.where}: the packet for {tenant!r} would hold {held} "
            f"a {self.kind} id of tenant {self.owner!r}; nothing written"
        )


def tenant_identifiers(store: Store, upto_seq: int | None = None) -> TenantIdentifiers:
    """Every tenant's identifiers in the store (entries up to `upto_seq`), one JSON parse an
    entry."""
    sql = (
        f"SELECT DISTINCT tenant, kind_index, identifier FROM (SELECT tenant, "
        f"unnest(range(1, {len(_PATHS) + 2})) AS kind_index, "
        f"unnest([tenant] || json_extract_string(event, {_SQL_PATHS})) AS identifier "
        f"FROM page WHERE tenant IS NOT NULL) "
        f"WHERE identifier IS NOT NULL AND identifier <> ''"
    )
    found: TenantIdentifiers = {}
    with store.reading() as conn, duckdb.connect() as con:
        for page in entry_tables(conn, None, upto_seq=upto_seq):
            _add_identifiers(found, con, page, sql)
    return found


def _add_identifiers(
    found: TenantIdentifiers, con: duckdb.DuckDBPyConnection, page: pa.Table, sql: str
) -> None:
    con.register("page", page)
    for tenant, index, value in sorted(
        con.execute(sql).fetchall()
    ):  # by kind order: the first kind names a value
        found.setdefault(tenant, {}).setdefault(
            value, "tenant" if index == 1 else _KINDS[index - 2]
        )
    con.unregister("page")


class Isolation:
    """What a packet for `tenant` must not hold: every other tenant's identifiers."""

    def __init__(self, identifiers: TenantIdentifiers, tenant: str) -> None:
        self.tenant = tenant
        self._own = set(identifiers.get(tenant, {})) | {tenant}
        self._own_normal = {normalise(value) for value in self._own}
        self._foreign: dict[str, tuple[str, str]] = {}  # identifier -> (kind, owner)
        self._foreign_normal: dict[str, str] = {}  # normalised -> identifier
        for other in sorted(identifiers):
            if other == tenant:
                continue
            for value, kind in sorted(identifiers[other].items()):
                if value not in self._own:
                    self._foreign.setdefault(value, (kind, other))
                    self._foreign_normal.setdefault(normalise(value), value)

    def leak_in_identifier(self, value: str, where: str) -> Leak | None:
        """Is `value`, found in an identifier field, another tenant's identifier or a
        look-alike of one (and none of this tenant's own)?"""
        if value in self._own:
            return None
        if value in self._foreign:
            return self._leak(value, where)
        normal = normalise(value)
        if normal in self._own_normal or normal not in self._foreign_normal:
            return None
        return replace(self._leak(self._foreign_normal[normal], where), found=value)

    def leak_in(self, value: Any, where: str) -> Leak | None:
        """The first foreign identifier under an identifier key of a JSON value, or None.
        An `event` holding JSON text is parsed and walked the same way."""
        if isinstance(value, dict):
            for key, inner in value.items():
                path = f"{where}.{key}" if where else str(key)
                leak = (self._leak_in_field(inner, path) if key in IDENTIFIER_KEYS else None) or (
                    self.leak_in_event(inner, path)
                    if key == "event"
                    else self.leak_in(inner, path)
                )
                if leak is not None:
                    return leak
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                leak = self.leak_in(inner, f"{where}[{index}]")
                if leak is not None:
                    return leak
        return None

    def _leak_in_field(self, value: Any, where: str) -> Leak | None:
        if isinstance(value, str):
            return self.leak_in_identifier(value, where)
        if isinstance(value, list):  # a list of identifiers
            for index, inner in enumerate(value):
                if isinstance(inner, str):
                    leak = self.leak_in_identifier(inner, f"{where}[{index}]")
                    if leak is not None:
                        return leak
        return None

    def leak_in_event(self, event: Any, where: str) -> Leak | None:
        """An entry's `event` is JSON text: its fields are walked, not its raw text."""
        if isinstance(event, str):
            try:
                return self.leak_in(json.loads(event), where)
            except json.JSONDecodeError:
                return None
        return self.leak_in(event, where)

    def leak_in_entry(self, entry: dict[str, Any], where: str = "") -> Leak | None:
        """A leak in one of the tenant's entries, named by `where` (a place in a packet)
        with the seq, or by the seq alone. Fleet entries hold no tenant's data: None."""
        if "tenant" in entry and entry["tenant"] is None:
            return None
        leak = self.leak_in(entry, where)
        if leak is None:
            return None
        seq = entry.get("seq")
        return replace(
            leak, where=f"{leak.where} (seq {seq})" if where else f"seq {seq} {leak.where}"
        )

    def _leak(self, value: str, where: str) -> Leak:
        kind, owner = self._foreign[value]
        return Leak(value, kind, owner, where)


def check_packet(isolation: Isolation, packet: dict[str, Any]) -> None:
    """The gate: raise IsolationError at the first foreign identifier in an identifier
    field of `packet` (its tenant's entries, findings and claims)."""
    bundle = packet.get("bundle", {})
    for index, entry in enumerate(bundle.get("entries", [])):
        leak = isolation.leak_in_entry(entry, f"packet.bundle.entries[{index}]")
        if leak is not None:
            raise IsolationError(leak.message(isolation.tenant))
    rest = {**packet, "bundle": {k: v for k, v in bundle.items() if k != "entries"}}
    leak = isolation.leak_in(rest, "packet")
    if leak is not None:
        raise IsolationError(leak.message(isolation.tenant))
