"""Ingest memory stays flat with file size (peak RSS measured in a child process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.big_jsonl import write_big
from tests.conftest import ROOT, SLOW

LIMIT_MIB = 300


def peak_rss_mib(tmp_path: Path, size_mib: int) -> tuple[float, float]:
    """The ingest's own peak RSS, and that plus its parsing child's (files of 16 MiB and up)."""
    source = tmp_path / f"events-{size_mib}.jsonl"
    count = write_big(source, size_mib)
    db = f"sqlite:///{tmp_path / f'ledger-{size_mib}.db'}"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "rss_probe.py"), "ingest", "--db", db, str(source)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stderr
    assert f"appended {count} ·" in done.stdout
    source.unlink()
    total = float(done.stdout.split("total_peak_rss_mib=", 1)[1].split()[0])
    return float(done.stdout.rsplit("peak_rss_mib=", 1)[1]), total


def test_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    small, _ = peak_rss_mib(tmp_path, 2)
    large, large_total = peak_rss_mib(tmp_path, 24)  # twelve times the events
    assert large_total < LIMIT_MIB
    assert large < small + 25, f"peak RSS grew from {small} MiB to {large} MiB"


@pytest.mark.skipif(not SLOW, reason="long run (about 20 minutes): set GPULEDGER_SLOW=1")
def test_two_gigabytes_ingest_under_300_mib(tmp_path: Path) -> None:
    assert peak_rss_mib(tmp_path, 2048)[1] < LIMIT_MIB
