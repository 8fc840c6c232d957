"""Run one gpuledger command in this process and print its peak RSS in MiB last (and,
before it, that of its largest child process and the sum of both).

Used by the streaming tests: `python tests/rss_probe.py ingest --db URL FILE`.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

from cli import main


def peak_rss_mib() -> float:
    """VmHWM: the high-water mark of this process image. ru_maxrss is not used where
    /proc exists, since Linux carries it over from the forking parent across execve."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    # A child (the parsing process of a large ingest) has its own peak; ru_maxrss of the
    # reaped children is the largest one's. Both print before the main figure, read last.
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"child_peak_rss_mib={children:.1f} total_peak_rss_mib={peak_rss_mib() + children:.1f}", flush=True)
    print(f"peak_rss_mib={peak_rss_mib():.1f}", flush=True)
    sys.exit(code if isinstance(code, int) else 1)
