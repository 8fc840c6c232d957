"""Writers append while readers reconcile. Several `gpuledger ingest` processes
write one store at once, and reader threads run the reconciliation engine meanwhile, each
on one snapshot (docs/ledger-format.md: a batch is all or nothing). Every reconciliation must
be the reconciliation of a whole-batch prefix of the final ledger: the same JSON as the
final store reconciled with `upto_seq` at the size the reader saw, and that size the end
of a committed batch.

Each writer is one source feeding one tenant: a grant held from 00:00 and never released,
then rounds of a job (start, progress each minute, completion, acceptance) each billed by
a line. Every event of a tenant is later than the one before it, except a line, which
adds a line: so each entry changes the answer (a later event moves the tenant's horizon
and with it the unbilled time), and a reader that saw part of a batch, or missed an
entry below the top it saw, would give an answer no whole-batch prefix gives.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import text

from ledger import Store, verify_ledger
from reconcile.engine import engine, reconcile_store, run
from reconcile.engine.snapshot import load_pages, store_pages
from tests.conftest import ROOT, SLOW, write_jsonl
from tests.reconcile_helpers import Scenario

WRITERS = 8 if SLOW else 6
ROUNDS = 120 if SLOW else 40  # jobs per writer, each billed by one line
MARKS = 8  # progress events per job, one a minute
GPUS = 2
LINE_AMOUNT = "1.20"
BATCH = 5  # small batches: many commits for the readers to land between
READERS = 2
PAUSE_S = 0.05  # between a reader's reconciliations: leaves the writers some CPU


def clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def job_start(k: int) -> int:
    """The minute job k starts: each round takes MARKS + 3 minutes, after the grant at 0."""
    return 1 + k * (MARKS + 3)


def writer_events(w: int) -> list[dict[str, Any]]:
    s = Scenario(tenant=f"t{w}")
    s.grant("A1", gpus=GPUS, at=clock(0))
    for k in range(ROUNDS):
        start, job = job_start(k), f"j{k}"
        s.start(job, "A1", at=clock(start))
        s.steps(job, *(clock(start + 1 + i) for i in range(MARKS)))
        s.complete(job, at=clock(start + MARKS + 1))
        s.result(job, "accepted", at=clock(start + MARKS + 2))
        # Billed from the job's start to its completion, appended after its acceptance.
        s.line(
            f"L{k}",
            "A1",
            clock(start),
            clock(start + MARKS + 1),
            gpus=GPUS,
            amount=LINE_AMOUNT,
            invoice=f"INV-{w}",
        )
    # Each writer is its own source, so the scenario's ids do not collide across writers.
    return [{**e, "source": f"test://writer-{w}"} for e in s.events]


@dataclass(frozen=True)
class Sighting:
    """One reconciliation by a reader, and the snapshot it ran on."""

    size: int  # the highest seq in the snapshot
    count: int  # the entries in it
    doc: dict[str, Any]


class ReconcilingReader(threading.Thread):
    """Reconciles the store until told to stop, reading the snapshot's size inside the same
    read transaction as the entries the engine loads."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.store = Store(url)
        self.stop = threading.Event()
        self.sightings: list[Sighting] = []
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                sighting = self.reconcile()
                if sighting is not None:
                    self.sightings.append(sighting)
            except (
                Exception
            ) as exc:  # the store exists before readers start: any error is a finding
                self.failures.append(repr(exc))
            self.stop.wait(PAUSE_S)

    def reconcile(self) -> Sighting | None:
        with self.store.reading() as conn:
            size, count = conn.execute(
                text("SELECT coalesce(max(seq), 0), count(*) FROM entries")
            ).one()
            if size == 0:
                # no batch yet; the engine would only take CPU from the writers starting up
                return None
            with engine(
                int(size), threads=1
            ) as con:  # one thread: the writers need the other core
                load_pages(con, store_pages(conn))
                doc = run(con).as_json()
        return Sighting(int(size), int(count), doc)


def ingest_all(db_url: str, files: list[Path]) -> list[tuple[str, str, int]]:
    command = [
        sys.executable,
        "-c",
        "from cli import main; main()",
        "ingest",
        "--db",
        db_url,
        "--batch-size",
        str(BATCH),
    ]
    procs = [
        subprocess.Popen(
            [*command, str(f)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for f in files
    ]
    return [p.communicate(timeout=300) + (p.returncode,) for p in procs]


def reconcile_while_writing(
    db_url: str, files: list[Path]
) -> tuple[list[tuple[str, str, int]], list[ReconcilingReader]]:
    Store(db_url).init()  # readers start before the writers
    readers = [ReconcilingReader(db_url) for _ in range(READERS)]
    for reader in readers:
        reader.start()
    outcomes = ingest_all(db_url, files)
    for reader in readers:
        reader.stop.set()
        reader.join(timeout=120)
        reader.store.close()
    return outcomes, readers


def batches_by_end(store: Store) -> dict[int, int]:
    """Each committed batch's last seq, with its first."""
    with store.reading() as conn:
        return {
            int(last): int(first)
            for first, last in conn.execute(text("SELECT first_seq, last_seq FROM batches"))
        }


def test_readers_reconciling_during_writes_see_whole_batch_prefixes(
    tmp_path: Path, db_url: str
) -> None:
    files = [write_jsonl(tmp_path / f"w{w}.jsonl", writer_events(w)) for w in range(WRITERS)]
    total = WRITERS * (
        1 + ROUNDS * (MARKS + 4)
    )  # the grant, then per round: start, marks, end, result, line
    outcomes, readers = reconcile_while_writing(db_url, files)

    for _out, err, code in outcomes:
        assert code == 0, err
    assert sum(int(out.split("appended ")[1].split(" ")[0]) for out, _, _ in outcomes) == total
    store = Store(db_url)
    result = verify_ledger(store)
    assert result.ok, str(result.problem)
    batches = batches_by_end(store)
    ends = set(batches)
    assert max(ends) == total

    failures = [f for reader in readers for f in reader.failures]
    assert not failures, failures[:3]
    sightings = [s for reader in readers for s in reader.sightings]
    assert all(s.count == s.size for s in sightings), [
        (s.size, s.count) for s in sightings if s.count != s.size
    ][:3]
    sizes = {s.size for s in sightings}  # never 0: readers skip the empty store
    assert sizes <= ends, f"snapshots ending inside a batch: {sorted(sizes - ends)[:3]}"
    in_progress = sorted(sizes - {total})
    assert len(in_progress) >= 2, (
        f"fewer than 2 reconciliations saw a write in progress: sizes {sorted(sizes)}"
    )

    prefixes = {size: reconcile_store(store, upto_seq=size).as_json() for size in sizes}
    for s in sightings:
        assert s.doc == prefixes[s.size], (
            f"the reconciliation of a snapshot of {s.size} entries is not the prefix's"
        )
    assert_part_of_a_batch_differs(
        store, {size: batches[size] for size in in_progress[:3]}, prefixes
    )
    assert_final_figures(reconcile_store(store).as_json())
    store.close()


def assert_part_of_a_batch_differs(
    store: Store, firsts: dict[int, int], prefixes: dict[int, dict[str, Any]]
) -> None:
    """The check above can fail: a reader that saw the batch ending at `size` only up to its
    middle, or only up to one entry short, would have reconciled to something else."""
    for size, first in firsts.items():
        for short in {(first - 1 + size) // 2, size - 1}:
            assert reconcile_store(store, upto_seq=short).as_json() != prefixes[size], (
                short,
                size,
            )


def assert_final_figures(doc: dict[str, Any]) -> None:
    """Worked by hand from the scenario, not from the engine: each line bills GPUS over
    [start, start + MARKS + 1) minutes; the grant is held from 00:00 to the tenant's
    horizon, its last acceptance at job_start(ROUNDS - 1) + MARKS + 2."""
    billed = ROUNDS * GPUS * (MARKS + 1) * 60
    held = GPUS * (job_start(ROUNDS - 1) + MARKS + 2) * 60
    assert len(doc["lines"]) == WRITERS * ROUNDS
    assert set(doc["tenants"]) == {f"t{w}" for w in range(WRITERS)}
    for name, node in doc["tenants"].items():
        assert (node["billed_gpu_seconds"], node["unbilled_gpu_seconds"]) == (
            billed,
            held - billed,
        ), name
        assert node["by_bearer"]["customer"] == str(ROUNDS * Decimal(LINE_AMOUNT)), name
