"""The dispute letter (docs/dispute-letter.md): the packet's claims for a one-allocation
invoice worked out by hand from RULES.md, verify-packet's text summary, the HTML letter
beside the packet, and that letter rendered in headless Chromium (skipped when `chromium`
is absent): the figures it shows are the hand-worked ones and nothing overflows its box.

acme holds A1, 2 GPUs on n1 (devices 0, 1), 10:00-10:40; job J1 starts at 10:00, progress
at 10:05, 10:06, 10:07, then nothing until 10:20 while a critical xid-79 on n1 device 0 is
open (10:10-10:12), progress at 10:21, a checkpoint from 10:21 to 10:23, completed at 10:30.
Invoice INV-1 (0.10 USD per GPU-minute throughout):

    L1  10:00-10:40, 2 GPUs, 8.00   startup [10:00, 10:05) 1.00, productive 0.40 + 0.20,
                                    stalled_fault [10:07, 10:20) 26 GPU-min 2.60 (provider),
                                    checkpoint [10:21, 10:23) 0.40,
                                    idle_unexplained [10:23, 10:30) 14 GPU-min 1.40 (disputed),
                                    idle_reserved [10:30, 10:40) 2.00
    L2  10:40-10:50, 2 GPUs, 2.00   after the release: unallocated, 20 GPU-min 2.00 (provider)
    L3  10:30-10:40, 2 GPUs, 1.00   inside L1's window: double_billed 20 GPU-min 1.00 (provider)

billed 11.00, provider-borne 2.60 + 2.00 + 1.00 = 5.60, disputed 1.40, disputed in all 7.00.

Invoice INV-2 has one line, L4, for J2 on A2 (2 GPUs on n2, 11:00-11:03, progress at 11:01
and 11:02, completed 11:03), 0.60 for 6 GPU-minutes: startup 0.20 and productive 0.40,
all the customer's, so nothing to dispute.

Invoice INV-3 has one line, L5, for J3 on A3 (2 GPUs on n3, 12:00-12:05), 1.00 for 10
GPU-minutes. J3 starts at 12:00 and reports step 1 at 12:01, 12:02, 12:03, 12:04 and
12:04:30, never rising, and never ends: startup [12:00, 12:01) 0.20, then
idle_unexplained [12:01, 12:05) 8 GPU-min 0.80 (disputed), with four gaps between marks,
of which the first (12:01-12:02) and the last (12:04-12:04:30) are cited.

Invoice INV-4, 0.10 USD per GPU-minute, 1 GPU:
    L6  A4 13:00-13:12, 1.20: J4 starts 13:00, progress 13:01, 13:02, a checkpoint
        13:02:30-13:03, progress 13:04, fails (cause hardware) at 13:06, starts again at
        13:07, progress 13:09, 13:10, completes 13:11. restart_lost [13:03, 13:06) 0.30 and
        restart_recovery [13:06, 13:09) 0.30, both the provider's (a hardware cause).
    L7  A5 14:00-14:10, 1.00: J5 starts 14:00, progress 14:01-14:04 each minute, is
        preempted (decision on A5) at 14:05 and cancelled at 14:06. idle_unexplained
        [14:04, 14:05) 0.10 (disputed), reclaimed [14:05, 14:10) 0.50 (provider, no notice).
billed 2.20, provider-borne 1.10, disputed 0.10.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import event, write_jsonl
from tests.conftest import run_cli as run
from tests.test_packet import read_png

CHROMIUM = shutil.which("chromium")


def at(clock: str) -> str:
    return f"2026-01-05T{clock}Z"


def acme(type_: str, id_: str, clock: str, **data: Any) -> dict[str, Any]:
    return event(type_, id_, {"tenant": "acme", **data}, source="slurm://acme", time=at(clock))


def line(id_: str, start: str, end: str, amount: str) -> dict[str, Any]:
    return acme(
        "billing.line",
        id_,
        end,
        invoice_id="INV-1",
        line_id=id_,
        allocation_id="A1",
        period_start=at(start),
        period_end=at(end),
        gpus=2,
        amount=amount,
        currency="USD",
    )


#: In ledger order: seq 1 is the grant, …, seq 16 the line L3.
EVENTS = [
    acme(
        "allocation.granted",
        "grant",
        "10:00:00",
        allocation_id="A1",
        gpus=2,
        node="n1",
        devices=[0, 1],
    ),  # 1
    acme("job.started", "start", "10:00:00", job_id="J1", allocation_id="A1"),  # 2
    acme("job.progress", "p1", "10:05:00", job_id="J1", step=1),  # 3
    acme("job.progress", "p2", "10:06:00", job_id="J1", step=2),  # 4
    acme("job.progress", "p3", "10:07:00", job_id="J1", step=3),  # 5
    event(
        "health.fault",
        "xid",
        {"node": "n1", "device": 0, "code": "xid-79", "severity": "critical"},
        source="dcgm://n1",
        time=at("10:10:00"),
    ),  # 6
    event(
        "health.cleared",
        "xid-ok",
        {"node": "n1", "device": 0, "code": "xid-79"},
        source="dcgm://n1",
        time=at("10:12:00"),
    ),  # 7
    acme("job.progress", "p4", "10:20:00", job_id="J1", step=4),  # 8
    acme("job.progress", "p5", "10:21:00", job_id="J1", step=5),  # 9
    acme(
        "checkpoint.started", "ck-start", "10:21:00", job_id="J1", checkpoint_id="ck1", step=5
    ),  # 10
    acme(
        "checkpoint.saved", "ck-saved", "10:23:00", job_id="J1", checkpoint_id="ck1", step=5
    ),  # 11
    acme("job.completed", "done", "10:30:00", job_id="J1"),  # 12
    acme("allocation.released", "release", "10:40:00", allocation_id="A1"),  # 13
    line("L1", "10:00:00", "10:40:00", "8.00"),  # 14
    line("L2", "10:40:00", "10:50:00", "2.00"),  # 15
    line("L3", "10:30:00", "10:40:00", "1.00"),  # 16
    acme(
        "allocation.granted",
        "grant-2",
        "11:00:00",
        allocation_id="A2",
        gpus=2,
        node="n2",
        devices=[0, 1],
    ),
    acme("job.started", "start-2", "11:00:00", job_id="J2", allocation_id="A2"),
    acme("job.progress", "q1", "11:01:00", job_id="J2", step=1),
    acme("job.progress", "q2", "11:02:00", job_id="J2", step=2),
    acme("job.completed", "done-2", "11:03:00", job_id="J2"),
    acme("allocation.released", "release-2", "11:03:00", allocation_id="A2"),
    acme(
        "billing.line",
        "L4",
        "11:03:00",
        invoice_id="INV-2",
        line_id="L4",
        allocation_id="A2",
        period_start=at("11:00:00"),
        period_end=at("11:03:00"),
        gpus=2,
        amount="0.60",
        currency="USD",
    ),
    acme(
        "allocation.granted",
        "grant-3",
        "12:00:00",
        allocation_id="A3",
        gpus=2,
        node="n3",
        devices=[0, 1],
    ),  # 24
    acme("job.started", "start-3", "12:00:00", job_id="J3", allocation_id="A3"),  # 25
    *[
        acme("job.progress", f"r{i}", clock, job_id="J3", step=1)  # 26-30
        for i, clock in enumerate(["12:01:00", "12:02:00", "12:03:00", "12:04:00", "12:04:30"])
    ],
    acme("allocation.released", "release-3", "12:05:00", allocation_id="A3"),  # 31
    acme(
        "billing.line",
        "L5",
        "12:05:00",
        invoice_id="INV-3",
        line_id="L5",
        allocation_id="A3",  # 32
        period_start=at("12:00:00"),
        period_end=at("12:05:00"),
        gpus=2,
        amount="1.00",
        currency="USD",
    ),
    acme(
        "allocation.granted",
        "grant-4",
        "13:00:00",
        allocation_id="A4",
        gpus=1,
        node="n4",
        devices=[0],
    ),  # 33
    acme("job.started", "start-4", "13:00:00", job_id="J4", allocation_id="A4"),  # 34
    acme("job.progress", "s1", "13:01:00", job_id="J4", step=1),  # 35
    acme("job.progress", "s2", "13:02:00", job_id="J4", step=2),  # 36
    acme(
        "checkpoint.started", "ck4-start", "13:02:30", job_id="J4", checkpoint_id="ck4", step=2
    ),  # 37
    acme(
        "checkpoint.saved", "ck4-saved", "13:03:00", job_id="J4", checkpoint_id="ck4", step=2
    ),  # 38
    acme("job.progress", "s3", "13:04:00", job_id="J4", step=3),  # 39
    acme("job.failed", "fail-4", "13:06:00", job_id="J4", cause="hardware"),  # 40
    acme("job.started", "restart-4", "13:07:00", job_id="J4", allocation_id="A4"),  # 41
    acme("job.progress", "s4", "13:09:00", job_id="J4", step=4),  # 42
    acme("job.progress", "s5", "13:10:00", job_id="J4", step=5),  # 43
    acme("job.completed", "done-4", "13:11:00", job_id="J4"),  # 44
    acme("allocation.released", "release-4", "13:30:00", allocation_id="A4"),  # 45
    acme(
        "billing.line",
        "L6",
        "13:12:00",
        invoice_id="INV-4",
        line_id="L6",
        allocation_id="A4",  # 46
        period_start=at("13:00:00"),
        period_end=at("13:12:00"),
        gpus=1,
        amount="1.20",
        currency="USD",
    ),
    acme(
        "allocation.granted",
        "grant-5",
        "14:00:00",
        allocation_id="A5",
        gpus=1,
        node="n5",
        devices=[0],
    ),  # 47
    acme("job.started", "start-5", "14:00:00", job_id="J5", allocation_id="A5"),  # 48
    *[
        acme("job.progress", f"u{i}", f"14:0{i}:00", job_id="J5", step=i) for i in range(1, 5)
    ],  # 49-52
    acme(
        "policy.decision",
        "preempt-5",
        "14:05:00",
        decision="preempted",
        allocation_id="A5",
        job_id="J5",
    ),  # 53
    acme("job.cancelled", "cancel-5", "14:06:00", job_id="J5"),  # 54
    acme("allocation.released", "release-5", "14:10:00", allocation_id="A5"),  # 55
    acme(
        "billing.line",
        "L7",
        "14:10:00",
        invoice_id="INV-4",
        line_id="L7",
        allocation_id="A5",  # 56
        period_start=at("14:00:00"),
        period_end=at("14:10:00"),
        gpus=1,
        amount="1.00",
        currency="USD",
    ),
]

#: (line, category, bearer, GPU-seconds, amount, stretches, cited seqs), worked out above.
CLAIMS = [
    (
        "L1",
        "stalled_fault",
        "provider",
        1560,
        "2.60",
        [[at("10:07:00"), at("10:20:00"), 2]],
        [1, 5, 6, 7, 8, 13, 14],
    ),  # grant, the gap's marks p3 and p4, the fault and its clearing, release, L1
    (
        "L1",
        "idle_unexplained",
        "disputed",
        840,
        "1.40",
        [[at("10:23:00"), at("10:30:00"), 2]],
        # grant, the attempt's start, the gap's marks p5 and the completion, the save at its start,
        # release, L1
        [1, 2, 9, 11, 12, 13, 14],
    ),
    (
        "L2",
        "unallocated",
        "provider",
        1200,
        "2.00",
        [[at("10:40:00"), at("10:50:00"), 2]],
        [1, 13, 15],
    ),
    (
        "L3",
        "double_billed",
        "provider",
        1200,
        "1.00",
        [[at("10:30:00"), at("10:40:00"), 2]],
        [1, 13, 14, 16],
    ),  # L1 owns the seconds
]
SENTENCE = (
    "acme disputes 7.00 USD of the 11.00 USD billed on invoice INV-1: 5.60 USD that the "
    "provider's own records "
    "put on the provider and 1.40 USD billed while its jobs ran idle with nothing in the "
    "ledger to explain it "
    "(4 findings below)."
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("letter")
    url = f"sqlite:///{folder / 'ledger.db'}"
    assert run("keygen", "--out", str(folder / "key"))[0] == 0
    assert run("ingest", "--db", url, str(write_jsonl(folder / "e.jsonl", EVENTS)))[0] == 0
    code, out, err = run(
        "dispute",
        "--db",
        url,
        "--tenant",
        "acme",
        "--invoice",
        "INV-1",
        "--key",
        str(folder / "key"),
        "--out",
        str(folder / "acme.json"),
    )
    assert code == 0, err
    assert (
        out.splitlines()[-1]
        == f"wrote {folder / 'acme.letter.html'}: the dispute letter, from verify-packet's "
        "recomputation of the packet"
    )
    return folder


def packet(folder: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((folder / "acme.json").read_text())
    return doc


def test_claims_worked_by_hand(folder: Path) -> None:
    claims = packet(folder)["claims"]
    assert [
        (
            c["line_id"],
            c["category"],
            c["bearer"],
            c["gpu_seconds"],
            c["amount"],
            c["stretches"],
            c["cites"],
        )
        for c in claims
    ] == CLAIMS
    assert {(c["allocation_id"], c["currency"]) for c in claims} == {("A1", "USD")}


def test_verify_packet_prints_the_letter(folder: Path) -> None:
    code, out, err = run(
        "verify-packet",
        str(folder / "acme.json"),
        "--pubkey",
        str(folder / "key.pub"),
        "--letter",
        str(folder / "mine.html"),
    )
    assert (code, err) == (0, "")
    said = out.splitlines()
    assert said[0].startswith("ok: invoice INV-1 of acme, 3 lines;")
    assert said[1] == SENTENCE
    # the request: the claim, the invoice, and a date 30 days after its last billed period
    # (L3 ends 2026-01-05T10:50Z)
    assert said[2] == (
        "Please credit 7.00 USD against invoice INV-1 by 2026-02-04, or answer each finding "
        "below with the evidence you rely on."
    )
    said = said[:2] + said[3:]
    assert (
        said[2]
        == "  billed 11.00 USD · provider-borne 5.60 USD · disputed 1.40 USD · we dispute 7.00 USD"
    )
    assert said[3] == (
        "  1. 2026-01-05T10:07:00Z → 2026-01-05T10:20:00Z  stalled_fault (provider)  2.60 USD  "
        "line L1, allocation A1; RULES.md, Categories, rule 7; cites seq 1, 5, 6, 7, 8, 13, 14; "
        "open: the provider has not answered"
    )
    assert said[4].startswith(
        "  2. 2026-01-05T10:23:00Z → 2026-01-05T10:30:00Z  idle_unexplained (disputed)  1.40 USD"
    )
    assert said[7] == f"wrote {folder / 'mine.html'}" and len(said) == 8
    # the customer's own letter and the one written beside the packet say the same
    assert (folder / "mine.html").read_text() == (folder / "acme.letter.html").read_text()


def test_the_letter_is_written_from_the_recomputation_not_the_file(folder: Path) -> None:
    # a packet without claims (as written before them) still verifies, and the letter has them all
    doc = packet(folder)
    del doc["claims"]
    (folder / "bare.json").write_text(json.dumps(doc))
    code, out, _ = run(
        "verify-packet", str(folder / "bare.json"), "--pubkey", str(folder / "key.pub")
    )
    assert code == 0 and out.splitlines()[1] == SENTENCE


def test_an_invoice_with_nothing_to_dispute_says_so(folder: Path) -> None:
    code, out, err = run(
        "dispute",
        "--db",
        f"sqlite:///{folder / 'ledger.db'}",
        "--tenant",
        "acme",
        "--invoice",
        "INV-2",
        "--key",
        str(folder / "key"),
        "--out",
        str(folder / "inv2.json"),
    )
    assert (code, err) == (0, "")
    assert json.loads((folder / "inv2.json").read_text())["claims"] == []
    code, out, _ = run(
        "verify-packet", str(folder / "inv2.json"), "--pubkey", str(folder / "key.pub")
    )
    assert code == 0 and out.splitlines()[1:] == [
        "acme disputes nothing on invoice INV-2: the ledger puts all 0.60 USD on acme.",
        "  billed 0.60 USD · provider-borne 0.00 USD · disputed 0.00 USD · we dispute 0.00 USD",
    ]
    page = (folder / "inv2.letter.html").read_text()
    assert "Nothing on this invoice is provider-borne or disputed." in page
    assert "productive 0.40 USD · startup 0.20 USD." in page


def test_a_long_idle_stretch_cites_its_first_and_last_gap(folder: Path) -> None:
    code, _, err = run(
        "dispute",
        "--db",
        f"sqlite:///{folder / 'ledger.db'}",
        "--tenant",
        "acme",
        "--invoice",
        "INV-3",
        "--key",
        str(folder / "key"),
        "--out",
        str(folder / "inv3.json"),
    )
    assert (code, err) == (0, "")
    [claim] = json.loads((folder / "inv3.json").read_text())["claims"]
    assert (claim["category"], claim["gpu_seconds"], claim["amount"], claim["stretches"]) == (
        "idle_unexplained",
        480,
        "0.80",
        [[at("12:01:00"), at("12:05:00"), 2]],
    )
    # grant, start, the marks of 12:01, 12:02 (first gap) and 12:04, 12:04:30 (last), release, L5;
    # not 12:03's
    assert claim["cites"] == [24, 25, 26, 27, 29, 30, 31, 32]


def test_restarts_and_a_reclaim_worked_by_hand(folder: Path) -> None:
    code, out, err = run(
        "dispute",
        "--db",
        f"sqlite:///{folder / 'ledger.db'}",
        "--tenant",
        "acme",
        "--invoice",
        "INV-4",
        "--key",
        str(folder / "key"),
        "--out",
        str(folder / "inv4.json"),
    )
    assert (code, err) == (0, "")
    claims = json.loads((folder / "inv4.json").read_text())["claims"]
    assert [
        (
            c["line_id"],
            c["category"],
            c["bearer"],
            c["gpu_seconds"],
            c["amount"],
            c["stretches"],
            c["cites"],
        )
        for c in claims
    ] == [
        # grant, the failed attempt's start, the save the loss counts from, the failure, release,
        # L6
        (
            "L6",
            "restart_lost",
            "provider",
            180,
            "0.30",
            [[at("13:03:00"), at("13:06:00"), 1]],
            [33, 34, 38, 40, 45, 46],
        ),
        # grant, the failure, the next attempt's start and its first progress, release, L6
        (
            "L6",
            "restart_recovery",
            "provider",
            180,
            "0.30",
            [[at("13:06:00"), at("13:09:00"), 1]],
            [33, 40, 41, 42, 45, 46],
        ),
        # grant, the preemption, release, L7
        (
            "L7",
            "reclaimed",
            "provider",
            300,
            "0.50",
            [[at("14:05:00"), at("14:10:00"), 1]],
            [47, 53, 55, 56],
        ),
        # grant, the attempt's start and its cancellation, the last progress at the stretch's
        # start, release, L7
        (
            "L7",
            "idle_unexplained",
            "disputed",
            60,
            "0.10",
            [[at("14:04:00"), at("14:05:00"), 1]],
            [47, 48, 52, 54, 55, 56],
        ),
    ]
    code, out, _ = run(
        "verify-packet", str(folder / "inv4.json"), "--pubkey", str(folder / "key.pub")
    )
    said = out.splitlines()
    assert said[2].startswith("Please credit 1.20 USD against invoice INV-4 by ")
    said = said[:2] + said[3:]  # the request read, the totals follow
    assert (
        code == 0
        and said[2]
        == "  billed 2.20 USD · provider-borne 1.10 USD · disputed 0.10 USD · we dispute 1.20 USD"
    )
    # the restart categories quote their rule and the bearer rule (the failure's cause decides)
    # (the findings in time order: whichever line holds restart_lost's)
    assert any(
        "; RULES.md, Categories, rule 4; RULES.md, Categories, Bearers; cites seq 33, 34, "
        "38, 40, 45, 46" in line
        for line in said[3:]
    )
    page = (folder / "inv4.letter.html").read_text()
    assert (
        "cause</span> <bdi>hardware</bdi>" in page
        and "decision</span> <bdi>preempted</bdi>" in page
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda c: c[0].update(amount="0.60"),
            'claims[0] (line L1).amount: the packet says "0.60", recomputed "2.60"',
        ),
        (lambda c: c[1]["cites"].remove(2), "claims[1] (line L1).cites"),
        (lambda c: c.pop(), "claims"),
    ],
)
def test_a_claim_that_is_not_the_recomputation_is_refused(
    folder: Path, change: Any, reason: str
) -> None:
    doc = packet(folder)
    change(doc["claims"])
    (folder / "altered.json").write_text(json.dumps(doc))
    code, out, err = run(
        "verify-packet", str(folder / "altered.json"), "--pubkey", str(folder / "key.pub")
    )
    assert (code, out) == (1, "")
    assert err.startswith(f"FAILED: {reason}") and err.endswith(
        "(recomputed from the packet's own entries)\n"
    ), err


def test_the_rule_is_quoted_from_rules_md(folder: Path) -> None:
    page = (folder / "acme.letter.html").read_text()
    # RULES.md as one line: list bullets run together, inline Markdown (`code`, **bold**) set as
    # text
    rules = (Path(__file__).parent.parent / "reconcile" / "RULES.md").read_text()
    rules = re.sub(r"\s+", " ", rules.replace("\n- ", " ")).replace("`", "").replace("**", "")
    quoted = re.findall(
        r'<blockquote class="rule"><strong>([^<]*):</strong> (.*?)</blockquote>', page, re.S
    )
    # the findings in time order: 10:07 stalled, 10:23 idle, 10:30 double billed, 10:40
    # unallocated
    assert [place for place, _ in quoted] == [
        "RULES.md, Categories, rule 7",
        "RULES.md, Categories, rule 10",
        "RULES.md, Categories, rule 1",
        "RULES.md, Unallocated",
    ]
    quotes = [_text(quote) for _, quote in quoted]
    assert quotes[0].startswith(
        "stalled_fault: a gap [m_i, m_{i+1}) longer than stall_threshold_s"
    )
    assert quotes[1] == (
        "idle_unexplained: anything else: a job running with no progress and no cause found, "
        "a stall with no fault open, startup beyond the warmup allowance."
    )
    assert (
        "<code>idle_unexplained</code>: anything else: a job running" in page
        and "<strong>touches</strong> a when" in page
    )
    for quote in quotes:  # word for word
        assert quote in rules, quote


# -- headless Chromium ----------------------------------------------------------------

#: Added to a copy of the letter (the letter itself has no script): every element whose
#: content is wider than its box, and the page's own width against the window's.
OVERFLOW_CHECK = """<script>
(function () {
  var bad = [];
  document.querySelectorAll("body *").forEach(function (el) {
    if (el.closest("svg") || el.clientWidth === 0) return;
    // a scroll box on purpose (page.css: a table, a chart) scrolls; the page may not
    var x = getComputedStyle(el).overflowX;
    if (x === "auto" || x === "scroll") return;
    if (el.scrollWidth > el.clientWidth + 1)
      bad.push(el.tagName + "." + el.className + " " + el.scrollWidth + ">" + el.clientWidth);
  });
  if (document.documentElement.scrollWidth > window.innerWidth)
    bad.push("page " + document.documentElement.scrollWidth + ">" + window.innerWidth);
  var out = document.createElement("pre");
  out.id = "overflow-report";
  out.textContent = JSON.stringify(bad);
  document.body.appendChild(out);
})();
</script>
</body>"""


def _chromium(page: Path, profile: Path, width: int, mode: str = "--dump-dom") -> str:
    assert CHROMIUM is not None
    args = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--window-size={width},1000",
        mode,
        page.resolve().as_uri(),
    ]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not on PATH (Debian package `chromium`; .ci/run installs it)",
)
@pytest.mark.parametrize("width", [1280, 500])  # 500: headless Chromium's narrowest window
def test_the_letter_as_chromium_renders_it(folder: Path, tmp_path: Path, width: int) -> None:
    page = tmp_path / "letter.html"
    page.write_text((folder / "acme.letter.html").read_text().replace("</body>", OVERFLOW_CHECK))
    dom = _chromium(page, tmp_path / "profile", width)
    report = re.search(r'<pre id="overflow-report">(.*?)</pre>', dom, re.S)
    assert report is not None, "the check did not run"
    assert json.loads(html.unescape(report.group(1))) == []
    claim = re.search(r'<p class="claim" id="claim">(.*?)</p>', dom, re.S)
    assert claim is not None and " ".join(_text(claim.group(1)).split()) == SENTENCE
    figures = dict(re.findall(r'data-figure="(\w+)">([^<]*)<', dom))
    assert figures == {
        "billed": "11.00 USD",
        "provider": "5.60 USD",
        "disputed": "1.40 USD",
        "claimed": "7.00 USD",
    }
    # the rest of the 11.00 is the customer's: 11.00 - 7.00 = 0.40 + (0.40 + 0.20) + 1.00 + 2.00
    kept = re.search(r'<p class="small" id="not-disputed">(.*?)</p>', dom, re.S)
    assert kept is not None and " ".join(_text(kept.group(1)).split()) == (
        "Not disputed, the customer's by the same rules: checkpoint 0.40 USD · productive "
        "0.60 USD · startup 1.00 USD · "
        "idle_reserved 2.00 USD."
    )
    # each finding as shown equals the packet's claim and the hand-worked one
    shown = re.findall(
        r'<details class="finding (\w+)" id="finding-(\d+)" data-amount="([^"]*)" '
        r'data-category="(\w+)" data-state="open">'
        r'.*?<dd class="amount">([^<]*)</dd>(.*?)</div>\s*</details>',
        dom,
        re.S,
    )
    # in time order (the claims are in line order): by each one's first stretch
    in_time = sorted(CLAIMS, key=lambda c: str(c[5][0][0]))
    assert [(s[0], s[3], s[2], s[4]) for s in shown] == [
        (c[2], c[1], c[4], f"{c[4]} USD") for c in in_time
    ]
    claims = sorted(packet(folder)["claims"], key=lambda c: c["stretches"][0][0])
    assert [(c["bearer"], c["category"], c["amount"]) for c in claims] == [
        (s[0], s[3], s[2]) for s in shown
    ]
    cited = [[int(n) for n in re.findall(r'<tr><td class="num">(\d+)</td>', s[5])] for s in shown]
    assert cited == [c[6] for c in in_time]
    # the request, and the summary with the largest first: 2.60, 2.00, 1.40, 1.00
    request = re.search(r'<p class="request" id="request">(.*?)</p>', dom, re.S)
    assert request is not None and " ".join(_text(request.group(1)).split()).startswith(
        "Please credit 7.00 USD against invoice INV-1 by 2026-02-04"
    )
    largest = re.findall(r'data-largest="(\d+)">([^<]*)<', dom)
    assert [amount for _, amount in largest] == ["2.60 USD", "2.00 USD", "1.40 USD", "1.00 USD"]
    # the timeline: one bar per stretch, each linked to its finding
    assert re.findall(r'<rect class="bar [\w ]+" data-finding="(\d+)"', dom) == [
        "1",
        "2",
        "3",
        "4",
    ]


RED, AMBER = (0xC0, 0x39, 0x2B), (0xD9, 0x9A, 0x00)  # the bars' fills (letter.html.j2)


def _runs(row: bytes) -> list[tuple[str, int, int]]:
    """(colour, first x, length) of each run of bar-coloured pixels in one screenshot row."""
    out: list[tuple[str, int, int]] = []
    for x in range(len(row) // 3):
        pixel = row[3 * x : 3 * x + 3]
        name = next(
            (
                n
                for n, rgb in (("red", RED), ("amber", AMBER))
                if all(abs(pixel[k] - rgb[k]) <= 12 for k in range(3))
            ),
            None,
        )
        if name is None:
            continue
        if out and out[-1][0] == name and out[-1][1] + out[-1][2] == x:
            out[-1] = (name, out[-1][1], out[-1][2] + 1)
        else:
            out.append((name, x, 1))
    return out


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not on PATH (Debian package `chromium`; .ci/run installs it)",
)
def test_the_timeline_as_chromium_draws_it(folder: Path, tmp_path: Path) -> None:
    shot = tmp_path / "letter.png"
    _chromium(folder / "acme.letter.html", tmp_path / "profile", 1280, f"--screenshot={shot}")
    width, _, rows = read_png(shot)
    assert width == 1280
    # the bar row: the only rows with a bar-coloured run wider than a finding's 5 px border
    bar_rows = [runs for runs in map(_runs, rows) if any(n > 20 for _, _, n in runs)]
    assert len(bar_rows) >= 12  # ROW - 6 = 16 user units high
    runs = [r for r in bar_rows[len(bar_rows) // 2] if r[2] > 20]
    # 10:07-10:50 spans the axis: stalled 10:07-10:20 (13 min, red), idle 10:23-10:30 (7 min,
    # amber), double billed 10:30-10:40 and unallocated 10:40-10:50 (10 min each, red, touching:
    # the seam between them is a pixel column the anti-aliasing blends)
    assert [name for name, _, _ in runs] == ["red", "amber", "red", "red"]
    axis = runs[-1][1] + runs[-1][2] - runs[0][1]
    assert axis > 600
    for (_, start, length), (begin, minutes) in zip(runs, [(0, 13), (16, 7), (23, 10), (33, 10)]):
        assert (
            abs(start - runs[0][1] - axis * begin / 43) <= 3
            and abs(length - axis * minutes / 43) <= 3
        )
