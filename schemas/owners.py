"""Who may write what (docs/evidence.md, "Who writes what").

A source is the provider's (scheduler, DCGM host engine and exporter, billing, fleet
tooling) or a tenant's (its application's logs, the probes and benchmarks it runs). The
owner of what one ingest reads is given by whoever runs it: `--owner provider` or
`--owner tenant:NAME`, or `owner` on a manifest entry; left out, it is the provider.

- A provider's source writes any event.
- A tenant's source writes only events of TENANT_TYPES, and only with its own tenant.
  Fleet events (tenant null), grants, decisions, quotas, terms, promises, receipts and
  billing lines are the provider's alone. Anything else such a source yields is refused:
  a rejection naming the field, so it goes to the quarantine, never into the ledger.

The types are an allow list: a type added later is the provider's until said otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from schemas.errors import BadInput
from schemas.records import Accepted, Record, Rejected

PROVIDER = "provider"
_TENANT_PREFIX = "tenant:"

#: What a tenant's own source may write: what its jobs say of themselves (progress,
#: checkpoints, results), and what it measured on its own allocation (probes, serving
#: windows, the topology it saw). Nothing here moves money to the provider by itself:
#: the reconciliation rules that do read a fault, a decision or a receipt.
TENANT_TYPES = frozenset(
    {
        "job.submitted",
        "job.started",
        "job.progress",
        "job.completed",
        "job.failed",
        "job.cancelled",
        "checkpoint.started",
        "checkpoint.saved",
        "checkpoint.restored",
        "work.accepted",
        "work.rejected",
        "probe.result",
        "inference.window",
        "placement.observed",
    }
)


#: The CloudEvents source schemes of the provider's own collectors (its scheduler, DCGM
#: exporter, billing export, bindings, answers). An event is keyed by (source, id, tenant),
#: so a tenant writing under one of them could take the key of an event the provider will
#: write about that tenant (its device counters, a grant, a line) and have it quarantined
#: as a conflict: a tenant's source may not use them.
PROVIDER_SCHEMES = frozenset(
    {
        "slurm",
        "kueue",
        "k8s",
        "dcgm-exporter",
        "focus",
        "gpu-binding",
        "scheduler",
        "gpuledger-answer",
    }
)


class OwnerError(BadInput, ValueError):
    """An owner that is neither `provider` nor `tenant:NAME`."""


class Owner(NamedTuple):
    """The provider (tenant None) or one tenant."""

    tenant: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> Owner:
        """`provider` (also the default: None) or `tenant:NAME`."""
        if text is None or text == PROVIDER:
            return cls(None)
        if text.startswith(_TENANT_PREFIX) and text[len(_TENANT_PREFIX) :].strip():
            return cls(text[len(_TENANT_PREFIX) :])
        raise OwnerError(f"expected 'provider' or 'tenant:NAME', found {text!r}")

    def __str__(self) -> str:
        return PROVIDER if self.tenant is None else f"{_TENANT_PREFIX}{self.tenant}"

    def refusal(self, record: Accepted) -> Rejected | None:
        """The rejection of a record this owner may not write, or None when it may."""
        if self.tenant is None:
            return None
        if record.type not in TENANT_TYPES:
            what = "fleet events" if record.tenant is None else f"{record.type} events"
            return Rejected(
                record.origin,
                "type",
                f"a source of {self} may not write {what} ({record.type} "
                "is the provider's to write); ingest it with --owner provider if it is",
                record.body,
            )
        scheme = record.source.split("://", 1)[0] if "://" in record.source else None
        if scheme in PROVIDER_SCHEMES:
            return Rejected(
                record.origin,
                "source",
                f"a source of {self} may not write under the provider's {scheme}:// sources",
                record.body,
            )
        if record.tenant != self.tenant:
            return Rejected(
                record.origin,
                "data.tenant",
                f"a source of {self} writes only its own tenant's events, not {record.tenant!r}'s",
                record.body,
            )
        return None


def owned(records: Iterable[Record], owner: Owner) -> Iterator[Record]:
    """The records as `owner` may write them: refused ones become rejections."""
    if owner.tenant is None:
        yield from records
        return
    for record in records:
        refused = owner.refusal(record) if isinstance(record, Accepted) else None
        yield record if refused is None else refused


__all__ = ["PROVIDER", "PROVIDER_SCHEMES", "TENANT_TYPES", "Owner", "OwnerError", "owned"]
