"""The ledger's read API: what the rest of gpuledger may ask of a store.

The tables (`ledger/tables.py`) are the ledger's own: their names and columns are a
contract for outside tools that read the database, but inside this project only `ledger/`
queries them. Every other folder reads through the functions here, so a change of index,
column or backend is made in one place:

- `entries(store, tenant=…, type=…, first_seq=…, last_seq=…, seqs=…)`: stored entries, in
  `seq` order, filtered by any of these (`type` may be a tuple of types);
- `each_entry(store, …)`: the same filters, one entry at a time from one reading
  connection, so a tenant's month is never held at once;
- `tenants(store)`, `has_tenant(store, name)`: the tenants that own entries;
- `recorded_event(store, source, id, tenant)`: one event by its key;
- `head(store)`: the tree size, the last `seq` appended (0 for an empty ledger);
- `heads(store, tenant)`: what a tenant's documents stand on: its own last `tenant_seq`
  and the fleet's last `seq` (each 0 when there is none);
- `checkpoints(store)`: the signed checkpoints, oldest first.

Reads take the store's reading connection; none of them writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Select, func, select

from ledger.store import Store
from ledger.tables import checkpoints as checkpoints_table
from ledger.tables import entries as entries_table
from ledger.tables import quarantine as quarantine_table
from ledger.tree import TreeReader

#: seqs asked for in one statement: under SQLite's and PostgreSQL's bound-parameter limits
SEQ_CHUNK = 10_000


class StoredEntry(NamedTuple):
    """An entry as stored: its place, identity and canonical event text (as hashed)."""

    seq: int
    source: str
    id: str
    type: str
    tenant: str | None
    event: str


class StoredCheckpoint(NamedTuple):
    """A signed checkpoint as stored: its number, the tree it signs, and the note's text."""

    checkpoint_seq: int
    tree_size: int
    origin: str
    key_name: str
    signed_at: str
    note: str


_ANY = object()  # "no filter", where None is a value to filter by (a fleet entry's tenant)


def entries(
    store: Store,
    *,
    tenant: str | None | object = _ANY,
    type: str | tuple[str, ...] | None = None,
    first_seq: int | None = None,
    last_seq: int | None = None,
    seqs: Iterable[int] | None = None,
) -> list[StoredEntry]:
    """The entries that match every filter given, in `seq` order. `tenant=None` asks for
    fleet entries (no tenant); leaving it out asks for every tenant's."""
    query = _entries_query(tenant, type, first_seq, last_seq)
    with store.reading() as conn:
        if seqs is None:
            return [StoredEntry._make(row) for row in conn.execute(query)]
        wanted = sorted(set(seqs))
        found: list[StoredEntry] = []
        for start in range(0, len(wanted), SEQ_CHUNK):
            chunk = query.where(entries_table.c.seq.in_(wanted[start : start + SEQ_CHUNK]))
            found += [StoredEntry._make(row) for row in conn.execute(chunk)]
        return found


def each_entry(
    store: Store,
    *,
    tenant: str | None | object = _ANY,
    type: str | tuple[str, ...] | None = None,
    first_seq: int | None = None,
    last_seq: int | None = None,
) -> Iterator[StoredEntry]:
    """`entries`, one at a time, read from one connection (one snapshot) as they come."""
    with store.reading() as conn:
        for row in conn.execute(_entries_query(tenant, type, first_seq, last_seq)):
            yield StoredEntry._make(row)


def _entries_query(
    tenant: str | None | object,
    type_: str | tuple[str, ...] | None,
    first_seq: int | None,
    last_seq: int | None,
) -> Select[tuple[int, str, str, str, str | None, str]]:
    t = entries_table.c
    query = select(t.seq, t.source, t.id, t.type, t.tenant, t.event).order_by(t.seq)
    if tenant is None:
        query = query.where(t.tenant.is_(None))
    elif tenant is not _ANY:
        query = query.where(t.tenant == tenant)
    if isinstance(type_, tuple):
        query = query.where(t.type.in_(type_))
    elif type_ is not None:
        query = query.where(t.type == type_)
    if first_seq is not None:
        query = query.where(t.seq >= first_seq)
    if last_seq is not None:
        query = query.where(t.seq <= last_seq)
    return query


def recorded_event(store: Store, source: str, event_id: str, tenant: str | None) -> str | None:
    """The stored event of (`source`, `event_id`) of `tenant` (None: a fleet event), or
    None. Another tenant's event of the same key is never the answer."""
    t = entries_table.c
    owned = t.tenant.is_(None) if tenant is None else t.tenant == tenant
    with store.reading() as conn:
        found = conn.execute(
            select(t.event).where(t.source == source, t.id == event_id, owned)
        ).scalar()
    return None if found is None else str(found)


#: A grant of a job: its tenant, its nodes, and when it was held (granted at, released at
#: or None while held), as aware datetimes.
Grant = tuple[str, frozenset[str], datetime, datetime | None]


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def grant_tenants(store: Store) -> dict[str, list[Grant]]:
    """For each allocation or job id a provider's grant names, each such grant: tenant,
    nodes and the time it was held (to its `allocation.released`). Grants are the
    provider's alone (a tenant's source may not write one), so a tenant cannot claim
    another's job by naming it."""
    t = entries_table.c
    held: dict[tuple[str, str], tuple[frozenset[str], datetime, set[str]]] = {}
    released: dict[tuple[str, str], datetime] = {}
    query = select(t.type, t.tenant, t.event).where(
        t.type.in_(("allocation.granted", "allocation.released")), t.tenant.is_not(None)
    )
    with store.reading() as conn:
        for type_, tenant, event in conn.execute(query):
            body = json.loads(event)
            data = body.get("data") or {}
            aid = data.get("allocation_id")
            if aid is None:
                continue
            key = (str(tenant), str(aid))
            if type_ == "allocation.released":
                released[key] = _when(body["time"])
                continue
            nodes = frozenset(
                str(n) for n in [data.get("node"), *(data.get("nodes") or [])] if n is not None
            )
            names = {str(aid)} | ({str(data["job_id"])} if data.get("job_id") else set())
            if key not in held:  # the first grant of an allocation is when it began
                held[key] = (nodes, _when(body["time"]), names)
    found: dict[str, list[Grant]] = {}
    for (tenant, aid), (nodes, start, names) in held.items():
        for name in names:
            found.setdefault(name, []).append((tenant, nodes, start, released.get((tenant, aid))))
    return found


def job_tenant(store: Store) -> Callable[[str, str, str, str], str | None]:
    """The tenant of the provider's grant of a job id on a node over a sample window
    [start, end] (RFC 3339 texts), for device counters whose exporter names a Slurm job
    (ingest/dcgm_counters.py): the grants are read once, on first use. None when no grant
    held that job there then, or grants of several tenants did (a job id reused, a stale
    mapping file: nobody's)."""
    grants: dict[str, list[Grant]] | None = None

    def tenant(job_id: str, node: str, start: str, end: str) -> str | None:
        nonlocal grants
        if grants is None:
            grants = grant_tenants(store)
        lo, hi = _when(start), _when(end)
        owners = {
            t
            for t, nodes, granted, gone in grants.get(job_id, [])
            if node in nodes and granted <= hi and (gone is None or lo <= gone)
        }
        return owners.pop() if len(owners) == 1 else None

    return tenant


def tenants(store: Store) -> list[str]:
    """Every tenant that owns an entry, sorted: the (tenant, tenant_seq) index walked one
    tenant at a time, so the cost grows with the tenants, not the entries."""
    t = entries_table.c
    found: list[str] = []
    with store.reading() as conn:
        tenant = conn.execute(select(func.min(t.tenant))).scalar()
        while tenant is not None:
            found.append(str(tenant))
            tenant = conn.execute(select(func.min(t.tenant)).where(t.tenant > tenant)).scalar()
    return found


def has_tenant(store: Store, tenant: str) -> bool:
    """Whether some entry belongs to `tenant`."""
    with store.reading() as conn:
        query = select(entries_table.c.seq).where(entries_table.c.tenant == tenant).limit(1)
        return conn.execute(query).first() is not None


def head(store: Store) -> int:
    """The tree size: the last `seq` appended, 0 for an empty ledger."""
    with store.reading() as conn:
        return int(
            conn.execute(select(func.coalesce(func.max(entries_table.c.seq), 0))).scalar_one()
        )


def heads(store: Store, tenant: str) -> tuple[int, int]:
    """(the tenant's last tenant_seq, the fleet's last seq), read together: a document
    computed from a tenant's entries and the fleet's is the same while both stand, whatever
    other tenants append."""
    t = entries_table.c
    with store.reading() as conn:
        own = conn.execute(
            select(func.coalesce(func.max(t.tenant_seq), 0)).where(t.tenant == tenant)
        ).scalar_one()
        fleet = conn.execute(
            select(func.coalesce(func.max(t.seq), 0)).where(t.tenant.is_(None))
        ).scalar_one()
    return int(own), int(fleet)


def checkpoints(store: Store) -> list[StoredCheckpoint]:
    """The signed checkpoints, oldest first."""
    c = checkpoints_table.c
    query = select(c.checkpoint_seq, c.tree_size, c.origin, c.key_name, c.signed_at, c.note)
    with store.reading() as conn:
        rows = conn.execute(query.order_by(c.checkpoint_seq)).all()
    return [
        StoredCheckpoint(int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]))
        for r in rows
    ]


#: (tenant, source, id): an event's key in the ledger (ledger/append.py, rule 1).
EventKey = tuple[str | None, str, str]


def stored_keys(store: Store, keys: Iterable[EventKey]) -> dict[EventKey, tuple[int, str]]:
    """The `seq` and stored event text of each key found, by key (missing keys absent)."""
    t = entries_table.c
    found: dict[EventKey, tuple[int, str]] = {}
    with store.reading() as conn:
        for tenant, source, event_id in set(keys):
            owned = t.tenant.is_(None) if tenant is None else t.tenant == tenant
            row = conn.execute(
                select(t.seq, t.event).where(t.source == source, t.id == event_id, owned)
            ).first()
            if row is not None:
                found[(tenant, source, event_id)] = (int(row[0]), str(row[1]))
    return found


def counts_by_type(store: Store) -> dict[tuple[str | None, str], int]:
    """How many entries each (tenant, event type) holds; a fleet entry's tenant is None."""
    t = entries_table.c
    with store.reading() as conn:
        rows = conn.execute(select(t.tenant, t.type, func.count()).group_by(t.tenant, t.type))
        return {(r[0], str(r[1])): int(r[2]) for r in rows}


def quarantined_count(store: Store) -> int:
    """How many records the quarantine holds."""
    with store.reading() as conn:
        return int(conn.execute(select(func.count()).select_from(quarantine_table)).scalar_one())


class EntryProof(NamedTuple):
    """An entry's leaf hash and its RFC 6962 inclusion proof in the tree of `size`
    leaves, whose root is `root` (a signed checkpoint of that size commits to it)."""

    leaf_hash: bytes
    size: int
    root: bytes
    proof: list[bytes]


def entry_proof(store: Store, seq: int, size: int | None = None) -> EntryProof | None:
    """The proof that entry `seq` is in the tree of `size` leaves (default: the latest
    checkpoint's size when it covers the entry, else the head); None for no such entry."""
    with store.reading() as conn:
        leaf = conn.execute(
            select(entries_table.c.leaf_hash).where(entries_table.c.seq == seq)
        ).scalar()
        if leaf is None:
            return None
        if size is None:
            signed = conn.execute(select(func.max(checkpoints_table.c.tree_size))).scalar()
            head_size = conn.execute(select(func.max(entries_table.c.seq))).scalar_one()
            size = int(signed) if signed is not None and int(signed) >= seq else int(head_size)
        reader = TreeReader(conn)
        return EntryProof(
            bytes(leaf), size, reader.root(size), reader.inclusion_proof(seq - 1, size)
        )
