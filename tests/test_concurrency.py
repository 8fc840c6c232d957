"""Eight ingest processes at once on one store make one gapless chain, and readers taking
snapshots meanwhile only ever see whole batches (docs/ledger-format.md)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from sqlalchemy import func, select, text

from ledger import Store, verify_ledger
from ledger.tables import entries
from tests.conftest import ROOT, progress, write_jsonl

WRITERS = 8
READERS = 2
OWN = 200  # events only one writer has
SHARED = 100  # events every writer has, byte for byte the same


class SnapshotReader(threading.Thread):
    """Takes snapshots until told to stop; in each, the highest seq must be the end of a
    committed batch, in the batches table of that same snapshot, with no seq missing."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.store = Store(url)
        self.stop = threading.Event()
        self.seen: list[int] = []
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.seen.append(self.snapshot())
                self.stop.wait(0.005)  # leave the writers the CPU
            except AssertionError as exc:
                self.failures.append(str(exc))
            except Exception:  # the store is not initialised yet
                continue

    def snapshot(self) -> int:
        with self.store.reading() as conn:
            top, count = conn.execute(
                text("SELECT coalesce(max(seq), 0), count(*) FROM entries")
            ).one()
            boundaries = {int(r[0]) for r in conn.execute(text("SELECT last_seq FROM batches"))}
        assert top == count, f"a snapshot holds {count} entries up to seq {top}"
        assert top == 0 or top in boundaries, (
            f"a snapshot ends at seq {top}, inside a batch (ends: {sorted(boundaries)[-3:]})"
        )
        return int(top)


def test_eight_writers_make_one_chain_and_readers_see_whole_batches(
    tmp_path: Path, db_url: str
) -> None:
    shared = [progress(10_000 + i, tenant="shared") for i in range(SHARED)]
    files = []
    for w in range(WRITERS):
        own = [progress(i, tenant=f"t{w % 3}", source=f"test://writer-{w}") for i in range(OWN)]
        # Interleave so the writers contend for the same keys in the middle of their runs.
        mixed = own[:100] + shared + own[100:]
        files.append(write_jsonl(tmp_path / f"w{w}.jsonl", mixed))
    Store(db_url).init()  # readers start before the writers
    readers = [SnapshotReader(db_url) for _ in range(READERS)]
    for reader in readers:
        reader.start()
    command = [
        sys.executable,
        "-c",
        "from cli import main; main()",
        "ingest",
        "--db",
        db_url,
        "--batch-size",
        "20",
    ]
    procs = [
        subprocess.Popen(
            [*command, str(f)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for f in files
    ]
    outcomes = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    for reader in readers:
        reader.stop.set()
        reader.join(timeout=60)
        reader.store.close()
    for _out, err, code in outcomes:
        assert code == 0, err
    appended = sum(int(out.split("appended ")[1].split(" ")[0]) for out, _, _ in outcomes)
    distinct = WRITERS * OWN + SHARED
    assert appended == distinct
    store = Store(db_url)
    with store.reading() as conn:
        count, top = conn.execute(select(func.count(), func.max(entries.c.seq))).one()
        boundaries = {int(r[0]) for r in conn.execute(text("SELECT last_seq FROM batches"))}
    assert (count, top) == (distinct, distinct)
    result = verify_ledger(store)
    assert result.ok, str(result.problem)
    failures = [f for reader in readers for f in reader.failures]
    assert not failures, failures[:3]
    seen = {s for reader in readers for s in reader.seen}
    assert seen <= boundaries | {0}
    assert len(seen - {0, distinct}) >= 2, f"the readers saw no write in progress: {sorted(seen)}"
