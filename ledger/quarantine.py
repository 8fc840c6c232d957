"""The quarantine's own hash chain: rejected records are evidence too (docs/ledger-format.md).

    row   = RFC 8785 JSON of the row's columns but chain_hash: qid, recorded_at, kind, file,
            line, field, reason (strings and integers as stored), record, record_hash,
            existing_hash, incoming_hash (lower-case hex, or null), and record_length
            (an integer) where it is not null (rows from before the bound have none)
    chain = SHA-256(0x03 ‖ chain of the previous row ‖ row)    the first row's previous is 32 zero
    bytes

Rows are chained in qid order, and every checkpoint commits to the quarantine's size and
head in its `quarantine <count> <hex>` extension line. Rules `verify` applies, in order:
1. each row's chain recomputed from the rows before it equals its stored chain_hash (a
   row deleted, inserted or edited breaks the chain at the first row that differs);
2. rows without a chain_hash are allowed only before the first chained row (a store
   written before the chain existed; they are chained all the same when recomputed);
3. each checkpoint's committed head equals the chain recomputed at its count, and no
   checkpoint commits to more rows than are stored.
A row planted after the last checkpoint with a correctly computed chain cannot be told
from a real one until a checkpoint commits to a quarantine without it: then it fails 3.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from hashlib import sha256
from typing import Any

import orjson
from sqlalchemy import Connection, func, inspect, select, text

from ledger.errors import LedgerError
from ledger.hashing import ZERO_HASH
from ledger.tables import quarantine
from schemas.types import RECORD_HEAD

QUARANTINE_PREFIX = b"\x03"
_HASHED = ("qid", "recorded_at", "kind", "file", "line", "field", "reason")
_HEX = ("record", "record_hash", "existing_hash", "incoming_hash")
_PAGE = 5000


def row_bytes(row: Mapping[Any, Any]) -> bytes:
    """The canonical bytes of a quarantine row (RFC 8785: sorted keys, no whitespace)."""
    members = {name: row[name] for name in _HASHED}
    members.update(
        {name: bytes(row[name]).hex() if row[name] is not None else None for name in _HEX}
    )
    if row.get("record_length") is not None:
        members["record_length"] = int(row["record_length"])
    return orjson.dumps(members, option=orjson.OPT_SORT_KEYS)


def bounded(
    record: bytes, digest: bytes | None = None, length: int | None = None
) -> tuple[bytes, bytes, int]:
    """What a quarantine row keeps of a record: (its first RECORD_HEAD bytes, the SHA-256
    of the whole, the length of the whole). `digest` and `length` are given when `record`
    is already only the head (a reader that would not hold the whole)."""
    if digest is None or length is None:
        digest, length = sha256(record).digest(), len(record)
    return record[:RECORD_HEAD], digest, length


def storable_text(text: str) -> str:
    """Text for a quarantine column, storable on every backend: a NUL (PostgreSQL's text
    refuses it) written as `\\u0000`, a lone surrogate (not UTF-8) as `\\udXXX`."""
    if text.isascii() and "\x00" not in text:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\u0000")


def next_chain(previous: bytes, row: Mapping[Any, Any]) -> bytes:
    return sha256(QUARANTINE_PREFIX + previous + row_bytes(row)).digest()


def require_chain_column(conn: Connection) -> None:
    """A store from before the chain is upgraded by `gpuledger init`, never silently."""
    if "chain_hash" not in {c["name"] for c in inspect(conn).get_columns("quarantine")}:
        raise LedgerError(
            "this store was made before the quarantine was chained: "
            "run `gpuledger init` once to upgrade it (it adds a column; no row changes)",
            option="db",
        )


def quarantine_head(conn: Connection) -> tuple[int, bytes]:
    """(rows stored, chain head): read from the last row, or recomputed when the store
    holds only rows from before the chain."""
    require_chain_column(conn)
    count = conn.execute(select(func.count()).select_from(quarantine)).scalar_one()
    last = conn.execute(
        select(quarantine.c.chain_hash).order_by(quarantine.c.qid.desc()).limit(1)
    ).scalar()
    if count == 0:
        return 0, ZERO_HASH
    if last is not None:
        return int(count), bytes(last)
    head = ZERO_HASH
    for row in stored_rows(conn):
        head = next_chain(head, row)
    return int(count), head


def stored_rows(conn: Connection) -> Iterator[Mapping[Any, Any]]:
    """Every quarantine row in qid order, a page at a time."""
    last = None
    while True:
        query = select(quarantine).order_by(quarantine.c.qid).limit(_PAGE)
        if last is not None:
            query = query.where(quarantine.c.qid > last)
        rows = conn.execute(query).mappings().all()
        if not rows:
            return
        yield from rows
        last = rows[-1]["qid"]


def chained_rows(conn: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows not yet stored (a file re-read quarantines a record at a line once),
    numbered after the last qid and chained after the head. Call under the append lock."""
    known = _stored_keys(conn, rows)
    count, head = quarantine_head(conn)
    last_qid = conn.execute(select(func.coalesce(func.max(quarantine.c.qid), 0))).scalar_one()
    fresh: list[dict[str, Any]] = []
    for row in rows:
        key = (row["file"], row["line"], bytes(row["record_hash"]))
        if key in known:
            continue
        known.add(key)
        numbered = {**row, "qid": int(last_qid) + len(fresh) + 1}
        head = next_chain(head, numbered)
        fresh.append({**numbered, "chain_hash": head})
    return fresh


def _stored_keys(conn: Connection, rows: list[dict[str, Any]]) -> set[tuple[str, int, bytes]]:
    lines_by_file: dict[str, set[int]] = {}
    for row in rows:
        lines_by_file.setdefault(row["file"], set()).add(row["line"])
    found: set[tuple[str, int, bytes]] = set()
    for file, lines in lines_by_file.items():
        ordered = sorted(lines)
        for start in range(0, len(ordered), 500):
            query = select(quarantine.c.line, quarantine.c.record_hash).where(
                quarantine.c.file == file, quarantine.c.line.in_(ordered[start : start + 500])
            )
            found.update((file, int(r.line), bytes(r.record_hash)) for r in conn.execute(query))
    return found


def add_chain_column(conn: Connection) -> None:
    """A store made before the chain gets the chain_hash column; its old rows keep NULL
    there and are chained when verified (rule 2). One made before the bound gets the
    record_length column; its old rows keep NULL there (they hold the record whole)."""
    columns = {c["name"] for c in inspect(conn).get_columns("quarantine")}
    if "chain_hash" not in columns:
        kind = "BYTEA" if conn.dialect.name == "postgresql" else "BLOB"
        conn.execute(text(f"ALTER TABLE quarantine ADD COLUMN chain_hash {kind}"))
    if "record_length" not in columns:
        conn.execute(text("ALTER TABLE quarantine ADD COLUMN record_length BIGINT"))


def quarantine_problem(conn: Connection, commitments: list[tuple[int, int, bytes]]) -> str | None:
    """Rules 1 to 3 over the stored rows, against (checkpoint_seq, count, head) commitments;
    what is wrong first, or None."""
    require_chain_column(conn)
    wanted: dict[int, list[tuple[int, bytes]]] = {}
    for number, count, head in commitments:
        wanted.setdefault(count, []).append((number, head))
    head, position, chained = ZERO_HASH, 0, False
    for problem in _commitment_problems(wanted.get(0, []), 0, head):
        return problem
    for row in stored_rows(conn):
        position += 1
        head = next_chain(head, row)
        stored = row["chain_hash"]
        if stored is None and chained:
            return (
                f"quarantine row qid {row['qid']} has no chain hash, after chained rows: it was "
                "written outside gpuledger"
            )
        if stored is not None and bytes(stored) != head:
            return (
                f"quarantine row qid {row['qid']} (row {position}): chain hash expected "
                f"{head.hex()}, stored {bytes(stored).hex()}: "
                "this row or one before it was planted, deleted or edited"
            )
        chained = chained or stored is not None
        for problem in _commitment_problems(wanted.get(position, []), position, head):
            return problem
    beyond = sorted(count for count in wanted if count > position)
    if beyond:
        number = wanted[beyond[0]][0][0]
        return (
            f"checkpoint #{number} commits to {beyond[0]} quarantined records, the quarantine "
            f"holds {position}: rows were deleted"
        )
    return None


def _commitment_problems(
    commitments: list[tuple[int, bytes]], count: int, head: bytes
) -> Iterator[str]:
    for number, committed in commitments:
        if committed != head:
            yield (
                f"checkpoint #{number} commits to {count} quarantined records with head "
                f"{committed.hex()}, "
                f"the quarantine gives {head.hex()}: a row was planted, deleted or edited"
            )
