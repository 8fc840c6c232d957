"""Four ingest processes at once on one store make one gapless chain (DESIGN.md §3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import func, select

from ledger import Store, verify_ledger
from ledger.tables import entries
from tests.conftest import ROOT, progress, write_jsonl

WRITERS = 4
OWN = 200      # events only one writer has
SHARED = 100   # events every writer has, byte for byte the same


def test_four_writers_make_one_chain(tmp_path: Path, db_url: str) -> None:
    shared = [progress(10_000 + i, tenant="shared") for i in range(SHARED)]
    files = []
    for w in range(WRITERS):
        own = [progress(i, tenant=f"t{w % 2}", source=f"test://writer-{w}") for i in range(OWN)]
        # Interleave so the writers contend for the same keys in the middle of their runs.
        mixed = own[:100] + shared + own[100:]
        files.append(write_jsonl(tmp_path / f"w{w}.jsonl", mixed))
    command = [sys.executable, "-c", "from cli import main; main()", "ingest", "--db", db_url, "--batch-size", "20"]
    procs = [subprocess.Popen([*command, str(f)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for f in files]
    outcomes = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    for out, err, code in outcomes:
        assert code == 0, err
    appended = sum(int(out.split("appended ")[1].split(" ")[0]) for out, _, _ in outcomes)
    distinct = WRITERS * OWN + SHARED
    assert appended == distinct
    store = Store(db_url)
    with store.reading() as conn:
        count, top = conn.execute(select(func.count(), func.max(entries.c.seq))).one()
    assert (count, top) == (distinct, distinct)
    result = verify_ledger(store)
    assert result.ok, str(result.problem)
