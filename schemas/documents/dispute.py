"""The dispute packet (reconcile/packets/dispute.py, docs/packets.md): a customer's
evidence for one invoice, checked offline with the ledger's public key alone.

    version     1
    kind        "gpuledger-dispute"
    tenant      the tenant it is for
    invoice_id  the invoice it is about
    findings    the reconciliation of that invoice's lines (schemas/documents/reconciliation.py)
    claims      each provider-borne or disputed cell of the findings with its time stretches
                and the seqs of the entries that decided it; optional (packets written
                before claims still verify)
    placement_claims
                each line whose placement was not as sold (RULES.md 13): its share, its
                customer-borne amount and the claim, with the seqs of the line, the grant,
                the topology captures and the terms; optional (packets written before
                placement claims still verify)
    answers     the provider's signed answers to the findings, each as its dispute.answer
                entry's data with the entry's seq, time and status; optional (packets written
                before answers still verify)
    bundle      the evidence bundle (schemas/documents/bundle.py)

It is written compact (it is for machines; the letter beside it is for people)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from schemas.documents.base import Document, Number, OptStr, Str, kind
from schemas.documents.bundle import Bundle, LedgerInt
from schemas.documents.reconciliation import ReconciliationDocument

PACKET_VERSION = 1
PACKET_KIND = "gpuledger-dispute"

#: A stretch of a claim: from, to (RFC 3339 text), and how many GPUs.
Stretch = Annotated[
    list[Annotated[str | int, kind(str, int)]], kind(list), Field(min_length=3, max_length=3)
]


class DeviceActivity(Document):
    """What the GPU did over a stalled or idle claim (RULES.md 14): the sums, in seconds as
    exact decimal strings, and the mean SM active, the coverage and the sentence they give."""

    samples: LedgerInt
    seconds: Str
    covered_seconds: Str
    sampled_seconds: Str
    sm_active_seconds: Str
    coverage: Str
    sm_active: OptStr = None
    says: Str


class Claim(Document):
    """One provider-borne or disputed cell of the findings, told as time stretches, with
    the seqs of the entries that decided it."""

    line_id: Str
    allocation_id: OptStr
    category: Str
    bearer: Str
    gpu_seconds: Number
    amount: Str
    currency: OptStr
    stretches: Annotated[list[Stretch], kind(list)]
    cites: Annotated[list[LedgerInt], kind(list)]
    #: RULES.md 14; absent when no counters cover the claim (and in older packets)
    device_activity: DeviceActivity | None = None


class PlacementClaim(Document):
    """One line whose placement was not as sold (RULES.md 13): placement_credit_share x
    its customer-borne amount, with the seqs of the entries that decided it."""

    line_id: Str
    allocation_id: OptStr
    state: Str
    share: Str = Field(description="placement_credit_share of the terms in force")
    customer_amount: Str = Field(description="the line's customer-borne amount, exact")
    amount: Str = Field(description="the claim, rounded half-even to the minor unit")
    amount_exact: Str = Field(description="the claim, exact")
    currency: OptStr
    cites: Annotated[list[LedgerInt], kind(list)]


AnswerStatus = Literal["current", "superseded", "stale"]


class Answer(Document):
    """The provider's answer to one finding (docs/answers.md): its dispute.answer entry's
    data, with the entry's `seq` and `time`, and its `status`: `current`, `superseded` by a
    later answer to the finding, or `stale` (the finding's figures changed since)."""

    seq: LedgerInt
    time: Str
    status: Annotated[AnswerStatus, kind(str)]
    tenant: Str
    invoice_id: Str
    line_id: Str
    category: Str
    state: Annotated[Literal["accepted", "rejected", "partly"], kind(str)]
    reason: OptStr = None
    evidence: Annotated[list[LedgerInt], kind(list)] | None = None
    amount: OptStr = None
    currency: OptStr = None
    finding_amount: Str
    finding_gpu_seconds: Str
    revision: LedgerInt
    signer: Str
    signature: Str


class DisputePacket(Document):
    ROOT = "packet"
    JSON_STYLE: ClassVar[dict[str, Any]] = {"ensure_ascii": False, "separators": (",", ":")}

    version: LedgerInt
    kind: Str
    tenant: Str
    invoice_id: Str
    findings: ReconciliationDocument
    claims: Annotated[list[Claim], kind(list)] = Field(default_factory=list)
    placement_claims: Annotated[list[PlacementClaim], kind(list)] = Field(default_factory=list)
    answers: Annotated[list[Answer], kind(list)] = Field(default_factory=list)
    bundle: Bundle

    @field_validator("version")
    @classmethod
    def _version(cls, value: int) -> int:
        if value != PACKET_VERSION:
            raise ValueError(f"{value!r} is not {PACKET_VERSION}, the version this verifier reads")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value != PACKET_KIND:
            raise ValueError(f"{value!r} is not {PACKET_KIND!r}")
        return value
