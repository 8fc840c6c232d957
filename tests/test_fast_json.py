"""Documents are written by orjson (schemas/fast_json.py) with the bytes json.dumps gives
in their style: on the demo's reconciliation and on the values where the two encoders
differ (non-ASCII text, DEL, small numbers, integers past 64 bits)."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import ingest
import ledger
import reconcile.engine.json_text as json_text_module
import reconcile.reports.output as output
from fixtures.sim import SimConfig, simulate
from reconcile import reconcile_store
from reconcile.engine.json_text import json_text
from schemas.fast_json import dumps
from tests.test_reconcile_oracle import ledger_of, random_fleet

STYLES: list[dict[str, Any]] = [
    {"indent": 2},  # Document.JSON_STYLE
    {"ensure_ascii": False, "separators": (",", ":")},  # the dispute packet's
]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(
    "value",
    [
        {"tenant": "café", "note": "日本", "emoji": "\U0001f600", "del": "a\x7fb"},
        {"ctl": '\x00\x1f\n\t"\\/', "empty": {}, "list": [], "nested": [[{}], [1, None]]},
        [1e-05, 5.960464477539063e-08, 2.5e-07, 0.0001, 1e16, 1.5, -0.0, 3.0],
        {"big": 2**70, "neg": -(2**65), "t": True, "f": False, "n": None},
        {"looks small": "0.00001 and 5e-8", "id": "x" * 100},
        {"surrogate": "\ud800"},
    ],
)
def test_the_same_text_as_json_dumps(value: Any, style: dict[str, Any]) -> None:
    assert dumps(value, **style) == json.dumps(value, **style)


def test_another_style_is_json_dumps_own() -> None:
    value = {"b": 1, "a": [1, 2]}
    assert dumps(value, indent=4, sort_keys=True) == json.dumps(value, indent=4, sort_keys=True)


def test_the_demo_reconciliation_is_written_byte_for_byte(tmp_path: Path) -> None:
    simulate(SimConfig(), tmp_path)  # the demo's fleet
    store = ledger.Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    store.init()
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    appender = ledger.Appender(store)
    for item in manifest["files"]:
        records = ingest.extract(
            tmp_path / item["path"], item["format"], **item.get("options", {})
        )
        ledger.append_stream(appender, records, 5000)
    result = reconcile_store(store)
    document = result.document()
    expected = json.dumps(document.to_dict(), indent=2) + "\n"
    assert len(expected) > 1_000_000
    assert document.to_json() == expected
    # and built column-wise (reconcile/engine/json_text.py), as `reconcile --format json` does
    assert json_text(result) == expected
    store.close()


def test_the_column_wise_json_is_the_documents_on_random_fleets() -> None:
    """Random fleets: many categories shared by bearers, corrections, credits, currencies of
    0, 2 and 3 places; where a fleet has fractions of a second the writer steps aside."""
    built = 0
    for seed in range(12):
        with ledger_of(random_fleet(random.Random(seed))) as store:
            result = reconcile_store(store)
            text = json_text(result)
            if text is not None:
                built += 1
                assert text == result.document().to_json(), seed
            assert result.json_text() == result.document().to_json(), seed
    assert built >= 6


def test_texts_with_quotes_and_backslashes_are_escaped_as_json_dumps_escapes_them() -> None:
    """A description, an invoice and a line id holding `"` and `\\`: the column-wise writer
    escapes them (json.dumps writes `\\"` and `\\\\`), the rest of the document unchanged."""
    with ledger_of(random_fleet(random.Random(3))) as store:
        result = reconcile_store(store)
    table = result.table
    odd = {
        "description": 'GPU "hours" at C:\\fleet\\a',
        "invoice_id": 'inv-"7"',
        "line_id": "l\\1",
    }
    for name, text in odd.items():
        column = table.column(name)
        values = [text + ("" if v is None else str(v)) for v in column.to_pylist()]
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values))
    changed = dataclasses.replace(result, table=table)
    expected = json.dumps(changed.document().to_dict(), indent=2) + "\n"
    assert '\\"hours\\" at C:\\\\fleet\\\\a' in expected
    assert json_text(changed) == expected


def test_the_text_built_in_parts_on_threads_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lines cut into parts (one a thread, each cut where a line begins, some lines of
    several cells): the document is json.dumps's, whatever the number of parts."""
    with ledger_of(random_fleet(random.Random(5))) as store:
        result = reconcile_store(store)
    expected = result.document().to_json()
    starts = result._line_starts()
    assert starts is not None and len(starts) + 1 < result.cell_count  # lines of several cells
    lines = len(starts) + 1
    for parts in (2, 3, 50):
        monkeypatch.setattr(json_text_module, "_PART_CELLS", 1)
        monkeypatch.setattr(json_text_module, "_PARTS", parts)
        cuts = json_text_module._cuts(starts, result.cell_count)
        assert 2 <= len(cuts) <= min(parts, lines)
        assert [a for a, _ in cuts[1:]] == [b for _, b in cuts[:-1]]  # end to end
        assert cuts[0][0] == 0 and cuts[-1][1] == result.cell_count
        assert all(a in starts for a, _ in cuts[1:])  # each part begins a line
        assert json_text(result) == expected, parts


def test_the_column_wise_placement_sums_are_the_reconciliations() -> None:
    """The finance page's placement figures, from groups of lines in DuckDB, equal
    `placement_sums()` added up from the cells one at a time (exact Fractions, per tenant
    and currency), on random fleets with lines not placed as sold and their claims."""
    claims = 0
    for seed in range(12):
        with ledger_of(random_fleet(random.Random(seed))) as store:
            result = reconcile_store(store)
        expected = result.placement_sums()
        assert json_text_module.placement_sums(result) == expected, seed
        claims += sum(1 for sums in expected.values() if sums.claim)
    assert claims >= 1  # a claim was there to compare


def test_a_json_file_cut_short_by_a_failure_is_never_left(tmp_path: Path) -> None:
    """The document is written into a file beside the output that takes its name once
    whole: a failure half-way leaves the output as it was."""
    out = tmp_path / "r.json"
    out.write_text("the reconciliation before\n")

    def parts() -> Iterator[bytes]:
        yield b'{"period": '
        raise RuntimeError("a part could not be made")

    with pytest.raises(RuntimeError):
        output._write_whole(out, parts())
    assert out.read_text() == "the reconciliation before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    output._write_whole(out, iter([b"{", b"}\n"]))
    assert out.read_text() == "{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    assert out.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777  # as any new file


def test_a_json_document_to_a_pipe_given_as_out(tmp_path: Path) -> None:
    """`--out /dev/stdout`, or a named pipe: written to as it is (nothing beside it)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    output._write_whole(fifo, iter([b"{", b"}\n"]))
    reader.join()
    assert got == [b"{}\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_file_laid_where_the_partial_document_goes_is_never_written(tmp_path: Path) -> None:
    """In a shared folder, a link laid first under a name the writer might use does not
    turn the document's write onto another file: the partial file's name is new each time
    and made exclusively."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "r.json"
    for name in (".r.json.partial", ".r.json.tmp", "r.json.partial"):
        (tmp_path / name).symlink_to(victim)
    output._write_whole(out, iter([b"{", b"}\n"]))
    assert victim.read_text() == "keep me\n"
    assert out.read_text() == "{}\n" and not out.is_symlink()
