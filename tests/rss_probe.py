"""Run one gpuledger command in this process and print its peak RSS in MiB last.

Used by the streaming tests: `python tests/rss_probe.py ingest --db URL FILE`.
"""

from __future__ import annotations

import resource
import sys

from cli import main

if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    print(f"peak_rss_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}", flush=True)
    sys.exit(code if isinstance(code, int) else 1)
