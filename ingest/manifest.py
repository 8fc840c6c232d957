"""A manifest: the list of files one `gpuledger ingest --manifest FILE` reads, in order.

The simulator writes one beside its fleet (`manifest.json`), and an operator writes one
for a collection that runs every few minutes. It is JSON; only `files` is read:

    {"files": [
        {"path": "k8s/events.json", "format": "k8s-events", "options": {"cluster": "k8s-a"}},
        {"path": "kueue/workloads.yaml", "format": "kueue"},
        {"path": "dcgm/node-07.prom", "format": "dcgm-metrics", "options": {"node": "node-07"}}
    ]}

- `path`: the file, relative to the manifest's folder (or absolute);
- `format`: an ingest format; left out or null, the file's format is detected;
- `options`: the `ingest` options by their Python names (`cluster`, `node`,
  `scrape_time`, `tenant_field`, ...; OPTION_NAMES), each a string.
Files are ingested in the order listed; every entry is checked, and every file found and
its format identified, before the first is read, so a mistake appends nothing. Anything else in the manifest (the simulator's
seed, truth and counts) is left alone. A mistake is an IngestError naming the manifest,
the entry and the field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ingest.base import IngestError, open_source

#: The options an entry may give: those of `gpuledger ingest`, by their Python names.
OPTION_NAMES = frozenset({"fields", "delimiter", "cluster", "tenant_field", "gpu_field", "allocation_field", "node",
                          "fabric_domain", "scrape_time", "tenant", "timezone", "job", "allocation",
                          "window_start"})
OPTION_NAMES |= {"flavor_class", "qos_tenant"}  # the quota formats' (docs/quotas.md)


@dataclass(frozen=True)
class ManifestEntry:
    path: Path
    format: str | None
    options: dict[str, str] = field(default_factory=dict)


def ingest_plan(manifest: Path | None, files: Sequence[Path], fmt: str | None, options: dict[str, str],
                formats: list[str], identify: Callable[[Path, str | None], object]) -> list[ManifestEntry]:
    """What one `gpuledger ingest` reads, in order: FILES with the command's format and
    options, or every file of the manifest with its own (the command's options as defaults
    under them). With a manifest, `identify` (the format registry's) is asked about every
    file first, so a wrong format stops the run before anything is read."""
    if manifest is None:
        if not files:
            raise IngestError("give the files to ingest, or a manifest", option="manifest")
        return [ManifestEntry(path, fmt, options) for path in files]
    if files or fmt:
        raise IngestError("the manifest names the files and their formats; give no files or format with it",
                          option="manifest")
    entries = read_manifest(manifest, formats)
    for entry in entries:
        identify(entry.path, entry.format)
    return [ManifestEntry(e.path, e.format, {**options, **e.options}) for e in entries]


def read_manifest(manifest: Path, formats: list[str]) -> list[ManifestEntry]:
    """The manifest's files in order; `formats` are the known format names."""
    with open_source(manifest) as stream:
        raw = stream.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise IngestError(f"{manifest}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, list):
        raise IngestError(f"{manifest}: files: expected a list of {{path, format, options}}")
    return [_entry(manifest, index, item, formats) for index, item in enumerate(files)]


def _entry(manifest: Path, index: int, item: Any, formats: list[str]) -> ManifestEntry:
    where = f"{manifest}: files[{index}]"
    if not isinstance(item, dict):
        raise IngestError(f"{where}: expected an object with path, format, options")
    unknown = sorted(set(item) - {"path", "format", "options"})
    if unknown:
        raise IngestError(f"{where}.{unknown[0]}: unknown field (known: path, format, options)")
    path, fmt, options = item.get("path"), item.get("format"), item.get("options") or {}
    if not isinstance(path, str) or not path:
        raise IngestError(f"{where}.path: expected a file name")
    if fmt is not None and fmt not in formats:
        raise IngestError(f"{where}.format: unknown format {fmt!r} (known: {', '.join(formats)})")
    if not isinstance(options, dict):
        raise IngestError(f"{where}.options: expected an object")
    for name, value in options.items():
        if name not in OPTION_NAMES:
            raise IngestError(f"{where}.options.{name}: unknown option (known: {', '.join(sorted(OPTION_NAMES))})")
        if not isinstance(value, str):
            raise IngestError(f"{where}.options.{name}: expected a string, found {value!r}")
    found = manifest.parent / path
    if not found.is_file():
        raise IngestError(f"{where}.path: {found}: no such file")
    return ManifestEntry(found, fmt, dict(options))


__all__ = ["OPTION_NAMES", "ManifestEntry", "ingest_plan", "read_manifest"]
