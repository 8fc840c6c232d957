"""The event types of docs/events.md as frozen pydantic models, and the CloudEvents envelope.

Each `data` model declares its fields; unknown fields under `data` are kept as evidence
(`extra="allow"`) and never interpreted. The envelope is CloudEvents 1.0 structured mode;
extension attributes are kept too. One discriminated union on `type` validates an event
in a single pass. The field types carry the bounds at the door (schemas/types.py): what
validates, every later command can process.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal, NotRequired, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    Strict,
    TypeAdapter,
    ValidationInfo,
    WithJsonSchema,
    create_model,
    model_validator,
)
from typing_extensions import TypedDict

from schemas.defaults import DEFAULT_STALL_S as DEFAULT_STALL_S
from schemas.defaults import DEFAULT_WARMUP_S as DEFAULT_WARMUP_S
from schemas.types import (
    MAX_LINE_GPU_SECONDS,
    MAX_SAFE_INT,
    NAIVE_IS_UTC,
    NOW,
    Amount,
    Count,
    Currency,
    Deadline,
    GpuCount,
    Money,
    Name,
    NodeNames,
    PositiveCount,
    PositiveGpuCount,
    SafeInt,
    Seconds,
    Share,
    UtcTime,
    format_money,
    parse_money,
)

PlacementClass = Literal["whole", "mig", "timeslice"]
FailureCause = Literal["hardware", "fabric", "application", "preempted", "unknown"]
DecisionKind = Literal[
    "queued",
    "admitted",
    "placed",
    "preempted",
    "reclaimed",
    "evicted",
    "borrowed",
    "lent",
    "backfilled",
    "deactivated",
]
Severity = Literal["critical", "warning"]
BillingCategory = Literal["usage", "credit", "adjustment", "correction"]
FleetChangeKind = Literal["driver-upgrade", "mig-reconfigure", "firmware", "drain"]


class EventData(BaseModel):
    """Base of every `data` model: immutable, unknown fields kept."""

    model_config = ConfigDict(frozen=True, extra="allow")


#: A device named by its index: a count like any other.
DeviceIndex = Annotated[int, Field(ge=0, le=MAX_SAFE_INT)]


class TenantData(EventData):
    tenant: Name


class DeviceDiscovered(EventData):
    node: Name
    device: Name | DeviceIndex
    model: str | None = None
    fabric_domain: str | None = None
    mig_capable: bool | None = None


class AllocationGranted(TenantData):
    allocation_id: Name
    gpus: PositiveGpuCount
    devices: list[str | SafeInt] | None = None
    node: str | None = None
    #: An allocation on several nodes (a Slurm NodeList `gpu-a[01-02,07]` expanded, a
    #: Kueue pod set placed on several hosts): a fault on any of them touches it.
    nodes: NodeNames | None = None
    fabric_domain: str | None = None
    placement_class: PlacementClass = "whole"
    profile: str | None = None


class AllocationReleased(TenantData):
    allocation_id: Name
    reason: str | None = None


class JobSubmitted(TenantData):
    job_id: Name
    gpus: PositiveGpuCount | None = None
    queue: str | None = None
    priority: SafeInt | None = None


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
    warmup_allowance_s: Seconds = DEFAULT_WARMUP_S
    stall_threshold_s: Seconds = DEFAULT_STALL_S
    reclaim_notice_s: Seconds = 0
    #: RULES.md 13: the share of a not_as_sold line's customer-borne money claimed. Absent
    #: means "1"; it is not filled in, so terms written without it keep their
    #: canonical bytes.
    placement_credit_share: Share | None = Field(
        default=None,
        description="the share in [0, 1] of a line's customer-borne money claimed when its "
        'placement was not as sold (RULES.md 13); absent means "1"',
        json_schema_extra={"default": "1"},
    )


class PolicyPromise(TenantData):
    promise_id: Name
    job_id: Name
    start_by: Deadline
    complete_by: Deadline | None = None
    placement_class: PlacementClass | None = None
    gpus: PositiveGpuCount | None = None


class PolicyDecision(TenantData):
    decision: DecisionKind
    job_id: str | None = None
    allocation_id: str | None = None
    reason: str | None = None
    notice_s: Seconds | None = None
    queue: str | None = None
    priority: SafeInt | None = None


class HealthData(EventData):
    node: str | None = None
    device: str | DeviceIndex | None = None
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
    gpus: GpuCount
    amount: Amount
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
        if (
            self.gpus * _microseconds(self.period_end - self.period_start)
            > MAX_LINE_GPU_SECONDS * 10**6
        ):
            raise ValueError(
                f"the line bills more than {MAX_LINE_GPU_SECONDS // 3600:,} GPU-hours, "
                "more than the engine computes money for exactly (split it into lines)"
            )
        return self


def _microseconds(span: timedelta) -> int:
    return span // timedelta(microseconds=1)


class WorkResult(TenantData):
    job_id: Name
    result_id: Name
    units: Count | None = None


#: A measured figure (bandwidth, latency, time): a decimal string as the tool printed it,
#: never a float. At most 18 digits either side of the point, never negative: every
#: figure fits DuckDB's DECIMAL(38,18) exactly (docs/probes.md).
MEASURE_DIGITS = 18


def _measurable(value: Decimal) -> Decimal:
    if value < 0:
        raise ValueError(f"a measured figure is never negative: {value}")
    if (
        max(0, -int(value.as_tuple().exponent)) > MEASURE_DIGITS
        or value >= Decimal(10) ** MEASURE_DIGITS
    ):
        raise ValueError(
            f"{value} has more than {MEASURE_DIGITS} digits before or after the point"
        )
    return value


Measure = Annotated[
    Decimal,
    BeforeValidator(parse_money),
    AfterValidator(_measurable),
    PlainSerializer(format_money, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": r"^\+?0*(\d{1,18}(\.\d{0,18})?|\.\d{1,18})$"}),
]
#: The links `nvidia-smi topo -m` prints between two devices (its legend): `X` is the
#: device itself, `NV<n>` a bonded set of n NVLinks, `SOC` the name older drivers gave SYS.
LINK_PATTERN = r"^(X|NV[1-9][0-9]{0,2}|PIX|PXB|PHB|NODE|SYS|SOC)$"
Link = Annotated[str, Field(pattern=LINK_PATTERN)]
ProbeKind = Literal["nvbandwidth", "nccl-tests", "network"]
InPlace = Literal["out-of-place", "in-place"]


class TopoGpu(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    name: Name  # `GPU0`, as the matrix labels it
    cpu_affinity: NotRequired[str]  # `0-63,128-191`
    numa_affinity: NotRequired[str]  # `0`, or `N/A` as printed
    gpu_numa_id: NotRequired[str]
    other_columns: NotRequired[
        dict[str, str]
    ]  # a column the ingestor does not know, by its header name


class TopoNic(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    name: Name  # `NIC0` (newer drivers), or the device itself (`mlx5_0`, older ones)
    device: NotRequired[str]  # the NIC Legend's device for an alias: `NIC0: mlx5_10`


class TopoLink(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    a: Name
    b: Name
    link: Link


class Topology(TypedDict):
    """What `nvidia-smi topo -m` shows. Parts of an event are plain dicts (TypedDict), so
    the event's canonical bytes are written by the same encoder as every other field."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    gpus: Annotated[list[TopoGpu], Field(min_length=1)]
    nics: list[TopoNic]
    links: list[TopoLink]  # one per pair of devices, in matrix order (row before column)


class PlacementObserved(TenantData):
    allocation_id: Name
    node: Name
    topology: Topology
    tool: Name = "nvidia-smi topo -m"
    job_id: str | None = None


class ProbeFigure(TypedDict):
    """One number a probe printed, with its unit and what it was measured at."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    name: Name  # `busbw`, `algbw`, `time`, `sum`, `avg_busbw`, `wrong`
    value: Measure
    unit: Name  # `GB/s`, `us`, `ns`, `errors`
    size_bytes: NotRequired[Count]  # nccl-tests: the row's message size, and the rest of its keys
    count: NotRequired[Count]  # elements
    datatype: NotRequired[Name]  # `float`
    redop: NotRequired[Name]  # `sum`, `none`
    root: NotRequired[SafeInt]  # -1: no root
    placement: NotRequired[InPlace]  # the out-of-place or in-place half of the row


class ProbeMatrix(TypedDict):
    """nvbandwidth's matrix: cells[row][column], null where it printed `N/A`."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    title: str  # `memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)`
    unit: Name
    rows: list[str]
    columns: list[str]
    cells: list[list[Measure | None]]


def _shaped(matrix: ProbeMatrix) -> ProbeMatrix:
    rows, columns, cells = matrix["rows"], matrix["columns"], matrix["cells"]
    if len(cells) != len(rows) or any(len(row) != len(columns) for row in cells):
        raise ValueError(f"cells are not {len(rows)} rows of {len(columns)} columns")
    return matrix


class ProbeResult(TenantData):
    allocation_id: Name
    probe: ProbeKind
    test: Name
    figures: list[ProbeFigure] = Field(min_length=1)
    matrix: Annotated[ProbeMatrix, AfterValidator(_shaped)] | None = None
    gpus: PositiveGpuCount | None = None
    nodes: PositiveCount | None = None
    job_id: str | None = None
    tool_version: str | None = None


def _offered_rate(value: Any) -> str:
    """`inf` (every request sent at once, as the tools print it), or a measurement."""
    if isinstance(value, str) and value.strip() == "inf":
        return "inf"
    return format_money(_measurable(parse_money(value)))


#: An offered request rate (requests per second) as text: a decimal string, or `inf`.
OfferedRate = Annotated[
    str,
    BeforeValidator(_offered_rate),
    WithJsonSchema({"type": "string", "pattern": r"^(inf|\+?(\d+(\.\d*)?|\.\d+))$"}),
]


#: The figures of a per-request measure a tool prints: the mean and percentiles (p50 is
#: the median).
Statistic = Literal["mean", "p50", "p90", "p95", "p99", "max"]
#: One per-request measure of a serving window in milliseconds, statistic by statistic, as
#: the tool printed it; a figure it did not print is absent, never guessed. A plain
#: mapping, so the canonical encoding takes it as any JSON object.
Distribution = Annotated[dict[Statistic, Measure], Field(min_length=1)]


class InferenceWindow(TenantData):
    """One window of a serving job's own measurements (a benchmark run, docs/serving.md).
    `requests` were sent, `accepted` answered successfully, `failed` ended in an error
    and `cancelled` were withdrawn by the client; `concurrency` is the stated limit on
    requests in flight and `request_rate` the offered arrival rate (`inf`: all at once)."""

    job_id: Name
    allocation_id: str | None = None
    window_start: UtcTime
    window_end: UtcTime
    requests: Count
    accepted: Count
    failed: Count | None = None
    cancelled: Count | None = None
    concurrency: PositiveCount | None = None
    request_rate: OfferedRate | None = None
    request_throughput: Measure | None = None
    output_throughput: Measure | None = None
    input_tokens: Count | None = None
    output_tokens: Count | None = None
    ttft_ms: Distribution | None = None
    tpot_ms: Distribution | None = None
    itl_ms: Distribution | None = None
    latency_ms: Distribution | None = None
    tool: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> InferenceWindow:
        if self.window_end < self.window_start:
            raise ValueError("window_end is before window_start")
        if self.accepted + (self.failed or 0) + (self.cancelled or 0) > self.requests:
            raise ValueError(
                f"accepted, failed and cancelled ({self.accepted}, {self.failed or 0}, "
                f"{self.cancelled or 0}) add up to more than the {self.requests} requests"
            )
        return self


#: A content digest as `<algorithm>:<lowercase hex>`, as the checkpoint digests are written.
DIGEST_PATTERN = r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$"
Digest = Annotated[str, Field(pattern=DIGEST_PATTERN)]


#: A MIG profile as NVIDIA names it (`1g.18gb`, `3g.40gb`, `1g.10gb+me`, `1c.3g.40gb`).
MIG_PROFILE_PATTERN = r"[0-9][0-9A-Za-z.+-]{0,63}"
MigProfile = Annotated[str, Field(pattern=f"^{MIG_PROFILE_PATTERN}$")]
#: The class a quota binds: `whole`, `timeslice`, or `mig:<profile>` (one MIG profile).
QUOTA_CLASS_PATTERN = rf"^(whole|timeslice|mig:{MIG_PROFILE_PATTERN})$"
QuotaClass = Annotated[str, Strict(), Field(pattern=QUOTA_CLASS_PATTERN)]


class PolicyQuota(TenantData):
    """A tenant's nominal quota of GPUs in one class (docs/quotas.md): `gpus` it may hold
    at once, `borrowing_limit` more it may borrow from its cohort (absent: no limit
    stated), `lending_limit` of its own it may lend (absent: all of them). In force from
    the event's `time` until the next quota of the same tenant, class and `pool`."""

    placement_class: QuotaClass
    gpus: GpuCount
    borrowing_limit: GpuCount | None = None
    lending_limit: GpuCount | None = None
    pool: str | None = (
        None  # the limit it is (`clusterqueue/<name>`, `qos/<name>`): a tenant's pools add up
    )

    @model_validator(mode="after")
    def _consistent(self) -> PolicyQuota:
        if self.lending_limit is not None and self.lending_limit > self.gpus:
            raise ValueError(
                f"lending_limit {self.lending_limit} is more than the nominal quota gpus "
                f"{self.gpus}"
            )
        return self


StartOutcome = Literal["started", "failed"]


class StartReceipt(TenantData):
    """A small disposable job started on one offered placement class
    (docs/receipts-and-changes.md):
    what it really got. `driver` is the driver version it saw, `devices` what it was given,
    `topology_digest` the digest of its `nvidia-smi topo -m` output, `decision_seq` the
    ledger seq of the `policy.decision` that placed it, `submitted_at` when it was asked
    for and `launched_at` when its process started. A failed attempt is a receipt too:
    `outcome` `failed`, `reason` why, `launched_at` when the attempt was given up."""

    job_id: Name
    allocation_id: Name
    placement_class: PlacementClass
    launched_at: UtcTime
    outcome: StartOutcome | None = (
        None  # absent: started (a default would change older receipts' bytes)
    )
    reason: str | None = None
    submitted_at: UtcTime | None = None
    node: str | None = None
    profile: str | None = None
    driver: str | None = None
    devices: list[str | SafeInt] | None = None
    topology_digest: Digest | None = None
    decision_seq: PositiveCount | None = None

    @model_validator(mode="after")
    def _consistent(self) -> StartReceipt:
        if self.submitted_at is not None and self.launched_at < self.submitted_at:
            raise ValueError("launched_at is before submitted_at")
        return self


def _no_tenant_data(value: Any, info: ValidationInfo) -> None:
    if value is not None:
        raise ValueError(
            f"a fleet event carries no tenant's data: {info.field_name} must be absent or null"
        )
    return None


#: A field of a tenant's that a fleet event must not carry (docs/events.md): absent or null.
NoTenantData = Annotated[None, BeforeValidator(_no_tenant_data)]


class DeviceGeometry(TypedDict):
    """One device's MIG geometry: the profiles of its instances (empty: MIG off, the
    device offered whole)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    node: NotRequired[Name]
    device: Name | DeviceIndex
    profiles: list[MigProfile]


def _one_per_device(geometry: list[DeviceGeometry]) -> list[DeviceGeometry]:
    seen: set[tuple[str | None, str]] = set()
    for entry in geometry:
        key = (entry.get("node"), str(entry["device"]))
        if key in seen:
            raise ValueError(
                f"device {key[1]!r}{' on ' + key[0] if key[0] else ''} is listed twice"
            )
        seen.add(key)
    return geometry


Geometry = Annotated[list[DeviceGeometry], AfterValidator(_one_per_device)]


class FleetChange(EventData):
    """A change to the fleet itself (docs/receipts-and-changes.md): a driver upgrade, a MIG
    reconfiguration, firmware, a drain, on `nodes` from `started_at` to `ended_at` (open
    while absent); a MIG reconfiguration may carry each device's geometry before and
    after. A fleet event: it names no tenant, job or allocation."""

    change_id: Name
    kind: FleetChangeKind
    started_at: UtcTime
    ended_at: UtcTime | None = None
    nodes: list[Name] | None = None
    detail: str | None = None
    geometry_before: Geometry | None = None
    geometry_after: Geometry | None = None
    tenant: NoTenantData = None
    job_id: NoTenantData = None
    allocation_id: NoTenantData = None

    @model_validator(mode="after")
    def _consistent(self) -> FleetChange:
        if self.ended_at is not None and self.ended_at < self.started_at:
            raise ValueError("ended_at is before started_at")
        if self.kind != "mig-reconfigure" and (
            self.geometry_before is not None or self.geometry_after is not None
        ):
            raise ValueError(
                "geometry_before and geometry_after belong to a mig-reconfigure, not a "
                f"{self.kind}"
            )
        return self


def _percent(value: Decimal) -> Decimal:
    if value > 100:
        raise ValueError(f"{value} is not a percentage in [0, 100]")
    return value


#: A percentage in [0, 100] as a decimal string (DCGM_FI_DEV_GPU_UTIL).
Percent = Annotated[Measure, AfterValidator(_percent)]


class CounterFigures(EventData):
    """The means of DCGM's counters over a sample window (docs/events.md): ratios in [0, 1]
    (SM active 0.94 is 94 % of the window's cycles with a warp resident), GPU utilisation
    in percent, NVLink in bytes per second."""

    node: Name
    device: Name | DeviceIndex
    window_start: UtcTime
    window_end: UtcTime
    samples: PositiveCount
    sm_active: Share | None = None
    tensor_active: Share | None = None
    gr_engine_active: Share | None = None
    dram_active: Share | None = None
    gpu_util: Percent | None = None
    nvlink_tx_bytes: Measure | None = None
    nvlink_rx_bytes: Measure | None = None

    @model_validator(mode="after")
    def _window(self) -> CounterFigures:
        if self.window_end < self.window_start:
            raise ValueError("window_end is before window_start")
        return self


class DeviceCounters(CounterFigures):
    """What one device did over a sample window (`device.counters`), from dcgm-exporter or a
    Prometheus range query. A fleet event: the pod, namespace or job that ran on the device
    are a tenant's data and never ride here (`job.counters` carries them, apart)."""

    uuid: str | None = None
    model: str | None = None
    fabric_domain: str | None = None
    tenant: NoTenantData = None
    job_id: NoTenantData = None
    allocation_id: NoTenantData = None
    pod: NoTenantData = None
    namespace: NoTenantData = None


class JobCounters(CounterFigures, TenantData):
    """The same window of one device as `device.counters`, for the tenant whose workload
    the exporter's Kubernetes mapping names on it (`job.counters`): tenant the namespace,
    job_id the pod (as the Kubernetes ingestors name a pod's job), and its container."""

    job_id: Name
    pod: Name | None = None
    container: str | None = None


AnswerState = Literal["accepted", "rejected", "partly"]
#: A signature as the signed notes write one: base64 of the key id (4 bytes) and the
#: Ed25519 signature (64 bytes).
SIGNATURE_PATTERN = r"^[A-Za-z0-9+/]{91}=$"


class DisputeAnswer(TenantData):
    """The provider's answer to one finding of a dispute (docs/answers.md): the finding is
    the invoice's line and category; `state` `accepted`, `rejected` (with `reason` and the
    seqs of the entries it cites as `evidence`) or `partly` (with the `amount` accepted).
    `finding_amount` and `finding_gpu_seconds` are the finding's figures as answered: when
    they change, the answer is stale. `revision` counts the answers to the finding (a later
    one supersedes). `signature` is the provider's Ed25519 signature, by the key `signer`,
    over the canonical JSON of every other field (reconcile/packets/answers.py)."""

    invoice_id: Name
    line_id: Name
    category: Name
    state: AnswerState
    reason: str | None = None
    evidence: list[PositiveCount] | None = None
    amount: Money | None = None
    currency: Currency | None = None
    finding_amount: Money
    finding_gpu_seconds: Measure
    revision: PositiveCount
    signer: Name
    signature: Annotated[str, Strict(), Field(pattern=SIGNATURE_PATTERN)]

    @model_validator(mode="after")
    def _consistent(self) -> DisputeAnswer:
        if self.state == "rejected" and not (self.reason or "").strip():
            raise ValueError("a rejected finding needs a reason")
        if self.state != "rejected" and (self.reason is not None or self.evidence is not None):
            raise ValueError(f"reason and evidence belong to a rejection, not to {self.state}")
        if self.state == "partly":
            if self.amount is None:
                raise ValueError("a finding accepted partly needs the amount accepted")
            if not 0 < self.amount < self.finding_amount:
                raise ValueError(
                    f"amount {self.amount} is not between 0 and the finding's "
                    f"{self.finding_amount} (accept or reject the whole instead)"
                )
        elif self.amount is not None:
            raise ValueError(f"an amount belongs to a finding accepted partly, not {self.state}")
        if self.finding_amount < 0:
            raise ValueError(f"finding_amount {self.finding_amount} is negative")
        return self


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
    "policy.quota": PolicyQuota,
    "health.fault": HealthData,
    "health.cleared": HealthData,
    "billing.line": BillingLine,
    "work.accepted": WorkResult,
    "work.rejected": WorkResult,
    "inference.window": InferenceWindow,
    "placement.observed": PlacementObserved,
    "probe.result": ProbeResult,
    "start.receipt": StartReceipt,
    "fleet.change": FleetChange,
    "device.counters": DeviceCounters,
    "job.counters": JobCounters,
    "dispute.answer": DisputeAnswer,
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

# Union[] of a tuple built at run time; `X | Y` cannot be spelled over it
_AnyEvent = Annotated[  # type: ignore[valid-type]
    Union[tuple(ENVELOPES.values())],  # noqa: UP007
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[CloudEvent] = TypeAdapter(_AnyEvent)  # type: ignore[arg-type]


def validate_event_json(raw: bytes | str, now: datetime | None = None) -> CloudEvent:
    """Parse and validate one CloudEvent from JSON text; raises pydantic.ValidationError.

    `now` is the ingest's clock (default: this machine's): no time may lie more than a day
    past it. Every time must carry a zone (RFC 3339)."""
    return EVENT_ADAPTER.validate_json(raw, context={NOW: now})


def validate_event(
    obj: Any, now: datetime | None = None, naive_is_utc: bool = False
) -> CloudEvent:
    """Validate one CloudEvent given as Python objects; raises pydantic.ValidationError.

    `now` as for `validate_event_json`. `naive_is_utc` lets a parser of a tool that prints
    no zone hand over naive times, meaning UTC (its own `--timezone` decides first)."""
    return EVENT_ADAPTER.validate_python(obj, context={NOW: now, NAIVE_IS_UTC: naive_is_utc})
