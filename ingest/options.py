"""Each format's options as one configuration object.

An ingestor declares what it can be told beside its file as one frozen pydantic model,
`options`, a subclass of `IngestOptions`: every field a string (as given on a command line
or in a manifest), documented by its description, required when it has no default. Every
way of giving options (the command's `KEY=VALUE` pairs, a manifest entry's `options`,
a library caller's keywords) goes through `IngestOptions.of`, which refuses an option the
format does not take, names every missing required one at once, and checks each value
(a time zone, a time, a map) before any file is read.

Beside the options, a caller may hand an ingestor hooks that no user gives (RUNTIME):
`recorded`, a look-up of an event already in the ledger, `job_tenant`, the tenant of a
provider's grant of a job id on a node (ingest/dcgm_counters.py), and `skipped`, a counter
of what was passed over. They are not options and are not checked here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from ingest.base import IngestError

#: What a caller may pass an ingestor beside its options: hooks, never user input.
RUNTIME = frozenset({"recorded", "skipped", "job_tenant"})


def _named(option: str) -> AfterValidator:
    """A name that must not be blank when given."""

    def check(value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise IngestError("empty name", option=option)
        return value

    return AfterValidator(check)


def _flavor_class(value: str | None) -> str | None:
    from ingest.quotas import class_map

    class_map(value)
    return value


def _qos_tenant(value: str | None) -> str | None:
    from ingest.quotas import name_map

    name_map(value, "qos_tenant")
    return value


def _zone(value: str | None) -> str | None:
    if value:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise IngestError(
                f"unknown time zone {value!r} (an IANA name such as Europe/Berlin or UTC)",
                option="timezone",
            ) from None
    return value


def _rfc3339(option: str) -> AfterValidator:
    def check(value: str | None) -> str | None:
        from datetime import datetime

        if value:
            try:
                datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
            except ValueError:
                raise IngestError(f"not an RFC 3339 time: {value!r}", option=option) from None
        return value

    return AfterValidator(check)


class IngestOptions(BaseModel):
    """What an ingestor is told beside its file. A subclass per format; its fields are
    the format's options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the format these options are for, named in errors
    format: ClassVar[str] = ""

    @classmethod
    def names(cls) -> list[str]:
        return list(cls.model_fields)

    @classmethod
    def required(cls) -> list[str]:
        return [name for name, field in cls.model_fields.items() if field.is_required()]

    @classmethod
    def of(cls, given: Mapping[str, Any], path: Path | str | None = None) -> Self:
        """The options `given` (None values are left out), checked: an option the format
        does not take, a missing required one (every one named at once) or a bad value is
        an IngestError naming the option."""
        given = {k: v for k, v in given.items() if v is not None}
        where = f"{path}: " if path is not None else ""
        unknown = sorted(set(given) - set(cls.model_fields))
        if unknown:
            raise IngestError(
                f"{where}{cls.format} takes no option {unknown[0]!r} "
                f"(its options: {', '.join(cls.names()) or 'none'})",
                option=unknown[0],
            )
        for name, value in given.items():
            if not isinstance(value, str):
                raise IngestError(f"{where}expected a string, found {value!r}", option=name)
        missing = [name for name in cls.required() if not given.get(name, "").strip()]
        if len(missing) == 1:
            raise IngestError(
                f"{where}required: {cls.format} output names no {missing[0]}", option=missing[0]
            )
        if missing:
            raise IngestError(
                f"{where}required: {', '.join(missing)} ({cls.format} output names none of them)"
            )
        return cls.model_validate(given)

    def given(self) -> dict[str, str]:
        """The options set, by name: what the ingestor's `extract` is called with."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    @classmethod
    def listing(cls) -> Iterable[tuple[str, bool, str]]:
        """(name, required, description) of every option, in declared order."""
        for name, field in cls.model_fields.items():
            yield name, field.is_required(), field.description or ""


class TenantOptions(IngestOptions):
    """A format whose tenant may be fixed for the whole file or read from a field."""

    @model_validator(mode="after")
    def _one_tenant_rule(self) -> Self:
        tenant = getattr(self, "tenant", None)
        if tenant is not None and not tenant.strip():
            raise IngestError("empty tenant name", option="tenant")
        if tenant is not None and getattr(self, "tenant_field", None):
            raise IngestError(
                "give a fixed tenant or the tenant field to read it from, not both",
                option="tenant_field",
            )
        return self


# Field types shared by several formats: a value's check travels with its type; each
# format gives the description in its own terms.
Job = Annotated[str | None, _named("job")]
Zone = Annotated[str | None, AfterValidator(_zone)]
ScrapeTime = Annotated[str | None, _rfc3339("scrape_time")]
FlavorClass = Annotated[str | None, AfterValidator(_flavor_class)]
QosTenant = Annotated[str | None, AfterValidator(_qos_tenant)]

#: Descriptions worded once for the formats that share them.
TENANT = "The tenant of every record of the file (when the source names none)."
CAPTURE = "When the output was captured, RFC 3339 (default: the file's modification time)."
ZONE = "The IANA zone its zoneless local times are read in (default: this machine's zone)."
PROBE_TENANT = "The tenant that ran the probe (required)."
PROBE_ALLOCATION = "The allocation the output was captured on (required)."
PROBE_JOB = "The job (pilot) that ran the probe."


def option(description: str, default: Any = None) -> Any:
    """A field of an options object: its description is its documentation."""
    return Field(default, description=description)


def required(description: str) -> Any:
    return Field(description=description)


__all__ = [
    "CAPTURE",
    "PROBE_ALLOCATION",
    "PROBE_JOB",
    "PROBE_TENANT",
    "RUNTIME",
    "TENANT",
    "ZONE",
    "FlavorClass",
    "IngestOptions",
    "Job",
    "QosTenant",
    "ScrapeTime",
    "TenantOptions",
    "Zone",
    "option",
    "required",
]
