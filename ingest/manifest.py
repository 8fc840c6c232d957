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
- `options`: the format's options (`cluster`, `node`, `scrape_time`, `tenant_field`, ...),
  each a string: the fields of its options object (ingest/options.py; `gpuledger ingest
  --list-formats` lists them). An option the format does not take is refused.
Each entry becomes a configured ingestor (`ingest.configure`: the format's ingestor and
its options object, checked) the way the command's own files do. Files are ingested in
the order listed; every entry is checked, and every file found, its format identified and
its options checked, before the first is read, so a mistake appends nothing. Anything else
in the manifest (the simulator's seed, truth and counts) is left alone. A mistake is an
IngestError naming the manifest, the line, the entry and the field
(`collect.json:7: files[2].options.nod: ...`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ingest import INGESTORS, Configured, choose, configure, format_names
from ingest.base import IngestError, open_source
from schemas.owners import Owner, OwnerError

#: Where no ingest reads from, whatever the folders allowed: the kernel's and devices'
#: pseudo files (/proc/self/environ holds the process's secrets) report as regular files.
SPECIAL_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
_ENTRY_FIELDS = ("path", "format", "options", "owner")


@dataclass(frozen=True)
class ManifestEntry:
    path: Path
    format: str | None
    options: dict[str, str] = field(default_factory=dict)
    where: str | None = None  # `manifest:line: files[i]`, for an entry of a manifest


@dataclass(frozen=True)
class PlannedFile:
    """One file of an ingest, its ingestor configured."""

    path: Path
    format: str | None
    options: dict[str, str]  # the configured options, and the owner when given
    configured: Configured


def ingest_plan(
    manifest: Path | None,
    files: Sequence[Path],
    fmt: str | None,
    options: dict[str, str],
    allowed: Sequence[Path] = (),
) -> list[PlannedFile]:
    """What one `gpuledger ingest` reads, in order: FILES with the command's format and
    options, or every file of the manifest with its own. The command's options (`owner`
    apart) are defaults for every file whose format takes them, under a manifest entry's
    own; one that no file's format takes is refused. Every file's ingestor is configured
    (`ingest.configure`: format identified, options checked) first, so a mistake stops the
    run before anything is read. Every file must be a regular one (`regular_file`); a
    manifest's must lie in its folder or `allowed`."""
    if manifest is None:
        if not files:
            raise IngestError("give the files to ingest, or a manifest", option="manifest")
        _owner(options.get("owner"))
        entries = [ManifestEntry(regular_file(path), fmt) for path in files]
    else:
        if files or fmt:
            raise IngestError(
                "the manifest names the files and their formats; give no files or format with it",
                option="manifest",
            )
        regular_file(manifest, option="manifest")
        _owner(options.get("owner"))
        entries = read_manifest(manifest, format_names(), allowed)
    defaults = {k: v for k, v in options.items() if k != "owner"}
    planned = [_configured(entry, defaults, options.get("owner")) for entry in entries]
    taken = {name for plan in planned for name in plan.configured.ingestor.options.model_fields}
    unused = sorted(set(defaults) - taken)
    if unused:
        kinds = {p.configured.ingestor.name: p.configured.ingestor.options for p in planned}
        takes = "; ".join(
            f"{name} takes {', '.join(o.names()) or 'none'}" for name, o in kinds.items()
        )
        whose = f"{planned[0].path}: " if len(planned) == 1 else ""
        raise IngestError(
            f"{whose}no file here takes the option {unused[0]!r} ({takes})", option=unused[0]
        )
    return planned


def _configured(entry: ManifestEntry, defaults: dict[str, str], owner: str | None) -> PlannedFile:
    """The entry's ingestor, configured: the command's defaults its format takes, under
    the entry's own options."""
    ingestor = choose(entry.path, entry.format)[0]  # a wrong format is named first
    if entry.where is not None:
        unknown = sorted(set(entry.options) - {*ingestor.options.model_fields, "owner"})
        if unknown:
            its = ", ".join(ingestor.options.names()) or "none"
            raise IngestError(
                f"{entry.where}.options.{unknown[0]}: {ingestor.name} takes no "
                f"such option (its options: {its})"
            )
    declared = ingestor.options.model_fields
    given: dict[str, str] = {k: v for k, v in defaults.items() if k in declared}
    given.update(entry.options)
    if owner is not None and "owner" not in given:
        given["owner"] = owner
    try:
        configured = configure(entry.path, entry.format, **given)
    except IngestError as exc:
        if entry.where is None or exc.option in defaults.keys() - entry.options.keys():
            raise  # about the command's own files, or its own option
        field = f".options.{exc.option}" if exc.option in entry.options else ""
        raise IngestError(f"{entry.where}{field}: {exc}") from None
    return PlannedFile(entry.path, entry.format, given, configured)


def read_manifest(
    manifest: Path, formats: list[str], allowed: Sequence[Path] = ()
) -> list[ManifestEntry]:
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
    lines = _element_lines(raw.decode("utf-8", "replace"))
    return [
        _entry(manifest, index, item, formats, folders, lines.get(index, 1))
        for index, item in enumerate(files)
    ]


def _element_lines(text: str) -> dict[int, int]:
    """The line on which each element of the top-level `files` list begins, in JSON
    already known to be valid (orjson tells no positions)."""
    lines: dict[int, int] = {}
    found = re.search(r'"files"\s*:\s*\[', text)
    if found is None:
        return lines
    position, depth, index, in_string = found.end(), 0, 0, False
    expecting = True  # the next non-blank character begins an element
    while position < len(text):
        char = text[position]
        if in_string:
            if char == "\\":
                position += 1
            elif char == '"':
                in_string = False
        elif char in " \t\r\n":
            pass
        elif depth == 0 and char == "]":
            break
        elif depth == 0 and char == ",":
            index, expecting = index + 1, True
        else:
            if expecting and depth == 0:
                lines[index] = text.count("\n", 0, position) + 1
                expecting = False
            if char == '"':
                in_string = True
            elif char in "[{":
                depth += 1
            elif char in "]}":
                depth -= 1
        position += 1
    return lines


def _entry(
    manifest: Path, index: int, item: Any, formats: list[str], folders: list[Path], line: int
) -> ManifestEntry:
    where = f"{manifest}:{line}: files[{index}]"
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
    names = sorted({name for i in INGESTORS for name in i.options.model_fields})
    for name, value in options.items():
        if name not in names:
            raise IngestError(
                f"{where}.options.{name}: unknown option (known: {', '.join(names)})"
            )
        if not isinstance(value, str):
            raise IngestError(f"{where}.options.{name}: expected a string, found {value!r}")
    owner = item.get("owner")
    if owner is not None:
        options = {**options, "owner": _owner(owner, f"{where}.owner")}
    found = _inside(manifest.parent / path, f"{where}.path", folders)
    return ManifestEntry(found, fmt, dict(options), where)


def _owner(text: object, where: str | None = None) -> str | None:
    """The owner as given, checked (schemas/owners.py); `where` is the manifest entry that
    gave it, None for the `owner` option."""
    if text is None:
        return None
    try:
        if not isinstance(text, str):
            raise OwnerError(f"expected 'provider' or 'tenant:NAME', found {text!r}")
        return str(Owner.parse(text))
    except OwnerError as exc:
        if where is None:
            raise IngestError(str(exc), option="owner") from None
        raise IngestError(f"{where}: {exc}") from None


def _inside(path: Path, where: str, folders: list[Path]) -> Path:
    """`path` when it resolves inside one of `folders` (the manifest's, then --allow-path)."""
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(folder) for folder in folders):
        raise IngestError(
            f"{where}: {path} resolves to {real}, outside the manifest's "
            f"folder {folders[0]}: refused (allow its folder to read it)",
            option="allow_path",
        )
    return regular_file(path, where)


def regular_file(path: Path, where: str | None = None, option: str | None = None) -> Path:
    """`path` when it is a regular file that is not a kernel or device pseudo file;
    checked before it is opened, so a refused path is never read. `where` names the
    manifest entry that gave it, `option` the caller's parameter."""
    real = Path(os.path.realpath(path))
    named = f"{where}: {path}" if where else str(path)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        raise IngestError(f"{named}: no such file", option=option) from None
    except OSError as exc:
        raise IngestError(f"{named}: cannot read: {exc.strerror}", option=option) from None
    if any(real.is_relative_to(root) for root in SPECIAL_ROOTS) or not stat.S_ISREG(mode):
        raise IngestError(
            f"{named}: not a regular file ({_kind(real, mode)}): refused", option=option
        )
    return path


def _kind(real: Path, mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    for test, name in kinds:
        if test(mode):
            return name
    return f"a pseudo file under /{real.parts[1]}" if len(real.parts) > 1 else "a special file"


__all__ = ["ManifestEntry", "PlannedFile", "ingest_plan", "read_manifest", "regular_file"]
