"""FinOps FOCUS 1.0–1.2 billing exports (CSV or Parquet): every row a `billing.line`.

Mapping: ChargePeriodStart/End → the period; BilledCost → amount (exact Decimal text);
BillingCurrency → currency; InvoiceId, else BillingPeriodStart → invoice_id;
ResourceId (or the column given as `allocation_field`) → allocation_id; tenant from
SubAccountId, else BillingAccountId (or `tenant_field`, or `--tenant NAME` for the whole
file). The original columns ride along whole under `data.focus`.

Charge categories as FOCUS defines them (ChargeCategory: Usage, Purchase, Tax, Credit,
Adjustment; ChargeClass `Correction`: a correction to a previously invoiced period):
- Usage and Adjustment bill GPU time: gpus from the column `gpu_field` when given, else
  PricingQuantity ÷ the period's hours when PricingUnit is GPU-hours, else 0;
- Purchase (a commitment bought upfront or recurring), Tax and Credit are money only:
  gpus 0, whatever their PricingUnit says;
- category: Usage → usage, Credit → credit, Adjustment → adjustment; Purchase and Tax →
  adjustment (the ledger's categories have no purchase or tax; the row's own value is
  kept as `charge_category`); ChargeClass Correction → correction; the extension column
  `x_Corrects` (the `Id` of the line this row replaces) → corrects.
A value FOCUS does not allow is refused with the allowed ones.

Quirks taken as they are: the literal NULL for empty, times with a space and no zone
(UTC, as FOCUS requires), money with many decimal places, a non-standard `Id` column.

A line's id is the row's `Id` when there is one, else a digest of what identifies the
charge (IDENTITY: provider, accounts, invoice period, charge period, category, class,
description, resource, SKU, pricing unit, commitment) and how many rows with that
identity came before it in the file. A later export of the same period repeats its
earlier rows as duplicates and appends only the new ones; a row whose amounts changed
under the same identity is a conflict (kept in quarantine, the first stays), never a
second charge; two identical rows (a duplicated charge) stay two lines.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from hashlib import sha256
from pathlib import Path
from typing import Any

from ingest.base import UTF8_BOM, IngestError, event_from_object, fixed_tenant, open_source
from ingest.options import TENANT, TenantOptions, option
from schemas import Origin, Record, Rejected
from schemas.types import format_money

NULLS = frozenset({"", "NULL", "null"})
_GPU_HOUR_UNITS = frozenset(
    {"gpu-hours", "gpu-hour", "gpu hours", "gpu hour", "gpuhours", "gpu-hrs"}
)
#: FOCUS ChargeCategory → (the ledger's category, whether the row may bill GPU time).
_CATEGORIES = {
    "usage": ("usage", True),
    "adjustment": ("adjustment", True),
    "purchase": ("adjustment", False),
    "tax": ("adjustment", False),
    "credit": ("credit", False),
}
IDENTITY = (
    "ProviderName",
    "BillingAccountId",
    "SubAccountId",
    "BillingPeriodStart",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ResourceId",
    "SkuId",
    "SkuPriceId",
    "PricingUnit",
    "CommitmentDiscountId",
    "CommitmentDiscountStatus",
    "CapacityReservationId",
    "RegionId",
    "AvailabilityZone",
    "ServiceName",
    "x_Corrects",
)
TENANT_COLUMNS = ("SubAccountId", "BillingAccountId")


class FocusOptions(TenantOptions):
    """What focus is told beside its file."""

    format = "focus"

    tenant_field: str | None = option(
        "The column to take the tenant from (default: SubAccountId, else BillingAccountId)."
    )
    tenant: str | None = option(TENANT)
    gpu_field: str | None = option(
        "The column holding the GPU count (default: "
        "PricingQuantity when PricingUnit is GPU-hours)."
    )
    allocation_field: str | None = option(
        "The column holding the allocation id (default: ResourceId)."
    )


class FocusIngestor:
    name = "focus"
    options = FocusOptions
    description = "FinOps FOCUS 1.0-1.2 billing export, CSV or Parquet"

    def identify(self, path: Path, head: bytes) -> bool:
        if head.startswith(b"PAR1"):
            return b"BilledCost" in _parquet_schema_text(path)
        first = head.removeprefix(UTF8_BOM).split(b"\n", 1)[0]
        return b"BilledCost" in first and b"ChargePeriodStart" in first

    def extract(self, path: Path, **options: Any) -> Iterator[Record]:
        with open_source(path) as stream:
            is_parquet = stream.read(4) == b"PAR1"
        rows = _parquet_rows(path) if is_parquet else _csv_rows(path)
        options = {**options, "tenant": fixed_tenant(options)}
        seen: dict[bytes, int] = {}
        for line, row, raw in rows:
            if not seen:
                _check_columns(path, row, options)
            yield _line_event(row, Origin(str(path), line), raw, seen, options)


def _check_columns(path: Path, row: dict[str, str | None], options: dict[str, Any]) -> None:
    """The columns a tenant comes from exist (checked once, on the first row)."""
    if options.get("tenant") is not None or "__error__" in row:
        return
    wanted = [options["tenant_field"]] if options.get("tenant_field") else list(TENANT_COLUMNS)
    if not any(column in row for column in wanted):
        raise IngestError(
            f"{path}: no tenant column: the file has no {' or '.join(wanted)}; "
            "name the tenant of the whole file",
            option="tenant",
        )


def _parquet_schema_text(path: Path) -> bytes:
    import pyarrow.parquet as pq

    try:
        return ",".join(pq.read_schema(path).names).encode()
    except Exception:  # not a readable Parquet file: not ours to claim
        return b""


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str | None], bytes]]:
    with open_source(path) as binary:
        # surrogateescape keeps undecodable bytes visible, so such rows can be refused.
        text = io.TextIOWrapper(binary, encoding="utf-8-sig", errors="surrogateescape", newline="")
        reader = csv.reader(text)
        header = next(reader, None)
        if header is None:
            return
        start = reader.line_num + 1
        for values in reader:
            raw = ",".join(values).encode("utf-8", "surrogateescape")
            if any(_undecodable(v) for v in values):
                yield start, {"__error__": "not valid UTF-8"}, raw
            elif len(values) != len(header):
                yield (
                    start,
                    {"__error__": f"expected {len(header)} columns, found {len(values)}"},
                    raw,
                )
            else:
                yield start, {k: (None if v in NULLS else v) for k, v in zip(header, values)}, raw
            start = reader.line_num + 1


def _undecodable(value: str) -> bool:
    return not value.isascii() and any("\udc80" <= c <= "\udcff" for c in value)


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, str | None], bytes]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    line = 1  # rows are numbered from 2, as if the first line were a header
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
            for row in batch.to_pylist():
                line += 1
                cleaned = {k: _as_text(v) for k, v in row.items()}
                yield line, cleaned, repr(sorted(cleaned.items())).encode()
    except (pa.ArrowException, OSError) as exc:
        raise IngestError(f"{path}:{line + 1}: not a readable Parquet file: {exc}") from None


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        aware: datetime = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return aware.isoformat()
    if isinstance(value, float):
        return repr(value)  # Parquet doubles are already inexact; kept as written
    text = str(value)
    return None if text in NULLS else text


def _line_event(
    row: dict[str, str | None],
    origin: Origin,
    raw: bytes,
    seen: dict[bytes, int],
    options: dict[str, Any],
) -> Record:
    if "__error__" in row:
        return Rejected(origin, "(row)", str(row["__error__"]), raw)
    try:
        data = _billing_data(row, options)
    except ValueError as exc:
        field, _, reason = str(exc).partition(": ")
        return Rejected(origin, field, reason, raw)
    digest = _identity(row)
    seen[digest] = seen.get(digest, 0) + 1
    line_id = row.get("Id") or f"{digest.hex()[:24]}-{seen[digest]}"
    data["line_id"] = line_id
    source = (
        f"focus://{row.get('ProviderName') or 'unknown'}/"
        f"{row.get('BillingAccountId') or 'unknown'}"
    )
    event = {
        "specversion": "1.0",
        "id": line_id,
        "source": source,
        "type": "billing.line",
        "time": data["period_end"],
        "data": data,
    }
    return event_from_object(event, origin, raw)


def _identity(row: dict[str, str | None]) -> bytes:
    """What identifies a charge, independent of the file's column order or format."""
    return sha256(
        repr([(k, row.get(k)) for k in IDENTITY]).encode("utf-8", "surrogateescape")
    ).digest()


def _tenant(row: dict[str, str | None], options: dict[str, Any]) -> str:
    if options.get("tenant") is not None:
        return str(options["tenant"])
    tenant_field = options.get("tenant_field")
    tenant = (
        row.get(tenant_field)
        if tenant_field
        else (row.get("SubAccountId") or row.get("BillingAccountId"))
    )
    if not tenant:
        empty = (
            f"{tenant_field} is empty"
            if tenant_field
            else "SubAccountId and BillingAccountId are empty"
        )
        raise ValueError(f"{tenant_field or 'SubAccountId'}: no tenant: {empty}")
    return tenant


def _billing_data(row: dict[str, str | None], options: dict[str, Any]) -> dict[str, Any]:
    tenant = _tenant(row, options)
    start, end = _time(row, "ChargePeriodStart"), _time(row, "ChargePeriodEnd")
    amount = _decimal(row, "BilledCost", required=True)
    assert amount is not None  # required=True raised otherwise
    allocation = row.get(options.get("allocation_field") or "ResourceId")
    category, bills_time = _category(row)
    gpus = _gpus(row, options.get("gpu_field"), start, end) if bills_time else 0
    data: dict[str, Any] = {
        "tenant": tenant,
        "invoice_id": row.get("InvoiceId") or _invoice_from_period(row),
        "allocation_id": allocation,
        "period_start": start,
        "period_end": end,
        "gpus": gpus,
        "amount": format_money(amount),
        "currency": row.get("BillingCurrency"),
        "category": category,
        "charge_category": row.get("ChargeCategory") or row.get("ChargeType"),
        "corrects": row.get("x_Corrects"),
        "focus": row,
    }
    if gpus:
        price = _decimal(row, "ContractedUnitPrice") or _decimal(row, "ListUnitPrice")
        data["unit_price"] = None if price is None else format_money(price)
    return {k: v for k, v in data.items() if v is not None}


def _time(row: dict[str, str | None], field: str) -> str:
    text = row.get(field)
    if not text:
        raise ValueError(f"{field}: missing")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{field}: not a time: {text!r}") from None
    moment = (
        moment.replace(tzinfo=timezone.utc)
        if moment.tzinfo is None
        else moment.astimezone(timezone.utc)
    )
    return moment.isoformat().replace("+00:00", "Z")


def _decimal(row: dict[str, str | None], field: str, required: bool = False) -> Decimal | None:
    text = row.get(field)
    if text is None:
        if required:
            raise ValueError(f"{field}: missing")
        return None
    try:
        return Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"{field}: not a decimal: {text!r}") from None


def _gpus(row: dict[str, str | None], gpu_field: str | None, start: str, end: str) -> int:
    if gpu_field:
        count = _decimal(row, gpu_field)
        if count is None or count != count.to_integral_value() or count < 0:
            raise ValueError(f"{gpu_field}: not a whole number of GPUs: {count}")
        return int(count)
    if (row.get("PricingUnit") or "").strip().lower() not in _GPU_HOUR_UNITS:
        return 0
    quantity = _decimal(row, "PricingQuantity") or Decimal(0)
    hours = (
        Decimal(
            int(
                (
                    datetime.fromisoformat(end[:-1]) - datetime.fromisoformat(start[:-1])
                ).total_seconds()
            )
        )
        / 3600
    )
    if hours <= 0:
        raise ValueError("PricingQuantity: GPU-hours over an empty charge period")
    count = quantity / hours
    if count < 0:
        raise ValueError(f"PricingQuantity: not a whole number of GPUs: {count}")
    if count != count.to_integral_value():
        raise ValueError(
            f"PricingQuantity: {quantity} GPU-hours over {hours.normalize()} h is no whole number "
            "of GPUs; name the column that holds the GPU count (the gpu_field option)"
        )
    return int(count)


def _category(row: dict[str, str | None]) -> tuple[str, bool]:
    """The ledger's category, and whether the row may bill GPU time (FOCUS ChargeCategory)."""
    column = (
        "ChargeCategory" if "ChargeCategory" in row or "ChargeType" not in row else "ChargeType"
    )  # FOCUS 0.5's name
    text = row.get(column) or ""
    found = _CATEGORIES.get(text.strip().lower())
    if found is None:
        raise ValueError(
            f"{column}: not a FOCUS charge category: {text!r} (Usage, Purchase, Tax, Credit, "
            "Adjustment)"
        )
    charge_class = (row.get("ChargeClass") or "").strip()
    if charge_class.lower() == "correction":
        return "correction", found[1]
    if charge_class:
        raise ValueError(
            f"ChargeClass: not a FOCUS charge class: {charge_class!r} (Correction, or empty)"
        )
    return found


def _invoice_from_period(row: dict[str, str | None]) -> str:
    period = row.get("BillingPeriodStart")
    if not period:
        raise ValueError("InvoiceId: missing, and no BillingPeriodStart to stand for it")
    return f"period-{_time(row, 'BillingPeriodStart')}"


__all__ = ["FocusIngestor"]
