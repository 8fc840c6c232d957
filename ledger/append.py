"""Appending batches: idempotency, conflicts, quarantine, hashes, all in one transaction.

Rules, in the order they apply to each accepted record of a batch:
1. `tenant` + `source` + `id` is the key (a fleet event's tenant is null): an event only
   ever meets its own tenant's events, so no tenant can shadow another's by claiming its
   source and id. A key already in the ledger (or earlier in the batch) with the same
   canonical bytes is a duplicate: skipped and counted.
2. The same key with other bytes is a conflict: kept in the quarantine with both hashes,
   never replacing what is stored.
3. Everything else gets the next `seq` (gapless from 1), the next `tenant_seq` of its
   tenant, a fresh 16-byte salt, and its leaf, chain and tenant_prev hashes.
A batch, quarantine rows included, commits whole or not at all.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from hashlib import sha256
from itertools import islice
from typing import Any

import numpy as np
from sqlalchemy import Connection, func, insert, select
from sqlalchemy.exc import IntegrityError

from ledger.digests import chain, each, split
from ledger.errors import StoreWriteFailed
from ledger.hashing import CHAIN_PREFIX, LEAF_PREFIX, SALT_SIZE, ZERO_HASH, entry_bytes
from ledger.merkle import Frontier
from ledger.quarantine import bounded, chained_rows, storable_text
from ledger.store import Store
from ledger.tables import batches, entries, quarantine
from ledger.tree import TreeReader
from schemas import Accepted, Record, Rejected, format_utc

DEFAULT_BATCH_SIZE = 5000  # one fsync per batch: larger batches amortise it
ENTRY_COLUMNS = (
    "seq",
    "recorded_at",
    "source",
    "id",
    "type",
    "tenant",
    "tenant_seq",
    "event",
    "salt",
    "leaf_hash",
    "chain_hash",
    "tenant_prev",
)
Clock = Callable[[], datetime]
#: (tenant, source, id): the idempotency key (rule 1).
EventKey = tuple[str | None, str, str]
SaltSource = Callable[[int], bytes]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class BatchResult:
    appended: int = 0
    duplicates: int = 0
    quarantined: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    #: Conflicts found, as `file:line: id: reason`.
    conflicts: list[str] = field(default_factory=list)


@dataclass
class _Plan:
    """What one batch will write, worked out under the lock."""

    quarantine_rows: list[dict[str, Any]] = field(default_factory=list)
    duplicates: int = 0
    conflicts: list[str] = field(default_factory=list)
    #: What the ledger already holds under the keys of this batch it found stored.
    held: dict[EventKey, bytes] = field(default_factory=dict)


@dataclass
class _Tip:
    """The ledger's head as a batch left it: enough to hash the next batch without reading
    the tree or the tenant heads again, valid while the head is still (size, chain)."""

    size: int
    chain: bytes
    frontier: list[bytes]
    tenant_heads: dict[str, tuple[int, bytes]]


class Appender:
    """Appends batches to one store. `clock` and `salts` are injectable for test vectors.

    Two shortcuts, each checked before it is taken: the head a batch left is reused by the
    next one when the store's head is still that one (its chain hash commits to all that
    came before), and new keys are inserted without first looking them up, with the
    key's unique indexes (ledger/tables.py) as the check: a batch that meets a stored key
    is rolled back to its savepoint and done again with the lookup (rules 1 and 2), as are
    the batches after it until one meets no stored key.
    """

    def __init__(
        self, store: Store, clock: Clock = utc_now, salts: SaltSource = secrets.token_bytes
    ) -> None:
        self.store = store
        self.clock = clock
        self.salts = salts
        self._tip: _Tip | None = None
        self._expect_known = False

    def append(self, batch: Sequence[Record]) -> BatchResult:
        """Append one batch in one transaction; returns what happened to its records."""
        accepted = [r for r in batch if isinstance(r, Accepted)]
        rejected = [r for r in batch if isinstance(r, Rejected)]
        tip = None
        with self.store.writing() as conn:
            recorded_at = format_utc(self.clock())
            plan = _Plan()
            plan.quarantine_rows.extend(_invalid_row(r, recorded_at) for r in rejected)
            fresh, later = _first_of_each_key(accepted)
            result = BatchResult()
            if fresh:
                tip = self._append_new(conn, fresh, plan, recorded_at, result)
            _settle_later(later, fresh, plan, recorded_at)
            result.duplicates, result.conflicts = plan.duplicates, plan.conflicts
            if plan.quarantine_rows:
                result.quarantined = self._insert_quarantine(conn, plan.quarantine_rows)
        if tip is not None:
            self._tip = tip  # committed: the next batch may start from it
        return result

    def _append_new(
        self,
        conn: Connection,
        records: list[Accepted],
        plan: _Plan,
        recorded_at: str,
        result: BatchResult,
    ) -> _Tip | None:
        """Rules 1 to 3 for the keys this batch holds once each."""
        if not self._expect_known:
            try:
                with conn.begin_nested():
                    return self._hash_and_insert(conn, records, recorded_at, result)
            except _integrity_errors(conn):
                pass  # a stored key: look them all up
        fresh = _drop_known(conn, records, plan, recorded_at)
        self._expect_known = len(fresh) < len(records)
        return self._hash_and_insert(conn, fresh, recorded_at, result) if fresh else None

    def _hash_and_insert(
        self, conn: Connection, records: list[Accepted], recorded_at: str, result: BatchResult
    ) -> _Tip:
        """Rule 3: number, salt and hash the new records, then write them and the tree."""
        tip = self._current_tip(conn, {r.tenant for r in records if r.tenant is not None})
        rows, leaves = _entry_rows(tip, records, recorded_at, self.salts(SALT_SIZE * len(records)))
        frontier = Frontier(tip.size, tip.frontier)
        frontier.extend_packed(leaves)
        _bulk_insert_entries(conn, rows)
        if frontier.completed:
            _bulk_insert(conn, "tree_nodes", ("level", "idx", "hash"), frontier.completed)
        first, last, chain = tip.size + 1, tip.size + len(rows), rows[-1][10]
        batch_seq = conn.execute(
            select(func.coalesce(func.max(batches.c.batch_seq), 0))
        ).scalar_one()
        conn.execute(
            insert(batches).values(
                batch_seq=batch_seq + 1,
                first_seq=first,
                last_seq=last,
                chain_head=chain,
                recorded_at=recorded_at,
            )
        )
        result.appended, result.first_seq, result.last_seq = len(rows), first, last
        return _Tip(last, chain, frontier.hashes, tip.tenant_heads)

    def _current_tip(self, conn: Connection, tenants: set[str]) -> _Tip:
        """The head as stored, with the frontier and the heads of `tenants` (a copy to
        work on: the batch may yet roll back)."""
        size, chain = _chain_head(conn)
        cached = self._tip
        if cached is not None and (cached.size, cached.chain) == (size, chain):
            heads = dict(cached.tenant_heads)
            frontier = list(cached.frontier)
        else:
            heads, frontier = {}, TreeReader(conn).frontier(size).hashes
        heads.update(_tenant_heads(conn, tenants - heads.keys()))
        return _Tip(size, chain, frontier, heads)

    def _insert_quarantine(self, conn: Connection, rows: list[dict[str, Any]]) -> int:
        """Insert, chained, skipping records this file already had quarantined at that line."""
        fresh = chained_rows(conn, rows)
        if fresh:
            conn.execute(insert(quarantine), fresh)
        return len(rows)


def _entry_rows(
    tip: _Tip, records: list[Accepted], recorded_at: str, salt_block: bytes
) -> tuple[list[tuple[Any, ...]], bytes]:
    """The rows of `records` as entries seq tip.size+1.., and their leaves end to end;
    advances tip.tenant_heads. The hot loops of an ingest: one orjson call an entry for
    its canonical bytes, then the leaves and the chain a batch at a time
    (ledger/digests.py: hashlib's cost a call was most of the hashing)."""
    heads, first = tip.tenant_heads, tip.size + 1
    salts = [salt_block[i : i + SALT_SIZE] for i in range(0, len(records) * SALT_SIZE, SALT_SIZE)]
    # each tenant's number, and whose leaf its entry names: the head's (a str key) or an
    # earlier entry of this batch (its position), known once the leaves are
    tenant_seqs: list[int | None] = []
    previous: list[int | bytes | None] = []
    last_in_batch: dict[str, tuple[int, int]] = {}
    for i, record in enumerate(records):
        tenant = record.tenant
        if tenant is None:
            tenant_seqs.append(None)
            previous.append(None)
            continue
        before = last_in_batch.get(tenant)
        if before is None:
            number, leaf = heads.get(tenant, (0, ZERO_HASH))
            previous.append(leaf)
        else:
            number, at = before
            previous.append(at)
        tenant_seqs.append(number + 1)
        last_in_batch[tenant] = (number + 1, i)
    parts = [
        LEAF_PREFIX
        + entry_bytes(
            first + i,
            recorded_at,
            r.source,
            r.id,
            r.type,
            r.tenant,
            tenant_seqs[i],
            r.body,
            salts[i],
        )
        for i, r in enumerate(records)
    ]
    leaves = each(b"".join(parts), np.cumsum([0, *map(len, parts)], dtype=np.int64))
    links = chain(CHAIN_PREFIX, tip.chain, leaves)
    leaf_of = split(leaves)
    link_of = split(links)
    for tenant, (number, at) in last_in_batch.items():
        heads[tenant] = (number, leaf_of[at])
    rows = [
        (
            first + i,
            recorded_at,
            r.source,
            r.id,
            r.type,
            r.tenant,
            tenant_seqs[i],
            r.body.decode("utf-8"),
            salts[i],
            leaf_of[i],
            link_of[i],
            leaf_of[prev] if isinstance(prev, int) else prev,
        )
        for i, (r, prev) in enumerate(zip(records, previous, strict=True))
    ]
    return rows, leaves


def _first_of_each_key(records: list[Accepted]) -> tuple[list[Accepted], list[Accepted]]:
    """The first record of each key in the batch, and the later ones (rules 1 and 2 are
    applied to those once it is known what the ledger holds under their key)."""
    first: set[EventKey] = set()
    fresh: list[Accepted] = []
    later: list[Accepted] = []
    for record in records:
        key = (record.tenant, record.source, record.id)
        if key in first:
            later.append(record)
        else:
            first.add(key)
            fresh.append(record)
    return fresh, later


def _settle_later(
    later: list[Accepted], fresh: list[Accepted], plan: _Plan, recorded_at: str
) -> None:
    """Rules 1 and 2 for a key's later records in the batch: against what the ledger holds
    under the key once the batch is in (what was stored before, else the batch's first),
    so where a batch ends never changes what a record is."""
    firsts = {(r.tenant, r.source, r.id): r.body for r in fresh}
    for record in later:
        key = (record.tenant, record.source, record.id)
        _duplicate_or_conflict(record, plan.held.get(key, firsts[key]), plan, recorded_at)


def _drop_known(
    conn: Connection, records: list[Accepted], plan: _Plan, recorded_at: str
) -> list[Accepted]:
    """Rules 1 and 2 against the ledger: keep the records whose key is not stored."""
    stored = _stored_bodies(conn, {(r.tenant, r.source, r.id) for r in records})
    fresh: list[Accepted] = []
    for record in records:
        key = (record.tenant, record.source, record.id)
        known = stored.get(key)
        if known is None:
            fresh.append(record)
        else:
            plan.held[key] = known
            _duplicate_or_conflict(record, known, plan, recorded_at)
    return fresh


def _duplicate_or_conflict(record: Accepted, known: bytes, plan: _Plan, recorded_at: str) -> None:
    if known == record.body:
        plan.duplicates += 1
        return
    row = _conflict_row(record, known, recorded_at)
    plan.quarantine_rows.append(row)
    plan.conflicts.append(f"{record.origin}: id: {row['reason']}")


def _integrity_errors(conn: Connection) -> tuple[type[Exception], ...]:
    """What a unique index raises, from the driver (the bulk insert goes to it directly)
    or through SQLAlchemy."""
    return (conn.dialect.loaded_dbapi.IntegrityError, IntegrityError)


def _stored_bodies(conn: Connection, keys: set[EventKey]) -> dict[EventKey, bytes]:
    """Stored canonical bytes of the keys already in the ledger.

    One `source = ? AND id IN (...)` statement per source and 500 ids: SQLite plans a
    row-value IN as a full scan, this form as probes of the (source, id, tenant) index.
    Other tenants' events under the same source and id are read too, and never matched.
    It goes to the driver directly: building the expression costs more than running it.
    """
    ids_by_source: dict[str, set[str]] = {}
    for _, source, id_ in keys:
        ids_by_source.setdefault(source, set()).add(id_)
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    found: dict[EventKey, bytes] = {}
    for source, id_set in ids_by_source.items():
        ids = sorted(id_set)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            statement = (
                f"SELECT tenant, id, event FROM entries WHERE source = {mark} "
                f"AND id IN ({', '.join([mark] * len(chunk))})"
            )
            rows = conn.exec_driver_sql(statement, (source, *chunk)).all()
            found.update({(r[0], source, r[1]): r[2].encode("utf-8") for r in rows})
    return {key: body for key, body in found.items() if key in keys}


def _chain_head(conn: Connection) -> tuple[int, bytes]:
    row = conn.execute(
        select(entries.c.seq, entries.c.chain_hash).order_by(entries.c.seq.desc()).limit(1)
    ).first()
    return (0, ZERO_HASH) if row is None else (int(row.seq), bytes(row.chain_hash))


def _tenant_heads(conn: Connection, tenants: set[str]) -> dict[str, tuple[int, bytes]]:
    heads: dict[str, tuple[int, bytes]] = {}
    for tenant in tenants:
        row = conn.execute(
            select(entries.c.tenant_seq, entries.c.leaf_hash)
            .where(entries.c.tenant == tenant)
            .order_by(entries.c.tenant_seq.desc())
            .limit(1)
        ).first()
        if row is not None:
            heads[tenant] = (int(row.tenant_seq), bytes(row.leaf_hash))
    return heads


def _bulk_insert_entries(conn: Connection, rows: list[tuple[Any, ...]]) -> None:
    """The hot path: the driver's own bulk path under SQLAlchemy's transaction."""
    _bulk_insert(conn, "entries", ENTRY_COLUMNS, rows)


def _bulk_insert(
    conn: Connection, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
) -> None:
    """Rows into one table through the driver: COPY on PostgreSQL, executemany on SQLite."""
    raw: Any = conn.connection.dbapi_connection  # sqlite3 or psycopg, each used as itself
    names = ", ".join(columns)
    if conn.dialect.name == "postgresql":
        with raw.cursor() as cursor:
            with cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        return
    raw.executemany(
        f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})", rows
    )


def _invalid_row(record: Rejected, recorded_at: str) -> dict[str, Any]:
    head, digest, length = bounded(record.record, record.digest, record.length)
    return {
        "recorded_at": recorded_at,
        "kind": "invalid",
        "file": storable_text(record.origin.file),
        "line": record.origin.line,
        "field": storable_text(record.field),
        "reason": storable_text(record.reason),
        "record": head,
        "record_hash": digest,
        "record_length": length,
        "existing_hash": None,
        "incoming_hash": None,
    }


def _conflict_row(record: Accepted, known: bytes, recorded_at: str) -> dict[str, Any]:
    existing, incoming = sha256(known).digest(), sha256(record.body).digest()
    head, _, length = bounded(record.body, incoming, len(record.body))
    return {
        "recorded_at": recorded_at,
        "kind": "conflict",
        "file": storable_text(record.origin.file),
        "line": record.origin.line,
        "field": "id",
        "reason": storable_text(
            f"event {record.id!r} from {record.source!r} is already in the ledger with other "
            f"content (stored sha256 {existing.hex()[:16]}…, incoming {incoming.hex()[:16]}…)"
        ),
        "record": head,
        "record_hash": incoming,
        "record_length": length,
        "existing_hash": existing,
        "incoming_hash": incoming,
    }


def batched(records: Iterable[Record], size: int) -> Iterator[list[Record]]:
    iterator = iter(records)
    while chunk := list(islice(iterator, size)):
        yield chunk


@dataclass
class AppendReport:
    """What an ingest did: every record read is appended, a duplicate, or quarantined."""

    read: int = 0
    appended: int = 0
    duplicates: int = 0
    quarantined: int = 0
    #: The first problems, as `file:line: field: reason`, for the terminal.
    problems: list[str] = field(default_factory=list)
    max_problems: int = 20

    def add(self, batch: Sequence[Record], result: BatchResult) -> None:
        self.read += len(batch)
        self.appended += result.appended
        self.duplicates += result.duplicates
        self.quarantined += result.quarantined
        found = [str(r) for r in batch if isinstance(r, Rejected)] + result.conflicts
        self.problems.extend(found[: max(0, self.max_problems - len(self.problems))])


def append_stream(
    appender: Appender,
    records: Iterable[Record],
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[Sequence[Record], AppendReport], None] | None = None,
) -> AppendReport:
    """Append a stream of records batch by batch; memory stays at one batch."""
    report = AppendReport()
    for batch in batched(records, batch_size):
        try:
            result = appender.append(batch)
        except StoreWriteFailed as exc:
            start = batch[0].origin
            raise StoreWriteFailed(
                exc.url,
                exc.reason,
                where=f"{start}: ",
                outcome=(
                    f"the batch from this line on was rolled back; the {report.appended} events "
                    "this ingest appended before it are stored: run it again to append the rest"
                ),
            ) from exc
        report.add(batch, result)
        if on_batch is not None:
            on_batch(batch, report)
    return report
