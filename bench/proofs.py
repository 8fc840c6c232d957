"""Checkpoint and proof cost at 1M and 10M entries (`python -m bench.proofs [SIZES...]`).

The ledger is synthetic: rows with the real schema and real leaf, chain and tree-node
hashes, but a stub event, written straight through sqlite3 (building 10M real entries
through ingest is the ingest benchmark's job, not this one's). Measured beside the
baseline, a root rebuilt from every leaf hash read from the same store, and with the
number of SQL statements each operation runs, which should grow as log n.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from hashlib import sha256
from pathlib import Path
from typing import Any

from sqlalchemy import event

from bench.results_file import record
from ledger import Store
from ledger.checkpoint import sign_checkpoint
from ledger.hashing import chain_hash
from ledger.merkle import Frontier, root_of_leaves
from ledger.note import Signer
from ledger.proofs import verify_consistency, verify_inclusion
from ledger.tree import TreeReader

_CHUNK = 200_000


def build(path: Path, size: int) -> Store:
    store = Store(f"sqlite:///{path}")
    store.init()
    raw = store.engine.raw_connection()
    db: Any = raw.dbapi_connection
    db.execute("PRAGMA synchronous=OFF")
    frontier, chain = Frontier(0), bytes(32)
    db.execute("BEGIN")
    for start in range(1, size + 1, _CHUNK):
        rows = []
        for seq in range(start, min(size, start + _CHUNK - 1) + 1):
            leaf = sha256(seq.to_bytes(8, "big")).digest()
            chain = chain_hash(chain, leaf)
            frontier.push(leaf)
            tenant = f"t{seq % 50}"
            rows.append(
                (
                    seq,
                    "t",
                    "bench",
                    str(seq),
                    "job.progress",
                    tenant,
                    seq // 50 + 1,
                    "{}",
                    bytes(16),
                    leaf,
                    chain,
                    None,
                )
            )
        db.executemany("INSERT INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        db.executemany("INSERT INTO tree_nodes VALUES (?,?,?)", frontier.completed)
        frontier.completed.clear()
    db.execute("INSERT INTO batches VALUES (1, 1, ?, ?, 't')", (size, chain))
    db.execute("COMMIT")
    raw.close()
    return store


class StatementCounter:
    def __init__(self, store: Store) -> None:
        self.count = 0
        event.listen(store.engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1


def measure(size: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        store = build(Path(folder) / "bench.db", size)
        built_s = time.perf_counter() - t0
        counter = StatementCounter(store)
        signer = Signer.generate("bench")
        t0 = time.perf_counter()
        checkpoint = sign_checkpoint(store, signer)
        checkpoint_ms = (time.perf_counter() - t0) * 1000
        checkpoint_statements = counter.count
        rng = random.Random(1)
        timings, statements = [], []
        with store.reading() as conn:
            reader = TreeReader(conn)
            for index in rng.sample(range(size), 200):
                before = counter.count
                t0 = time.perf_counter()
                proof = reader.inclusion_proof(index, size)
                timings.append((time.perf_counter() - t0) * 1000)
                statements.append(counter.count - before)
                verify_inclusion(
                    index,
                    size,
                    sha256((index + 1).to_bytes(8, "big")).digest(),
                    proof,
                    checkpoint.body.root,
                )
            t0 = time.perf_counter()
            consistency = reader.consistency_proof(size // 3, size)
            consistency_ms = (time.perf_counter() - t0) * 1000
            verify_consistency(
                size // 3, size, reader.root(size // 3), checkpoint.body.root, consistency
            )
            t0 = time.perf_counter()
            leaves = [
                bytes(h)
                for h in conn.exec_driver_sql(
                    "SELECT leaf_hash FROM entries ORDER BY seq"
                ).scalars()
            ]
            baseline_root = _rebuild(leaves)
            baseline_ms = (time.perf_counter() - t0) * 1000
        assert baseline_root == checkpoint.body.root
        store.close()
    median = statistics.median(timings)
    return {
        "entries": size,
        "build_s": round(built_s, 1),
        "checkpoint_ms": round(checkpoint_ms, 2),
        "checkpoint_sql_statements": checkpoint_statements,
        "inclusion_proof_ms_median": round(median, 3),
        "inclusion_proof_ms_p95": round(sorted(timings)[189], 3),
        "inclusion_proof_sql_statements_max": max(statements),
        "consistency_proof_ms": round(consistency_ms, 3),
        "baseline_rebuild_root_ms": round(baseline_ms, 1),
        "ratio_baseline_over_proof": round(baseline_ms / median, 1),
        "goal": "O(log n) reads; under 5 ms a proof at 10M",
    }


def _rebuild(leaves: list[bytes]) -> bytes:
    frontier = Frontier(0)
    for leaf in leaves:
        frontier.push(leaf)
    root = frontier.root()
    assert root is not None and (len(leaves) > 64 or root == root_of_leaves(leaves))
    return root


if __name__ == "__main__":
    sizes = [int(s) for s in sys.argv[1:]] or [1_000_000, 10_000_000]
    for n in sizes:
        result = measure(n)
        record(f"proofs_{n}", result)
        print(result, flush=True)
