"""Ingestors: one module per source format, registered in one explicit list.

`extract(path, format)` picks the ingestor by name; with no name, the one whose
`identify` claims the file (a file claimed by two is an error, not a guess), else
CloudEvents, the native format.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ingest.base import IngestError, Ingestor, open_source
from ingest.cloudevents import CloudEventsIngestor
from ingest.dcgm_metrics import DcgmMetricsIngestor
from ingest.dcgm_stats import DcgmStatsIngestor
from ingest.focus import FocusIngestor
from ingest.k8s_events import K8sEventsIngestor
from ingest.kueue import KueueIngestor
from ingest.sacct import SacctIngestor
from schemas import Record

INGESTORS: list[Ingestor] = [CloudEventsIngestor(), SacctIngestor(), FocusIngestor(), DcgmStatsIngestor(),
                             DcgmMetricsIngestor(), KueueIngestor(), K8sEventsIngestor()]
DEFAULT_FORMAT = "cloudevents"


def format_names() -> list[str]:
    return [i.name for i in INGESTORS]


def ingestor_for(path: Path, name: str | None = None) -> Ingestor:
    if name is not None:
        for ingestor in INGESTORS:
            if ingestor.name == name:
                return ingestor
        raise IngestError(f"--format: unknown format {name!r} (known: {', '.join(format_names())})")
    with open_source(path) as stream:
        head = stream.read(8192)
    claims = [i for i in INGESTORS if i.identify(path, head)]
    if len(claims) > 1:
        names = ", ".join(i.name for i in claims)
        raise IngestError(f"{path}: claimed by several formats ({names}); choose one with --format")
    return claims[0] if claims else ingestor_for(path, DEFAULT_FORMAT)


def extract(path: Path, name: str | None = None, **options: Any) -> Iterator[Record]:
    """The records of one source file, in file order."""
    return ingestor_for(path, name).extract(path, **options)


__all__ = ["INGESTORS", "IngestError", "Ingestor", "extract", "format_names", "ingestor_for"]
