"""RFC 8785 canonical bytes: checked-in vectors, and the fast path against the reference."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import canonical, canonical_event, event_document, validate_event
from schemas.canonical import fast_canonical

VECTORS = json.loads((Path(__file__).parent / "vectors" / "canonical.json").read_text(encoding="utf-8"))["cases"]


def vector_value(case: dict[str, Any]) -> Any:
    if "ieee754" in case:
        return struct.unpack(">d", bytes.fromhex(case["ieee754"]))[0]
    return json.loads(case["json"])


@pytest.mark.parametrize("case", VECTORS, ids=[c["name"] for c in VECTORS])
def test_vectors(case: dict[str, Any]) -> None:
    value = vector_value(case)
    for encode in (canonical, fast_canonical):
        out = encode(value)
        assert out.decode("utf-8") == case["canonical"]
        assert hashlib.sha256(out).hexdigest() == case["sha256"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {1: "x"}, {"a": object()}])
def test_values_json_cannot_carry_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        canonical(bad)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_fast_path_equals_reference(value: Any) -> None:
    assert fast_canonical(value) == canonical(value)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_canonical_is_a_fixed_point(value: Any) -> None:
    once = canonical(value)
    assert canonical(json.loads(once)) == once


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in {"tenant", "job_id", "step", "units"}), json_values, max_size=4))
def test_event_bytes_equal_the_reference_encoding(extra: dict[str, Any]) -> None:
    ev = validate_event({
        "specversion": "1.0", "id": "p1", "source": "s", "type": "job.progress",
        "time": "2026-01-05T10:00:00.25+01:00", "data": {"tenant": "t", "job_id": "j", "step": 3, **extra},
    })
    assert canonical_event(ev) == canonical(event_document(ev))
