"""Results go to bench/results.json, one key per benchmark, merged with earlier runs."""

from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results.json"


def record(name: str, result: dict[str, Any]) -> None:
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    result = dict(result, measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  machine=f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}")
    data[name] = result
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
