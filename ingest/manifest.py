"""A manifest: the list of files one `gpuledger ingest --manifest FILE` reads, in order.

The simulator writes one beside its fleet (`manifest.json`), and an operator writes one
for a collection that runs every few minutes. It is JSON; only `files` is read:

    {"files": [
        {"path": "k8s/events.json", "format": "k8s-events", "options": {"cluster": "k8s-a"}},
        {"path": "kueue/workloads.yaml", "format": "kueue"},
        {"path": "dcgm/node-07.prom", "format": "dcgm-metrics", "options": {"node": "node-07"}}
    ]}

- `path`: the file, relative to the manifest's folder. It must resolve (symbolic links
  followed) inside that folder, or inside a folder the command names with `--allow-path
  DIR`; `../`, absolute paths and links leading out are refused otherwise, as is anything
  that is not a regular file (/proc, /sys, /dev, FIFOs, sockets, devices). A refused path
  is an error before anything is read, so nothing of it reaches the ledger or the
  quarantine (docs/cli.md);
- `owner`: whose source the file is, `provider` (the default) or `tenant:NAME`
  (schemas/owners.py: a tenant's source writes only that tenant's own events);
- `format`: an ingest format; left out or null, the file's format is detected;
- `options`: the `ingest` options by their Python names (`cluster`, `node`,
  `scrape_time`, `tenant_field`, ...; OPTION_NAMES), each a string.
Files are ingested in the order listed; every entry is checked, and every file found and
its format identified, before the first is read, so a mistake appends nothing. Anything else in the manifest (the simulator's
seed, truth and counts) is left alone. A mistake is an IngestError naming the manifest,
the entry and the field.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ingest.base import IngestError, open_source
from schemas.owners import Owner, OwnerError

#: The options an entry may give: those of `gpuledger ingest`, by their Python names.
OPTION_NAMES = frozenset({"fields", "delimiter", "cluster", "tenant_field", "gpu_field", "allocation_field", "node",
                          "fabric_domain", "scrape_time", "tenant", "timezone", "job", "allocation",
                          "window_start"})
OPTION_NAMES |= {"flavor_class", "qos_tenant"}  # the quota formats' (docs/quotas.md)
#: Where no ingest reads from, whatever the folders allowed: the kernel's and devices'
#: pseudo files (/proc/self/environ holds the process's secrets) report as regular files.
SPECIAL_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
_ENTRY_FIELDS = ("path", "format", "options", "owner")


@dataclass(frozen=True)
class ManifestEntry:
    path: Path
    format: str | None
    options: dict[str, str] = field(default_factory=dict)


def ingest_plan(manifest: Path | None, files: Sequence[Path], fmt: str | None, options: dict[str, str],
                formats: list[str], identify: Callable[[Path, str | None], object],
                allowed: Sequence[Path] = ()) -> list[ManifestEntry]:
    """What one `gpuledger ingest` reads, in order: FILES with the command's format and
    options, or every file of the manifest with its own (the command's options as defaults
    under them). With a manifest, `identify` (the format registry's) is asked about every
    file first, so a wrong format stops the run before anything is read. Every file must
    be a regular one (`regular_file`); a manifest's must lie in its folder or `allowed`."""
    if manifest is None:
        if not files:
            raise IngestError("give the files to ingest, or a manifest", option="manifest")
        _owner(options.get("owner"), "--owner")
        return [ManifestEntry(regular_file(path), fmt, options) for path in files]
    if files or fmt:
        raise IngestError("the manifest names the files and their formats; give no files or format with it",
                          option="manifest")
    regular_file(manifest, "--manifest")
    _owner(options.get("owner"), "--owner")
    entries = read_manifest(manifest, formats, allowed)
    for entry in entries:
        identify(entry.path, entry.format)
    return [ManifestEntry(e.path, e.format, {**options, **e.options}) for e in entries]


def read_manifest(manifest: Path, formats: list[str],
                  allowed: Sequence[Path] = ()) -> list[ManifestEntry]:
    """The manifest's files in order; `formats` are the known format names, `allowed`
    the folders outside the manifest's own its paths may lead to."""
    with open_source(manifest) as stream:
        raw = stream.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise IngestError(f"{manifest}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, list):
        raise IngestError(f"{manifest}: files: expected a list of {{path, format, options}}")
    folders = [Path(os.path.realpath(d)) for d in (manifest.parent, *allowed)]
    return [_entry(manifest, index, item, formats, folders) for index, item in enumerate(files)]


def _entry(manifest: Path, index: int, item: Any, formats: list[str],
           folders: list[Path]) -> ManifestEntry:
    where = f"{manifest}: files[{index}]"
    if not isinstance(item, dict):
        raise IngestError(f"{where}: expected an object with path, format, options")
    unknown = sorted(set(item) - set(_ENTRY_FIELDS))
    if unknown:
        known = ", ".join(_ENTRY_FIELDS)
        raise IngestError(f"{where}.{unknown[0]}: unknown field (known: {known})")
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
    owner = item.get("owner")
    if owner is not None:
        options = {**options, "owner": _owner(owner, f"{where}.owner")}
    found = _inside(manifest.parent / path, f"{where}.path", folders)
    return ManifestEntry(found, fmt, dict(options))


def _owner(text: object, where: str) -> str | None:
    """The owner as given, checked (schemas/owners.py)."""
    if text is None:
        return None
    try:
        if not isinstance(text, str):
            raise OwnerError(f"expected 'provider' or 'tenant:NAME', found {text!r}")
        return str(Owner.parse(text))
    except OwnerError as exc:
        raise IngestError(f"{where}: {exc}") from None


def _inside(path: Path, where: str, folders: list[Path]) -> Path:
    """`path` when it resolves inside one of `folders` (the manifest's, then --allow-path)."""
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(folder) for folder in folders):
        raise IngestError(f"{where}: {path} resolves to {real}, outside the manifest's "
                          f"folder {folders[0]}: refused (allow its folder to read it)",
                          option="allow_path")
    return regular_file(path, where)


def regular_file(path: Path, where: str | None = None) -> Path:
    """`path` when it is a regular file that is not a kernel or device pseudo file;
    checked before it is opened, so a refused path is never read. `where` names the
    manifest entry or option that gave it."""
    real = Path(os.path.realpath(path))
    named = f"{where}: {path}" if where else str(path)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        raise IngestError(f"{named}: no such file") from None
    except OSError as exc:
        raise IngestError(f"{named}: cannot read: {exc.strerror}") from None
    if any(real.is_relative_to(root) for root in SPECIAL_ROOTS) or not stat.S_ISREG(mode):
        raise IngestError(f"{named}: not a regular file ({_kind(real, mode)}): refused")
    return path


def _kind(real: Path, mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    for test, name in kinds:
        if test(mode):
            return name
    return f"a pseudo file under /{real.parts[1]}" if len(real.parts) > 1 else "a special file"


__all__ = ["OPTION_NAMES", "ManifestEntry", "ingest_plan", "read_manifest", "regular_file"]
