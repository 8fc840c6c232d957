"""The diagnostic packet's timeline, laid out server-side as SVG geometry.

One lane each, top to bottom: the job's path, allocation, attempts, progress density,
checkpoints, decisions, faults, billed periods. Every item of a lane is one `<rect
class="mark lane-<lane> …">`, so the page needs no script and a test can count what was
drawn: path → one per wait between two recorded steps (reconcile/packets/story.py: queue wait,
placement, start-up, wait for first progress), so the queue wait is a bar of its own;
allocation → one per allocation (grant to release); attempts → one per attempt;
progress → one per non-empty histogram bin (height ∝ marks); checkpoints → one per
checkpoint (start to save) and one per restore; decisions → one per decision;
faults → one per fault (open to clear); billed → one per billing line (its period).
Vertical markers show start_by, complete_by, the actual start and completion. Things
still open at the window's end run to it.

The packet page draws two: the **zoom** (the span story.zoom chose, around the missed
promise) above the **whole job** (the packet's window). A picture of a span draws only
what overlaps it, cut at its edges: a 13-hour job's 20-minute miss is a sliver in the
whole view and fills the zoom.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconcile.engine.figures import iso, parse_time
from reconcile.packets.story import open_wait

WIDTH, LEFT, RIGHT = 1340, 150, 20
LANE_H, BAR_H, TOP, AXIS_H = 46, 24, 30, 34
MIN_W = 3.0
LANES = (
    ("path", "job's path"),
    ("allocation", "allocation"),
    ("attempts", "job attempts"),
    ("progress", "progress"),
    ("checkpoints", "checkpoints"),
    ("decisions", "decisions"),
    ("faults", "faults"),
    ("billed", "billed periods"),
)

WAIT_KINDS = {
    "queue wait": "queue",
    "placement": "placement",
    "start-up": "startup",
    "wait for first progress": "first-progress",
}


@dataclass
class Mark:
    lane: str
    x: float
    y: float
    w: float
    h: float
    kind: str
    title: str


@dataclass
class Timeline:
    width: int
    height: int
    left: int
    plot_w: int
    lanes: list[dict[str, Any]]
    marks: list[Mark] = field(default_factory=list)
    markers: list[dict[str, Any]] = field(default_factory=list)
    ticks: list[dict[str, Any]] = field(default_factory=list)

    def count(self, lane: str) -> int:
        return sum(1 for m in self.marks if m.lane == lane)


class _Scale:
    def __init__(self, w0: int, w1: int) -> None:
        self.w0, self.w1, self.span = w0, w1, max(1, w1 - w0)

    def x(self, text: str | None, default: float = 1.0) -> float:
        if text is None:
            return LEFT + default * (WIDTH - LEFT - RIGHT)
        return self.x_us(parse_time(text))

    def x_us(self, us: float) -> float:
        fraction = (us - self.w0) / self.span
        return LEFT + min(1.0, max(0.0, fraction)) * (WIDTH - LEFT - RIGHT)

    def outside(self, start: str | None, end: str | None) -> bool:
        """[start, end] misses the span (None: open at that side)."""
        return (start is not None and parse_time(start) > self.w1) or (
            end is not None and parse_time(end) < self.w0
        )


def timeline(packet: dict[str, Any], span: dict[str, Any] | None = None) -> Timeline:
    """The packet's lanes, marks, markers and axis ticks over `span` (a dict with `from`
    and `to`; default the packet's window), in SVG user units."""
    span = span or packet["window"]
    w0, w1 = parse_time(span["from"]), parse_time(span["to"])
    scale = _Scale(w0, w1)
    lanes = [
        {"name": name, "label": label, "y": TOP + i * LANE_H, "h": LANE_H}
        for i, (name, label) in enumerate(LANES)
    ]
    tl = Timeline(WIDTH, TOP + len(LANES) * LANE_H + AXIS_H, LEFT, WIDTH - LEFT - RIGHT, lanes)
    y = {name: TOP + i * LANE_H + (LANE_H - BAR_H) / 2 for i, (name, _) in enumerate(LANES)}
    _bars(tl, scale, y, packet)
    hist = span.get("progress_histogram") or packet["application"]["progress_histogram"]
    _progress(tl, scale, y["progress"], hist, span)
    _markers(tl, scale, packet)
    tl.ticks = _ticks(w0, w1)
    return tl


def _bar(
    tl: Timeline,
    scale: _Scale,
    lane: str,
    y: float,
    start: str | None,
    end: str | None,
    kind: str,
    title: str,
    start_default: float = 0.0,
) -> None:
    if scale.outside(start, end):
        return
    x0, x1 = scale.x(start, start_default), scale.x(end)
    tl.marks.append(Mark(lane, x0, y, max(MIN_W, x1 - x0), BAR_H, kind, title))


def _bars(tl: Timeline, scale: _Scale, y: dict[str, float], p: dict[str, Any]) -> None:
    _path(tl, scale, y["path"], p)
    for a in p["reservations"]:
        _bar(
            tl,
            scale,
            "allocation",
            y["allocation"],
            a["granted"],
            a["released"],
            "held",
            f"allocation {a['allocation_id']}: {a['gpus']} GPU(s) on {a['node'] or '?'}, "
            f"{a['granted'] or '?'} → {a['released'] or 'open'}",
        )
    for a in p["application"]["attempts"]:
        _bar(
            tl,
            scale,
            "attempts",
            y["attempts"],
            a["started"],
            a["ended"],
            a["outcome"],
            f"attempt {a['attempt']} on {a['allocation_id']}: {a['started']} → "
            f"{a['ended'] or 'running'} "
            f"({a['outcome']}{', ' + a['cause'] if a['cause'] else ''})",
        )
    ckpt = p["checkpoints"]
    for c in ckpt["checkpoints"]:
        _bar(
            tl,
            scale,
            "checkpoints",
            y["checkpoints"],
            c["started"] or c["saved"],
            c["saved"] or c["started"],
            "saved" if c["saved"] else "unsaved",
            f"checkpoint {c['checkpoint_id']} (step {c['step']}): "
            f"{c['started'] or '?'} → {c['saved'] or 'never saved'}",
        )
    for r in ckpt["restores"]:
        _bar(
            tl,
            scale,
            "checkpoints",
            y["checkpoints"],
            r["t"],
            r["t"],
            "restored",
            f"restored {r['checkpoint_id']} (step {r['step']}) at {r['t']}",
        )
    for d in p["decisions"]:
        _bar(
            tl,
            scale,
            "decisions",
            y["decisions"],
            d["t"],
            d["t"],
            f"decision-{d['decision']}",
            f"#{d['order']} {d['decision']} at "
            f"{d['t']}{': ' + d['reason'] if d['reason'] else ''}",
        )
    for f in p["health"]["faults"]:
        _bar(
            tl,
            scale,
            "faults",
            y["faults"],
            f["opened"],
            f["cleared"],
            f"fault-{f['severity'] or 'unknown'}",
            f"{f['code']} on {f['node'] or f['fabric_domain'] or f['device']}: "
            f"{f['opened']} → {f['cleared'] or 'open'}",
        )
    for line in p["billing"]["lines"]:
        _bar(
            tl,
            scale,
            "billed",
            y["billed"],
            line["period_start"],
            line["period_end"],
            "replaced" if line["replaced"] else "line",
            f"{line['invoice_id']}/{line['line_id']}: {line['gpus']} GPU(s), "
            f"{line['amount']} {line['currency']}, "
            f"{line['period_start']} → "
            f"{line['period_end']}{' (replaced by a correction)' if line['replaced'] else ''}",
        )


def _path(tl: Timeline, scale: _Scale, y: float, p: dict[str, Any]) -> None:
    """A bar per wait; a job that never started waits on, open, to the window's end."""
    steps = {s["step"]: s for s in p["path"]}
    for s in p["path"]:
        if s["wait"] is not None:
            since = steps[s["since"]]
            _bar(
                tl,
                scale,
                "path",
                y,
                since["t"],
                s["t"],
                "wait-" + WAIT_KINDS[s["wait"]],
                f"{s['wait']}: {since['label']} {since['t']} → {s['label']} {s['t']} "
                f"({s['wait_text']})",
            )
    waiting = open_wait(p["path"]) if p["promise"]["started"] is None else None
    if waiting is not None:
        since, name = waiting
        _bar(
            tl,
            scale,
            "path",
            y,
            since["t"],
            None,
            "wait-" + WAIT_KINDS[name],
            f"{name}: {since['label']} {since['t']} → still waiting at the window's end",
        )


def _progress(
    tl: Timeline, scale: _Scale, y: float, hist: dict[str, Any], span: dict[str, Any]
) -> None:
    """One bar per non-empty bin of `hist`, the histogram of `span` (its bins split it evenly)."""
    counts: list[int] = hist["counts"]
    peak = max(counts, default=0)
    if not peak:
        return
    h0, h1 = parse_time(span["from"]), parse_time(span["to"])
    bin_us = (h1 - h0) / hist["bins"]
    for i, n in enumerate(counts):
        b0, b1 = h0 + i * bin_us, h0 + (i + 1) * bin_us
        if n:
            h = max(2.0, BAR_H * n / peak)
            x0, x1 = scale.x_us(b0), scale.x_us(b1)
            tl.marks.append(
                Mark(
                    "progress",
                    x0,
                    y + BAR_H - h,
                    max(1.0, x1 - x0 - 0.5),
                    h,
                    "density",
                    f"{n} progress mark(s) in bin {i + 1} of {hist['bins']} "
                    f"({hist['bin_seconds']} s each)",
                )
            )


def _markers(tl: Timeline, scale: _Scale, p: dict[str, Any]) -> None:
    promise = p["promise"]
    for key, label, kind in (
        ("start_by", "start by", "promised"),
        ("complete_by", "complete by", "promised"),
        ("started", "started", "actual"),
        ("completed", "completed", "actual"),
    ):
        if promise[key] is not None and not scale.outside(promise[key], promise[key]):
            x = scale.x(promise[key])
            near_end = x > WIDTH - RIGHT - 90  # label to the left of the line, inside the picture
            tl.markers.append(
                {
                    "x": x,
                    "label": label,
                    "kind": kind,
                    "title": f"{label} {promise[key]}",
                    "label_x": x - 3 if near_end else x + 3,
                    "anchor": "end" if near_end else "start",
                }
            )


def _ticks(w0: int, w1: int, n: int = 6) -> list[dict[str, Any]]:
    out = []
    for i in range(n + 1):
        t = w0 + (w1 - w0) * i // n
        text = iso(t) or ""
        anchor = "start" if i == 0 else "end" if i == n else "middle"
        out.append(
            {
                "x": LEFT + i * (WIDTH - LEFT - RIGHT) / n,
                "label": text[5:16].replace("T", " "),
                "anchor": anchor,
            }
        )
    return out
