"""Hand-worked reconciliation of billing: corrections, credits, money and its
rounding, unbilled time, the tenant and invoice filters, and `gpuledger reconcile`.

As in test_reconcile_rules.py every expected figure is worked out by hand beside it, from
reconcile/RULES.md; most lines cost $0.001 a GPU-second (GPU-seconds / 1000).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import main
from ledger import Appender, Store
from schemas import Accepted, Origin, canonical
from tests.reconcile_helpers import (
    C,
    P,
    Scenario,
    cats,
    ingest,
    line,
    line_ids,
    reconcile,
    run,
    stall_base,
    tenant,
)

# --- corrections and credits --------------------------------------------------------------------


def hold_8_gpus() -> Scenario:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:00")
    s.release("A1", at="11:00")
    return s


@pytest.mark.parametrize(
    "correction_first", [False, True], ids=["in order", "correction appended first"]
)
def test_a_correction_replaces_the_line_it_names(tmp_path: Path, correction_first: bool) -> None:
    s = hold_8_gpus()
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")
    s.line(
        "L1c",
        "A1",
        "10:00",
        "10:30",
        gpus=8,
        amount="14.40",
        category="correction",
        corrects="L1",
        at="11:05",
    )
    if correction_first:
        s.events[-2:] = s.events[-1:] + s.events[-2:-1]
    doc = reconcile(tmp_path, s)
    # L1 is dropped, time and money; L1c: 1800 s x 8 = 14400 idle_reserved, no double billing.
    assert line_ids(doc) == ["L1c"]
    assert cats(line(doc, "L1c")) == {"idle_reserved": (14400, "14.40", C)}
    t = tenant(doc)
    # unbilled: 8 x [10:00, 11:00) = 28800 minus the 14400 L1c bills.
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (14400, 14400)
    assert t["by_bearer"] == {"provider": "0.00", "customer": "14.40", "disputed": "0.00"}


def test_a_chain_of_corrections_leaves_only_the_last(tmp_path: Path) -> None:
    s = hold_8_gpus()
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")
    s.line(
        "L2", "A1", "10:00", "10:40", gpus=8, amount="19.20", category="correction", corrects="L1"
    )
    s.line(
        "L3", "A1", "10:00", "10:20", gpus=8, amount="9.60", category="correction", corrects="L2"
    )
    doc = reconcile(tmp_path, s)
    # Only L3: 1200 s x 8 = 9600 idle_reserved.
    assert line_ids(doc) == ["L3"]
    assert cats(line(doc, "L3")) == {"idle_reserved": (9600, "9.60", C)}
    assert tenant(doc)["by_bearer"]["customer"] == "9.60"


def test_a_correction_naming_no_known_line_is_an_ordinary_line(tmp_path: Path) -> None:
    s = hold_8_gpus()
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")
    s.line(
        "L2",
        "A1",
        "10:30",
        "11:00",
        gpus=8,
        amount="14.40",
        category="correction",
        corrects="L-nope",
    )
    doc = reconcile(tmp_path, s)
    # L2 is kept; its [10:30, 11:00) is L1's already: 1800 x 8 = 14400 double_billed.
    assert line_ids(doc) == ["L1", "L2"]
    assert cats(line(doc, "L1")) == {"idle_reserved": (28800, "28.80", C)}
    assert cats(line(doc, "L2")) == {"double_billed": (14400, "14.40", P)}


def two_tenants_one_allocation_id() -> Scenario:
    s = hold_8_gpus()
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")
    s.grant("A1", gpus=2, at="10:00", tenant="beta")  # beta's own A1, 2 GPUs
    s.release("A1", at="11:00", tenant="beta")
    s.line("L1", "A1", "10:00", "11:00", gpus=2, amount="7.20", tenant="beta")
    s.line(
        "L9",
        "A1",
        "10:00",
        "10:30",
        gpus=2,
        amount="3.60",
        corrects="L1",
        category="correction",
        tenant="beta",
    )
    return s


def test_a_correction_replaces_only_its_own_tenants_line(tmp_path: Path) -> None:
    doc = reconcile(tmp_path, two_tenants_one_allocation_id())
    # acme's L1 stays, on acme's 8-GPU A1: 3600 x 8 = 28800 idle_reserved, nothing unallocated.
    # beta's L1 is replaced by L9: 1800 s x 2 = 3600 idle_reserved.
    assert line_ids(doc, "acme") == ["L1"] and line_ids(doc, "beta") == ["L9"]
    [acme_l1] = [ln for ln in doc["lines"] if ln["tenant"] == "acme"]
    assert cats(acme_l1) == {"idle_reserved": (28800, "28.80", C)}
    assert cats(line(doc, "L9")) == {"idle_reserved": (3600, "3.60", C)}


def test_tenant_filter_holds_only_that_tenant(tmp_path: Path) -> None:
    doc = reconcile(tmp_path, two_tenants_one_allocation_id(), tenant="beta")
    assert list(doc["tenants"]) == ["beta"]
    assert [(ln["tenant"], ln["line_id"]) for ln in doc["lines"]] == [("beta", "L9")]
    # beta: 2 x 3600 = 7200 held, 3600 billed by L9.
    t = tenant(doc, "beta")
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (3600, 3600)


def test_invoice_filter_keeps_the_lines_classification(tmp_path: Path) -> None:
    s = hold_8_gpus()
    s.line("L1", "A1", "10:00", "10:40", gpus=8, amount="19.20", invoice="INV-1")
    s.line("L2", "A1", "10:20", "11:00", gpus=8, amount="19.20", invoice="INV-2")
    doc = reconcile(tmp_path, s, invoice="INV-2")
    # Only INV-2's line, still double billed against INV-1's earlier line (as unfiltered):
    # [10:20, 10:40) 9600 double_billed, [10:40, 11:00) 9600 idle_reserved.
    assert [ln["line_id"] for ln in doc["lines"]] == ["L2"]
    assert cats(line(doc, "L2")) == {
        "double_billed": (9600, "9.60", P),
        "idle_reserved": (9600, "9.60", C),
    }
    assert tenant(doc)["billed_gpu_seconds"] == 19200


def test_credits_and_fees_change_money_only(tmp_path: Path) -> None:
    s = hold_8_gpus()
    # A credit over the same window, appended first: it bills no time, so L1 is not double billed.
    s.line("CR1", "A1", "10:00", "11:00", gpus=8, amount="-5.00", category="credit")
    s.line("L1", "A1", "10:00", "11:00", gpus=8, amount="28.80")
    s.line("FEE", None, "10:00", "11:00", gpus=0, amount="100.00")
    doc = reconcile(tmp_path, s)
    assert (line(doc, "CR1")["gpu_seconds"], line(doc, "CR1")["amount"]) == (0, "-5.00")
    assert cats(line(doc, "CR1")) == {
        "money_only": (0, "-5.00", C)
    }  # the customer's, whatever the sign
    assert cats(line(doc, "FEE")) == {"money_only": (0, "100.00", C)}
    assert cats(line(doc, "L1")) == {"idle_reserved": (28800, "28.80", C)}
    t = tenant(doc)
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (28800, 0)
    # invoice total -5.00 + 28.80 + 100.00 = 123.80, all the customer's
    assert t["by_bearer"] == {"provider": "0.00", "customer": "123.80", "disputed": "0.00"}


# --- money --------------------------------------------------------------------------------------


def thirds(
    s: Scenario, alloc: str, job: str, line_id: str, amount: str, currency: str = "USD"
) -> None:
    """1 GPU for 30 min: startup 600 s, productive 600 s, idle_reserved 600 s."""
    s.grant(alloc, gpus=1, at="10:00")
    s.start(job, alloc, at="10:00")
    s.steps(job, "10:10", "10:15")
    s.complete(job, at="10:20")
    s.release(alloc, at="10:30")
    s.line(line_id, alloc, "10:00", "10:30", gpus=1, amount=amount, currency=currency)


@pytest.mark.parametrize(
    ("currency", "amount", "productive", "startup", "idle_reserved"),
    [
        # one unit left: each third (3.333.. USD, 333.3.. JPY, whose minor unit is 1 yen) loses
        # the same remainder, so it goes to the first in category order: productive (rule 6)
        ("USD", "10.00", "3.34", "3.33", "3.33"),
        ("JPY", "1000", "334", "333", "333"),
        # 999,999,997 cents x 1.8e9 GPU-µs x 10^4 needs ~74 bits: the 128-bit path of money.py
        # (the largest amount ingest accepts is below 10^7); one cent left, to productive
        ("USD", "9999999.97", "3333333.33", "3333333.32", "3333333.32"),
        # two units left: each third is 2/3 of a unit, every floor 0 with the same remainder, so
        # they go to productive, then startup (rule 8), not idle_reserved (rule 9)
        ("USD", "0.02", "0.01", "0.01", "0.00"),
        ("JPY", "2", "1", "1", "0"),
    ],
    ids=["USD", "JPY", "USD 128-bit", "USD two left", "JPY two left"],
)
def test_rounding_remainder_goes_by_largest_remainder_then_category_order(
    tmp_path: Path, currency: str, amount: str, productive: str, startup: str, idle_reserved: str
) -> None:
    s = Scenario()
    thirds(s, "A1", "j1", "L1", amount, currency)
    doc = reconcile(tmp_path, s)
    l1 = line(doc, "L1")
    assert l1["amount"] == amount
    assert cats(l1) == {
        "productive": (600, productive, C),
        "startup": (600, startup, C),
        "idle_reserved": (600, idle_reserved, C),
    }


def test_rounding_ties_rank_every_label_apart_in_category_order() -> None:
    """Which cell of a tie gets a cent must never be left to the sort: the money ranks ties
    by label code, and every label has a code of its own, in RULES.md's order (unallocated,
    then rules 1-10, restart bearers provider first). The scenario above can pass by luck;
    this cannot."""
    from reconcile.engine.rules import LABELS

    # by hand from RULES.md: §Unallocated, rules 1-10 of §Categories, §Inputs 2 (money_only)
    in_order = [
        "unallocated",
        "double_billed",
        "reclaimed",
        "checkpoint",
        "restart_lost.provider",
        "restart_lost.customer",
        "restart_recovery.provider",
        "restart_recovery.customer",
        "productive.accepted",
        "productive.rejected",
        "productive.pending",
        "stalled_fault",
        "startup",
        "idle_reserved",
        "idle_unexplained",
        "money_only",
    ]
    assert [label.name for label in sorted(LABELS, key=lambda label: label.code)] == in_order
    assert len({label.code for label in LABELS}) == len(in_order)


@pytest.mark.parametrize("places", [25, 40])
def test_amounts_too_fine_for_exact_arithmetic_are_a_clear_error(
    tmp_path: Path, places: int
) -> None:
    s = Scenario()
    # 25 places: 10^25 units x 1.8e9 GPU-µs x 10^4 is 128 bits, past 126; 40 places: the
    # amount alone (41 digits) is past 128 bits.
    thirds(s, "A1", "j1", "L1", "1." + "0" * places)
    url = f"sqlite:///{tmp_path / 'fine.db'}"
    store = Store(url)
    store.init()
    # Ingest quarantines such amounts (docs/canonical-and-bounds.md); a ledger written
    # before that bound still holds them, so the line is stored past the validators.
    *checked, unchecked = s.events
    ingest(store, checked)
    Appender(store).append(
        [
            Accepted(
                unchecked["source"],
                unchecked["id"],
                unchecked["type"],
                "acme",
                canonical(unchecked),
                Origin("older", 1),
            )
        ]
    )
    store.close()
    result = CliRunner().invoke(main, ["reconcile", "--db", url, "--format", "json"])
    assert result.exit_code == 2, result.output
    assert "exceed exact 128-bit arithmetic" in result.output
    assert "Traceback" not in result.output


def test_reported_amounts_add_up_to_the_invoice_total(tmp_path: Path) -> None:
    s = Scenario()
    thirds(s, "A1", "j1", "L1", "10.00")
    thirds(s, "A2", "j2", "L2", "10.00")
    doc = reconcile(tmp_path, s)
    t = tenant(doc)
    # 1200 s per category over both lines; each line's three amounts add to 10.00, and the
    # tenant's categories and bearers add to the invoice total 20.00 to the cent.
    assert {k: v[0] for k, v in cats(t).items()} == {
        "startup": 1200,
        "productive": 1200,
        "idle_reserved": 1200,
    }
    for line_id in ("L1", "L2"):
        assert sum(Decimal(v[1]) for v in cats(line(doc, line_id)).values()) == Decimal("10.00")
    assert sum(Decimal(v[1]) for v in cats(t).values()) == Decimal("20.00")
    assert t["by_bearer"] == {"provider": "0.00", "customer": "20.00", "disputed": "0.00"}


def test_a_line_amount_is_rounded_half_even_when_reported(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.release("A1", at="10:10")
    s.line("L1", "A1", "10:00", "10:05", gpus=1, amount="0.125")
    s.line("L2", "A1", "10:05", "10:10", gpus=1, amount="0.135")
    doc = reconcile(tmp_path, s)
    # half-even: 0.125 -> 0.12, 0.135 -> 0.14; each line is 300 s idle_reserved.
    assert (line(doc, "L1")["amount"], cats(line(doc, "L1"))) == (
        "0.12",
        {"idle_reserved": (300, "0.12", C)},
    )
    assert (line(doc, "L2")["amount"], cats(line(doc, "L2"))) == (
        "0.14",
        {"idle_reserved": (300, "0.14", C)},
    )
    assert tenant(doc)["by_bearer"]["customer"] == "0.26"


def test_rounded_lines_that_miss_the_invoice_total_are_made_to_meet_it(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.release("A1", at="10:10")
    s.line("L1", "A1", "10:00", "10:05", gpus=1, amount="0.0031")
    s.line("L2", "A1", "10:05", "10:10", gpus=1, amount="0.0220")
    doc = reconcile(tmp_path, s)
    # invoice 0.0251 -> 0.03; lines half-even 0.00 + 0.02 = 0.02 miss it by 0.01, which goes
    # to the line with the larger rounding remainder: L1 (0.0031 against L2's 0.0020).
    assert (line(doc, "L1")["amount"], cats(line(doc, "L1"))) == (
        "0.01",
        {"idle_reserved": (300, "0.01", C)},
    )
    assert (line(doc, "L2")["amount"], cats(line(doc, "L2"))) == (
        "0.02",
        {"idle_reserved": (300, "0.02", C)},
    )
    assert tenant(doc)["by_bearer"]["customer"] == "0.03"


def test_two_tenants_invoices_of_one_id_never_share_a_cent(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=1, at="10:00")
    s.grant("B1", gpus=1, at="10:00", tenant="beta")
    s.line("L1", "A1", "10:00", "10:05", gpus=1, amount="0.0031")
    s.line("M1", "B1", "10:00", "10:05", gpus=1, amount="0.0031", tenant="beta")
    doc = reconcile(tmp_path, s)
    # Each tenant's INV-1 is its own invoice: 0.0031 -> 0.00 and its one line 0.00 meet.
    # Pooled, the two would total 0.0062 -> 0.01 and one tenant's line would take a cent
    # because of the other tenant's line.
    assert cats(line(doc, "L1")) == {"idle_reserved": (300, "0.00", C)}
    assert [ln["amount"] for ln in doc["lines"]] == ["0.00", "0.00"]


# --- unbilled -----------------------------------------------------------------------------------


def test_unbilled_counts_each_second_once_at_the_first_lines_gpus(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=8, at="10:00")
    s.line("L1", "A1", "10:00", "11:00", gpus=4, amount="14.40")
    s.line("L2", "A1", "10:30", "11:30", gpus=8, amount="28.80")
    s.line("L3", "A1", "11:30", "12:00", gpus=10, amount="18.00")
    s.release("A1", at="12:00")
    doc = reconcile(tmp_path, s)
    # L1: 3600 x 4 = 14400 idle_reserved. L2: [10:30, 11:00) L1's already: 1800 x 8 = 14400
    # double_billed; [11:00, 11:30) 14400 idle_reserved. L3: (10 - 8) x 1800 = 3600 unallocated,
    # 1800 x 8 = 14400 idle_reserved.
    assert cats(line(doc, "L1")) == {"idle_reserved": (14400, "14.40", C)}
    assert cats(line(doc, "L2")) == {
        "double_billed": (14400, "14.40", P),
        "idle_reserved": (14400, "14.40", C),
    }
    assert cats(line(doc, "L3")) == {
        "unallocated": (3600, "3.60", P),
        "idle_reserved": (14400, "14.40", C),
    }
    # H = [10:00, 12:00) x 8 = 57600; billed of H, each second once at the first line's GPUs
    # (at most 8): 14400 (L1) + 14400 (L2, 11:00-11:30) + 14400 (L3 at 8) = 43200 -> 14400.
    t = tenant(doc)
    assert (t["billed_gpu_seconds"], t["unbilled_gpu_seconds"]) == (14400 + 28800 + 18000, 14400)


def test_unbilled_horizon_is_the_tenants_own_latest_event(tmp_path: Path) -> None:
    s = Scenario()
    s.grant("A1", gpus=2, at="10:00")  # never released
    s.line("L1", "A1", "10:00", "10:30", gpus=2, amount="3.60", at="11:00")
    s.grant("B1", gpus=1, at="13:00", tenant="beta")
    s.fault(at="14:00", node="n9")  # a fleet event: nobody's horizon
    doc = reconcile(tmp_path, s)
    # acme's horizon is 11:00: 2 x [10:00, 11:00) = 7200 minus 2 x 1800 billed = 3600.
    assert tenant(doc)["unbilled_gpu_seconds"] == 3600


# --- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "code"), [("0.50", 1), ("0.60", 0)])
def test_cli_fails_when_provider_and_disputed_money_exceed_the_limit(
    tmp_path: Path, limit: str, code: int
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    run(url, stall_base().events)
    # stall_base with no fault: provider 0.00 + disputed 0.60 (the 600 s idle_unexplained gap).
    result = CliRunner().invoke(
        main, ["reconcile", "--db", url, "--format", "json", "--fail-on-disputed", limit]
    )
    assert result.exit_code == code, result.output
    doc = json.loads(result.stdout)
    assert doc["tenants"]["acme"]["by_bearer"] == {
        "provider": "0.00",
        "customer": "0.60",
        "disputed": "0.60",
    }
