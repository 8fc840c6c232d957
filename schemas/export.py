"""Export one JSON Schema per event type into schemas/json/ (`python -m schemas.export`).

The files are checked in; a test regenerates them in memory and fails on any drift.
"""

from __future__ import annotations

import json
from pathlib import Path

from schemas.events import ENVELOPES

SCHEMA_DIR = Path(__file__).parent / "json"


def schema_texts() -> dict[str, str]:
    """File name → JSON Schema text, for every event type."""
    texts = {}
    for event_type, model in ENVELOPES.items():
        schema = model.model_json_schema()
        schema["$id"] = f"https://gpuledger.invalid/schemas/{event_type}.json"
        texts[f"{event_type}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return texts


def write_schemas(folder: Path = SCHEMA_DIR) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_texts().items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_schemas():
        print(path)
