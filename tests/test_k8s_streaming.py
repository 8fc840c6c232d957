"""The Kubernetes reader (ingest/k8sdocs.py) streams: its peak RSS does not grow with the
file (a kubectl EventList in JSON, a multi-document YAML stream), and cutting objects out
of the file gives the same result whatever the read chunk size."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import yaml
from hypothesis import given
from hypothesis import strategies as st

import ingest.k8sdocs as k8sdocs
from ingest.k8sdocs import K8sObject, read_objects
from tests.conftest import ROOT
from tests.test_fuzz_k8s_parsers import (
    EVENT_JSON,
    EVENT_YAML,
    SETTINGS,
    WORKLOAD_JSON,
    WORKLOAD_YAML,
    noise,
)

GROWTH_LIMIT_MIB = 10  # a reader holding the 24 MiB file whole adds more than twice this

PROBE = """
import sys
from pathlib import Path
from ingest import extract
from schemas import Accepted
from tests.rss_probe import peak_rss_mib
accepted = sum(isinstance(r, Accepted) for r in extract(Path(sys.argv[1]), "k8s-events"))
print(accepted, peak_rss_mib())
"""


def event(n: int) -> dict[str, Any]:
    pod = f"job-{n}-0"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{pod}.17a{n:08x}",
            "namespace": f"team-{n % 7}",
            "uid": f"uid-{n}",
            "resourceVersion": str(n + 1),
            "creationTimestamp": "2026-01-05T10:00:00Z",
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod,
            "namespace": f"team-{n % 7}",
            "uid": f"pod-{n}",
            "resourceVersion": str(n),
        },
        "reason": "Scheduled",
        "message": f"Successfully assigned team-{n % 7}/{pod} to node-{n % 97}",
        "source": {"component": "default-scheduler"},
        "type": "Normal",
        "count": 1,
        "firstTimestamp": "2026-01-05T10:00:00Z",
        "lastTimestamp": "2026-01-05T10:00:00Z",
        "reportingComponent": "default-scheduler",
        "reportingInstance": "",
    }


def write_events(path: Path, size_mib: int, as_yaml: bool) -> int:
    """An EventList as `kubectl get events -o json` writes it, or a YAML stream of one
    Event per document, of about `size_mib` MiB; the number of Events."""
    limit, n = size_mib << 20, 0
    with path.open("wb") as out:
        out.write(b"" if as_yaml else b'{\n  "apiVersion": "v1",\n  "items": [\n')
        while out.tell() < limit:
            batch = [event(n + i) for i in range(1000)]
            if as_yaml:
                out.write(
                    b"".join(
                        b"---\n" + yaml.safe_dump(e, default_flow_style=False).encode()
                        for e in batch
                    )
                )
            else:
                sep = b",\n" if n else b""
                out.write(
                    sep + b",\n".join(orjson.dumps(e, option=orjson.OPT_INDENT_2) for e in batch)
                )
            n += len(batch)
        out.write(
            b""
            if as_yaml
            else b'\n  ],\n  "kind": "List",\n  "metadata": {"resourceVersion": ""}\n}\n'
        )
    return n


def peak_rss_mib(tmp_path: Path, size_mib: int, as_yaml: bool) -> float:
    source = tmp_path / f"events-{size_mib}.{'yaml' if as_yaml else 'json'}"
    count = write_events(source, size_mib, as_yaml)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(source)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    accepted, peak = done.stdout.split()
    assert int(accepted) == count  # every Event read, none lost at a chunk boundary
    source.unlink()
    return float(peak)


def test_json_event_list_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    small = peak_rss_mib(tmp_path, 2, as_yaml=False)
    large = peak_rss_mib(tmp_path, 24, as_yaml=False)  # twelve times the Events
    assert large < small + GROWTH_LIMIT_MIB, f"peak RSS grew from {small} MiB to {large} MiB"


def test_yaml_stream_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    small = peak_rss_mib(tmp_path, 2, as_yaml=True)
    large = peak_rss_mib(tmp_path, 24, as_yaml=True)
    assert large < small + GROWTH_LIMIT_MIB, f"peak RSS grew from {small} MiB to {large} MiB"


# --- chunk boundaries ---------------------------------------------------------------


@contextmanager
def chunk_size(size: int) -> Iterator[None]:
    saved = k8sdocs._CHUNK
    k8sdocs._CHUNK = size
    try:
        yield
    finally:
        k8sdocs._CHUNK = saved


def summary(data: bytes, size: int) -> list[tuple[Any, ...]]:
    """What the reader makes of the bytes with reads of `size` bytes: each object's body,
    raw bytes, line and offset; each rejection's line, offset, field and reason (the raw
    bytes of a whole-file rejection are what was held, so they depend on the size)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "objects"
        path.write_bytes(data)
        with chunk_size(size):
            found = list(read_objects(path))
    return [
        (f.body, f.raw, f.origin.line, f.origin.offset)
        if isinstance(f, K8sObject)
        else (f.origin.line, f.origin.offset, f.field, f.reason)
        for f in found
    ]


BASES = [
    WORKLOAD_JSON,
    EVENT_JSON,
    WORKLOAD_YAML,
    EVENT_YAML,
    b"\n".join(orjson.dumps(e) for e in (orjson.loads(EVENT_JSON)["items"] * 3)),  # kubectl -w
    orjson.dumps(orjson.loads(WORKLOAD_JSON)["items"] * 2),  # a bare array
    b"---\n".join([WORKLOAD_YAML, EVENT_YAML, b"%YAML 1.1\n", EVENT_YAML]),
    b"\xef\xbb\xbf\n \n" + EVENT_JSON,
    b"\xef\xbb\xbf" + WORKLOAD_YAML,
]  # after a byte-order mark


@SETTINGS
@given(st.sampled_from(BASES), st.integers(0, 4000), noise, st.integers(1, 64))
def test_any_chunk_size_cuts_the_same_objects(
    base: bytes, cut: int, tail: bytes, size: int
) -> None:
    data = base[: cut % (len(base) + 1)] + tail if tail else base
    assert summary(data, size) == summary(data, 1 << 20)
