"""The operator's diagnostic packet of one promise (`gpuledger packet`, packet.json;
reconcile/packets/diagnostic.py tells each section). The story comes first (`promise`,
`why`, `path`, `zoom`), then the sections, then the evidence they cite.

Times are RFC 3339 text, durations seconds. Columns quoted from events as the ledger
holds them (a device, a step, a notice) are `Scalar`: their JSON type is the event's."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, JsonValue

from schemas.documents.base import (
    Bool,
    Document,
    Int,
    Number,
    OptInt,
    OptNumber,
    OptStr,
    Scalar,
    Str,
    kind,
)
from schemas.documents.reconciliation import CategoryFigures
from schemas.documents.reports import Promise

Texts = Annotated[list[Str], kind(list)]
#: A value quoted from an event as it is: any JSON.
Quoted = JsonValue


class _Span(Document):
    """A stretch of time: `from` and `to`, and its length."""

    model_config = Document.model_config | {"populate_by_name": True}

    from_: Str = Field(alias="from")
    to: Str
    seconds: Number


class Histogram(Document):
    bins: Int
    bin_seconds: Number
    counts: Annotated[list[Int], kind(list)]


class Step(Document):
    """One step of the job's path, from submission to first progress, with its wait."""

    step: Str
    label: Str
    t: OptStr
    seq: OptInt
    status: Str
    wait: OptStr
    wait_s: OptNumber
    wait_text: OptStr
    since: OptStr
    note: OptStr


class Zoom(Document):
    """The span the page draws zoomed, around what the sentence is about."""

    model_config = Document.model_config | {"populate_by_name": True}

    about: Str = Field(description="start or completion")
    from_: Str = Field(alias="from")
    to: Str
    seconds: Number
    progress_histogram: Histogram


class Job(Document):
    tenant: Str
    job_id: OptStr
    pods: Texts


class Decision(Document):
    seq: Int
    t: OptStr
    decision: OptStr
    job_id: OptStr
    allocation_id: OptStr
    reason: OptStr
    queue: OptStr
    notice_s: Scalar
    order: Int


class Reservation(Document):
    allocation_id: OptStr
    granted: OptStr
    grant_seq: OptInt
    released: OptStr
    release_seq: OptInt
    release_reason: OptStr
    gpus: Scalar
    node: OptStr
    devices: Quoted
    fabric_domain: OptStr
    placement_class: OptStr
    profile: OptStr


class Device(Document):
    node: OptStr
    device: Scalar
    model: OptStr
    fabric_domain: OptStr
    seq: Int


class Fault(Document):
    seq: Int
    opened: OptStr
    node: OptStr
    device: Scalar
    fabric_domain: OptStr
    code: OptStr
    severity: OptStr
    cleared: OptStr
    cleared_seq: OptInt
    touches: Quoted
    detail: Quoted = None


class Health(Document):
    devices: Annotated[list[Device], kind(list)]
    faults: Annotated[list[Fault], kind(list)]


class Attempt(Document):
    seq: Int
    attempt: Scalar
    allocation_id: OptStr
    pod: OptStr
    started: OptStr
    ended: OptStr
    end_seq: OptInt
    outcome: Str
    cause: OptStr
    detail: Quoted = None


class AttemptProgress(Document):
    attempt_seq: OptInt
    marks: Int
    first: OptStr
    last: OptStr
    first_step: Scalar
    last_step: Scalar
    units: Scalar
    step_time_p50_s: OptNumber
    step_time_p95_s: OptNumber
    longest_gap_s: OptNumber
    longest_gap_end: OptStr


class Application(Document):
    attempts: Annotated[list[Attempt], kind(list)]
    restarts: Int
    failures: Annotated[list[Attempt], kind(list)]
    progress: Annotated[list[AttemptProgress], kind(list)]
    progress_histogram: Histogram


class Save(Document):
    checkpoint_id: OptStr
    step: Scalar
    started: OptStr
    started_seq: OptInt
    saved: OptStr
    saved_seq: OptInt


class Restore(Document):
    checkpoint_id: OptStr
    step: Scalar
    t: OptStr
    seq: Int


class Checkpoints(Document):
    checkpoints: Annotated[list[Save], kind(list)]
    restores: Annotated[list[Restore], kind(list)]
    last_saved: Annotated[Save | None, kind(dict, type(None))]


class BillingLine(Document):
    """A line naming one of the allocations, with the reconciliation's categories (none
    for a line another replaced)."""

    seq: Int
    invoice_id: OptStr
    line_id: OptStr
    allocation_id: OptStr
    period_start: OptStr
    period_end: OptStr
    gpus: Scalar
    amount: OptStr
    currency: OptStr
    category: OptStr
    corrects: OptStr
    replaced: Bool
    categories: dict[str, CategoryFigures]


class Billing(Document):
    lines: Annotated[list[BillingLine], kind(list)]
    job_cost: dict[str, Str]


class Evidence(Document):
    """A cited entry as stored: its event's type, time and data."""

    seq: Int
    source: Str
    id: Str
    type: Str
    time: Str
    data: dict[str, Quoted]


class DiagnosticPacket(Document):
    ROOT = "packet"

    promise: Promise
    why: Str
    path: Annotated[list[Step], kind(list)]
    zoom: Zoom
    job: Job
    window: _Span
    decisions: Annotated[list[Decision], kind(list)]
    reservations: Annotated[list[Reservation], kind(list)]
    preemptions: Annotated[list[Decision], kind(list)]
    health: Health
    application: Application
    checkpoints: Checkpoints
    billing: Billing
    evidence: Annotated[list[Evidence], kind(list)]
