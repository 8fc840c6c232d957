"""The reports (`gpuledger report … --format json`, and `reports/*.json` of the demo):
promises, capacity (with the fleet changes' windows), outcomes (with its serving view),
placement and envelope; definitions in docs/reports.md and docs/placement.md.

Times are RFC 3339 text; durations are seconds (whole unless the times had a fraction);
money is decimal text at the currency's minor unit, keyed by currency; a figure that
cannot be computed (no data) is null."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from schemas.documents.base import (
    Bool,
    Document,
    Int,
    Number,
    OptInt,
    OptNumber,
    OptPeriod,
    OptStr,
    Str,
    kind,
)

#: Per currency: a money figure's name → decimal text (null when it cannot be computed).
CostByCurrency = dict[str, dict[str, OptStr]]
Texts = Annotated[list[Str], kind(list)]


class Distribution(Document):
    """How many values, and their nearest-rank p50 and p95 (null when there are none)."""

    n: Int
    p50: OptNumber
    p95: OptNumber


# -- promises ---------------------------------------------------------------------------


class PromiseSummary(Document):
    tenant: Str
    placement_class: OptStr
    promises: Int
    met: Int
    missed: Int
    pending: Int
    started: Int
    start_delay_p50_s: OptNumber
    start_delay_p95_s: OptNumber


class AheadJob(Document):
    tenant: Str
    job_id: Str
    submitted: OptStr
    started: OptStr
    backfilled: Bool


class Ahead(Document):
    """The jobs of a missed start's class submitted after it and started before it."""

    jobs: Int
    backfilled: Int
    seen: Annotated[list[AheadJob], kind(list)]
    others: Int  # another tenant's, counted only (a tenant's report)
    scheduler_s: Number


class QueueEstimates(Document):
    """One queue's time limits asked for against the time its jobs ran."""

    queue: Str
    jobs: Int
    requested_s: Number
    elapsed_s: Number
    used_share: OptNumber
    optimistic: Int
    pessimistic: Int
    accurate: Int


class Promise(Document):
    """One promise, kept or not; a missed one names the command of its diagnostic packet."""

    tenant: Str
    promise_id: Str
    job_id: OptStr
    placement_class: OptStr
    gpus: OptInt
    promised_at: OptStr
    start_by: OptStr
    started: OptStr
    start_status: OptStr
    start_delay_s: OptNumber
    complete_by: OptStr
    completed: OptStr
    completion_status: OptStr
    completion_delay_s: OptNumber
    allocation_id: OptStr
    missed: Bool
    seq: Int
    packet_command: Str = Field(default="", description="a missed promise's only")
    cause: OptStr = Field(
        default=None, description="a missed start's only: its cause (reconcile/RULES.md)"
    )
    cause_seconds: Annotated[dict[str, Number], kind(dict)] = Field(
        default_factory=dict, description="a missed start's only: seconds of its wait per cause"
    )
    cause_bearer: OptStr = Field(
        default=None, description="a missed start's only: its cause's bearer"
    )
    ahead: Annotated[Ahead | None, kind(dict, type(None))] = Field(
        default=None, description="a missed start's only: the later jobs started before it"
    )


class CauseGroup(Document):
    """The misses of one cause: how many it is its cause, its seconds over all misses."""

    cause: Str
    cause_bearer: Str
    misses: Int
    seconds: Number


class PromisesReport(Document):
    ROOT = "promises"

    period: OptPeriod = Field(default=None, description="the period the report covers")
    summary: Annotated[list[PromiseSummary], kind(list)]
    misses: Annotated[list[Promise], kind(list)]
    promises: Annotated[list[Promise], kind(list)]
    causes: Annotated[list[CauseGroup], kind(list)] = Field(default_factory=list)
    estimates: Annotated[list[QueueEstimates], kind(list)] = Field(default_factory=list)


# -- capacity ---------------------------------------------------------------------------


class Window(Document):
    since: OptStr
    until: OptStr


class ClassCapacity(Document):
    """One placement class's devices and jobs, step by step, with the shares of each step."""

    placement_class: OptStr
    devices_discovered: Int
    jobs_admitted: Int
    jobs_placed: Int
    workloads_started: Int
    started_without_admission: Int
    devices_admitted: Int
    devices_placed: Int
    devices_started: Int
    admitted_started: Int
    devices_admitted_share: OptNumber
    devices_placed_share: OptNumber
    devices_started_share: OptNumber
    admitted_started_share: OptNumber


class ClassReceipts(Document):
    placement_class: OptStr
    devices_discovered: Int
    receipts: Int
    devices_receipted: Int
    devices_without_receipt: Int
    workloads_started: Int
    start_attempts: Int = 0  # every receipt, failed ones included
    failed_starts: Int = 0  # receipts with outcome failed


class ChangeWindow(Document):
    """Starts and waits before, during or after one fleet change."""

    model_config = Document.model_config | {"populate_by_name": True}

    phase: Str
    from_: OptStr = Field(alias="from")
    to: OptStr
    starts: Int
    job_starts: Int
    receipt_starts: Int
    submitted: Int
    queue_delay_s: Distribution
    not_started: Int
    started_after_window: Int
    interrupted: Int


class HeldJob(Document):
    tenant: Str
    job_id: Str
    submitted: OptStr
    started: OptStr


class FleetChange(Document):
    change_id: Str
    kind: Str
    nodes: Annotated[list[Str] | None, kind(list, type(None))]
    started_at: OptStr
    ended_at: OptStr
    open: Bool
    window_s: OptNumber
    windows: Annotated[list[ChangeWindow], kind(list)]
    held_past_end: Annotated[list[HeldJob], kind(list)]


class CapacityGroup(Document):
    """One class and fabric domain over the period: GPU-seconds discovered, and in each
    state (they add up to discovered)."""

    placement_class: Str
    fabric_domain: OptStr
    discovered_gpu_s: Number
    allocated_gpu_s: Number
    free_gpu_s: Number
    faulted_gpu_s: Number
    under_change_gpu_s: Number


class QuotaUse(Document):
    """One class over the period: GPU-seconds reserved by tenants' quotas, used, unused."""

    placement_class: Str
    reserved_gpu_s: Number
    used_gpu_s: Number
    unused_gpu_s: Number


class NodeFaults(Document):
    """One node over the period: its faults, its GPU-hours, the rate, its faulted time."""

    node: Str
    faults: Number
    critical: Number
    gpu_hours: Str
    faults_per_1000_gpu_hours: OptStr
    faulted_gpu_s: Number


class CapacityInTime(Document):
    since: Str
    until: Str
    groups: Annotated[list[CapacityGroup], kind(list)]
    quota: Annotated[list[QuotaUse], kind(list)] = Field(default_factory=list)
    nodes: Annotated[list[NodeFaults], kind(list)] = Field(default_factory=list)


class CapacityReport(Document):
    ROOT = "capacity"

    period: OptPeriod = Field(default=None, description="the period the report covers")
    window: Window
    tenant: OptStr
    classes: Annotated[list[ClassCapacity], kind(list)]
    total: ClassCapacity
    receipts: Annotated[list[ClassReceipts], kind(list)]
    changes: Annotated[list[FleetChange], kind(list)]
    in_time: Annotated[CapacityInTime | None, kind(dict, type(None))] = None


# -- outcomes ---------------------------------------------------------------------------


class CheckpointOverhead(Document):
    checkpoint_gpu_seconds: Number
    billed_gpu_seconds: Number
    ratio: OptNumber


class TenantOutcomes(Document):
    tenant: Str
    jobs: Int
    completed_runs: Int
    accepted_results: Int
    time_to_first_usable_allocation_s: Distribution
    step_time_s: Distribution
    completed_run_time_s: Distribution
    checkpoint_overhead: CheckpointOverhead
    cost: CostByCurrency


class JobOutcome(Document):
    tenant: Str
    job_id: Str
    submitted: OptStr
    first_start: OptStr
    first_allocation: OptStr
    granted: OptStr
    first_progress: OptStr
    completed: OptStr
    attempts: OptInt
    time_to_first_usable_allocation_s: OptNumber
    completed_run_time_s: OptNumber
    result: Str
    cost: dict[str, Str]


class Percentiles(Document):
    """The highest figure any window printed, per statistic."""

    p50: OptStr
    p95: OptStr
    p99: OptStr


class ServingFigures(Document):
    """One tenant's inference windows at one concurrency (or all of them)."""

    tenant: Str
    concurrency: Annotated[int | str | None, kind(int, str, type(None))]
    windows: Int
    jobs: Texts
    seconds: OptNumber
    requests: Int
    accepted: Int
    failed: OptInt
    cancelled: OptInt
    request_rate_per_s: OptStr
    output_tokens_per_s: OptStr
    ttft_ms: Percentiles
    latency_ms: Percentiles
    cost: CostByCurrency


class OutcomesReport(Document):
    """Per tenant, per job, and the serving view (`report outcomes --view serving` alone
    writes only `serving`)."""

    ROOT = "outcomes"

    period: OptPeriod = Field(default=None, description="the period the report covers")
    tenants: Annotated[list[TenantOutcomes], kind(list)] = Field(default_factory=list)
    jobs: Annotated[list[JobOutcome], kind(list)] = Field(default_factory=list)
    serving: Annotated[list[ServingFigures], kind(list)]


# -- placement --------------------------------------------------------------------------


class AllocationPlacement(Document):
    """One allocation: the class sold, what was observed of it, and the verdict."""

    tenant: Str
    allocation_id: Str
    jobs: Texts
    gpus: OptInt
    placement_class: OptStr
    class_from: OptStr
    promise_id: OptStr
    granted_class: OptStr
    nodes_observed: Texts
    links_observed: dict[str, Int]
    status: Str
    reason: Str
    reasons: Texts
    billed: dict[str, Str]
    busbw_gbps: OptStr
    busbw_size_bytes: OptInt
    step_time_p50_s: OptStr
    step_times: Int


class PlacementSummary(Document):
    tenant: Str
    placement_class: OptStr
    allocations: Int
    match: Int
    mismatch: Int
    undetermined: Int
    unobserved: Int
    billed_on_mismatch: dict[str, Str]


class Prediction(Document):
    """Per class: does bus bandwidth predict step time (Spearman's ρ)?"""

    placement_class: OptStr
    n: Int
    spearman: OptStr
    spearman_squared: OptStr
    predicts: Annotated[bool | None, kind(bool, type(None))]
    reading: Str


class PlacementReport(Document):
    ROOT = "placement"

    period: OptPeriod = Field(default=None, description="the period the report covers")
    allocations: Annotated[list[AllocationPlacement], kind(list)]
    summary: Annotated[list[PlacementSummary], kind(list)]
    prediction: Annotated[list[Prediction], kind(list)]


# -- envelope ---------------------------------------------------------------------------


class PromiseFigures(Document):
    promises: Int
    met: Int
    missed: Int
    pending: Int
    start_delay_s: Distribution
    completion_delay_s: Distribution
    promised_start_s: Distribution
    observed_start_s: Distribution
    promised_completion_s: Distribution
    observed_completion_s: Distribution


class EnvelopeGroup(Document):
    """One source and/or placement class (the report's `by`): jobs, promises, restarts,
    checkpoint overhead and cost."""

    source: OptStr = None
    placement_class: OptStr = None
    jobs: Int
    started: Int
    completed: Int
    start_wait_s: Distribution
    completed_run_time_s: Distribution
    promises: Annotated[PromiseFigures | None, kind(dict, type(None))]
    restarts: Int
    jobs_restarted: Int
    restart_rate: OptNumber
    accepted_results: Int
    checkpoint_overhead: CheckpointOverhead
    cost: CostByCurrency
    miss_causes: Annotated[dict[str, Int], kind(dict)] = Field(
        default_factory=dict, description="the group's missed starts by cause (reconcile/RULES.md)"
    )


class EnvelopeReport(Document):
    ROOT = "envelope"

    period: OptPeriod = Field(default=None, description="the period the report covers")
    by: Texts
    tenant: OptStr
    groups: Annotated[list[EnvelopeGroup], kind(list)]
    unassigned: dict[str, Str] = Field(description="money of lines in no group, per currency")


#: Each report's document, by the report's name.
REPORT_DOCUMENTS: dict[str, type[Document]] = {
    "promises": PromisesReport,
    "capacity": CapacityReport,
    "outcomes": OutcomesReport,
    "serving": OutcomesReport,
    "placement": PlacementReport,
    "envelope": EnvelopeReport,
}
