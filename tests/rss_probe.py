"""Run one gpuledger command in this process and print its peak RSS in MiB last (and,
before it, the peak of its child processes, such as the parsing process of a large
ingest, and the sum of both).

Used by the streaming tests: `python tests/rss_probe.py ingest --db URL FILE`.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from pathlib import Path

from cli import main


def vm_hwm_mib(pid: str = "self") -> float | None:
    """VmHWM: the high-water mark of a process image (reset by execve), or None when the
    process is gone. ru_maxrss is not used where /proc exists, since Linux carries it over
    from the forking parent across execve (a child would report the parent's size)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def peak_rss_mib() -> float:
    own = vm_hwm_mib()
    return own if own is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class ChildPeaks(threading.Thread):
    """Samples the VmHWM of this process's children until stopped: a high-water mark,
    so a sample late in a child's life holds its peak."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        me = str(os.getpid())
        while not self.stop.wait(0.05):
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    parent = stat.read_text().rsplit(")", 1)[1].split()[1]
                except (OSError, IndexError):
                    continue
                if parent == me:
                    peak = vm_hwm_mib(stat.parent.name)
                    if peak is not None:
                        self.peaks[stat.parent.name] = max(
                            peak, self.peaks.get(stat.parent.name, 0.0)
                        )


if __name__ == "__main__":
    children = ChildPeaks()
    children.start()
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    children.stop.set()
    children.join()
    child = max(children.peaks.values(), default=0.0)
    print(
        f"child_peak_rss_mib={child:.1f} total_peak_rss_mib={peak_rss_mib() + child:.1f}",
        flush=True,
    )
    print(f"peak_rss_mib={peak_rss_mib():.1f}", flush=True)
    sys.exit(code if isinstance(code, int) else 1)
