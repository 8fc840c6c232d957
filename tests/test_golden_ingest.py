"""Golden files: what each ingestor makes of each checked-in sample, record by record.

`fixtures/golden/<sample>.golden` holds one line a record, in file order: the line it was
read from and the event's canonical bytes, or `REJECTED`, the field and the reason. A
change to an ingestor that changes one byte of what it appends fails here, and the diff
shows which record changed and how. Regenerate only on purpose, and read the diff:

    GPULEDGER_GOLDEN=write .venv/bin/python -m pytest tests/test_golden_ingest.py
"""

from __future__ import annotations

import os

import pytest

from ingest import extract
from schemas.records import Accepted
from tests.test_samples import ROWS, SAMPLES

GOLDEN = SAMPLES.parent / "golden"
#: Formats that date a capture by the file's modification time unless told: pinned here,
#: so that a fresh clone (new mtimes) reads the same events.
PINNED = {"scrape_time": "2026-01-07T10:00:00Z"}
NEEDS_PIN = {"nvidia-smi-topo", "nvbandwidth", "nccl-tests", "dcgmi-diag"}


def _options(flags: list[str]) -> dict[str, str]:
    names = [f.removeprefix("--").replace("-", "_") for f in flags[::2]]
    return dict(zip(names, flags[1::2], strict=True))


def render(name: str, fmt: str, flags: list[str]) -> str:
    options = _options(flags) | (PINNED if fmt in NEEDS_PIN else {})
    lines = []
    for record in extract(SAMPLES / name, fmt, **options):
        if isinstance(record, Accepted):
            lines.append(f"{record.origin.line}\t{record.body.decode()}")
        else:
            lines.append(f"{record.origin.line}\tREJECTED\t{record.field}\t{record.reason}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("name", "fmt", "flags"), [pytest.param(r[0], r[1], r[2], id=r[0]) for r in ROWS]
)
def test_ingestor_output_matches_its_golden_file(name: str, fmt: str, flags: list[str]) -> None:
    golden = GOLDEN / f"{name}.golden"
    made = render(name, fmt, flags)
    if os.environ.get("GPULEDGER_GOLDEN") == "write":
        golden.write_text(made, encoding="utf-8")
    assert golden.exists(), (
        f"no golden file {golden.name}: regenerate on purpose (see this module's docstring)"
    )
    assert made == golden.read_text(encoding="utf-8")
