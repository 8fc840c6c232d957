"""The store's tables. Other tools read them, so names and columns are part of the
contract (docs/ledger-format.md). Hashes and salts are raw bytes; `event` is the canonical text
exactly as hashed (TEXT, never JSONB, which would re-serialise it)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

# SQLite makes only "INTEGER PRIMARY KEY" an alias of the rowid, the fast clustered key.
SeqType = BigInteger().with_variant(Integer(), "sqlite")

entries = Table(
    "entries",
    metadata,
    Column("seq", SeqType, primary_key=True, autoincrement=False),
    Column("recorded_at", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("id", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("tenant", Text),
    Column("tenant_seq", BigInteger),
    Column("event", Text, nullable=False),
    Column("salt", LargeBinary, nullable=False),
    Column("leaf_hash", LargeBinary, nullable=False),
    Column("chain_hash", LargeBinary, nullable=False),
    Column("tenant_prev", LargeBinary),
)
Index("entries_tenant_seq", entries.c.tenant, entries.c.tenant_seq, unique=True)
#: The idempotency key is (tenant, source, id): an event only ever meets events of its own
#: tenant, a fleet event (tenant null) only fleet events, so no tenant can make another's
#: event a duplicate or a conflict, whatever source and id it claims. Two indexes, since a
#: unique index lets NULLs repeat: one for tenants' events, a partial one for the fleet's.
Index("entries_event_key", entries.c.source, entries.c.id, entries.c.tenant, unique=True)
Index(
    "entries_fleet_event_key",
    entries.c.source,
    entries.c.id,
    unique=True,
    sqlite_where=entries.c.tenant.is_(None),
    postgresql_where=entries.c.tenant.is_(None),
)

#: One row per committed append batch: the chain head it left. It lets `verify` name a
#: truncated tail or a row inserted past the end without any signed checkpoint.
batches = Table(
    "batches",
    metadata,
    Column("batch_seq", SeqType, primary_key=True, autoincrement=False),
    Column("first_seq", BigInteger, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("chain_head", LargeBinary, nullable=False),
    Column("recorded_at", Text, nullable=False),
)

quarantine = Table(
    "quarantine",
    metadata,
    Column("qid", SeqType, primary_key=True, autoincrement=True),
    Column("recorded_at", Text, nullable=False),
    Column("kind", Text, nullable=False),  # invalid | conflict
    Column("file", Text, nullable=False),
    Column("line", BigInteger, nullable=False),
    Column("field", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("record", LargeBinary, nullable=False),
    Column("record_hash", LargeBinary, nullable=False),
    Column("existing_hash", LargeBinary),
    Column("incoming_hash", LargeBinary),
    # The quarantine's own hash chain (ledger/quarantine.py); NULL only in rows written
    # before the chain existed.
    Column("chain_hash", LargeBinary),
    # The length of the whole record: `record` holds its first 64 KiB, `record_hash` the
    # SHA-256 of the whole. NULL only in rows written before the bound, which hold it whole.
    Column("record_length", BigInteger),
    # Re-reading the same file must not quarantine the same record twice.
    UniqueConstraint("file", "line", "record_hash", name="quarantine_record_key"),
)

#: Interior nodes of complete Merkle subtrees: node (level, index) covers leaves
#: [index * 2**level, (index + 1) * 2**level), 0-based.
tree_nodes = Table(
    "tree_nodes",
    metadata,
    Column("level", Integer, primary_key=True, autoincrement=False),
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("hash", LargeBinary, nullable=False),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("checkpoint_seq", SeqType, primary_key=True, autoincrement=False),
    Column("origin", Text, nullable=False),
    Column("tree_size", BigInteger, nullable=False),
    Column("root_hash", LargeBinary, nullable=False),
    Column("chain_head", LargeBinary, nullable=False),
    Column("tenant_root", LargeBinary, nullable=False),
    Column("signed_at", Text, nullable=False),
    Column("key_name", Text, nullable=False),
    Column("note", Text, nullable=False),
)

#: The per-tenant heads each checkpoint commits to (its `tenant_root` is their tree).
checkpoint_tenants = Table(
    "checkpoint_tenants",
    metadata,
    Column("checkpoint_seq", BigInteger, primary_key=True, autoincrement=False),
    Column("tenant", Text, primary_key=True),
    Column("tenant_seq", BigInteger, nullable=False),
    Column("leaf_hash", LargeBinary, nullable=False),
)

#: The fleet heads each checkpoint commits to (its note's `fleet` line is their tree,
#: ledger/fleet_heads.py): per fleet key, how many fleet entries touch it and their chain.
checkpoint_fleet = Table(
    "checkpoint_fleet",
    metadata,
    Column("checkpoint_seq", BigInteger, primary_key=True, autoincrement=False),
    Column("fleet_key", Text, primary_key=True),
    Column("entry_count", BigInteger, nullable=False),
    Column("head_hash", LargeBinary, nullable=False),
)

#: Witnesses' cosignatures on stored checkpoints (c2sp.org/tlog-cosignature), gathered
#: after signing: `line` is the note signature line exactly as the witness wrote it.
cosignatures = Table(
    "cosignatures",
    metadata,
    Column("checkpoint_seq", BigInteger, primary_key=True, autoincrement=False),
    Column("witness_key", Text, primary_key=True),  # the witness's verifier key (vkey)
    Column("timestamp", BigInteger, nullable=False),
    Column("line", Text, nullable=False),
)

#: A columnar copy of each complete run of entries from seq 1 (ledger/sealed.py): derived
#: from `entries`, written in the append that completes the run, checked by `verify`.
sealed_pages = Table(
    "sealed_pages",
    metadata,
    Column("first_seq", SeqType, primary_key=True, autoincrement=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("entries", BigInteger, nullable=False),
    Column("digest", LargeBinary, nullable=False),  # SHA-256 of `page`
    Column("page", LargeBinary, nullable=False),  # Parquet: seq, type, tenant, event
)

#: A sealed page's extras (ledger/sealed.py): the entries' other columns, which an export
#: writes, made by a checkpoint for each page that has none yet (the ingest's sealing
#: leaves them out: they cost it four times the page). A page without them is exported
#: from the rows.
sealed_extras = Table(
    "sealed_extras",
    metadata,
    Column("first_seq", SeqType, primary_key=True, autoincrement=False),  # its page's
    Column("digest", LargeBinary, nullable=False),  # SHA-256 of `extras`
    Column("extras", LargeBinary, nullable=False),  # Parquet: EXTRAS_SCHEMA
)

#: API tokens of `gpuledger serve` (ledger/tokens.py): not evidence, so outside the chain
#: and mutable (a revocation sets `revoked_at`). Only the SHA-256 of a token is kept.
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("token_id", Text, primary_key=True),  # the public handle shown by `token list`
    Column("digest", LargeBinary, nullable=False),  # SHA-256 of the whole token text
    Column("role", Text, nullable=False),  # operator, tenant:NAME or collector:SOURCE
    Column("owner", Text, nullable=False),  # a collector's rights: provider or tenant:NAME
    Column("label", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("revoked_at", Text),
)

#: The tables no row of which may change once written.
APPEND_ONLY = (
    "entries",
    "batches",
    "quarantine",
    "tree_nodes",
    "checkpoints",
    "checkpoint_tenants",
    "cosignatures",
    "sealed_pages",
    "sealed_extras",
    "checkpoint_fleet",
)
