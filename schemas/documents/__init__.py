"""The documents gpuledger writes and reads at its boundaries, one module per family:
each a frozen pydantic model with `from_json` and `to_json` (schemas/documents/base.py),
exported as JSON Schema beside the events' (schemas/export.py)."""

from schemas.documents.base import Document, InvalidDocument
from schemas.documents.bundle import Bundle, Entry
from schemas.documents.diagnostic import DiagnosticPacket
from schemas.documents.dispute import Answer, Claim, DisputePacket
from schemas.documents.reconciliation import ReconciliationDocument
from schemas.documents.reports import (
    CapacityReport,
    EnvelopeReport,
    OutcomesReport,
    PlacementReport,
    PromisesReport,
)
from schemas.documents.serve import FindingsPage, LinesPage

#: Every document, by the name of its JSON Schema (schemas/json/documents/<name>.json).
DOCUMENTS: dict[str, type[Document]] = {
    "reconciliation": ReconciliationDocument,
    "dispute-packet": DisputePacket,
    "evidence-bundle": Bundle,
    "diagnostic-packet": DiagnosticPacket,
    "report.promises": PromisesReport,
    "report.capacity": CapacityReport,
    "report.outcomes": OutcomesReport,
    "report.placement": PlacementReport,
    "report.envelope": EnvelopeReport,
    "serve.lines": LinesPage,
    "serve.findings": FindingsPage,
}

__all__ = [
    "DOCUMENTS",
    "Answer",
    "Bundle",
    "CapacityReport",
    "Claim",
    "DiagnosticPacket",
    "DisputePacket",
    "Document",
    "Entry",
    "EnvelopeReport",
    "FindingsPage",
    "InvalidDocument",
    "LinesPage",
    "OutcomesReport",
    "PlacementReport",
    "PromisesReport",
    "ReconciliationDocument",
]
