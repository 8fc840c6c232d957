"""The event types of DESIGN.md §2 as frozen pydantic models, and the CloudEvents envelope.

Each `data` model declares its fields; unknown fields under `data` are kept as evidence
(`extra="allow"`) and never interpreted. The envelope is CloudEvents 1.0 structured mode;
extension attributes are kept too. One discriminated union on `type` validates an event
in a single pass.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model, model_validator

from schemas.types import Count, Currency, Money, Name, PositiveCount, UtcTime

PlacementClass = Literal["whole", "mig", "timeslice"]
FailureCause = Literal["hardware", "fabric", "application", "preempted", "unknown"]
DecisionKind = Literal[
    "queued", "admitted", "placed", "preempted", "reclaimed", "evicted", "borrowed", "lent",
    "backfilled",
]
Severity = Literal["critical", "warning"]
BillingCategory = Literal["usage", "credit", "adjustment", "correction"]


class EventData(BaseModel):
    """Base of every `data` model: immutable, unknown fields kept."""

    model_config = ConfigDict(frozen=True, extra="allow")


class TenantData(EventData):
    tenant: Name


class DeviceDiscovered(EventData):
    node: Name
    device: Name | Annotated[int, Field(ge=0)]
    model: str | None = None
    fabric_domain: str | None = None
    mig_capable: bool | None = None


class AllocationGranted(TenantData):
    allocation_id: Name
    gpus: PositiveCount
    devices: list[str | int] | None = None
    node: str | None = None
    fabric_domain: str | None = None
    placement_class: PlacementClass = "whole"
    profile: str | None = None


class AllocationReleased(TenantData):
    allocation_id: Name
    reason: str | None = None


class JobSubmitted(TenantData):
    job_id: Name
    gpus: PositiveCount | None = None
    queue: str | None = None
    priority: int | None = None


class JobStarted(TenantData):
    job_id: Name
    allocation_id: Name
    attempt: PositiveCount = 1


class JobProgress(TenantData):
    job_id: Name
    step: Count
    units: Count | None = None


class JobCompleted(TenantData):
    job_id: Name


class JobFailed(TenantData):
    job_id: Name
    cause: FailureCause
    detail: str | None = None


class JobCancelled(TenantData):
    job_id: Name
    by: str | None = None


class CheckpointStarted(TenantData):
    job_id: Name
    checkpoint_id: Name
    step: Count


class CheckpointSaved(TenantData):
    job_id: Name
    checkpoint_id: Name
    step: Count
    bytes: Count | None = None
    digest: str | None = None


class CheckpointRestored(TenantData):
    job_id: Name
    checkpoint_id: Name
    step: Count


class PolicyTerms(TenantData):
    warmup_allowance_s: Count = 600
    stall_threshold_s: Count = 300
    reclaim_notice_s: Count = 0


class PolicyPromise(TenantData):
    promise_id: Name
    job_id: Name
    start_by: UtcTime
    complete_by: UtcTime | None = None
    placement_class: PlacementClass | None = None
    gpus: PositiveCount | None = None


class PolicyDecision(TenantData):
    decision: DecisionKind
    job_id: str | None = None
    allocation_id: str | None = None
    reason: str | None = None
    notice_s: Count | None = None
    queue: str | None = None
    priority: int | None = None


class HealthData(EventData):
    node: str | None = None
    device: str | Annotated[int, Field(ge=0)] | None = None
    fabric_domain: str | None = None
    code: Name
    severity: Severity | None = None
    detail: str | None = None

    @model_validator(mode="after")
    def _names_a_place(self) -> HealthData:
        if self.node is None and self.device is None and self.fabric_domain is None:
            raise ValueError("at least one of node, device, fabric_domain is required")
        return self


class BillingLine(TenantData):
    invoice_id: Name
    line_id: Name
    allocation_id: str | None = None
    period_start: UtcTime
    period_end: UtcTime
    gpus: Count
    amount: Money
    currency: Currency
    unit_price: Money | None = None
    category: BillingCategory = "usage"
    corrects: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> BillingLine:
        if self.gpus > 0 and not self.allocation_id:
            raise ValueError("allocation_id is required when gpus > 0")
        if self.period_end < self.period_start:
            raise ValueError("period_end is before period_start")
        return self


class WorkResult(TenantData):
    job_id: Name
    result_id: Name
    units: Count | None = None


#: Every event type and its `data` model: the one list the rest of the code reads.
DATA_MODELS: dict[str, type[EventData]] = {
    "device.discovered": DeviceDiscovered,
    "allocation.granted": AllocationGranted,
    "allocation.released": AllocationReleased,
    "job.submitted": JobSubmitted,
    "job.started": JobStarted,
    "job.progress": JobProgress,
    "job.completed": JobCompleted,
    "job.failed": JobFailed,
    "job.cancelled": JobCancelled,
    "checkpoint.started": CheckpointStarted,
    "checkpoint.saved": CheckpointSaved,
    "checkpoint.restored": CheckpointRestored,
    "policy.terms": PolicyTerms,
    "policy.promise": PolicyPromise,
    "policy.decision": PolicyDecision,
    "health.fault": HealthData,
    "health.cleared": HealthData,
    "billing.line": BillingLine,
    "work.accepted": WorkResult,
    "work.rejected": WorkResult,
}

#: Types whose events belong to the fleet, not to one tenant (their `tenant` is null).
FLEET_TYPES = frozenset(t for t, m in DATA_MODELS.items() if not issubclass(m, TenantData))


class CloudEvent(BaseModel):
    """CloudEvents 1.0 structured-mode envelope; extension attributes are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    specversion: Literal["1.0"]
    id: Name
    source: Name
    type: str
    time: UtcTime
    datacontenttype: str | None = None
    dataschema: str | None = None
    subject: str | None = None
    data: EventData

    @property
    def tenant(self) -> str | None:
        return getattr(self.data, "tenant", None)


def _envelope(event_type: str, data_model: type[EventData]) -> type[CloudEvent]:
    name = "".join(part.capitalize() for part in event_type.split(".")) + "Event"
    model: type[CloudEvent] = create_model(
        name,
        __base__=CloudEvent,
        type=(Literal[event_type], ...),  # type: ignore[arg-type]
        data=(data_model, ...),
    )
    return model


ENVELOPES: dict[str, type[CloudEvent]] = {t: _envelope(t, m) for t, m in DATA_MODELS.items()}

_AnyEvent = Annotated[Union[tuple(ENVELOPES.values())], Field(discriminator="type")]  # type: ignore[valid-type]
EVENT_ADAPTER: TypeAdapter[CloudEvent] = TypeAdapter(_AnyEvent)  # type: ignore[arg-type]


def validate_event_json(raw: bytes | str) -> CloudEvent:
    """Parse and validate one CloudEvent from JSON text; raises pydantic.ValidationError."""
    return EVENT_ADAPTER.validate_json(raw)


def validate_event(obj: Any) -> CloudEvent:
    """Validate one CloudEvent given as Python objects; raises pydantic.ValidationError."""
    return EVENT_ADAPTER.validate_python(obj)
