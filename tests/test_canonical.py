"""RFC 8785 canonical bytes: the reference test vectors (tests/vectors/rfc8785/, from
cyberphone/json-canonicalization), the project's own pinned vectors, the values JSON
cannot carry (refused the same way on every path), and the fast path against the
reference for any value, and for any event the schemas accept."""

from __future__ import annotations

import gzip
import hashlib
import json
import struct
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.base import event_from_json, event_from_object
from schemas import (
    NotCanonicalizable,
    Origin,
    Rejected,
    canonical,
    canonical_event,
    event_document,
    validate_event,
)
from schemas.canonical import es6_number, fast_canonical
from tests.event_strategies import NOW, events, json_values

VECTORS = Path(__file__).parent / "vectors"
RFC8785 = VECTORS / "rfc8785"
PINNED = json.loads((VECTORS / "canonical.json").read_text(encoding="utf-8"))["cases"]
#: SHA-256 of the first 10,000 lines of es6testfile100m.txt, from testdata/README.md.
ES6_10K_SHA256 = "b9f7a8e75ef22a835685a52ccba7f7d6bdc99e34b010992cbc5864cd12be6892"
ENCODERS = [canonical, fast_canonical]


@pytest.mark.parametrize("encode", ENCODERS, ids=["reference", "fast"])
@pytest.mark.parametrize("name", ["arrays", "french", "structures", "unicode", "values", "weird"])
def test_rfc8785_reference_vectors(name: str, encode: Any) -> None:
    value = json.loads((RFC8785 / "input" / f"{name}.json").read_bytes())
    assert encode(value) == (RFC8785 / "output" / f"{name}.json").read_bytes()


def es6_sample() -> list[tuple[str, str]]:
    raw = gzip.decompress((RFC8785 / "es6testfile10k.txt.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == ES6_10K_SHA256, (
        "the ES6 sample is not the published one"
    )
    return [
        tuple(line.split(","))  # type: ignore[misc]
        for line in raw.decode("ascii").splitlines()
    ]


def test_es6_numbers_sample() -> None:
    """10,000 doubles (static edge cases, the smallest normals, then pseudo-random ones)."""
    wrong = []
    for hex_bits, expected in es6_sample():
        value = struct.unpack(">d", bytes.fromhex(hex_bits.rjust(16, "0")))[0]
        if es6_number(value) != expected or fast_canonical([value]) != f"[{expected}]".encode():
            wrong.append((hex_bits, expected, es6_number(value)))
    assert not wrong, wrong[:5]


def pinned_value(case: dict[str, Any]) -> Any:
    if "ieee754" in case:
        return struct.unpack(">d", bytes.fromhex(case["ieee754"]))[0]
    return json.loads(case["json"])


@pytest.mark.parametrize("case", PINNED, ids=[c["name"] for c in PINNED])
def test_pinned_vectors(case: dict[str, Any]) -> None:
    value = pinned_value(case)
    for encode in ENCODERS:
        out = encode(value)
        assert out.decode("utf-8") == case["canonical"]
        assert hashlib.sha256(out).hexdigest() == case["sha256"]


AT_TWO = timezone(timedelta(hours=2))
INEXACT = (
    "an integer of {} bits that a double does not hold exactly (I-JSON, RFC 7493 §2.2): "
    "RFC 8785 would write another number; send it as a string"
)

#: Values JSON cannot carry exactly: (value, path to it, reason), each worked out from the rule.
REFUSED: dict[str, tuple[Any, str, str]] = {
    "integer 2**53 + 1": ({"n": 2**53 + 1}, "n", INEXACT.format(54)),
    "integer -(2**64) - 1 in a list": (
        {"data": {"x": [1, -(2**64) - 1]}},
        "data.x[1]",
        INEXACT.format(65),
    ),
    "integer 10**21, held exactly but written with an exponent": (
        [10**21],
        "[0]",
        INEXACT.format(70),
    ),
    "integer 10**400": ([10**400], "[0]", INEXACT.format(1329)),
    "NaN": ({"f": float("nan")}, "f", "nan has no JSON form"),
    "infinity": ([float("-inf")], "[0]", "-inf has no JSON form"),
    "lone surrogate": (
        {"s": "a\ud800"},
        "s",
        "a lone surrogate: not Unicode text (RFC 7493 §2.1)",
    ),
    "lone surrogate key": (
        {"\udfff": 1},
        "\udfff",
        "a lone surrogate: not Unicode text (RFC 7493 §2.1)",
    ),
    "naive time": (
        {"t": datetime(2026, 1, 5, 10)},
        "t",
        "a time with no zone names no instant: 2026-01-05T10:00:00",
    ),
    "Decimal NaN": ({"m": Decimal("NaN")}, "m", "the decimal NaN has no JSON form"),
    "key not a string": ({"d": {1: "x"}}, "d", "an object key of type int, not a string"),
    "date alone": ({"d": date(2026, 1, 5)}, "d", "date has no JSON form"),
    "set": ({"s": {1}}, "s", "set has no JSON form"),
    "bytes": ([b"x"], "[0]", "bytes has no JSON form"),
}


@pytest.mark.parametrize("encode", ENCODERS, ids=["reference", "fast"])
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_values_json_cannot_carry_are_refused_with_their_path(name: str, encode: Any) -> None:
    value, path, reason = REFUSED[name]
    with pytest.raises(NotCanonicalizable) as info:
        encode(value)
    assert (info.value.field, info.value.reason) == (path, reason)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2**53, "9007199254740992"),
        (-(2**53), "-9007199254740992"),
        (10**20, "100000000000000000000"),
        (2**64, None),
        (2**53 + 2, "9007199254740994"),
        (2**60 + 2**8, None),
    ],
)
def test_large_integers_are_kept_only_when_rfc8785_writes_their_digits(
    value: int, text: str | None
) -> None:
    """2**53 + 2 and 10**20 are doubles exactly, and ES6 prints their digits (4340000000000001
    and the powers of ten in the ES6 sample); 2**64 prints as 18446744073709552000 and
    2**60 + 2**8 as 1152921504606847200: refused."""
    for encode in ENCODERS:
        if text is None:
            with pytest.raises(NotCanonicalizable):
                encode([value])
        else:
            assert encode([value]) == f"[{text}]".encode()


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 1, 5, 12, 30, 0, 250000, tzinfo=AT_TWO),
        datetime(2026, 1, 5, 10, 30, 0, 250000, tzinfo=timezone.utc),
    ],
)
def test_times_are_written_in_utc_on_every_path(moment: datetime) -> None:
    for encode in ENCODERS:
        assert encode({"t": moment}) == b'{"t":"2026-01-05T10:30:00.250000Z"}'


def outcome(encode: Any, value: Any) -> bytes | tuple[str, str]:
    try:
        return bytes(encode(value))
    except NotCanonicalizable as exc:
        return exc.field, exc.reason


python_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text()
    | st.datetimes(timezones=st.none() | st.just(timezone.utc) | st.timezones())
    | st.decimals(places=None)
    | st.dates()
    | st.binary(max_size=2),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        | st.dictionaries(st.integers(0, 3), inner, min_size=1, max_size=2)
    ),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(python_values)
def test_fast_path_gives_the_reference_bytes_or_the_same_refusal(value: Any) -> None:
    assert outcome(fast_canonical, value) == outcome(canonical, value)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_canonical_is_a_fixed_point(value: Any) -> None:
    once = canonical(value)
    assert canonical(json.loads(once)) == once


@settings(max_examples=300, deadline=None)
@given(events())
def test_event_bytes_equal_the_reference_for_any_accepted_event(raw: dict[str, Any]) -> None:
    ev = validate_event(raw, now=NOW)
    assert canonical_event(ev) == canonical(event_document(ev))


@settings(max_examples=100, deadline=None)
@given(events(extras=False))
def test_declared_fields_alone_take_the_same_bytes(raw: dict[str, Any]) -> None:
    """The path with no walk (only declared fields) against the reference."""
    ev = validate_event(raw, now=NOW)
    assert not ev.data.__pydantic_extra__
    assert canonical_event(ev) == canonical(event_document(ev))


PRIORITY_2_64 = {"tenant": "t", "job_id": "j", "priority": 2**64}


@pytest.mark.parametrize(
    "unrelated", [{}, {"gpu_util": 0.5}], ids=["declared only", "with a float beside"]
)
def test_a_declared_integer_past_2_53_is_refused_whatever_lies_beside_it(
    unrelated: dict[str, Any],
) -> None:
    line = json.dumps(
        {
            "specversion": "1.0",
            "id": "e1",
            "source": "s",
            "type": "job.submitted",
            "time": "2026-01-05T10:00:00Z",
            "data": {**PRIORITY_2_64, **unrelated},
        }
    ).encode()
    record = event_from_json(line, Origin("f.jsonl", 3))
    assert isinstance(record, Rejected)
    assert (record.field, record.reason) == (
        "data.priority",
        f"Input should be less than or equal to {2**53 - 1}",
    )


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (10**400, "data.big"),
        ([1, 2**64], "data.list[1]"),
        ({"deep": [float("inf")]}, "data.map.deep[0]"),
    ],
)
def test_an_unknown_field_json_cannot_carry_is_quarantined_with_its_path(
    value: Any, path: str
) -> None:
    name = path.split(".")[1].split("[")[0]
    obj = {
        "specversion": "1.0",
        "id": "e1",
        "source": "s",
        "type": "job.completed",
        "time": "2026-01-05T10:00:00Z",
        "data": {"tenant": "t", "job_id": "j", name: value},
    }
    record = event_from_object(obj, Origin("f.yaml", 9), b"raw")
    assert isinstance(record, Rejected)
    assert str(record).startswith(f"f.yaml:9: {path}: ")


def test_an_unknown_integer_of_400_digits_in_json_text_is_quarantined() -> None:
    line = (
        b'{"specversion":"1.0","id":"e1","source":"s","type":"job.completed",'
        b'"time":"2026-01-05T10:00:00Z",'
        b'"data":{"tenant":"t","job_id":"j","x":1' + b"0" * 400 + b"}}"
    )
    record = event_from_json(line, Origin("f.jsonl", 1))
    assert isinstance(record, Rejected)
    assert (record.field, record.reason) == ("data.x", INEXACT.format(1329))
