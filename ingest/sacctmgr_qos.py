"""Slurm QOS limits as `sacctmgr show qos -P` prints them (docs/quotas.md): a header line,
then one row a QOS, fields separated by `|` (`-p` ends every line with one more; both read).

A QOS's `GrpTRES` GPU limit is a quota: the GPUs all jobs running under the QOS may hold
together. `gres/gpu=N` is the quota of the class `flavor_class` names for the QOS
(`--flavor-class gpu_mig=mig:1g.10gb`), else `whole`; typed entries (`gres/gpu:a100=4`)
are kept under `by_type`. With only typed entries, each type is a class (the
`flavor_class` of the type, else `mig:<type>` for a type named like a MIG profile,
`1g.10gb`, else `whole`), and the types of one class add up. Per-job and per-user caps
(`MaxTRES`, `MaxTRESPU`) and the rest are not quotas: passed over. A QOS with no GPU in
`GrpTRES` gives nothing.

The tenant: a QOS names none (accounts are given QOS by `sacctmgr show assoc`), so the
option `qos_tenant` maps QOS names to tenants (`--qos-tenant gpu_acme=acme,gpu_beta=beta`),
and `tenant` is the tenant of every other row. A row with a GPU quota and no tenant is
quarantined, naming the QOS.

Time: the snapshot's (`scrape_time`, else the file's modification time); revisions as in
ingest/quotas.py, so a second poll of the same limits appends nothing. Source
`slurm://<cluster>`, pool `qos/<name>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.base import UTF8_BOM, IngestError, fixed_tenant, open_source
from ingest.options import CAPTURE, FlavorClass, QosTenant, ScrapeTime, TenantOptions, option
from ingest.quotas import (
    Recorded,
    class_map,
    gpu_count,
    name_map,
    quota_record,
    recorded_of,
    snapshot_time,
)
from schemas import Origin, Record, Rejected

_MIG_TYPE = re.compile(r"\d+g\.\d+gb[0-9A-Za-z.+-]*")
MAX_LINE = 1 << 20  # a QOS row is short; a longer line is not sacctmgr output


class SacctmgrQosOptions(TenantOptions):
    """What sacctmgr-qos is told beside its file."""

    format = "sacctmgr-qos"

    cluster: str | None = option("The cluster name, part of every event's source.")
    tenant: str | None = option("The tenant of every QOS that qos_tenant does not name.")
    qos_tenant: QosTenant = option("The tenant each QOS's GPU limit binds, QOS=TENANT,...")
    flavor_class: FlavorClass = option(
        "Each QOS's or GPU type's placement class, NAME=CLASS,... (whole, timeslice, "
        "mig:<profile>; default: whole)."
    )
    scrape_time: ScrapeTime = option(CAPTURE)


class SacctmgrQosIngestor:
    name = "sacctmgr-qos"
    options = SacctmgrQosOptions
    description = "Slurm sacctmgr show qos -P: GrpTRES GPU limits as quotas"
    reads_ledger = True  # its option `recorded` is a function: parsed in the ingesting process

    def identify(self, path: Path, head: bytes) -> bool:
        first = head.removeprefix(UTF8_BOM).lstrip().split(b"\n", 1)[0].rstrip(b"\r|").split(b"|")
        return (
            first[:1] == [b"Name"]
            and b"GrpTRES" in first
            and (b"Priority" in first or b"MaxWall" in first)
        )

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        rows = _Rows(
            str(path),
            options.get("cluster") or "default",
            fixed_tenant(options),
            name_map(options.get("qos_tenant"), "qos_tenant"),
            class_map(options.get("flavor_class")),
            snapshot_time(path, options),
            recorded_of(options),
        )
        with open_source(path) as stream:
            yield from rows.read(stream)


@dataclass
class _Rows:
    file: str
    cluster: str
    tenant: str | None
    qos_tenants: dict[str, str]
    classes: dict[str, str]
    time: str
    recorded: Recorded | None

    def read(self, stream: Any) -> Iterator[Record]:
        header: list[str] | None = None
        trailing = False  # `-p`: the header, and so every line, ends with one more delimiter
        offset = 0
        for number, raw in enumerate(stream, start=1):
            line_offset, offset = offset, offset + len(raw)
            if len(raw) > MAX_LINE:
                raise IngestError(
                    f"{self.file}:{number}: a line over {MAX_LINE >> 20} MiB: not sacctmgr output"
                )
            text = (
                (raw.removeprefix(UTF8_BOM) if number == 1 else raw)
                .decode("utf-8", "replace")
                .rstrip("\r\n")
            )
            if not text.strip():
                continue
            if header is None:
                trailing = text.endswith("|")
                header = _split(text, trailing)
                for needed in ("Name", "GrpTRES"):
                    if needed not in header:
                        raise IngestError(
                            f"{self.file}:{number}: header: no {needed} field: not `sacctmgr show "
                            "qos -P` output",
                            option="format",
                        )
                continue
            origin = Origin(self.file, number, line_offset)
            yield from self._row(header, _split(text, trailing), origin, raw)

    def _row(
        self, header: list[str], values: list[str], origin: Origin, raw: bytes
    ) -> Iterator[Record]:
        if len(values) != len(header):
            yield Rejected(
                origin,
                "(row)",
                f"expected {len(header)} fields as the header names, found {len(values)}",
                raw,
            )
            return
        row = dict(zip(header, values, strict=True))
        qos = row["Name"].strip()
        try:
            plain, by_type = _gpu_limits(row["GrpTRES"])
        except ValueError as exc:
            yield Rejected(origin, "GrpTRES", str(exc), raw)
            return
        if plain is None and not by_type:
            return  # no GPU limit: not a quota
        tenant = self.qos_tenants.get(qos) or self.tenant
        if not qos or tenant is None:
            yield Rejected(
                origin,
                "Name",
                f"QOS {qos!r} limits GPUs (GrpTRES {row['GrpTRES']}) but names no tenant: "
                "give the qos_tenant mapping (QOS=TENANT) or the tenant option",
                raw,
            )
            return
        records = [
            quota_record(f"slurm://{self.cluster}", data, self.time, origin, raw, self.recorded)
            for data in self._quotas(qos, tenant, plain, by_type)
        ]
        rejected = [r for r in records if isinstance(r, Rejected)]
        yield from (rejected[:1] if rejected else records)  # a QOS is one record

    def _quotas(
        self, qos: str, tenant: str, plain: int | None, by_type: dict[str, int]
    ) -> list[dict[str, Any]]:
        common = {"tenant": tenant, "pool": f"qos/{qos}", "qos": qos}
        if plain is not None:
            return [
                {
                    **common,
                    "placement_class": self.classes.get(qos, "whole"),
                    "gpus": plain,
                    "by_type": by_type or None,
                }
            ]
        by_class: dict[str, dict[str, int]] = {}
        for gpu_type, count in by_type.items():
            by_class.setdefault(self._type_class(gpu_type), {})[gpu_type] = count
        return [
            {**common, "placement_class": placement, "gpus": sum(types.values()), "by_type": types}
            for placement, types in by_class.items()
        ]

    def _type_class(self, gpu_type: str) -> str:
        if gpu_type in self.classes:
            return self.classes[gpu_type]
        return f"mig:{gpu_type}" if _MIG_TYPE.fullmatch(gpu_type) else "whole"


def _split(text: str, trailing: bool) -> list[str]:
    """The fields of a line. With `-P` a line ends in `|` only when its last field is
    empty; with `-p` every line ends in one more `|` (the header says which)."""
    return (text[:-1] if trailing and text.endswith("|") else text).split("|")


def _gpu_limits(tres: str) -> tuple[int | None, dict[str, int]]:
    """`gres/gpu=N` and the typed `gres/gpu:<type>=N` entries of a TRES list."""
    plain: int | None = None
    by_type: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in tres.split(","))):
        key, sep, value = item.partition("=")
        if key != "gres/gpu" and not key.startswith("gres/gpu:"):
            continue
        count = gpu_count(value) if sep else None
        if count is None:
            raise ValueError(f"{item!r}: not a whole number of GPUs")
        if key == "gres/gpu":
            plain = count
        else:
            by_type[key.removeprefix("gres/gpu:")] = count
    return plain, by_type


__all__ = ["SacctmgrQosIngestor"]
