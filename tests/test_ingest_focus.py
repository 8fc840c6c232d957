"""The FOCUS ingestor: the real sample to the last digit, GPU-hours, Parquet, bad rows."""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli import main
from ingest import extract, ingestor_for
from schemas import Accepted, Rejected
from tests.conftest import REALDATA

REAL = REALDATA / "focus" / "focus_sample.csv"
HEADER = [
    "BilledCost",
    "BillingAccountId",
    "SubAccountId",
    "BillingCurrency",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "PricingQuantity",
    "PricingUnit",
    "ListUnitPrice",
    "ResourceId",
    "ProviderName",
    "InvoiceId",
]
ROWS = [
    [
        "24.00",
        "BA1",
        "acme",
        "USD",
        "2026-01-01 00:00:00",
        "Usage",
        "NULL",
        "2026-01-05 10:00:00",
        "2026-01-05 13:00:00",
        "24",
        "GPU-Hours",
        "1.00",
        "A1",
        "Neo",
        "INV-1",
    ],
    [
        "-2.50",
        "BA1",
        "acme",
        "USD",
        "2026-01-01 00:00:00",
        "Credit",
        "NULL",
        "2026-01-05 00:00:00",
        "2026-01-06 00:00:00",
        "NULL",
        "NULL",
        "NULL",
        "NULL",
        "Neo",
        "INV-1",
    ],
    [
        "3.00",
        "BA1",
        "NULL",
        "USD",
        "2026-01-01 00:00:00",
        "Adjustment",
        "Correction",
        "2026-01-05 00:00:00",
        "2026-01-06 00:00:00",
        "NULL",
        "NULL",
        "NULL",
        "NULL",
        "Neo",
        "NULL",
    ],
]


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_ALL)
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


def lines(path: Path) -> list[dict[str, object]]:
    found = list(extract(path, "focus"))
    assert all(isinstance(r, Accepted) for r in found), found
    return [orjson.loads(r.body)["data"] for r in found if isinstance(r, Accepted)]


def test_columns_map_to_billing_lines(tmp_path: Path) -> None:
    usage, credit, correction = lines(write_csv(tmp_path / "f.csv", ROWS))
    # 24 GPU-hours over a 3-hour period: 8 GPUs.
    assert (usage["gpus"], usage["allocation_id"], usage["amount"], usage["unit_price"]) == (
        8,
        "A1",
        "24.00",
        "1.00",
    )
    assert (usage["period_start"], usage["period_end"], usage["tenant"]) == (
        "2026-01-05T10:00:00Z",
        "2026-01-05T13:00:00Z",
        "acme",
    )
    assert (credit["category"], credit["gpus"], credit["amount"]) == ("credit", 0, "-2.50")
    assert (correction["category"], correction["tenant"], correction["invoice_id"]) == (
        "correction",
        "BA1",
        "period-2026-01-01T00:00:00Z",
    )
    assert usage["focus"]["ChargeClass"] is None  # type: ignore[index]


def test_identical_rows_stay_two_lines_and_reingest_appends_nothing(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "f.csv", [ROWS[0], ROWS[0]])
    db = f"sqlite:///{tmp_path / 'l.db'}"
    first = CliRunner().invoke(main, ["ingest", "--db", db, "--format", "focus", str(path)])
    again = CliRunner().invoke(main, ["ingest", "--db", db, "--format", "focus", str(path)])
    assert first.stdout.endswith("appended 2 · duplicate 0 · quarantined 0\n")
    assert again.stdout.endswith("appended 0 · duplicate 2 · quarantined 0\n")


def test_bad_rows_name_their_line_and_column(tmp_path: Path) -> None:
    bad_money = list(ROWS[0])
    bad_money[0] = "twelve"
    fractional = list(ROWS[0])
    fractional[9] = "25"  # 25 GPU-hours over 3 hours is no whole number of GPUs
    found = list(extract(write_csv(tmp_path / "f.csv", [bad_money, ROWS[1], fractional]), "focus"))
    assert [(r.origin.line, r.field) for r in found if isinstance(r, Rejected)] == [
        (2, "BilledCost"),
        (4, "PricingQuantity"),
    ]


def test_parquet_exports_ingest_the_same(tmp_path: Path) -> None:
    table = pa.table(
        {
            name: [None if row[i] == "NULL" else row[i] for row in ROWS]
            for i, name in enumerate(HEADER)
        }
    )
    pq.write_table(table, tmp_path / "f.parquet")
    assert ingestor_for(tmp_path / "f.parquet").name == "focus"
    from_parquet = lines(tmp_path / "f.parquet")
    from_csv = lines(write_csv(tmp_path / "f.csv", ROWS))
    strip = [{k: v for k, v in d.items() if k not in ("focus", "line_id")} for d in from_parquet]
    assert strip == [
        {k: v for k, v in d.items() if k not in ("focus", "line_id")} for d in from_csv
    ]


@pytest.mark.skipif(
    not REAL.exists(),
    reason=f"real data not present at {REAL} (it lives beside the project, not in it)",
)
def test_real_sample_ingests_completely_to_the_last_digit(tmp_path: Path) -> None:
    data = lines(REAL)
    assert len(data) == 1000
    assert sum(Decimal(str(d["amount"])) for d in data) == Decimal(
        "20.52022672899"
    )  # the file's BilledCost sum
    counts: dict[object, int] = {}
    for d in data:
        counts[d["category"]] = counts.get(d["category"], 0) + 1
    assert counts == {"usage": 997, "adjustment": 2, "credit": 1}
    assert ingestor_for(REAL).name == "focus"
    result = CliRunner().invoke(
        main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", str(REAL)]
    )
    assert result.exit_code == 0 and result.stdout.endswith(
        "read 1000 · appended 1000 · duplicate 0 · quarantined 0\n"
    )


def test_x_corrects_names_the_line_a_correction_replaces(tmp_path: Path) -> None:
    header = [*HEADER, "Id", "x_Corrects"]
    original = [*ROWS[0], "L-1", "NULL"]
    correction = list(ROWS[0])
    correction[0], correction[6] = "20.00", "Correction"
    path = tmp_path / "f.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows([original, [*correction, "L-1-fix", "L-1"]])
    first, fix = lines(path)
    assert "corrects" not in first
    assert (fix["line_id"], fix["category"], fix["corrects"], fix["amount"]) == (
        "L-1-fix",
        "correction",
        "L-1",
        "20.00",
    )


def row_with(**changes: str) -> list[str]:
    row = list(ROWS[0])
    for column, value in changes.items():
        row[HEADER.index(column)] = value
    return row


@pytest.mark.parametrize(
    ("charge_category", "charge_class", "category", "gpus"),
    [
        ("Usage", "NULL", "usage", 8),
        ("Adjustment", "NULL", "adjustment", 8),
        # A reservation bought in GPU-hours is money, not 720 GPU-hours of use.
        ("Purchase", "NULL", "adjustment", 0),
        ("Tax", "NULL", "adjustment", 0),
        ("Credit", "NULL", "credit", 0),
        ("Usage", "Correction", "correction", 8),
        ("Purchase", "Correction", "correction", 0),
        ("usage", "NULL", "usage", 8),  # FOCUS values, in any case
    ],
)
def test_charge_categories_map_as_focus_defines_them(
    tmp_path: Path, charge_category: str, charge_class: str, category: str, gpus: int
) -> None:
    [line] = lines(
        write_csv(
            tmp_path / "f.csv",
            [row_with(ChargeCategory=charge_category, ChargeClass=charge_class)],
        )
    )
    assert (line["category"], line["gpus"], line["charge_category"]) == (
        category,
        gpus,
        charge_category,
    )


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        (
            {"ChargeCategory": "Refund"},
            "ChargeCategory",
            "not a FOCUS charge category: 'Refund' (Usage, Purchase, Tax, Credit, Adjustment)",
        ),
        (
            {"ChargeClass": "Reversal"},
            "ChargeClass",
            "not a FOCUS charge class: 'Reversal' (Correction, or empty)",
        ),
        (
            {"PricingQuantity": "25"},
            "PricingQuantity",
            "25 GPU-hours over 3 h is no whole number of GPUs; name the column that holds the GPU "
            "count (the gpu_field option)",
        ),
    ],
)
def test_rows_that_cannot_be_read_say_why(
    tmp_path: Path, changes: dict[str, str], field: str, reason: str
) -> None:
    [record] = list(extract(write_csv(tmp_path / "f.csv", [row_with(**changes)]), "focus"))
    assert isinstance(record, Rejected) and (record.origin.line, record.field, record.reason) == (
        2,
        field,
        reason,
    )


DAY1 = [
    row_with(ChargePeriodStart="2026-01-05 10:00:00", ChargePeriodEnd="2026-01-05 13:00:00"),
    row_with(
        ResourceId="A2",
        BilledCost="8.00",
        PricingQuantity="8",
        ChargePeriodStart="2026-01-05 10:00:00",
        ChargePeriodEnd="2026-01-05 11:00:00",
    ),
]
DAY2 = [
    row_with(ChargePeriodStart="2026-01-06 10:00:00", ChargePeriodEnd="2026-01-06 13:00:00"),
    row_with(
        ChargeCategory="Tax",
        BilledCost="3.20",
        PricingQuantity="NULL",
        PricingUnit="NULL",
        ResourceId="NULL",
        ChargePeriodStart="2026-01-06 00:00:00",
        ChargePeriodEnd="2026-01-07 00:00:00",
    ),
]
DAY3 = [row_with(ChargePeriodStart="2026-01-07 10:00:00", ChargePeriodEnd="2026-01-07 13:00:00")]


def ingest_exports(
    tmp_path: Path, exports: list[list[list[str]]]
) -> tuple[str, list[tuple[int, str]]]:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    results = []
    for number, rows in enumerate(exports, start=1):
        path = write_csv(tmp_path / f"export{number}.csv", rows)
        result = CliRunner().invoke(main, ["ingest", "--db", db, "--format", "focus", str(path)])
        results.append((result.exit_code, result.stdout.partition(": ")[2]))
    return db, results


def stored_amounts(db: str) -> list[str]:
    stored = CliRunner().invoke(main, ["export", "--db", db]).stdout.splitlines()
    return [orjson.loads(line)["event"]["data"]["amount"] for line in stored]


def test_successive_exports_of_a_month_to_date_append_only_the_new_rows(tmp_path: Path) -> None:
    db, results = ingest_exports(tmp_path, [DAY1, DAY1 + DAY2, DAY1 + DAY2 + DAY3])
    assert results == [
        (0, "read 2 · appended 2 · duplicate 0 · quarantined 0\n"),
        (0, "read 4 · appended 2 · duplicate 2 · quarantined 0\n"),
        (0, "read 5 · appended 1 · duplicate 4 · quarantined 0\n"),
    ]
    assert stored_amounts(db) == ["24.00", "8.00", "24.00", "3.20", "24.00"]


def test_a_charge_restated_under_the_same_identity_is_a_conflict_and_the_first_stays(
    tmp_path: Path,
) -> None:
    restated = [
        row_with(
            BilledCost="30.00",
            ChargePeriodStart="2026-01-05 10:00:00",
            ChargePeriodEnd="2026-01-05 13:00:00",
        ),
        *DAY1[1:],
    ]
    db, results = ingest_exports(tmp_path, [DAY1, restated])
    assert results == [
        (0, "read 2 · appended 2 · duplicate 0 · quarantined 0\n"),
        (1, "read 2 · appended 0 · duplicate 1 · quarantined 1\n"),
    ]
    assert stored_amounts(db) == ["24.00", "8.00"]


def test_tenant_names_the_tenant_of_a_file_without_account_columns(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    header = [h for h in HEADER if h not in ("BillingAccountId", "SubAccountId")]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerow([v for h, v in zip(HEADER, ROWS[0]) if h in header])
    result = CliRunner().invoke(
        main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--format", "focus", str(path)]
    )
    assert (result.exit_code, result.output.strip()) == (
        2,
        f"Error: --tenant: {path}: no tenant column: the file has no SubAccountId or "
        "BillingAccountId; name the tenant of the whole file",
    )
    [line] = [
        orjson.loads(r.body)["data"]
        for r in extract(path, "focus", tenant="acme")
        if isinstance(r, Accepted)
    ]
    assert (line["tenant"], line["gpus"]) == ("acme", 8)


MORE = REALDATA / "focus-more" / "guymano-FOCUS-1.2_costandusage_azure_rows1-3_and_9.csv"


@pytest.mark.skipif(
    not MORE.exists(),
    reason=f"real data not present at {MORE} (it lives beside the project, not in it)",
)
def test_real_focus_1_2_rows_a_purchase_is_money_not_usage(tmp_path: Path) -> None:
    # README facts: 1 Purchase row of 1121.840640, 2 committed-usage rows of 0.000000, 1 Azure
    # Monitor
    # row of 161.842418; 2 SubAccountIds.
    data = lines(MORE)
    assert [(d["charge_category"], d["category"], d["gpus"], d["amount"]) for d in data] == [
        ("Purchase", "adjustment", 0, "1121.840640"),
        ("Usage", "usage", 0, "0.000000"),
        ("Usage", "usage", 0, "0.000000"),
        ("Usage", "usage", 0, "161.842418"),
    ]
    assert len({d["tenant"] for d in data}) == 2
    assert sum(Decimal(str(d["amount"])) for d in data) == Decimal("1283.683058")
    result = CliRunner().invoke(
        main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", str(MORE)]
    )
    assert (result.exit_code, result.stdout) == (
        0,
        f"{MORE}: read 4 · appended 4 · duplicate 0 · quarantined 0\n",
    )


@pytest.mark.skipif(
    not REAL.exists(),
    reason=f"real data not present at {REAL} (it lives beside the project, not in it)",
)
def test_real_sample_providers_and_charges_without_a_resource() -> None:
    # README facts: AWS 942, Microsoft 51, Oracle 7 rows; 75 rows with ResourceId NULL; no GPU-hour
    # pricing.
    records = [r for r in extract(REAL, "focus") if isinstance(r, Accepted)]
    providers: dict[str, int] = {}
    for record in records:
        provider = record.source.removeprefix("focus://").split("/")[0]
        providers[provider] = providers.get(provider, 0) + 1
    assert providers == {"AWS": 942, "Microsoft": 51, "Oracle": 7}
    data = [orjson.loads(r.body)["data"] for r in records]
    assert sum(1 for d in data if "allocation_id" not in d) == 75 and {
        d["gpus"] for d in data
    } == {0}


def test_focus_0_5_names_the_category_charge_type(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    header = ["ChargeType" if h == "ChargeCategory" else h for h in HEADER if h != "ChargeClass"]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerow(
            [v for h, v in zip(HEADER, row_with(ChargeCategory="Purchase")) if h != "ChargeClass"]
        )
    [line] = lines(path)
    assert (line["category"], line["gpus"], line["charge_category"]) == (
        "adjustment",
        0,
        "Purchase",
    )
