"""Write a large CloudEvents JSON Lines file of job.progress events (for memory runs).

`python tests/big_jsonl.py PATH SIZE_MIB`
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson


def write_big(path: Path, size_mib: int) -> int:
    limit, written, n = size_mib << 20, 0, 0
    with path.open("wb") as out:
        while written < limit:
            chunk = b"".join(
                orjson.dumps(
                    {
                        "specversion": "1.0",
                        "id": f"p{n + i}",
                        "source": "sim://node-1",
                        "type": "job.progress",
                        "time": "2026-01-05T10:00:00Z",
                        "data": {
                            "tenant": f"t{(n + i) % 16}",
                            "job_id": f"j{(n + i) % 97}",
                            "step": n + i,
                            "units": (n + i) * 4096,
                        },
                    }
                )
                + b"\n"
                for i in range(10_000)
            )
            out.write(chunk)
            written += len(chunk)
            n += 10_000
    return n


if __name__ == "__main__":
    print(write_big(Path(sys.argv[1]), int(sys.argv[2])))
