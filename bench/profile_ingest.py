"""Where an ingest's time goes (`python -m bench.profile_ingest [EVENTS] [--cprofile]`).

CPU time per event (this process, best of three) of each stage on the generated native
stream, every stage on the same events: parsing alone (read, validate, canonical bytes),
appending already parsed records (dedup, salts, hashes, tree, insert, commit), and the
driver alone writing the same rows (the ingest benchmark's baseline). With --cprofile,
the functions of a whole ingest by their own time.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import ingest
import ledger
from bench.ingest import baseline
from bench.sources import write_native


def cpu_us(events: int, step: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.process_time()
        step()
        best = min(best, time.process_time() - started)
    return best / events * 1e6


def main(argv: list[str]) -> None:
    events = int(next((a for a in argv if a.isdigit()), "100000"))
    with tempfile.TemporaryDirectory(prefix="gpuledger-profile-") as folder:
        source = Path(folder) / "events.jsonl"
        write_native(source, events)
        records = list(ingest.extract(source))
        urls = iter(f"sqlite:///{Path(folder) / f'{n}.db'}" for n in range(100))

        def append() -> None:
            store = ledger.Store(next(urls))
            store.init()
            ledger.append_stream(ledger.Appender(store), records)
            store.close()

        parse = cpu_us(events, lambda: deque(ingest.extract(source), maxlen=0))
        appended = cpu_us(events, append)
        written = next(urls)
        append_once = ledger.Store(written)
        append_once.init()
        ledger.append_stream(ledger.Appender(append_once), records)
        driver = min(baseline(written, next(urls)).cpu_s for _ in range(3)) / events * 1e6
        print(
            f"{events} events, CPU µs an event: parse {parse:.2f} · append {appended:.2f} "
            f"(of which the driver's insert and commit ≈ {driver:.2f}) · total ≈ "
            f"{parse + appended:.2f}"
        )
        if "--cprofile" in argv:
            profile = cProfile.Profile()
            profile.runcall(
                lambda: ledger.append_stream(
                    ledger.Appender(_fresh(next(urls))), ingest.extract(source)
                )
            )
            pstats.Stats(profile).sort_stats("tottime").print_stats(20)


def _fresh(url: str) -> ledger.Store:
    store = ledger.Store(url)
    store.init()
    return store


if __name__ == "__main__":
    main(sys.argv[1:])
