"""The quarantine's chain under concurrent writers: four files with bad lines, each
ingested by two processes at once, make one linear chain with each rejected record once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sqlalchemy import func, select

from ledger import Store, verify_ledger
from ledger.tables import quarantine
from tests.conftest import ROOT, progress

FILES = 4
GOOD, BAD = 30, 10


def test_concurrent_ingests_chain_each_rejected_record_once(tmp_path: Path, db_url: str) -> None:
    paths = []
    for f in range(FILES):
        lines = [json.dumps(progress(i, source=f"test://file-{f}")) for i in range(GOOD)]
        for b in range(BAD):
            lines.insert(3 * b + 1, '{"not": "an event", "file": %d, "n": %d}' % (f, b))
        path = tmp_path / f"f{f}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    Store(db_url).init()
    command = [
        sys.executable,
        "-c",
        "from cli import main; main()",
        "ingest",
        "--db",
        db_url,
        "--batch-size",
        "7",
    ]
    procs = [
        subprocess.Popen(
            [*command, str(p)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for p in paths + paths
    ]
    outcomes = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert [code for _, _, code in outcomes] == [1] * (2 * FILES), [
        err for _, err, _ in outcomes
    ]  # 1: records quarantined
    store = Store(db_url)
    with store.reading() as conn:
        count, top = conn.execute(select(func.count(), func.max(quarantine.c.qid))).one()
    assert (count, top) == (FILES * BAD, FILES * BAD)
    result = verify_ledger(store)
    assert result.ok, str(result.problem)
