"""The diagnostic packet of the late-start promise P2 of tests/reports_scenario.py:
its JSON sections worked out by hand from the scenario's events, a self-contained HTML
page, and that page rendered in headless Chromium (skipped when `chromium` is absent)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli import main
from ledger import Store
from reconcile.packets.diagnostic import PromiseNotFound, build_packet, render_html, write_packet
from reconcile.packets.story import duration
from reconcile.reports import report
from tests.reports_scenario import Events, at, make_store_of, sqlite_store

CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    s = sqlite_store(tmp_path_factory.mktemp("packet"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def packet_dir(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("p2") / "P2"
    write_packet(store, "P2", out)
    return out


@pytest.fixture(scope="module")
def packet(packet_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((packet_dir / "packet.json").read_text())
    return doc


def test_promise_and_window(packet: dict[str, Any]) -> None:
    p = packet["promise"]
    assert (p["promise_id"], p["job_id"], p["start_status"], p["start_delay_s"], p["missed"]) == (
        "P2",
        "J2",
        "late",
        900,
        True,
    )
    # from the promise (09:50) to complete_by (12:00), the latest of J2's and A2's times
    assert packet["window"] == {"from": at("09:50"), "to": at("12:00"), "seconds": 7800}


def test_path_of_a_late_start(packet: dict[str, Any]) -> None:
    # J2: submitted 09:58, admitted 10:20 (22 min queued), placed 10:21, started 10:25, first
    # progress 10:30
    assert [
        (s["step"], s["t"], s["status"], s["wait"], s["wait_s"], s["wait_text"], s["since"])
        for s in packet["path"]
    ] == [
        ("submitted", at("09:58"), "recorded", None, None, None, None),
        ("admitted", at("10:20"), "recorded", "queue wait", 1320, "22 min", "submitted"),
        ("placed", at("10:21"), "recorded", "placement", 60, "1 min", "admitted"),
        ("started", at("10:25"), "recorded", "start-up", 240, "4 min", "placed"),
        (
            "first_progress",
            at("10:30"),
            "recorded",
            "wait for first progress",
            300,
            "5 min",
            "started",
        ),
    ]
    by_seq = {e["seq"]: e for e in packet["evidence"]}
    assert (
        by_seq[packet["path"][0]["seq"]]["type"] == "job.submitted"
    )  # the submission is evidence too


def test_why_a_late_start_was_missed(packet: dict[str, Any]) -> None:
    # start_by 10:10 falls inside [09:58 submitted, 10:20 admitted]: the queue wait, the longest.
    # Cause (RULES.md): the wait [09:58, 10:25) is 27 min; J2 needs 1 mig:1g.10gb (A2's class);
    # n2/0 is mig, its profile 1g.10gb from A2, the job's own grant (free for it); no fault on
    # it before 10:34, not deactivated, no failed start, no quota: it fit all 27 min: scheduler.
    assert packet["why"] == (
        "Started 15 min late (10:25 UTC, promised by 10:10 UTC): start_by passed during the "
        "queue wait (submitted 09:58 UTC → admitted 10:20 UTC, 22 min). "
        "Cause: scheduler, borne by the provider: for 27 min of the 27 min "
        "waited, it fit (1 of 1 mig:1g.10gb instance free) and was within "
        "quota; the scheduler started it later."
    )
    # the path from 09:58 to 10:30 and start_by 10:10: 32 min, padded by 4 min (a tenth, in whole
    # minutes)
    zoom = dict(packet["zoom"])
    hist = zoom.pop("progress_histogram")
    assert zoom == {"about": "start", "from": at("09:54"), "to": at("10:34"), "seconds": 2400}
    # its own 120 bins of 20 s from 09:54: 10:30 → 2160 s → bin 108; 10:31 → 111; 10:33 → 117
    # (10:45, 10:50 are out)
    assert (
        hist["bin_seconds"],
        [i for i, n in enumerate(hist["counts"]) if n],
        sum(hist["counts"]),
    ) == (20, [108, 111, 117], 3)


@pytest.mark.parametrize(
    ("promise", "why"),
    [
        ("P1", "Kept: started at 10:02 UTC, by 10:05 UTC; completed at 10:16 UTC, by 11:00 UTC."),
        # J3 started 10:06 and completed 11:10 against 10:50, with no failure: the run itself was
        # long
        (
            "P3",
            "Completed 20 min late (11:10 UTC, promised by 10:50 UTC): no failure or "
            "preemption recorded; "
            "the run took 1 h 4 min from its start.",
        ),
        # J5: submitted 10:50, no decision names it, never started; start_by 11:00 < horizon 11:20.
        # Cause: wait [10:50, 11:20) 30 min, 1 whole GPU; n1/0 and n1/1 (whole) are faulted by the
        # n1 node fault until 10:59 (none free; healthy, one fits): fault 9 min; from 10:59 both
        # free: scheduler 21 min, the most.
        (
            "P5",
            "Never started (promised by 11:00 UTC): submitted at 10:50 UTC, then no start "
            "in the ledger; "
            "it was waiting to start when start_by passed. Cause: scheduler, borne by the "
            "provider: for 21 min of the 30 min waited, it fit (2 of 2 whole GPUs free) and "
            "was within quota; the scheduler did not start it.",
        ),
        ("P6", "Not missed yet: the ledger does not reach the promised time."),
    ],
)
def test_why_sentences(store: Store, promise: str, why: str) -> None:
    assert build_packet(store, promise)["why"] == why


def test_a_job_without_admission_waits_in_the_queue_until_it_starts(tmp_path: Path) -> None:
    """A Slurm-like job: no scheduling decision names it, so admission and placement are not
    needed."""
    e = Events()
    e.add("policy.promise", "09:00", promise_id="P", job_id="J", start_by=at("10:00"))
    e.add("job.submitted", "09:30", job_id="J")
    e.add("job.started", "10:40", job_id="J", allocation_id="A")
    e.add("job.progress", "10:45", job_id="J", step=1)
    store = make_store_of(f"sqlite:///{tmp_path / 'slurm.db'}", e.items)
    try:
        packet = build_packet(store, "P")
    finally:
        store.close()
    assert [(s["step"], s["status"], s["wait"], s["wait_s"]) for s in packet["path"]] == [
        ("submitted", "recorded", None, None),
        ("admitted", "not needed", None, None),
        ("placed", "not needed", None, None),
        ("started", "recorded", "queue wait", 4200),
        ("first_progress", "recorded", "wait for first progress", 300),
    ]
    assert packet["path"][1]["note"] == "no scheduling decision names the job (Slurm writes none)"
    assert "not needed: no scheduling decision names the job (Slurm writes none)" in render_html(
        packet
    )
    # no device is discovered: fewer free than the 1 needed for the whole wait [09:30, 10:40)
    assert packet["why"] == (
        "Started 40 min late (10:40 UTC, promised by 10:00 UTC): start_by passed during the "
        "queue wait (submitted 09:30 UTC → started 10:40 UTC, 1 h 10 min). "
        "Cause: capacity, borne by the provider: for 1 h 10 min of the "
        "1 h 10 min waited, no whole GPU was free: the ledger discovered "
        "none."
    )
    # focus 09:30-10:45 (75 min) padded by 8 min, cut at the window's end (10:45, the last event)
    assert {k: v for k, v in packet["zoom"].items() if k != "progress_histogram"} == {
        "about": "start",
        "from": at("09:22"),
        "to": at("10:45"),
        "seconds": 4980,
    }


def test_a_job_submitted_after_start_by(tmp_path: Path) -> None:
    e = Events()
    e.add("policy.promise", "09:00", promise_id="P", job_id="J", start_by=at("10:00"))
    e.add("job.submitted", "10:05", job_id="J")
    e.add("job.started", "10:10", job_id="J", allocation_id="A")
    store = make_store_of(f"sqlite:///{tmp_path / 'after.db'}", e.items)
    try:
        # wait [10:00, 10:10): 5 min before the submission, then 5 min with no device
        # (capacity); the tie goes to late_submission, first in the order
        assert build_packet(store, "P")["why"] == (
            "Started 10 min late (10:10 UTC, promised by 10:00 UTC): the job was submitted "
            "after start_by. Cause: late_submission, borne by the customer: for 5 min of the "
            "10 min waited, the job was not yet submitted."
        )
    finally:
        store.close()


def _packet_of(tmp_path: Path, e: Events) -> dict[str, Any]:
    store = make_store_of(f"sqlite:///{tmp_path / 'one.db'}", e.items)
    try:
        return build_packet(store, "P")
    finally:
        store.close()


def test_the_longest_wait_is_named_when_start_by_passed_in_another(tmp_path: Path) -> None:
    e = Events()
    e.add("policy.promise", "08:00", promise_id="P", job_id="J", start_by=at("09:45"))
    e.add("job.submitted", "09:00", job_id="J")
    e.add("policy.decision", "09:40", decision="admitted", job_id="J", allocation_id="A")
    e.add("policy.decision", "09:50", decision="placed", job_id="J")
    e.add("job.started", "09:52", job_id="J", allocation_id="A")
    # start_by 09:45 falls in [09:40 admitted, 09:50 placed]; the queue wait (40 min) was longer.
    # Cause: wait [09:00, 09:52) with no device discovered: capacity for all 52 min
    assert _packet_of(tmp_path, e)["why"] == (
        "Started 7 min late (09:52 UTC, promised by 09:45 UTC): start_by passed during "
        "the placement "
        "(admitted 09:40 UTC → placed 09:50 UTC, 10 min); the longest wait was the queue wait "
        "(40 min). Cause: capacity, borne by the provider: for 52 min of the 52 min waited, no "
        "whole GPU was free: the ledger discovered none."
    )


def test_a_late_completion_names_its_failures(tmp_path: Path) -> None:
    e = Events()
    e.add(
        "policy.promise",
        "09:00",
        promise_id="P",
        job_id="J",
        start_by=at("10:00"),
        complete_by=at("11:00"),
    )
    e.add("job.started", "10:00", job_id="J", allocation_id="A", attempt=1)
    e.add("job.failed", "10:30", job_id="J", cause="hardware", detail="XID 79")
    e.add("job.started", "10:40", job_id="J", allocation_id="A", attempt=2)
    e.add("job.completed", "11:20", job_id="J")
    packet = _packet_of(tmp_path, e)
    assert packet["why"] == (
        "Completed 20 min late (11:20 UTC, promised by 11:00 UTC): attempt 1 failed at "
        "10:30 UTC (hardware: XID 79); 1 restart."
    )
    # about the completion: complete_by 11:00 to completed 11:20, padded by 2 min (a tenth, at
    # least one)
    assert {k: v for k, v in packet["zoom"].items() if k != "progress_histogram"} == {
        "about": "completion",
        "from": at("10:58"),
        "to": at("11:20"),
        "seconds": 1320,
    }


@pytest.mark.parametrize(
    ("s", "text"),
    [
        (0, "0 s"),
        (45, "45 s"),
        (60, "1 min"),
        (150, "2 min 30 s"),
        (4200, "1 h 10 min"),
        (46800, "13 h"),
        (-90, "-1 min 30 s"),
        (None, "—"),
    ],
)
def test_durations_as_people_say_them(s: int | None, text: str) -> None:
    assert duration(s) == text


def test_decisions_in_time_order(packet: dict[str, Any]) -> None:
    # the queued decision came later in the ledger but is earliest in time
    assert [
        (d["order"], d["t"], d["decision"], d["allocation_id"]) for d in packet["decisions"]
    ] == [
        (1, at("10:00"), "queued", None),
        (2, at("10:20"), "admitted", "A2"),
        (3, at("10:21"), "placed", None),
    ]
    assert packet["preemptions"] == []


def test_reservation(packet: dict[str, Any]) -> None:
    [a] = packet["reservations"]
    assert (
        a["allocation_id"],
        a["granted"],
        a["released"],
        a["node"],
        a["devices"],
        a["placement_class"],
        a["profile"],
    ) == ("A2", at("10:20"), at("11:00"), "n2", ["0"], "mig", "1g.10gb")


def test_faults_touching_the_allocation_in_the_window(packet: dict[str, Any]) -> None:
    # n1 (another node), n2/1 (another device) and n2/0 at 13:00 (after 12:00) are left out
    assert [
        (f["code"], f["node"], f["device"], f["opened"], f["cleared"], f["touches"])
        for f in packet["health"]["faults"]
    ] == [("xid-79", "n2", "0", at("10:34"), at("10:50"), ["A2"])]
    assert [(d["node"], d["device"]) for d in packet["health"]["devices"]] == [("n2", "0")]


def test_attempts_progress_and_failure(packet: dict[str, Any]) -> None:
    app = packet["application"]
    assert [
        (a["attempt"], a["started"], a["ended"], a["outcome"], a["cause"], a["detail"])
        for a in app["attempts"]
    ] == [
        (1, at("10:25"), at("10:35"), "failed", "hardware", "XID 79 on GPU 0"),
        (2, at("10:40"), at("11:00"), "completed", None, None),
    ]
    assert (app["restarts"], len(app["failures"])) == (1, 1)
    # attempt 1: marks 10:30 10:31 10:33 (gaps 60, 120: p50 rank 1 → 60, p95 rank 2 → 120);
    # attempt 2: 10:45 10:50 (one gap, 300)
    assert [
        (
            g["marks"],
            g["first_step"],
            g["last_step"],
            g["step_time_p50_s"],
            g["step_time_p95_s"],
            g["longest_gap_s"],
        )
        for g in app["progress"]
    ] == [(3, 1, 3, 60, 120, 120), (2, 4, 5, 300, 300, 300)]
    # 120 bins of 7800/120 = 65 s from 09:50: 10:30 → 2400 s → bin 36; 10:31 → 37; 10:33 → 39;
    # 10:45 → 50; 10:50 → 55
    counts = app["progress_histogram"]["counts"]
    assert [i for i, n in enumerate(counts) if n] == [36, 37, 39, 50, 55] and sum(counts) == 5


def test_checkpoints(packet: dict[str, Any]) -> None:
    ck = packet["checkpoints"]
    assert [
        (c["checkpoint_id"], c["step"], c["started"], c["saved"]) for c in ck["checkpoints"]
    ] == [("c2", 3, at("10:32"), at("10:33"))]
    assert [(r["checkpoint_id"], r["t"]) for r in ck["restores"]] == [("c2", at("10:41"))]
    assert ck["last_saved"]["checkpoint_id"] == "c2"


def test_billing_record(packet: dict[str, Any]) -> None:
    [line] = packet["billing"]["lines"]
    assert (
        line["line_id"],
        line["period_start"],
        line["period_end"],
        line["amount"],
        line["replaced"],
    ) == ("L2", at("10:20"), at("11:00"), "4.80", False)
    # L2 [10:20, 11:00) on A2: 2400 GPU-s, every one of them in some category
    assert sum(c["gpu_seconds"] for c in line["categories"].values()) == 2400
    assert line["categories"]["checkpoint"]["gpu_seconds"] == 60  # c2 [10:32, 10:33)
    assert packet["billing"]["job_cost"] == {"USD": "4.80"}  # J2 alone on A2


def test_evidence_holds_every_cited_entry(packet: dict[str, Any]) -> None:
    by_seq = {e["seq"]: e for e in packet["evidence"]}
    failed = by_seq[packet["application"]["attempts"][0]["end_seq"]]
    assert (failed["type"], failed["data"]["detail"]) == ("job.failed", "XID 79 on GPU 0")
    assert {d["seq"] for d in packet["decisions"]} <= set(by_seq)
    assert all(e["type"] != "job.progress" for e in packet["evidence"])


def test_html_is_self_contained(packet_dir: Path) -> None:
    html = (packet_dir / "packet.html").read_text()
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"\b(src|href)\s*=", html, re.I)
    assert "<script" not in html.lower() and "<link" not in html.lower() and "@import" not in html
    # the whole job: path 4 waits, allocation 1, attempts 2, progress bins 5, checkpoints 2,
    # decisions 3, faults 1, billed 1; the zoom [09:54, 10:34]: the same less attempt 2 (10:40),
    # progress at 10:45 and 10:50, the restore (10:41)
    assert html.count('class="mark lane-') == (4 + 1 + 2 + 5 + 2 + 3 + 1 + 1) + (
        4 + 1 + 1 + 3 + 1 + 3 + 1 + 1
    )


def test_unknown_promise(store: Store, tmp_path: Path) -> None:
    with pytest.raises(PromiseNotFound):
        build_packet(store, "P9")
    result = CliRunner().invoke(
        main, ["packet", "--db", store.url, "--promise", "P9", "--out", str(tmp_path / "x")]
    )
    assert (result.exit_code, result.stderr) == (
        2,
        "Error: --promise: no policy.promise with promise_id 'P9' in the ledger "
        "(`gpuledger report promises` lists them)\n",
    )
    assert not (tmp_path / "x").exists()


def test_a_promise_id_of_two_tenants_needs_tenant(tmp_path: Path) -> None:
    events = []
    for tenant, start in (("acme", "10:00"), ("borealis", "10:30")):
        e = Events(tenant)
        e.add("policy.promise", "09:00", promise_id="P", job_id="J", start_by=at("10:10"))
        e.add("job.started", start, job_id="J", allocation_id="A")
        events += [{**item, "id": f"{tenant}-{item['id']}"} for item in e.items]
    store = make_store_of(f"sqlite:///{tmp_path / 'two.db'}", events)
    try:
        with pytest.raises(PromiseNotFound, match="promised by acme, borealis: name one$"):
            build_packet(store, "P")
        assert (
            build_packet(store, "P", "borealis")["promise"]["start_status"] == "late"
        )  # 10:30 > 10:10
        [miss] = report(store, "promises")["misses"]
        assert (
            miss["packet_command"]
            == "gpuledger packet --promise P --tenant borealis --out packets/P"
        )
    finally:
        store.close()


def test_cli_packet_of_a_promise_never_started(store: Store, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["packet", "--db", store.url, "--promise", "P5", "--out", str(tmp_path / "P5")]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "P5" / "packet.json").read_text())
    assert (
        doc["promise"]["start_status"],
        doc["application"]["attempts"],
        doc["reservations"],
    ) == ("not_started", [], [])
    html = (tmp_path / "P5" / "packet.html").read_text()
    assert "the job never started" in html
    # J5 was submitted at 10:50 and is still queued: one open queue wait in each picture, and no
    # other wait
    assert (
        html.count('class="mark lane-path wait-queue"'),
        html.count('class="mark lane-path'),
    ) == (2, 2)
    assert (
        "queue wait: submitted 2026-01-05T10:50:00Z → still waiting at the window&#39;s end"
        in html
    )


# -- headless Chromium ----------------------------------------------------------------


def _chromium(page: Path, profile: Path, *mode: str) -> subprocess.CompletedProcess[str]:
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
        *mode,
        page.resolve().as_uri(),
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of (R, G, B) bytes of an 8-bit RGB or RGBA, non-interlaced PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        header, idat = (
            (body, idat) if kind == b"IHDR" else (header, idat + body if kind == b"IDAT" else idat)
        )
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
    bpp = 3 if color == 2 else 4
    raw, stride, prev, rows = zlib.decompress(idat), width * bpp, bytearray(width * bpp), []
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a, b = line[i - bpp] if i >= bpp else 0, prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        rows.append(bytes(v for j, v in enumerate(line) if j % bpp < 3))
    return width, height, rows


def colours(rows: list[bytes]) -> Counter[tuple[int, int, int]]:
    """How many pixels have each (R, G, B)."""
    found: Counter[tuple[int, int, int]] = Counter()
    for row in rows:
        found.update(zip(row[0::3], row[1::3], row[2::3]))
    return found


def _pixels_near(
    found: Counter[tuple[int, int, int]], rgb: tuple[int, int, int], tolerance: int = 12
) -> int:
    return sum(
        n
        for colour, n in found.items()
        if all(abs(colour[k] - rgb[k]) <= tolerance for k in range(3))
    )


# What the test page asks Chromium after layout: the text people see (innerText) of the
# why line and the path table, and every box whose content is wider than it, or SVG text
# outside its picture. Injected into a copy of the page: packet.html itself has no script.
PROBE = """<pre id="probe"></pre><script>
const out = {why: document.getElementById("why").innerText,
  path: [...document.querySelectorAll("#path tr")].slice(1)
    .map(r => [...r.cells].map(c => c.innerText)),
  zoom_heading: document.querySelectorAll("h2")[1].innerText, overflow: [],
  page: [document.documentElement.scrollWidth, window.innerWidth]};
for (const el of document.body.querySelectorAll(
    "p, td, th, h1, h2, dd, dt, .legend, .legend .item, table")) {
  if (el.scrollWidth > el.clientWidth + 1)
    out.overflow.push(el.tagName + " " + el.innerText.slice(0, 60));
}
for (const svg of document.querySelectorAll("svg.timeline")) {
  const width = svg.viewBox.baseVal.width, height = svg.viewBox.baseVal.height;
  for (const t of svg.querySelectorAll("text")) {
    const b = t.getBBox();
    if (b.x < 0 || b.y < 0 || b.x + b.width > width || b.y + b.height > height)
      out.overflow.push(svg.id + " " + t.textContent);
  }
}
document.getElementById("probe").textContent = JSON.stringify(out);
</script>"""


def _lanes(dom: str, svg_id: str) -> dict[str, int]:
    svg = re.search(rf'<svg class="timeline" id="{svg_id}".*?</svg>', dom, re.S)
    assert svg is not None, svg_id
    return dict(Counter(re.findall(r'<rect class="mark lane-(\w+)', svg.group(0))))


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not on PATH (Debian package `chromium`; .ci/run installs it)",
)
def test_timeline_renders_in_headless_chromium(packet_dir: Path, tmp_path: Path) -> None:
    page = packet_dir / "packet.html"
    dom = _chromium(page, tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the whole job: four waits on the path, one allocation, two attempts, five progress bins, one
    # checkpoint + one restore, three decisions, one fault, one billed period
    assert _lanes(dom.stdout, "timeline") == {
        "path": 4,
        "allocation": 1,
        "attempts": 2,
        "progress": 5,
        "checkpoints": 2,
        "decisions": 3,
        "faults": 1,
        "billed": 1,
    }
    # the zoom [09:54, 10:34]: attempt 2 (10:40), the restore (10:41) and the marks at 10:45, 10:50
    # fall outside
    assert _lanes(dom.stdout, "timeline-zoom") == {
        "path": 4,
        "allocation": 1,
        "attempts": 1,
        "progress": 3,
        "checkpoints": 1,
        "decisions": 3,
        "faults": 1,
        "billed": 1,
    }

    shot = tmp_path / "packet.png"
    result = _chromium(
        page, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1400,1200"
    )
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    width, height, rows = read_png(shot)
    assert (width, height) == (1400, 1200)
    found = colours(rows)
    # the timeline's bars are drawn in their own colours (packet.html.j2): the queue wait (#e05597,
    # 22 of the zoom's 40 min ≈ 650 px × 24 px, and 22 of 130 min in the whole view), the failed
    # attempt (#d64541), the completed one (#2e9d57, whole view), the allocation held (#7f8fa6)
    assert _pixels_near(found, (0xE0, 0x55, 0x97)) > 10_000
    assert _pixels_near(found, (0xD6, 0x45, 0x41)) > 1000
    assert _pixels_near(found, (0x2E, 0x9D, 0x57)) > 1000
    assert _pixels_near(found, (0x7F, 0x8F, 0xA6)) > 1000


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not on PATH (Debian package `chromium`; .ci/run installs it)",
)
@pytest.mark.parametrize(
    "window", [1400, 1024]
)  # a desktop, and a laptop where the pictures shrink to fit
def test_rendered_figures_equal_the_packet_and_nothing_overflows(
    packet_dir: Path, packet: dict[str, Any], tmp_path: Path, window: int
) -> None:
    probe = tmp_path / "probe.html"
    probe.write_text(
        (packet_dir / "packet.html").read_text().replace("</body>", PROBE + "</body>")
    )
    dom = _chromium(
        probe, tmp_path / "profile-probe", f"--window-size={window},1200", "--dump-dom"
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert found is not None and found.group(1), dom.stdout[-2000:]
    shown = json.loads(
        found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    )
    assert shown["why"] == f"Why: {packet['why']}"
    # each step as shown: label, time, "<wait>: <text> (<seconds> s)", the step it waited since,
    # seq
    assert [row[:4] for row in shown["path"]] == [
        [
            s["label"],
            s["t"],
            "" if s["wait_s"] is None else f"{s['wait']}: {s['wait_text']} ({s['wait_s']} s)",
            (s["since"] or "").replace("_", " "),
        ]
        for s in packet["path"]
    ]
    # and the figures themselves, as worked out by hand in test_path_of_a_late_start
    assert shown["path"][1][1:3] == [at("10:20"), "queue wait: 22 min (1320 s)"]
    zoom = packet["zoom"]
    assert f"{zoom['from']} → {zoom['to']} ({zoom['seconds']} s)" in shown["zoom_heading"]
    assert shown["overflow"] == []
    page_width, window_width = shown["page"]
    assert page_width <= window_width == window  # no horizontal scrolling
