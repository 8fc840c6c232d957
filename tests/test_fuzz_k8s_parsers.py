"""Fuzzing the kueue and k8s-events parsers (the pattern of tests/test_fuzz_parsers.py):
whatever the bytes or the values, a parser yields records (accepted or rejected) or
raises the project's own IngestError; nothing else escapes."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

import orjson
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.k8sdocs import read_objects
from tests.conftest import FUZZ_EXAMPLES
from tests.test_fuzz_parsers import run

WORKLOAD: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "Workload",
    "metadata": {
        "name": "wl",
        "namespace": "ns",
        "uid": "u",
        "ownerReferences": [{"name": "job"}],
        "labels": {"t": "x"},
    },
    "spec": {"queueName": "q", "priority": 1},
    "status": {
        "accumulatedPastExexcutionTimeSeconds": 10,
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"nvidia.com/gpu": "f"},
                    "resourceUsage": {
                        "nvidia.com/gpu": "8",
                        "nvidia.com/mig-1g.10gb": "1",
                        "nvidia.com/gpu.shared": "1",
                    },
                    "topologyAssignment": {
                        "levels": ["kubernetes.io/hostname"],
                        "domains": [{"values": ["n1"], "count": 1}],
                        "slices": [
                            {"domainCount": 1, "valuesPerLevel": [{"prefix": "n", "roots": ["2"]}]}
                        ],
                    },
                }
            ],
        },
        "conditions": [
            {"type": t, "status": s, "reason": r, "lastTransitionTime": "2026-01-05T10:00:00Z"}
            for t, s, r in [
                ("QuotaReserved", "True", "QuotaReserved"),
                ("Admitted", "True", "Admitted"),
                ("Evicted", "True", "Preempted"),
                ("Preempted", "True", "InCohortReclamation"),
                ("Requeued", "True", "x"),
                ("Finished", "True", "Succeeded"),
                ("QuotaReserved", "False", "Pending"),
            ]
        ],
    },
}
EVENT: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Event",
    "metadata": {"name": "e", "namespace": "ns", "uid": "u", "resourceVersion": "1"},
    "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns"},
    "reason": "Scheduled",
    "message": "Successfully assigned ns/p to n1",
    "type": "Normal",
    "series": {"lastObservedTime": "2026-01-05T10:00:00Z"},
    "eventTime": "2026-01-05T10:00:00.5Z",
    "lastTimestamp": None,
    "firstTimestamp": "2026-01-05T10:00:00Z",
}
WORKLOAD_JSON = orjson.dumps({"kind": "List", "items": [WORKLOAD]}, option=orjson.OPT_INDENT_2)
WORKLOAD_YAML = yaml.safe_dump(WORKLOAD).encode()
EVENT_JSON = orjson.dumps({"kind": "EventList", "items": [EVENT]}, option=orjson.OPT_INDENT_2)
EVENT_YAML = yaml.safe_dump(EVENT).encode()

fragments = st.sampled_from(
    [
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b'"',
        b"\\",
        b"\n",
        b"\t",
        b"  ",
        b"- ",
        b"---\n",
        b"...\n",
        b"&a ",
        b"*a",
        b"!!binary ",
        b"!!set ",
        b"!!python/object ",
        b"? ",
        b"|\n",
        b">-\n",
        b"null",
        b"~",
        b"true",
        b"-8",
        b"8k",
        b"1e400",
        b"0x1F",
        b"\xff\xfe",
        b"\x00",
        b"\xe2\x98\x83",
        b"\\ud800",
        b"2026-13-45T99:99:99Z",
        b"2026-01-05T10:00:00Z",
        b"kind: Workload",
        b'"kind": "Event"',
        b"items:",
        b'"items": [',
        b"status:",
        b"conditions:",
        b"nvidia.com/gpu",
        b"kubernetes.io/hostname",
        b"Admitted",
        b"True",
    ]
)
noise = st.lists(st.one_of(fragments, st.binary(max_size=12)), max_size=40).map(b"".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def replaced(document: dict[str, Any], seed: int, value: Any) -> dict[str, Any]:
    """The document with one value, chosen by seed, replaced (the root is never replaced)."""
    copy: dict[str, Any] = orjson.loads(orjson.dumps(document))
    path = random.Random(seed).choice(paths(copy)[1:])
    parent: Any = copy
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return copy


def dump(document: Any, as_yaml: bool) -> bytes:
    # The standard library writes what orjson cannot: integers past 64 bits, NaN (not JSON: to be
    # refused).
    return (
        yaml.safe_dump(document, allow_unicode=True).encode()
        if as_yaml
        else json.dumps(document).encode()
    )


@SETTINGS
@given(noise)
def test_kueue_json_bytes(data: bytes) -> None:
    run("kueue", WORKLOAD_JSON[: len(data) * 37 % len(WORKLOAD_JSON)] + data)


@SETTINGS
@given(noise)
def test_kueue_yaml_bytes(data: bytes) -> None:
    run("kueue", WORKLOAD_YAML[: len(data) * 37 % len(WORKLOAD_YAML)] + data)


@SETTINGS
@given(noise)
def test_k8s_events_json_bytes(data: bytes) -> None:
    run("k8s-events", EVENT_JSON[: len(data) * 37 % len(EVENT_JSON)] + data)


@SETTINGS
@given(noise)
def test_k8s_events_yaml_bytes(data: bytes) -> None:
    run("k8s-events", EVENT_YAML[: len(data) * 37 % len(EVENT_YAML)] + data)


@SETTINGS
@given(st.integers(0, 2**32), json_values, st.booleans())
def test_kueue_any_value_anywhere(seed: int, value: Any, as_yaml: bool) -> None:
    run("kueue", dump(replaced(WORKLOAD, seed, value), as_yaml))


@SETTINGS
@given(st.integers(0, 2**32), json_values, st.booleans())
def test_k8s_events_any_value_anywhere(seed: int, value: Any, as_yaml: bool) -> None:
    run("k8s-events", dump(replaced(EVENT, seed, value), as_yaml))


tricky_text = st.text(alphabet=st.sampled_from(list('ab"\\{}[],:\n\t é☃')), max_size=12)
plain_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=10,
)


@SETTINGS
@given(
    st.lists(st.dictionaries(tricky_text, plain_values, max_size=4), max_size=5),
    st.sampled_from([None, 2, 4]),
    st.booleans(),
)
def test_json_list_scanner_cuts_exactly_the_items(
    items: list[dict[str, Any]], indent: int | None, as_list_object: bool
) -> None:
    document: Any = (
        {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"items": [1]}}
        if as_list_object
        else items
    )
    text = json.dumps(document, indent=indent, ensure_ascii=False)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "list.json"
        path.write_text(text)
        found = list(read_objects(path))
    assert [getattr(f, "body", None) for f in found] == items
    lines = text.splitlines()
    assert all(
        lines[f.origin.line - 1].lstrip().lstrip("[").lstrip().startswith("{") for f in found
    )
