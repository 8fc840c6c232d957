"""The evidence bundle (ledger/evidence.py): a tenant's entries with the proofs that they
are in the ledger, all of them, as one signed checkpoint says. Its `Entry` is a ledger
entry as a bundle carries it: every hashed column, so its leaf can be recomputed.

Integers are the ledger's: in [0, 2^53). Hashes and salts are lowercase-or-not hex text;
a salt is 16 bytes, a hash of a consistency proof or a withheld leaf 32."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from schemas.documents.base import Document, OptStr, Str, hex_digits, kind

BUNDLE_VERSION = 1

#: A ledger integer (seq, tree size, index): in [0, 2^53).
LedgerInt = Annotated[int, kind(int, ranged=True)]
OptLedgerInt = Annotated[int | None, kind(int, type(None), ranged=True)]
Hex = Annotated[str, kind(str), AfterValidator(hex_digits)]


def _hash(value: str) -> str:
    hex_digits(value)
    if len(value) != 64:
        raise ValueError(f"expected a SHA-256 hash (64 hex digits), got {len(value)} characters")
    return value


def _salt(value: str) -> str:
    if len(value) != 32:
        raise ValueError(f"expected 16 bytes in hex, got {len(value)} characters")
    return hex_digits(value)


Hash = Annotated[str, kind(str), AfterValidator(_hash)]
Salt = Annotated[str, kind(str), AfterValidator(_salt)]


class Entry(Document):
    """One ledger entry, every column its leaf hash covers (ledger/hashing.py `entry_bytes`),
    in that order: a tenant's entry has its tenant and tenant_seq, a fleet entry neither."""

    ROOT = "entry"

    seq: LedgerInt
    recorded_at: Str
    source: Str
    id: Str
    type: Str
    tenant: OptStr
    tenant_seq: OptLedgerInt
    event: Str = Field(description="the canonical event, as JSON text")
    salt: Salt


#: The columns of an entry, in the order its leaf hash takes them.
ENTRY_FIELDS: tuple[str, ...] = tuple(Entry.model_fields)


class TenantHead(Document):
    """The checkpoint's commitment to the tenant's last entry, with its inclusion proof."""

    tenant_seq: LedgerInt
    leaf: Hex
    index: LedgerInt
    proof: Annotated[list[Hex], kind(list)]


class FleetHead(Document):
    """A fleet key's committed count and chain head, with its proof in the fleet-head tree;
    `seqs` when the key is one of the tenant's (absent for a neighbour proving absence)."""

    key: Str
    count: LedgerInt
    head: Hex
    index: LedgerInt
    proof: Annotated[list[Hex], kind(list)]
    seqs: Annotated[list[LedgerInt], kind(list)] = Field(default_factory=list)


class Fleet(Document):
    heads: Annotated[list[FleetHead], kind(list)]


class Withheld(Document):
    """A fleet entry proven by its leaf hash alone."""

    seq: LedgerInt
    leaf: Hash


class Consistency(Document):
    """RFC 9162's proof that the checkpoint's tree extends the tree of `from_size`."""

    from_size: LedgerInt
    proof: Annotated[list[Hash], kind(list)]


class Bundle(Document):
    ROOT = "bundle"

    version: LedgerInt
    tenant: Str
    checkpoint: Str = Field(description="the signed checkpoint note, with any cosignatures")
    entries: Annotated[list[Entry], kind(list)]
    inclusion: Annotated[list[Hex], kind(list)]
    tenant_head: TenantHead
    fleet: Annotated[Fleet | SkipJsonSchema[None], kind(dict)] = None
    withheld: Annotated[list[Withheld], kind(list)] = Field(default_factory=list)
    consistency: Annotated[Consistency | SkipJsonSchema[None], kind(dict)] = None

    @field_validator("version")
    @classmethod
    def _version(cls, value: int) -> int:
        if value != BUNDLE_VERSION:
            raise ValueError(f"{value} is not {BUNDLE_VERSION}, the version this verifier reads")
        return value
