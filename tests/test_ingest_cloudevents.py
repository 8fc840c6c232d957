"""The CloudEvents reader: JSON Lines, JSON arrays, pretty-printed objects; line numbers, BOM,
bad structure.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import IngestError, extract, ingestor_for
from ingest.jsonarray import MalformedArray, iter_array, iter_values
from schemas import Accepted, Rejected
from tests.conftest import progress


def records(path: Path) -> list[Any]:
    return list(extract(path, "cloudevents"))


def test_jsonl_lines_are_numbered_from_one_and_blank_lines_skipped(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf"
        + json.dumps(progress(1)).encode()
        + b"\n\n  \n"
        + json.dumps(progress(2)).encode()
    )
    found = records(path)
    assert [(type(r), r.origin.line) for r in found] == [(Accepted, 1), (Accepted, 4)]


def test_array_elements_carry_their_line(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text("\n[ %s,\n\n  %s ]" % (json.dumps(progress(1)), json.dumps(progress(2))))
    assert [r.origin.line for r in records(path)] == [2, 4]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("[", 1, "the JSON array is not closed"),
        ('[{"a": 1},\n]', 2, "empty element in the JSON array"),
    ],
)
def test_broken_arrays_are_quarantined_with_a_reason(
    tmp_path: Path, text: str, line: int, reason: str
) -> None:
    path = tmp_path / "a.json"
    path.write_text(text)
    last = records(path)[-1]
    assert isinstance(last, Rejected) and (last.origin.line, last.field, last.reason) == (
        line,
        "(file)",
        reason,
    )


def test_unknown_format_is_named(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text("")
    with pytest.raises(IngestError, match="unknown format 'nope'"):
        ingestor_for(path, "nope")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.characters(codec="utf-8")),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(json_values, max_size=6), st.booleans())
def test_array_scanner_returns_each_element(elements: list[Any], pretty: bool) -> None:
    text = json.dumps(elements, indent=2 if pretty else None, ensure_ascii=False).encode()
    found = [json.loads(e.raw) for e in iter_array(io.BytesIO(text))]
    assert found == elements


def test_array_scanner_refuses_text_that_is_no_array() -> None:
    with pytest.raises(MalformedArray):
        list(iter_array(io.BytesIO(b'{"a": 1}')))


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8])
def test_array_scanner_across_read_boundaries(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    import ingest.jsonarray as jsonarray

    monkeypatch.setattr(jsonarray, "_CHUNK", chunk)
    elements = [{"a": 'x,]"\\'}, [1, [2, {"b": "}"}]], "☃\n", 3, None]
    text = json.dumps(elements, indent=1, ensure_ascii=False).encode()
    found = list(iter_array(io.BytesIO(text)))
    assert [json.loads(e.raw) for e in found] == elements
    assert [text[e.offset : e.offset + len(e.raw)] for e in found] == [e.raw for e in found]


def b64_event(data: object) -> dict[str, Any]:
    import base64

    raw = progress(7)
    del raw["data"]
    raw["data_base64"] = base64.b64encode(json.dumps(data).encode()).decode()
    return raw


def test_data_base64_is_decoded(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps(b64_event({"tenant": "acme", "job_id": "j1", "step": 7})) + "\n")
    [record] = records(path)
    assert (
        isinstance(record, Accepted)
        and b'"data":{"job_id":"j1","step":7,"tenant":"acme"}' in record.body
    )
    assert b"data_base64" not in record.body


@pytest.mark.parametrize(
    ("event_", "reason"),
    [
        ({**b64_event({}), "data": {}}, "an event carries data or data_base64, not both"),
        ({**b64_event({}), "data_base64": "!!!"}, "not base64 of JSON"),
    ],
)
def test_bad_data_base64_is_rejected(tmp_path: Path, event_: dict[str, Any], reason: str) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps(event_) + "\n")
    [record] = records(path)
    assert (
        isinstance(record, Rejected)
        and record.field == "data_base64"
        and record.reason.startswith(reason)
    )


# --- the shapes tools write: one pretty object, several, an array, JSON Lines ------------------


def shapes(events: list[dict[str, Any]]) -> dict[str, bytes]:
    return {
        "JSON Lines": b"".join(json.dumps(e).encode() + b"\n" for e in events),
        "one array": json.dumps(events, indent=2).encode(),
        "pretty objects one after another (jq .)": b"".join(
            json.dumps(e, indent=4).encode() + b"\n" for e in events
        ),
    }


@pytest.mark.parametrize("shape", list(shapes([])))
def test_every_shape_gives_the_same_events(tmp_path: Path, shape: str) -> None:
    events = [progress(1), b64_event({"tenant": "acme", "job_id": "j1", "step": 7}), progress(2)]
    path = tmp_path / "e.json"
    path.write_bytes(shapes(events)[shape])
    found = records(path)
    assert [type(r) for r in found] == [Accepted] * 3, found
    assert [json.loads(r.body)["data"]["step"] for r in found] == [
        1,
        7,
        2,
    ]  # data_base64 decoded in every shape


def test_one_pretty_object_is_one_record_at_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    path.write_text("\n\n" + json.dumps(progress(1), indent=4) + "\n")
    [record] = records(path)
    assert isinstance(record, Accepted) and record.origin.line == 3


def test_pretty_objects_carry_their_first_line(tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    first = json.dumps(progress(1), indent=2)
    path.write_text(first + "\n\n" + json.dumps(progress(2), indent=2) + "\n")
    assert [r.origin.line for r in records(path)] == [1, first.count("\n") + 3]


def test_a_pretty_object_cut_short_is_one_rejection(tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    path.write_text(
        json.dumps(progress(1), indent=2) + "\n" + json.dumps(progress(2), indent=2)[:-3]
    )
    found = records(path)
    assert isinstance(found[0], Accepted)
    assert isinstance(found[1], Rejected) and (found[1].field, found[1].reason) == (
        "(file)",
        "the file ends inside this JSON object",
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.dictionaries(st.text(max_size=4), json_values, max_size=3), max_size=5),
    st.booleans(),
)
def test_value_scanner_returns_each_object(objects: list[dict[str, Any]], pretty: bool) -> None:
    text = b"\n".join(
        json.dumps(o, indent=2 if pretty else None, ensure_ascii=False).encode() for o in objects
    )
    found = list(iter_values(io.BytesIO(text)))
    assert [json.loads(e.raw) for e in found] == objects
    assert [text[e.offset : e.offset + len(e.raw)] for e in found] == [e.raw for e in found]


def test_tenant_option_fills_only_a_missing_tenant_of_a_tenant_type(tmp_path: Path) -> None:
    unnamed = progress(1)
    del unnamed["data"]["tenant"]
    fault = {
        "specversion": "1.0",
        "id": "f1",
        "source": "test://fleet",
        "type": "health.fault",
        "time": "2026-01-05T10:00:00Z",
        "data": {"node": "n1", "code": "xid-79", "severity": "critical"},
    }
    path = tmp_path / "e.jsonl"
    path.write_text(
        "".join(json.dumps(e) + "\n" for e in (unnamed, progress(2, tenant="beta"), fault))
    )
    found = list(extract(path, "cloudevents", tenant="acme"))
    assert [r.tenant for r in found if isinstance(r, Accepted)] == ["acme", "beta", None]
    assert isinstance(
        records(path)[0], Rejected
    )  # without the option, the missing tenant is an error


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8])
def test_value_scanner_across_read_boundaries(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    import ingest.jsonarray as jsonarray

    monkeypatch.setattr(jsonarray, "_CHUNK", chunk)
    objects: list[Any] = [{"a": 'x,}"\\{'}, [1, [2, {"b": "]"}]], {"c": "☃\n"}, {}]
    text = (
        b"\n\n".join(json.dumps(o, indent=1, ensure_ascii=False).encode() for o in objects) + b"\n"
    )
    found = list(iter_values(io.BytesIO(text)))
    assert [json.loads(e.raw) for e in found] == objects
    assert [text[e.offset : e.offset + len(e.raw)] for e in found] == [e.raw for e in found]
    # indent=1 prints the objects over 3, 9, 3 and 1 lines, each followed by a blank line.
    assert [e.line for e in found] == [1, 1 + 3 + 1, 5 + 9 + 1, 15 + 3 + 1]
