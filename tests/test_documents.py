"""The documents at gpuledger's boundaries (schemas/documents/): every JSON file the demo
writes reads into its model and writes back byte for byte; a document with a member of
the wrong type, or one the format does not define, is refused with the member's place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.documents import DOCUMENTS, Document, InvalidDocument
from schemas.documents.reports import REPORT_DOCUMENTS
from schemas.export import SCHEMA_DIR
from tests.conftest import run_cli as run


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    code, _, err = run("demo", "--out", str(out))
    assert code == 0, err
    return out


def written(demo: Path) -> list[tuple[Path, type[Document]]]:
    """Each JSON document the demo wrote, with its model."""
    found: list[tuple[Path, type[Document]]] = [
        (demo / "reconcile.json", DOCUMENTS["reconciliation"])
    ]
    found += [(p, DOCUMENTS["dispute-packet"]) for p in demo.glob("dispute-*.json")]
    found += [(p, DOCUMENTS["diagnostic-packet"]) for p in demo.glob("packet-*/packet.json")]
    for path in sorted((demo / "reports").glob("*.json")):
        found.append((path, REPORT_DOCUMENTS[path.stem.split("_")[0]]))
    return found


def test_every_document_the_demo_writes_reads_and_writes_back_unchanged(demo: Path) -> None:
    documents = written(demo)
    kinds = {model for _, model in documents}
    # the serve API's lists are documents of the server, not of the demo
    served = {DOCUMENTS["serve.lines"], DOCUMENTS["serve.findings"]}
    assert kinds == set(DOCUMENTS.values()) - {DOCUMENTS["evidence-bundle"], *served}
    assert len(documents) == 9  # reconciliation, dispute, diagnostic, 5 reports, envelope by class
    for path, model in documents:
        text = path.read_text(encoding="utf-8")
        assert model.from_json(text).to_json() == text, path.name
        assert model.from_json(text.encode("utf-8")).to_json() == text, path.name


def test_the_dispute_packets_bundle_is_its_document_too(demo: Path) -> None:
    [path] = demo.glob("dispute-*.json")
    bundle = json.loads(path.read_text(encoding="utf-8"))["bundle"]
    model = DOCUMENTS["evidence-bundle"]
    assert model.parse(bundle).to_dict() == bundle
    assert json.loads(model.from_json(json.dumps(bundle)).to_json()) == bundle


def test_a_member_of_the_wrong_type_is_named_by_its_place(demo: Path) -> None:
    doc = json.loads((demo / "reports" / "capacity.json").read_text(encoding="utf-8"))
    doc["changes"][0]["windows"][1]["starts"] = "2"
    with pytest.raises(InvalidDocument) as caught:
        DOCUMENTS["report.capacity"].parse(doc)
    assert (
        str(caught.value)
        == "capacity.changes[0].windows[1].starts: expected an integer, got a string"
    )
    assert caught.value.option is None


def test_a_member_the_format_does_not_define_is_refused(demo: Path) -> None:
    doc = json.loads((demo / "reconcile.json").read_text(encoding="utf-8"))
    doc["lines"][2]["categories"]["productive"]["discount"] = "0.10"
    with pytest.raises(
        InvalidDocument,
        match=r"^reconciliation\.lines\[2\]\.categories\.productive\.discount: "
        "not a member of this format$",
    ):
        DOCUMENTS["reconciliation"].parse(doc)


def test_a_document_is_frozen() -> None:
    model = DOCUMENTS["evidence-bundle"]
    with pytest.raises(InvalidDocument, match="^bundle.tenant: missing$"):
        model.parse({"version": 1})
    assert model.model_config.get("frozen") is True and model.model_config.get("extra") == "forbid"


def test_text_that_is_not_json_is_refused() -> None:
    with pytest.raises(InvalidDocument, match="^reconciliation: not JSON: "):
        DOCUMENTS["reconciliation"].from_json('{"tenants": ')


def test_every_document_has_a_checked_in_schema() -> None:
    for name in DOCUMENTS:
        schema = json.loads(
            (SCHEMA_DIR / "documents" / f"{name}.json").read_text(encoding="utf-8")
        )
        assert schema["additionalProperties"] is False, name
