"""Every benchmark in turn (`python -m bench.run [--quick]`), results into bench/results.json.

Full: ingest (1M native events into SQLite; PostgreSQL, FOCUS and sacct at 200k-250k),
verify (1M entries), proofs at 1M and 10M entries, verify-packet on a tenant's month (1M entries),
memory at 2 GiB of JSON Lines,
reconcile (10,000 GPUs for 30 days beside pandas on a tenth) and its scaling series,
the end-to-end path (bench/e2e.py: 64 GPUs for 7 days on each backend) and its growth
at 16, 32, 64 days, reconcile from a SQLite store at 500, 1,000, 2,000 GPUs x 30 days
(bench/field_scale.py):
well over an hour on two cores. Quick: small sizes of each, one run, about a minute.
"""

from __future__ import annotations

import argparse

from bench import e2e, field_scale, ingest, memory, packet, proofs, verify
from bench import reconcile as reconcile_bench
from bench.results_file import record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each")
    args = parser.parse_args()
    quick = ["--quick"] if args.quick else []
    ingest.main(quick)
    verify.main(quick)
    for size in [20_000] if args.quick else [1_000_000, 10_000_000]:
        result = proofs.measure(size)
        record(f"proofs_{size}", result)
        print(f"proofs {size}: {result}", flush=True)
    packet.main(quick)  # verify-packet on one tenant's month: 1M entries (quick: 20k)
    memory.main(["16"] if args.quick else ["2048"])
    # reconcile: 10,000 GPUs x 30 days beside pandas on a tenth, then the scaling series
    reconcile_bench.main(["--quick"] if args.quick else [])
    if not args.quick:
        reconcile_bench.main(["--scaling", "--gpus", "1250", "--days", "10"])
    # the user's path end to end (ingest .. verify-packet) on bench.reconcile's fleet
    for backend in ("sqlite", "postgresql"):
        e2e.main(
            ["--backend", backend]
            + (["--quick"] if args.quick else ["--gpus", "64", "--days", "7"])
        )
    # its growth at 1x, 2x, 4x the events (quick: SQLite only, 16 GPUs for 1, 2, 4 days)
    for backend in ("sqlite",) if args.quick else ("sqlite", "postgresql"):
        e2e.main(
            ["--scale", "--backend", backend]
            + (["--gpus", "16", "--days", "1"] if args.quick else ["--gpus", "64", "--days", "16"])
        )
    if not args.quick:  # reconcile from a SQLite store toward 10,000 GPUs x 30 days
        field_scale.main(["--gpus", "500", "1000", "2000", "--days", "30", "--cli"])


if __name__ == "__main__":
    main()
