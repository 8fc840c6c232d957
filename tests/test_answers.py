"""The provider's answers to a dispute (docs/answers.md), on the ledger of tests/test_letter.py.

Invoice INV-1's findings, worked out by hand there (0.10 USD per GPU-minute, 2 GPUs):

    L1/stalled_fault     [10:07, 10:20)  1560 GPU-s  2.60 USD  provider
    L1/idle_unexplained  [10:23, 10:30)   840 GPU-s  1.40 USD  disputed
    L2/unallocated       [10:40, 10:50)  1200 GPU-s  2.00 USD  provider
    L3/double_billed     [10:30, 10:40)  1200 GPU-s  1.00 USD  provider

INV-3's one finding is L5/idle_unexplained [12:01, 12:05), 480 GPU-s, 0.80 USD. A late
`job.progress` of J3 at 12:02:30 with step 2 (a rise) makes [12:02, 12:02:30) productive:
60 GPU-s less, 420 GPU-s and 0.70 USD, so an answer to 0.80 is stale.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ledger import Store, read
from tests.conftest import event, write_jsonl
from tests.conftest import run_cli as run
from tests.test_letter import EVENTS, acme, at


def answers_file(path: Path, *answers: dict[str, Any]) -> str:
    path.write_text(json.dumps({"answers": list(answers)}), encoding="utf-8")
    return str(path)


@pytest.fixture()
def ledger(tmp_path: Path) -> tuple[Path, str]:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run("keygen", "--out", str(tmp_path / "key"), "--name", "orbital")[0] == 0
    assert run("ingest", "--db", url, str(write_jsonl(tmp_path / "e.jsonl", EVENTS)))[0] == 0
    return tmp_path, url


def answer(
    folder: Path, url: str, invoice: str, file: str, key: str = "key"
) -> tuple[int, str, str]:
    return run(
        "answer", "--db", url, "--tenant", "acme", "--invoice", invoice,
        "--key", str(folder / key), file,
    )  # fmt: skip


def dispute(folder: Path, url: str, invoice: str) -> tuple[dict[str, Any], str]:
    out = folder / f"{invoice}.json"
    code, _, err = run(
        "dispute", "--db", url, "--tenant", "acme", "--invoice", invoice,
        "--key", str(folder / "key"), "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    code, text, err = run("verify-packet", str(out), "--pubkey", str(folder / "key.pub"))
    assert code == 0, err
    return json.loads(out.read_text(encoding="utf-8")), text


FIRST = (
    {"line_id": "L1", "category": "stalled_fault", "state": "accepted"},
    {
        "line_id": "L1",
        "category": "idle_unexplained",
        "state": "rejected",
        "reason": "the job waited on its own data loader",
        "evidence": [9, 5],
    },
    {"line_id": "L2", "category": "unallocated", "state": "partly", "amount": "0.50"},
)


def answer_entries(url: str) -> list[dict[str, Any]]:
    store = Store(url)
    return [json.loads(e.event)["data"] for e in read.entries(store, type="dispute.answer")]


def test_answers_are_recorded_once_signed_and_stated_in_packet_and_letter(
    ledger: tuple[Path, str],
) -> None:
    folder, url = ledger
    file = answers_file(folder / "a.json", *FIRST)
    code, out, err = answer(folder, url, "INV-1", file)
    assert (code, err) == (0, "")
    assert out == (
        "answered 3 findings of invoice INV-1 of acme (accepted 1, partly 1, rejected 1): "
        "3 appended, 0 unchanged, signed by orbital\n"
    )
    code, out, _ = answer(folder, url, "INV-1", file)  # idempotent: nothing twice
    assert code == 0 and "0 appended, 3 unchanged" in out
    stored = answer_entries(url)
    assert [(d["line_id"], d["category"], d["revision"]) for d in stored] == [
        ("L1", "stalled_fault", 1),
        ("L1", "idle_unexplained", 1),
        ("L2", "unallocated", 1),
    ]
    assert stored[1]["evidence"] == [5, 9] and stored[2]["amount"] == "0.50"
    assert [(d["finding_amount"], d["finding_gpu_seconds"]) for d in stored] == [
        ("2.60", "1560"),
        ("1.40", "840"),
        ("2.00", "1200"),
    ]
    packet, text = dispute(folder, url, "INV-1")
    assert text.splitlines()[0].endswith(
        "findings recomputed and equal; 3 answers of the provider, signatures checked"
    )
    assert [(a["line_id"], a["status"], a["state"]) for a in packet["answers"]] == [
        ("L1", "current", "accepted"),
        ("L1", "current", "rejected"),
        ("L2", "current", "partly"),
    ]
    findings = [line for line in text.splitlines() if line.startswith("  ") and ". 2026" in line]
    assert [line.rsplit("; ", 1)[1] for line in findings] == [
        "accepted by the provider: 2.60 USD",
        "rejected by the provider: the job waited on its own data loader (cites seq 5, 9)",
        "open: the provider has not answered",  # L3 (10:30) comes before L2 (10:40): time order
        "partly accepted by the provider: 0.50 USD of 2.00 USD",
    ]
    letter = (folder / "INV-1.letter.html").read_text(encoding="utf-8")
    assert [s for s in ("accepted", "rejected", "partly", "open") if f'data-state="{s}"' in letter]


def test_a_later_answer_supersedes_and_an_old_packet_still_verifies(
    ledger: tuple[Path, str],
) -> None:
    folder, url = ledger
    reject = {"line_id": "L3", "category": "double_billed", "state": "rejected", "reason": "no"}
    accept = {"line_id": "L3", "category": "double_billed", "state": "accepted"}
    assert answer(folder, url, "INV-1", answers_file(folder / "r.json", reject))[0] == 0
    code, out, _ = answer(folder, url, "INV-1", answers_file(folder / "a.json", accept))
    assert code == 0 and "1 appended, 0 unchanged" in out
    assert [d["revision"] for d in answer_entries(url)] == [1, 2]
    packet, text = dispute(folder, url, "INV-1")
    assert [(a["revision"], a["status"]) for a in packet["answers"]] == [
        (1, "superseded"),
        (2, "current"),
    ]
    assert "double_billed (provider)  1.00 USD" in text
    (l3,) = [line for line in text.splitlines() if "line L3," in line]  # findings: time order
    assert l3.endswith("; accepted by the provider: 1.00 USD")
    # a packet written before answers had no `answers` member: it verifies as written
    old = dict(packet)
    del old["answers"]
    (folder / "old.json").write_text(json.dumps(old), encoding="utf-8")
    assert (
        run("verify-packet", str(folder / "old.json"), "--pubkey", str(folder / "key.pub"))[0] == 0
    )


def test_a_finding_whose_figures_changed_shows_its_answer_stale(
    ledger: tuple[Path, str],
) -> None:
    folder, url = ledger
    accept = {"line_id": "L5", "category": "idle_unexplained", "state": "accepted"}
    file = answers_file(folder / "a.json", accept)
    assert answer(folder, url, "INV-3", file)[0] == 0
    late = acme("job.progress", "r-late", "12:02:30", job_id="J3", step=2)
    assert run("ingest", "--db", url, str(write_jsonl(folder / "late.jsonl", [late])))[0] == 0
    packet, text = dispute(folder, url, "INV-3")
    assert [(a["status"], a["finding_amount"]) for a in packet["answers"]] == [("stale", "0.80")]
    assert text.splitlines()[-1].endswith(
        "; open: the provider's answer (accepted, revision 1) was to figures that have "
        "changed (0.80 then)"
    )
    code, out, _ = answer(folder, url, "INV-3", file)  # the same file, new figures: appended
    assert code == 0 and "1 appended, 0 unchanged" in out
    assert [(d["revision"], d["finding_amount"], d["finding_gpu_seconds"]) for d in
            answer_entries(url)] == [(1, "0.80", "480"), (2, "0.70", "420")]  # fmt: skip
    packet, text = dispute(folder, url, "INV-3")
    assert text.splitlines()[-1].endswith("; accepted by the provider: 0.70 USD")


def test_verify_packet_checks_each_answer(ledger: tuple[Path, str]) -> None:
    folder, url = ledger
    assert answer(folder, url, "INV-1", answers_file(folder / "a.json", *FIRST))[0] == 0
    packet, _ = dispute(folder, url, "INV-1")
    packet["answers"][2]["amount"] = "1.50"
    (folder / "t.json").write_text(json.dumps(packet), encoding="utf-8")
    code, _, err = run(
        "verify-packet", str(folder / "t.json"), "--pubkey", str(folder / "key.pub")
    )
    assert code == 1
    assert err == (
        'FAILED: answers[2] (line L2).amount: the packet says "1.50", recomputed "0.50" '
        "(recomputed from the packet's own entries)\n"
    )


def test_an_answer_signed_by_another_key_fails_the_packet(ledger: tuple[Path, str]) -> None:
    folder, url = ledger
    assert run("keygen", "--out", str(folder / "other"), "--name", "mallory")[0] == 0
    file = answers_file(folder / "a.json", FIRST[0])
    assert answer(folder, url, "INV-1", file, key="other")[0] == 0
    code, _, err = run(
        "dispute", "--db", url, "--tenant", "acme", "--invoice", "INV-1",
        "--key", str(folder / "key"), "--out", str(folder / "p.json"),
    )  # fmt: skip
    assert code == 1
    # the answer is the entry after EVENTS
    assert f"answers: seq {len(EVENTS) + 1}: signed by 'mallory', not by 'orbital'" in err
    assert not (folder / "p.json").exists()


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        (
            {"line_id": "L9", "category": "unallocated", "state": "accepted"},
            "answers[0]: invoice 'INV-1' of 'acme' has no finding L9/unallocated",
        ),
        (
            {"line_id": "L1", "category": "stalled_fault", "state": "maybe"},
            "answers[0].state: 'maybe' is not one of accepted, rejected, partly",
        ),
        (
            {"line_id": "L2", "category": "unallocated", "state": "partly", "amount": "2.00"},
            "answers[0]: data: amount 2.00 is not between 0 and the finding's 2.00",
        ),
        (
            {"line_id": "L2", "category": "unallocated", "state": "rejected"},
            "answers[0]: data: a rejected finding needs a reason",
        ),
        (
            {
                "line_id": "L2",
                "category": "unallocated",
                "state": "rejected",
                "reason": "see zeta's line",
                "evidence": [999],
            },
            "answers[0].evidence: seq 999 is not an entry the customer's packet carries",
        ),
    ],
)
def test_answers_that_cannot_be_given_are_refused(
    ledger: tuple[Path, str], asked: dict[str, Any], message: str
) -> None:
    folder, url = ledger
    code, out, err = answer(folder, url, "INV-1", answers_file(folder / "a.json", asked))
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    assert answer_entries(url) == []


def test_a_tenants_source_cannot_write_an_answer(ledger: tuple[Path, str]) -> None:
    folder, url = ledger
    forged = event(
        "dispute.answer",
        "forged",
        {
            "tenant": "acme",
            "invoice_id": "INV-1",
            "line_id": "L2",
            "category": "unallocated",
            "state": "accepted",
            "finding_amount": "2.00",
            "finding_gpu_seconds": "1200",
            "revision": 1,
            "signer": "orbital",
            "signature": "A" * 91 + "=",
        },
        source="app://acme",
        time=at("12:00:00"),
    )
    path = write_jsonl(folder / "forged.jsonl", [forged])
    code, _, _ = run("ingest", "--db", url, "--owner", "tenant:acme", str(path))
    assert code == 1
    assert answer_entries(url) == []


def test_a_hostile_reason_never_controls_the_letter_or_the_terminal(
    ledger: tuple[Path, str],
) -> None:
    """The provider's reason is data: markup, a terminal escape, a bidi override and a
    formula reach the page escaped and the terminal as visible text, on one line."""
    folder, url = ledger
    reason = "<script>alert(1)</script>\x1b[2J\u202e=cmd|' /C calc'!A0\nsecond line"
    hostile = {"line_id": "L1", "category": "idle_unexplained", "state": "rejected",
               "reason": reason}  # fmt: skip
    code, _, err = answer(folder, url, "INV-1", answers_file(folder / "h.json", hostile))
    assert code == 0, err
    _, text = dispute(folder, url, "INV-1")
    assert "\x1b" not in text and "\u202e" not in text and "<script>" in text
    (l1,) = [line for line in text.splitlines() if "idle_unexplained" in line]
    assert "rejected by the provider: <script>" in l1 and "second line" in l1
    page = (folder / "INV-1.letter.html").read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "\x1b" not in page


def _finance_page(folder: Path, url: str) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """`reconcile --format html`: its figures (data-figure), and the largest findings'
    answers by (line, category)."""
    page = folder / "finance.html"
    code, _, err = run("reconcile", "--db", url, "--format", "html", "--out", str(page))
    assert code == 0, err
    text = page.read_text(encoding="utf-8")
    figures = dict(re.findall(r'data-figure="([^"]+)">([^<]*)<', text))
    rows = re.findall(
        r'<tr class="\w+" id="finding-\d+">.*?<td class="mono id"><bdi>([^<]*)</bdi></td>'
        r"<td>(\w+)</td>.*?<td class=\"answer\"[^>]*>([^<]*)</td>",
        text,
    )
    return figures, {(line, category): state for line, category, state in rows}


def test_the_static_finance_page_shows_each_answer_and_what_was_accepted(
    ledger: tuple[Path, str],
) -> None:
    """By hand, from the module's findings: INV-1's L1/stalled_fault accepted (2.60), L2
    accepted in part (0.50 of 2.00), L1/idle_unexplained rejected, L3 not answered: 3.10
    accepted, 1 of each state. INV-3's L5 accepted at 0.80, then a late progress mark makes
    it 0.70: the answer is stale, the finding open, nothing accepted."""
    folder, url = ledger
    assert answer(folder, url, "INV-1", answers_file(folder / "a.json", *FIRST))[0] == 0
    accept = {"line_id": "L5", "category": "idle_unexplained", "state": "accepted"}
    assert answer(folder, url, "INV-3", answers_file(folder / "b.json", accept))[0] == 0
    figures, answers = _finance_page(folder, url)
    assert figures["headline-invoice/acme/INV-1/USD/accepted"] == "3.10"
    assert figures["headline-invoice/acme/INV-1/USD/answered"] == (
        "1 accepted · 1 partly · 1 rejected · 1 open"
    )
    assert figures["headline-invoice/acme/INV-3/USD/accepted"] == "0.80"
    assert figures["headline-invoice/acme/INV-3/USD/answered"] == "1 accepted"
    assert figures["headline/USD/accepted"] == "3.90 USD"  # 3.10 + 0.80
    assert {k: answers[k] for k in [("L1", "stalled_fault"), ("L2", "unallocated")]} == {
        ("L1", "stalled_fault"): "accepted",
        ("L2", "unallocated"): "partly: 0.50 accepted",
    }
    assert answers[("L1", "idle_unexplained")] == "rejected"
    assert answers[("L3", "double_billed")] == "open"
    assert answers[("L5", "idle_unexplained")] == "accepted"
    late = acme("job.progress", "r-late", "12:02:30", job_id="J3", step=2)
    assert run("ingest", "--db", url, str(write_jsonl(folder / "late.jsonl", [late])))[0] == 0
    figures, answers = _finance_page(folder, url)
    assert figures["headline-invoice/acme/INV-3/USD/accepted"] == "0.00"
    assert figures["headline-invoice/acme/INV-3/USD/answered"] == "1 open"
    assert figures["headline/USD/accepted"] == "3.10 USD"
    assert answers[("L5", "idle_unexplained")] == "open (the answer was to other figures)"
