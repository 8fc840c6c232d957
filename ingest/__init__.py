"""Ingestors: one module per source format, registered in one explicit list.

`extract(path, format)` reads a file with the named ingestor, or with none named, the
one whose `identify` claims the file's first 64 KiB. Detection never guesses:
- no name, one claim: that format; two claims: an error naming both; none: an error
  (a blank file, which holds nothing to misread, is read as CloudEvents);
- a name whose ingestor does not claim the file, while another does: an error naming
  the one that does (`--format kueue` on a file of Events);
- a name no ingestor's identify can confirm (a headerless sacct file, say): read it, and
  if a non-blank file yields no record at all, that is an error too, before anything is
  written. A wrong format is a usage error, never "read 0, exit 0".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.base import UTF8_BOM, IngestError, Ingestor, open_source
from ingest.cloudevents import CloudEventsIngestor
from ingest.dcgm_metrics import DcgmMetricsIngestor
from ingest.dcgm_stats import DcgmStatsIngestor
from ingest.dcgmi_diag import DcgmiDiagIngestor
from ingest.focus import FocusIngestor
from ingest.k8s_events import K8sEventsIngestor
from ingest.kueue import KueueIngestor
from ingest.kueue_clusterqueue import KueueClusterQueueIngestor
from ingest.nccl_tests import NcclTestsIngestor
from ingest.nvbandwidth import NvbandwidthIngestor
from ingest.options import RUNTIME, IngestOptions
from ingest.prometheus_range import PrometheusRangeIngestor
from ingest.sacct import SacctIngestor
from ingest.sacctmgr_qos import SacctmgrQosIngestor
from ingest.serving_bench import ServingBenchIngestor
from ingest.topo import TopoIngestor
from schemas import Record
from schemas.owners import Owner, OwnerError, owned

HEAD_BYTES = 64 << 10  # what identify sees: enough for a log that runs before the part we read
INGESTORS: list[Ingestor] = [
    CloudEventsIngestor(),
    SacctIngestor(),
    FocusIngestor(),
    DcgmStatsIngestor(),
    DcgmMetricsIngestor(),
    KueueIngestor(),
    K8sEventsIngestor(),
    ServingBenchIngestor(),
    TopoIngestor(),
    NvbandwidthIngestor(),
    NcclTestsIngestor(),
    KueueClusterQueueIngestor(),
    SacctmgrQosIngestor(),
    PrometheusRangeIngestor(),
    DcgmiDiagIngestor(),
]
DEFAULT_FORMAT = "cloudevents"


def format_names() -> list[str]:
    return [i.name for i in INGESTORS]


def ingestor_for(path: Path, name: str | None = None) -> Ingestor:
    return choose(path, name)[0]


def choose(path: Path, name: str | None = None) -> tuple[Ingestor, bool]:
    """The ingestor for the file, and whether its identify claims the file."""
    with open_source(path) as stream:
        head = stream.read(HEAD_BYTES)
    claims = [i for i in INGESTORS if i.identify(path, head)]
    if name is not None:
        chosen = _named(name)
        others = [i.name for i in claims if i is not chosen]
        if chosen not in claims and others:
            raise IngestError(
                f"{name}: {path}: this is not {name} input, it looks like "
                f"{' or '.join(others)} (use {others[0]})",
                option="format",
            )
        return chosen, chosen in claims
    if len(claims) > 1:
        names = ", ".join(i.name for i in claims)
        raise IngestError(
            f"{path}: claimed by several formats ({names}); choose one", option="format"
        )
    if not claims and head.strip():
        raise IngestError(
            f"{path}: no format recognises this file; choose one ({', '.join(format_names())})",
            option="format",
        )
    return (claims[0], True) if claims else (_named(DEFAULT_FORMAT), True)


def _named(name: str) -> Ingestor:
    for ingestor in INGESTORS:
        if ingestor.name == name:
            return ingestor
    raise IngestError(
        f"unknown format {name!r} (known: {', '.join(format_names())})", option="format"
    )


@dataclass(frozen=True)
class Configured:
    """An ingestor with its file's options checked: what reads one file."""

    ingestor: Ingestor
    claimed: bool  # whether its identify claims the file
    options: IngestOptions
    owner: Owner
    hooks: dict[str, Any]  # RUNTIME: what the caller hands the ingestor beside its options

    def kwargs(self) -> dict[str, Any]:
        """What the ingestor's `extract` is called with."""
        return {**self.options.given(), **self.hooks}


def configure(path: Path, name: str | None = None, **options: Any) -> Configured:
    """The ingestor for the file (named, or detected) and its options, checked by the
    format's options object (ingest/options.py). Option `owner` (provider, tenant:NAME) is
    whose source the file is: a tenant's name is the tenant of a format that takes one,
    unless a tenant or tenant field is given."""
    ingestor, claimed = choose(path, name)
    hooks = {k: v for k, v in options.items() if k in RUNTIME}
    given = {
        k: v for k, v in options.items() if k not in RUNTIME and k != "owner" and v is not None
    }
    try:
        owner = Owner.parse(options.get("owner"))
    except OwnerError as exc:
        raise IngestError(f"{exc}", option="owner") from None
    takes = ingestor.options.model_fields
    if (
        owner.tenant is not None
        and "tenant" in takes
        and given.get("tenant") is None
        and not given.get("tenant_field")
    ):
        given["tenant"] = owner.tenant
    return Configured(ingestor, claimed, ingestor.options.of(given, path), owner, hooks)


def extract(path: Path, name: str | None = None, **options: Any) -> Iterator[Record]:
    """The records of one source file, in file order, as the source's owner (option
    `owner`, default the provider) may write them."""
    configured = configure(path, name, **options)
    ingestor = configured.ingestor
    records = ingestor.extract(path, **configured.kwargs())
    checked = records if configured.claimed else expect_records(records, path, ingestor.name)
    return owned(checked, configured.owner)


def expect_records(records: Iterator[Record], path: Path, name: str) -> Iterator[Record]:
    """The records, or an error when a file no identify could confirm yields none."""
    found = False
    for record in records:
        found = True
        yield record
    if not found and _has_content(path):
        raise IngestError(
            f"{name}: {path}: no {name} record in this non-empty file; "
            f"is it another format? ({', '.join(format_names())})",
            option="format",
        )


def _has_content(path: Path) -> bool:
    with open_source(path) as stream:
        while chunk := stream.read(1 << 16):
            if chunk.removeprefix(UTF8_BOM).strip():
                return True
    return False


__all__ = [
    "INGESTORS",
    "Configured",
    "IngestError",
    "IngestOptions",
    "Ingestor",
    "choose",
    "configure",
    "expect_records",
    "extract",
    "format_names",
    "ingestor_for",
]
