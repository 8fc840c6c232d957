"""One stall is one finding: a stretch that a billing hour splits over two lines is merged
back (reconcile/packets/letter.py, merge_stretches); findings are in time order."""

from __future__ import annotations

from reconcile.packets.letter import Cited, Finding, merge_stretches


def finding(
    line: str, category: str, start: str, end: str, amount: str, seqs: list[int]
) -> Finding:
    return Finding(
        number=0,
        line_id=line,
        allocation_id="A1",
        category=category,
        bearer="provider",
        amount=amount,
        currency="USD",
        gpu_seconds=1,
        start=start,
        end=end,
        stretches=[(start, end, 2)],
        rule="",
        rule_place="",
        cited=[Cited(s, "job.progress", "", [("job_id", "j1")]) for s in seqs],
    )


def test_a_stall_split_by_the_billing_hour_is_one_finding() -> None:
    h = "2026-01-05T{}:00Z"
    # stalled [10:40, 11:00) on L1 and [11:00, 11:25) on L2: one stall of 45 min, 1.50 + 1.90;
    # an idle stretch at 10:05 comes first in time; a stall at 12:00 does not touch the first
    merged = merge_stretches(
        [
            finding("L2", "stalled_fault", h.format("11:00"), h.format("11:25"), "1.90", [7, 9]),
            finding("L1", "stalled_fault", h.format("10:40"), h.format("11:00"), "1.50", [5, 7]),
            finding("L1", "idle_unexplained", h.format("10:05"), h.format("10:10"), "0.30", [3]),
            finding("L3", "stalled_fault", h.format("12:00"), h.format("12:05"), "0.20", [11]),
        ]
    )
    assert [(f.number, f.category, f.start, f.end, f.amount) for f in merged] == [
        (1, "idle_unexplained", h.format("10:05"), h.format("10:10"), "0.30"),
        (2, "stalled_fault", h.format("10:40"), h.format("11:25"), "3.40"),
        (3, "stalled_fault", h.format("12:00"), h.format("12:05"), "0.20"),
    ]
    stall = merged[1]
    assert stall.line_ids == ("L1", "L2") and stall.lines_text == "L1, L2"
    assert stall.stretches == [(h.format("10:40"), h.format("11:25"), 2)]  # one stretch
    assert [c.seq for c in stall.cited] == [5, 7, 9]  # each entry cited once
    # the three progress entries of j1 show as one row, first and last
    runs = stall.cited_runs()
    assert len(runs) == 1 and (runs[0].first.seq, runs[0].last.seq) == (5, 9)


def test_a_long_allocation_id_on_the_timeline_is_a_key_written_out_under_it() -> None:
    """The timeline's label column holds 30 characters: a 40-character allocation id is
    drawn as "[1] " and its first 25 characters and "…", and written out under the chart;
    a short one is drawn whole, with no key."""
    from dataclasses import replace

    from reconcile.packets.letter import Letter, Totals, render_html

    h = "2026-01-05T{}:00Z"
    long_id = "alloc-" + "x" * 34
    findings = merge_stretches(
        [
            replace(
                finding("L1", "stalled_fault", h.format("10:00"), h.format("10:10"), "1", [1]),
                allocation_id=long_id,
                rule_place="RULES.md",
            ),
            replace(
                finding("L2", "stalled_fault", h.format("10:20"), h.format("10:30"), "1", [2]),
                rule_place="RULES.md",
            ),
        ]
    )
    page = render_html(Letter("acme", "INV-1", "k", 1, 2, 2, 0, [Totals("USD")], findings))
    assert f"<title>{long_id}</title>[1] {long_id[:25]}…</text>" in page
    assert "<title>A1</title>A1</text>" in page
    assert (
        '<ul class="chart-keys"><li><span class="key">[1]</span> '
        f'<span class="mono"><bdi>{long_id}</bdi></span></li></ul>'
    ) in page
