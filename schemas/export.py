"""Export the JSON Schemas into schemas/json/ (`python -m schemas.export`, `make schemas`):
one per event type, and one per document under schemas/json/documents/ (the reports,
the reconciliation, the dispute and diagnostic packets, the evidence bundle).

The files are checked in; a test regenerates them in memory and fails on any drift.
"""

from __future__ import annotations

import json
from pathlib import Path

from schemas.documents import DOCUMENTS
from schemas.events import ENVELOPES

SCHEMA_DIR = Path(__file__).parent / "json"
BASE_ID = "https://gpuledger.invalid/schemas"


def schema_texts() -> dict[str, str]:
    """Path under SCHEMA_DIR → JSON Schema text, for every event type and document."""
    texts = {}
    for event_type, model in ENVELOPES.items():
        schema = model.model_json_schema()
        schema["$id"] = f"{BASE_ID}/{event_type}.json"
        texts[f"{event_type}.json"] = _text(schema)
    for name, document in DOCUMENTS.items():
        schema = _without_defaults(document.model_json_schema(by_alias=True))
        schema["$id"] = f"{BASE_ID}/documents/{name}.json"
        texts[f"documents/{name}.json"] = _text(schema)
    return texts


def _without_defaults(schema: dict[str, object]) -> dict[str, object]:
    """A document's member with a default is one it may leave out: the default is no value
    it stands for, so the schema names none (it says only that the member is optional)."""

    def walk(node: object) -> object:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items() if k != "default"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out = walk(schema)
    assert isinstance(out, dict)
    return out


def _text(schema: dict[str, object]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write_schemas(folder: Path = SCHEMA_DIR) -> list[Path]:
    written = []
    for name, text in schema_texts().items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_schemas():
        print(path)
