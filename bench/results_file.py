"""Results go to bench/results.json, one key per benchmark, merged with earlier runs.

Benchmarks of different parts may finish at the same moment: each merge holds an
exclusive lock on a side file while it reads, merges and replaces the results (written
to a temporary file first, so a reader never sees half of it)."""

from __future__ import annotations

import fcntl
import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results.json"


def record(name: str, result: dict[str, Any]) -> None:
    result = dict(
        result,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        machine=(
            f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}"
        ),
    )
    with open(RESULTS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        data[name] = result
        temporary = RESULTS.with_suffix(".tmp")
        temporary.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(temporary, RESULTS)
