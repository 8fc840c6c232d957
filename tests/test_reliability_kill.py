"""kill -9 at random points of an ingest, on both backends (docs/ledger-format.md: a batch is all
or nothing). After each kill the store verifies and holds exactly the first k batches of
the source (events and quarantined records alike) for some k: never part of one. Each
re-run picks up where the last stopped; the last one, left to finish, ends with exactly the
source's events, none twice and none lost, and each bad record quarantined once.

Most kill points are an entry count to wait for (the ingest is then somewhere in its next
batch: parsing, hashing, inserting or committing), the rest a random delay from the start
(start-up, init, the duplicates at the head of the file). 8 points a backend by default,
50 with GPULEDGER_SLOW=1; GPULEDGER_KILL_SEED picks other points.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from sqlalchemy import text

from ledger import Store
from tests.conftest import ROOT, SLOW
from tests.reliability import (
    assert_verifies,
    canonical_lines,
    cli,
    source_file,
    start_cli,
    stored_events,
)

POINTS = 50 if SLOW else 8
EVENTS = 4000
BAD_EVERY = 350  # an invalid record every 350 events: quarantine rows are part of a batch too
BATCH = 100
SEED = int(os.environ.get("GPULEDGER_KILL_SEED", "9"))


def stored_count(store: Store) -> int:
    try:
        with store.reading() as conn:
            return int(
                conn.execute(text("SELECT coalesce(max(seq), 0) FROM entries")).scalar_one()
            )
    except Exception:  # not initialised yet: nothing stored
        return 0


def initialised(url: str) -> bool:
    store = Store(url)
    try:
        return store.is_initialised()
    finally:
        store.close()


def kill_at(url: str, source: Path, rng: random.Random, target: int | None) -> bool:
    """Start an ingest and SIGKILL it once `target` entries are stored (or after a random
    delay when target is None); True when it was still running."""
    process = start_cli("ingest", "--db", url, "--batch-size", str(BATCH), str(source))
    store = Store(url)
    try:
        if target is None:
            time.sleep(rng.uniform(0, 1.5))
        else:
            while process.poll() is None and stored_count(store) < target:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.03))  # anywhere in the batch after the target
        running = process.poll() is None
        if running:
            os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=120)
        return running
    finally:
        store.close()


def file_records(source: Path) -> list[tuple[tuple[str, str], bool, int]]:
    """Each record of the source in file order: key, whether it is valid, line number."""
    records = []
    for number, line in enumerate(source.read_bytes().splitlines(), start=1):
        raw = orjson.loads(line)
        records.append(((raw["source"], raw["id"]), isinstance(raw["data"]["step"], int), number))
    return records


def stored_batches(url: str, records: list[tuple[tuple[str, str], bool, int]]) -> int:
    """k such that the store holds exactly the first k batches of the source."""
    keys = set(stored_events(url))
    store = Store(url)
    try:
        with store.reading() as conn:
            lines = [
                int(r[0]) for r in conn.execute(text("SELECT line FROM quarantine ORDER BY line"))
            ]
    finally:
        store.close()
    for k in range(0, len(records) // BATCH + 2):
        prefix = records[: k * BATCH]
        if keys == {key for key, valid, _ in prefix if valid}:
            assert lines == [line for _, valid, line in prefix if not valid], (
                f"quarantine is not that of {k} whole batches"
            )
            return k
    raise AssertionError(
        f"the {len(keys)} stored events are not the first whole batches of the source"
    )


def test_kill_nine_at_random_points(tmp_path: Path, db_url: str) -> None:
    source = source_file(tmp_path / "events.jsonl", 0, EVENTS, bad_every=BAD_EVERY)
    records = file_records(source)
    rng = random.Random(SEED)
    targets: list[int | None] = list(sorted(rng.sample(range(1, EVENTS), POINTS - POINTS // 4)))
    for _ in range(POINTS // 4):
        targets.insert(rng.randrange(len(targets) + 1), None)
    killed, batches = 0, []
    for target in targets:
        killed += kill_at(db_url, source, rng, target)
        if not initialised(db_url):
            batches.append(
                0
            )  # killed before `init` committed: no store yet (init is one transaction)
            continue
        assert_verifies(db_url)
        batches.append(stored_batches(db_url, records))
    assert killed >= POINTS // 2, (
        f"only {killed} of {POINTS} ingests were still running when killed"
    )
    assert batches == sorted(batches)  # a re-run never loses what an earlier one stored
    finished = cli("ingest", "--db", db_url, str(source))
    assert finished.returncode == 1, finished.stderr  # 1: the bad records are (still) quarantined
    assert stored_events(db_url) == canonical_lines(source)
    assert stored_batches(db_url, records) == -(-len(records) // BATCH)
    assert assert_verifies(db_url) == len(canonical_lines(source))


PARALLEL_CLI = [
    sys.executable,
    "-c",
    "import ingest.worker as w; w.MIN_BYTES = 0; from cli import main; main()",
]


def parsing_children_of(source: Path) -> list[int]:
    """Processes parsing `source` for an ingest (found by command line: once their parent
    is killed they belong to init)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ingest.worker" in words and str(source).encode() in words:
            found.append(int(cmdline.parent.name))
    return found


@pytest.mark.skipif(
    not Path("/proc/self/cmdline").exists(), reason="finds the parsing process in /proc"
)
def test_kill_nine_with_a_parsing_child(tmp_path: Path, sqlite_url: str) -> None:
    """The ingest parses in a child process (as it does for large files): killing the
    ingest leaves no child behind, and the same rules hold."""
    # Large enough that the child is still parsing (blocked: its reader is chunks ahead)
    # while the ingest appends the first 5000.
    source = source_file(tmp_path / "events.jsonl", 0, 40_000, bad_every=BAD_EVERY)
    records = file_records(source)
    rng = random.Random(SEED)
    for target in sorted(rng.sample(range(1, 5000), 10 if SLOW else 3)):
        process = subprocess.Popen(
            [*PARALLEL_CLI, "ingest", "--db", sqlite_url, "--batch-size", str(BATCH), str(source)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        store = Store(sqlite_url)
        # The target may be stored already: wait for the child too, then for the target.
        while process.poll() is None and not parsing_children_of(source):
            time.sleep(0.005)
        while process.poll() is None and stored_count(store) < target:
            time.sleep(0.005)
        store.close()
        assert parsing_children_of(source), (
            "the ingest parses in-process: the test is not testing a child"
        )
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=120)
        deadline = time.monotonic() + 60  # liveness: the orphan meets a closed pipe and exits
        while parsing_children_of(source) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert parsing_children_of(source) == []
        assert_verifies(sqlite_url)
        stored_batches(sqlite_url, records)
    assert cli("ingest", "--db", sqlite_url, str(source)).returncode == 1
    assert stored_events(sqlite_url) == canonical_lines(source)
