"""Tenant isolation of packets: a packet for one tenant holds no identifier of another.

Fleet events carry no tenant's data (docs/events.md), and a customer verifies a
packet without seeing any other tenant's. Both can fail upstream (an ingestor that keeps
a per-job dcgmi field on a fleet fault, a tenant event that names another tenant's pod),
and ledger entries cannot be edited afterwards: their canonical bytes are what the
inclusion proof covers. So isolation is enforced where a packet is made, in two places:

- choosing: a fleet entry that holds an identifier of a tenant other than the packet's
  is never carried; it is *withheld* (the packet lists its seq and leaf hash only);
- the gate: before a packet is written, every string in it (keys and values, each
  entry's `event` parsed and walked the same way, the checkpoint note, the findings) is
  scanned; the first identifier of another tenant refuses the packet, naming the
  identifier, its kind, its owner and where it is.

A tenant's identifiers are the values its own entries give for its name and for the
fields in `IDENTIFIER_PATHS` (job, allocation, pod, invoice, user). A value that is also
one of the packet tenant's own identifiers is not foreign (it is in its own data).

Matching is by whole tokens, where a token is a maximal run of word characters and `-`
(`[\\w-]+`): `train-002-9a945` is found in `train-002-9a945:2:xid-94`, `7965768` in
`7965768.batch`, but `acme` not in `acme-labs` and no identifier inside a hex hash or a
salt. An identifier that holds other characters (`a.b`, `ns/pod`) matches where it starts
at a token and ends at one. Numbers in events are not scanned: identifiers are strings.
"""

from __future__ import annotations

import json
import re
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
_KINDS = [kind for kind, paths in IDENTIFIER_PATHS.items() for _ in paths]
_PATHS = [path for paths in IDENTIFIER_PATHS.values() for path in paths]
_SQL_PATHS = "[" + ", ".join(f"'{path}'" for path in _PATHS) + "]"
_WORD = re.compile(r"[\w-]+")

#: Identifiers by tenant: tenant -> {identifier: kind}.
TenantIdentifiers = dict[str, dict[str, str]]


class IsolationError(CheckFailed):
    """A packet would carry another tenant's identifier: it is not written."""

    verdict = "REFUSED"


@dataclass(frozen=True)
class Leak:
    identifier: str
    kind: str
    owner: str
    where: str

    def message(self, tenant: str) -> str:
        return (f"{self.where}: the packet for {tenant!r} would hold {self.identifier!r}, "
                f"a {self.kind} id of tenant {self.owner!r}; nothing written")


def tenant_identifiers(store: Store, upto_seq: int | None = None) -> TenantIdentifiers:
    """Every tenant's identifiers in the store (entries up to `upto_seq`), one JSON parse an entry."""
    sql = (f"SELECT DISTINCT tenant, kind_index, identifier FROM (SELECT tenant, "
           f"unnest(range(1, {len(_PATHS) + 2})) AS kind_index, "
           f"unnest([tenant] || json_extract_string(event, {_SQL_PATHS})) AS identifier FROM page WHERE tenant IS NOT NULL) "
           f"WHERE identifier IS NOT NULL AND identifier <> ''")
    found: TenantIdentifiers = {}
    with store.reading() as conn, duckdb.connect() as con:
        for page in entry_tables(conn, None, upto_seq=upto_seq):
            _add_identifiers(found, con, page, sql)
    return found


def _add_identifiers(found: TenantIdentifiers, con: duckdb.DuckDBPyConnection, page: pa.Table, sql: str) -> None:
    con.register("page", page)
    for tenant, index, value in sorted(con.execute(sql).fetchall()):  # by kind order: the first kind names a value
        found.setdefault(tenant, {}).setdefault(value, "tenant" if index == 1 else _KINDS[index - 2])
    con.unregister("page")


class Isolation:
    """What a packet for `tenant` must not hold: every other tenant's identifiers."""

    def __init__(self, identifiers: TenantIdentifiers, tenant: str) -> None:
        own = set(identifiers.get(tenant, {})) | {tenant}
        self.tenant = tenant
        self._foreign: dict[str, tuple[str, str]] = {}
        for other in sorted(identifiers):
            for value, kind in identifiers[other].items():
                if other != tenant and value not in own:
                    self._foreign.setdefault(value, (kind, other))
        self._by_first_token: dict[str, list[str]] = {}
        self._loose: list[str] = []  # identifiers that do not start with a word character
        for value in self._foreign:
            first = _WORD.match(value)
            if first is None:
                self._loose.append(value)
            else:
                self._by_first_token.setdefault(first.group(), []).append(value)

    def leak_in_string(self, text: str, where: str) -> Leak | None:
        if not self._by_first_token.keys().isdisjoint(_WORD.findall(text)):
            for token in _WORD.finditer(text):
                for value in self._by_first_token.get(token.group(), ()):
                    if _found_at(text, value, token.start()):
                        return self._leak(value, where)
        for value in self._loose:
            at = text.find(value)
            while at >= 0:
                if _found_at(text, value, at):
                    return self._leak(value, where)
                at = text.find(value, at + 1)
        return None

    def leak_in(self, value: Any, where: str) -> Leak | None:
        """The first foreign identifier in a JSON value (keys included), or None."""
        if isinstance(value, str):
            return self.leak_in_string(value, where)
        if isinstance(value, dict):
            for key, inner in value.items():
                path = f"{where}.{key}" if where else key
                leak = (self.leak_in_string(key, f"{path} (the key)")
                        or (self.leak_in_event(inner, path) if key == "event" else self.leak_in(inner, path)))
                if leak is not None:
                    return leak
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                leak = self.leak_in(inner, f"{where}[{index}]")
                if leak is not None:
                    return leak
        return None

    def leak_in_event(self, event: Any, where: str) -> Leak | None:
        """An entry's `event` is JSON text: its strings are walked, not its raw text."""
        if isinstance(event, str):
            try:
                return self.leak_in(json.loads(event), where)
            except json.JSONDecodeError:
                return self.leak_in_string(event, where)
        return self.leak_in(event, where)

    def leak_in_entry(self, entry: dict[str, Any], where: str = "") -> Leak | None:
        """Named by `where` (a place in a packet) with the seq, or by seq alone. Most
        entries hold nothing: their strings are scanned at once, joined by a character
        that ends every token, and walked one by one (for the place) only on a hit."""
        strings: list[str] = []
        _collect_strings(entry, strings)
        if self.leak_in_string("\n".join(strings), where) is None:
            return None
        leak = self.leak_in(entry, where)
        if leak is None:
            return None
        seq = entry.get("seq")
        return replace(leak, where=f"{leak.where} (seq {seq})" if where else f"seq {seq} {leak.where}")

    def _leak(self, value: str, where: str) -> Leak:
        kind, owner = self._foreign[value]
        return Leak(value, kind, owner, where)


def _collect_strings(value: Any, out: list[str]) -> None:
    """Every string of a JSON value, keys included, each `event` parsed as `leak_in` walks it."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key, inner in value.items():
            out.append(key)
            if key == "event" and isinstance(inner, str):
                try:
                    inner = json.loads(inner)
                except json.JSONDecodeError:
                    pass
            _collect_strings(inner, out)
    elif isinstance(value, list):
        for inner in value:
            _collect_strings(inner, out)


def _found_at(text: str, value: str, at: int) -> bool:
    """`value` starts at a token boundary at `at` and ends at one."""
    end = at + len(value)
    if not text.startswith(value, at):
        return False
    before = at == 0 or not _WORD.match(text[at - 1])
    after = end == len(text) or not _WORD.match(text[end])
    return before and after


def check_packet(isolation: Isolation, packet: dict[str, Any]) -> None:
    """The gate: raise IsolationError at the first foreign identifier anywhere in `packet`."""
    bundle = packet.get("bundle", {})
    for index, entry in enumerate(bundle.get("entries", [])):
        leak = isolation.leak_in_entry(entry, f"packet.bundle.entries[{index}]")
        if leak is not None:
            raise IsolationError(leak.message(isolation.tenant))
    rest = {**packet, "bundle": {k: v for k, v in bundle.items() if k != "entries"}}
    leak = isolation.leak_in(rest, "packet")
    if leak is not None:
        raise IsolationError(leak.message(isolation.tenant))
