"""Malformed Kueue Workloads and Kubernetes Events, JSON and YAML, each with its pinned
`line: field: reason` (the pattern of tests/test_malformed_inputs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest import extract
from schemas import Rejected

# A kubectl List holding one Workload; line 4 opens the Workload.
WJ = """{
  "apiVersion": "v1",
  "items": [
    {
      "apiVersion": "kueue.x-k8s.io/v1beta1",
      "kind": "Workload",
      "metadata": {"name": "job-a-1b2c3", "namespace": "team-a", "uid": "0d6f1c3e", \
"resourceVersion": "7"},
      "spec": {"queueName": "lq-a", "priority": 100},
      "status": {
        "admission": {"clusterQueue": "cq", "podSetAssignments": [
          {"name": "main", "count": 1, "resourceUsage": {"cpu": "8", "nvidia.com/gpu": "8"}}]},
        "conditions": [
          {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": \
"2026-01-05T10:00:00Z", "message": ""}
        ]
      }
    }
  ],
  "kind": "List"
}
"""
# The same Workload as one YAML document; line 12 holds the time, line 17 the GPUs.
WY = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: job-a-1b2c3
  namespace: team-a
  uid: 0d6f1c3e
spec:
  queueName: lq-a
  priority: 100
status:
  conditions:
  - lastTransitionTime: "2026-01-05T10:00:00Z"
    reason: Admitted
    status: "True"
    type: Admitted
  admission:
    podSetAssignments:
    - name: main
      resourceUsage: {nvidia.com/gpu: "8"}
"""
# A core/v1 Event as kubectl prints it inside an EventList; line 4 opens the Event.
EJ = """{
  "apiVersion": "v1",
  "items": [
    {
      "apiVersion": "v1", "kind": "Event",
      "metadata": {"name": "p.1881e3122f8a910e", "namespace": "team-a", "uid": "ev-1", \
"resourceVersion": "9"},
      "involvedObject": {"kind": "Pod", "name": "p", "namespace": "team-a", "uid": "p-1"},
      "reason": "Evicted", "type": "Warning",
      "message": "The node was low on resource: memory.",
      "firstTimestamp": "2026-01-05T10:00:00Z", "lastTimestamp": "2026-01-05T10:00:00Z", "count": 1
    }
  ],
  "kind": "EventList"
}
"""
# An events.k8s.io/v1 Event as YAML; line 10 holds the time.
EY = """apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: p.1881e5085c31f408
  namespace: team-a
  uid: ev-2
  resourceVersion: "12"
reason: FailedScheduling
note: "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
eventTime: "2026-01-05T10:00:00.250000Z"
regarding:
  kind: Pod
  name: p
  namespace: team-a
"""


def b(text: str) -> bytes:
    return text.encode()


CASES: dict[str, tuple[str, bytes, tuple[int, str, str]]] = {
    "kueue json truncated": (
        "kueue",
        b(WJ[: WJ.index('"spec"')]),
        (4, "(file)", "the file ends inside this JSON object"),
    ),
    "kueue json truncated in a string": (
        "kueue",
        b(WJ[: WJ.index("team-a") + 3]),
        (4, "(file)", "the file ends inside a string of this JSON object"),
    ),
    "kueue json broken syntax": (
        "kueue",
        b(WJ.replace('"count": 1,', '"count": 1,,')),
        (11, "(object)", "not valid JSON: unexpected character, expected a string key"),
    ),
    "kueue json bad time": (
        "kueue",
        b(WJ.replace("2026-01-05T10:00:00Z", "2026-01-05 soon")),
        (4, "status.conditions[0].lastTransitionTime", "not an RFC 3339 time: '2026-01-05 soon'"),
    ),
    "kueue json impossible date": (
        "kueue",
        b(WJ.replace("2026-01-05T10:00:00Z", "2026-02-30T10:00:00Z")),
        (
            4,
            "status.conditions[0].lastTransitionTime",
            "not an RFC 3339 time: '2026-02-30T10:00:00Z'",
        ),
    ),
    "kueue json negative GPUs": (
        "kueue",
        b(WJ.replace('"nvidia.com/gpu": "8"', '"nvidia.com/gpu": "-8"')),
        (
            4,
            "status.admission.podSetAssignments[0].resourceUsage",
            "nvidia.com/gpu = '-8': a negative GPU count",
        ),
    ),
    "kueue json suffixed GPUs": (
        "kueue",
        b(WJ.replace('"nvidia.com/gpu": "8"', '"nvidia.com/gpu": "8k"')),
        (
            4,
            "status.admission.podSetAssignments[0].resourceUsage",
            "nvidia.com/gpu = '8k': not a whole number of GPUs",
        ),
    ),
    "kueue json fractional GPUs": (
        "kueue",
        b(WJ.replace('"nvidia.com/gpu": "8"', '"nvidia.com/gpu": 0.5')),
        (
            4,
            "status.admission.podSetAssignments[0].resourceUsage",
            "nvidia.com/gpu = 0.5: not a whole number of GPUs",
        ),
    ),
    "kueue json invalid UTF-8": (
        "kueue",
        b(WJ).replace(b'"team-a"', b'"te\xffam"'),
        (7, "(object)", "not valid UTF-8 at byte 173"),
    ),
    "kueue json conditions not a list": (
        "kueue",
        b(WJ.replace('"conditions": [', '"conditions": "Admitted", "x": [')),
        (4, "status.conditions", "expected a list, found string"),
    ),
    "kueue json namespace a number": (
        "kueue",
        b(WJ.replace('"namespace": "team-a"', '"namespace": 7')),
        (4, "metadata.namespace", "expected a string, found number 7"),
    ),
    "kueue json priority a string": (
        "kueue",
        b(WJ.replace('"priority": 100', '"priority": "high"')),
        (4, "spec.priority", "expected an integer, found string 'high'"),
    ),
    "kueue json no uid": (
        "kueue",
        b(WJ.replace('"uid": "0d6f1c3e", ', "")),
        (4, "metadata.uid", "missing"),
    ),
    "kueue json condition without a time": (
        "kueue",
        b(WJ.replace('"lastTransitionTime": "2026-01-05T10:00:00Z", ', "")),
        (4, "status.conditions[0].lastTransitionTime", "missing"),
    ),
    "kueue json a number for an object": (
        "kueue",
        b'{"kind": "List", "items": [42]}',
        (1, "(object)", "expected a Kubernetes object (a mapping), found number"),
    ),
    "kueue json empty element": (
        "kueue",
        b'{"kind": "List", "items": [\n  ,\n]}',
        (2, "(file)", "empty element in a JSON array"),
    ),
    "kueue yaml truncated": (
        "kueue",
        b(WY[: WY.index("2026-01-05") + 4]),
        (
            12,
            "(document)",
            "not valid YAML: while scanning a quoted scalar found unexpected end of stream",
        ),
    ),
    "kueue yaml bad time": (
        "kueue",
        b(WY.replace('"2026-01-05T10:00:00Z"', "2026-01-05T10:00:00 tomorrow")),
        (
            12,
            "status.conditions[0].lastTransitionTime",
            "not an RFC 3339 time: '2026-01-05T10:00:00 tomorrow'",
        ),
    ),
    "kueue yaml negative GPUs": (
        "kueue",
        b(WY.replace('{nvidia.com/gpu: "8"}', "{nvidia.com/gpu: -8}")),
        (
            19,
            "status.admission.podSetAssignments[0].resourceUsage",
            "nvidia.com/gpu = -8: a negative GPU count",
        ),
    ),
    "kueue yaml invalid UTF-8": (
        "kueue",
        b(WY).replace(b"team-a", b"te\xffam"),
        (5, "(document)", "not valid UTF-8 at byte 95"),
    ),
    "kueue yaml tab indentation": (
        "kueue",
        b(WY.replace("  uid:", "\tuid:")),
        (
            6,
            "(document)",
            "not valid YAML: while scanning a plain scalar found a tab character that violates "
            "indentation",
        ),
    ),
    "kueue yaml binary value": (
        "kueue",
        b(WY.replace("queueName: lq-a", "queueName: !!binary bHEtYQ==")),
        (8, "spec.queueName", "a YAML bytes has no JSON form"),
    ),
    "kueue yaml number key": (
        "kueue",
        b(WY.replace("  priority: 100", "  priority: 100\n  1: one")),
        (7, "spec", "key 1 is not a string"),
    ),
    "kueue yaml wrong kind": (
        "kueue",
        b(WY.replace("kind: Workload", "kind: Job")),
        (2, "kind", "not a Kueue Workload: 'Job'"),
    ),
    "kueue yaml not a mapping": (
        "kueue",
        b"just a line of text\n",
        (1, "(object)", "expected a Kubernetes object (a mapping), found string"),
    ),
    "kueue yaml nested too deeply": (
        "kueue",
        b(WY) + b"extra: " + b"[" * 80 + b"]" * 80 + b"\n",
        (20, "extra[0][0]", "nested deeper than 64 levels"),
    ),
    "events json truncated": (
        "k8s-events",
        b(EJ[: EJ.index('"reason"')]),
        (4, "(file)", "the file ends inside this JSON object"),
    ),
    "events json bad time": (
        "k8s-events",
        b(
            EJ.replace(
                '"lastTimestamp": "2026-01-05T10:00:00Z"',
                '"lastTimestamp": "2026-01-05T25:00:00Z"',
            )
        ),
        (4, "lastTimestamp", "not an RFC 3339 time: '2026-01-05T25:00:00Z'"),
    ),
    "events json invalid UTF-8": (
        "k8s-events",
        b(EJ).replace(b"memory", b"mem\xc3\x28ory"),
        (9, "(object)", "not valid UTF-8 at byte 386"),
    ),
    "events json involvedObject a string": (
        "k8s-events",
        b(EJ.replace('"involvedObject": {', '"involvedObject": "Pod/p", "x": {')),
        (4, "involvedObject", "expected an object, found string"),
    ),
    "events json reason a number": (
        "k8s-events",
        b(EJ.replace('"reason": "Evicted"', '"reason": 5')),
        (4, "reason", "expected a string, found number 5"),
    ),
    "events json no uid": (
        "k8s-events",
        b(EJ.replace('"uid": "ev-1", ', "")),
        (4, "metadata.uid", "missing"),
    ),
    "events json no time": (
        "k8s-events",
        b(
            EJ.replace(
                '"firstTimestamp": "2026-01-05T10:00:00Z", "lastTimestamp": '
                '"2026-01-05T10:00:00Z", ',
                "",
            )
        ),
        (
            4,
            "eventTime",
            "no time: none of eventTime, firstTimestamp, metadata.creationTimestamp, "
            "lastTimestamp, series.lastObservedTime is set",
        ),
    ),
    "events json pod without a namespace": (
        "k8s-events",
        b(EJ.replace('"namespace": "team-a", ', "")),
        (4, "metadata.namespace", "missing"),
    ),
    "events yaml truncated": (
        "k8s-events",
        b(EY[: EY.index("0/4") + 3]),
        (
            9,
            "(document)",
            "not valid YAML: while scanning a quoted scalar found unexpected end of stream",
        ),
    ),
    "events yaml bad time": (
        "k8s-events",
        b(EY.replace('"2026-01-05T10:00:00.250000Z"', "soon")),
        (10, "eventTime", "not an RFC 3339 time: 'soon'"),
    ),
    "events yaml invalid UTF-8": (
        "k8s-events",
        b(EY).replace(b"Insufficient", b"\xffnsufficient"),
        (9, "(document)", "not valid UTF-8 at byte 193"),
    ),
    "events yaml regarding a list": (
        "k8s-events",
        b(
            EY.replace("regarding:\n  kind: Pod", "regarding:\n- kind: Pod").replace(
                "  name: p\n  namespace", "  name: p\n- namespace"
            )
        ),
        (11, "regarding", "expected an object, found list"),
    ),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_malformed_input_is_rejected_with_its_pinned_message(tmp_path: Path, name: str) -> None:
    fmt, data, expected = CASES[name]
    path = tmp_path / "input"
    path.write_bytes(data)
    found = list(extract(path, fmt))
    assert [(r.origin.line, r.field, r.reason) for r in found if isinstance(r, Rejected)] == [
        expected
    ]
    assert all(
        isinstance(r, Rejected) and r.record for r in found
    )  # kept whole for the quarantine


@pytest.mark.parametrize(
    ("fmt", "data"), [("kueue", WJ), ("kueue", WY), ("k8s-events", EJ), ("k8s-events", EY)]
)
def test_the_unbroken_inputs_are_accepted(tmp_path: Path, fmt: str, data: str) -> None:
    path = tmp_path / "input"
    path.write_text(data)
    found = list(extract(path, fmt))
    assert found and not [r for r in found if isinstance(r, Rejected)]


def test_a_trailing_comma_is_refused_after_the_good_element(tmp_path: Path) -> None:
    path = tmp_path / "input.json"
    path.write_text(WJ.replace("    }\n  ],", "    },\n  ],"))
    found = list(extract(path, "kueue"))
    assert [type(r).__name__ for r in found] == ["Accepted", "Accepted", "Rejected"]
    assert isinstance(found[2], Rejected)
    assert (found[2].origin.line, found[2].field, found[2].reason) == (
        17,
        "(file)",
        "empty element in a JSON array",
    )


def test_a_broken_yaml_document_spares_the_next(tmp_path: Path) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(WY.replace("  uid:", "\tuid:") + "---\n" + WY)
    found = list(extract(path, "kueue"))
    assert [(type(r).__name__, r.origin.line) for r in found] == [
        ("Rejected", 6),
        ("Accepted", 21),
        ("Accepted", 21),
    ]  # a decision and its grant


def test_a_broken_json_element_spares_its_neighbours(tmp_path: Path) -> None:
    item = WJ[WJ.index("    {") : WJ.rindex("    }") + 5]
    path = tmp_path / "input.json"
    path.write_text(
        '{"kind": "List", "items": [\n'
        + item
        + ",\n"
        + item.replace('"count": 1,', '"count": ,')
        + ",\n"
        + item.replace("0d6f1c3e", "second")
        + "\n]}\n"
    )
    found = list(extract(path, "kueue"))
    assert [type(r).__name__ for r in found] == [
        "Accepted",
        "Accepted",
        "Rejected",
        "Accepted",
        "Accepted",
    ]
