"""The story of a promise, as the operator's packet tells it (docs/operator-packet.md).

**Path**: the job's steps in order — submitted, admitted, placed, started, first progress
— each with its time (the first such event of the job) and its **wait**: the time since
the previous step that was recorded. A wait is named by the step it ends at: the queue
wait (to admission), placement, start-up (to the start), and the wait for the first
progress mark. A step may be *not recorded* (the ledger has no such event), or *not
needed*: a job that no `policy.decision` names at all needs no admission or placement
(Slurm writes none), and its queue wait then runs from submission to start (the wait
after a step not needed keeps that step's name).

**Why** is one computed sentence. A late start names the wait during which `start_by`
passed and, when another wait was longer, that one too; a start that never came names the
last step recorded and the step that never followed. A late (or missing) completion
names the failures, preemptions and faults of the job's attempts, or, when there were
none, the run's length. A promise kept says so.

**Zoom**: the span the sentence is about — the path and `start_by` for a start, else
`complete_by` and the completion (or the window's end) — padded by a tenth of its length,
at least a minute, in whole minutes, and clipped to the packet's window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reconcile.engine.figures import iso, parse_time, seconds
from reconcile.engine.rules import SECOND

MINUTE = 60 * SECOND
#: (step, label, the name of the wait that ends at it)
STEPS = (
    ("submitted", "submitted", ""),
    ("admitted", "admitted", "queue wait"),
    ("placed", "placed", "placement"),
    ("started", "started", "start-up"),
    ("first_progress", "first progress", "wait for first progress"),
)
NO_ADMISSION = "no scheduling decision names the job (Slurm writes none)"


def duration(s: int | float | None) -> str:
    """Seconds as people say them: "45 s", "22 min", "2 min 30 s", "13 h 5 min"."""
    if s is None:
        return "—"
    total = round(abs(s))
    sign = "-" if s < 0 else ""
    h, rest = divmod(total, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{sign}{h} h" + (f" {m} min" if m else "")
    if m:
        return f"{sign}{m} min" + (f" {sec} s" if sec else "")
    return f"{sign}{sec} s"


def path(packet: dict[str, Any], submitted: tuple[str, int] | None) -> list[dict[str, Any]]:
    """The job's steps with their times, seqs, waits and status (see the module docstring)."""
    decided = bool(packet["decisions"])
    found: dict[str, tuple[str | None, int | None]] = {"submitted": submitted or (None, None)}
    for step in ("admitted", "placed"):
        first = next((d for d in packet["decisions"] if d["decision"] == step), None)
        found[step] = (first["t"], first["seq"]) if first else (None, None)
    found["started"] = _first_start(packet)
    found["first_progress"] = _first_progress(packet, found["started"][0])
    out: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for step, label, _ in STEPS:
        t, seq = found[step]
        status = (
            "recorded"
            if t
            else (
                "not needed" if step in ("admitted", "placed") and not decided else "not recorded"
            )
        )
        row: dict[str, Any] = {
            "step": step,
            "label": label,
            "t": t,
            "seq": seq,
            "status": status,
            "wait": None,
            "wait_s": None,
            "wait_text": None,
            "since": None,
            "note": NO_ADMISSION if status == "not needed" else None,
        }
        out.append(row)
        if t and previous:
            wait_us = parse_time(t) - parse_time(previous["t"])
            row |= {
                "wait": _wait_name(out, previous["step"], step),
                "wait_s": seconds(wait_us),
                "wait_text": duration(seconds(wait_us)),
                "since": previous["step"],
            }
        previous = row if t else previous
    return out


def open_wait(steps: list[dict[str, Any]]) -> tuple[dict[str, Any], str] | None:
    """The wait still open after the last step recorded before the start: that step and the
    wait's name (the next step's: the queue wait when admission was not needed or never came)."""
    before_start = steps[: [s["step"] for s in steps].index("started")]
    recorded = [i for i, s in enumerate(before_start) if s["t"]]
    if not recorded:
        return None
    last = recorded[-1]
    return steps[last], STEPS[last + 1][2]


def _wait_name(rows: list[dict[str, Any]], since: str, step: str) -> str:
    """The wait from `since` to `step`: named by the step after `since` when that one was not
    needed (Slurm: submission to start is the queue wait), else by `step`."""
    names = {s: name for s, _, name in STEPS}
    after = rows[[r["step"] for r in rows].index(since) + 1]
    return names[after["step"]] if after["status"] == "not needed" else names[step]


def _first_start(packet: dict[str, Any]) -> tuple[str | None, int | None]:
    attempts = packet["application"]["attempts"]
    if not attempts:
        return packet["promise"]["started"], None
    first = attempts[0]
    return first["started"], first["seq"]


def _first_progress(packet: dict[str, Any], started: str | None) -> tuple[str | None, int | None]:
    if started is None:
        return None, None
    firsts = [
        g["first"]
        for g in packet["application"]["progress"]
        if g["first"] and parse_time(g["first"]) >= parse_time(started)
    ]
    return (min(firsts, key=parse_time), None) if firsts else (None, None)


# -- the sentence ------------------------------------------------------------------------


def why(
    packet: dict[str, Any], steps: list[dict[str, Any]], cause: dict[str, Any] | None = None
) -> str:
    """One sentence (or two: start, then completion) saying why the promise was missed; a
    missed start's `cause` (promises.miss_detail) follows its sentence, with its figures."""
    p = packet["promise"]
    clock = _clock(packet)
    parts = []
    if p["start_status"] in ("late", "not_started"):
        parts.append(_why_start(p, steps, clock))
        if cause is not None:
            parts.append(cause_sentence(cause, p["started"] is not None))
    if p["completion_status"] in ("late", "not_completed"):
        parts.append(_why_completion(packet, clock))
    if parts:
        return " ".join(parts)
    if "pending" in (p["start_status"], p["completion_status"]):
        return "Not missed yet: the ledger does not reach the promised time."
    return f"Kept: started at {clock(p['started'])}, by {clock(p['start_by'])}" + (
        f"; completed at {clock(p['completed'])}, by {clock(p['complete_by'])}."
        if p["complete_by"]
        else "."
    )


def _why_start(
    p: dict[str, Any], steps: list[dict[str, Any]], clock: Callable[[str | None], str]
) -> str:
    recorded = [s for s in steps if s["t"] and s["step"] != "first_progress"]
    if p["start_status"] == "not_started":
        last = recorded[-1] if recorded else None
        told = f"{last['label']} at {clock(last['t'])}" if last else "nothing recorded of the job"
        admitted = steps[1]["status"] != "not recorded"
        waiting = "waiting to start" if admitted else "waiting for admission"
        return (
            f"Never started (promised by {clock(p['start_by'])}): {told}, then no "
            f"{'start' if admitted else 'admission'} in the ledger; it was {waiting} when "
            "start_by passed."
        )
    start_by = p["start_by"]
    crossed = next((s for s in recorded if parse_time(s["t"]) > parse_time(start_by)), None)
    text = (
        f"Started {duration(p['start_delay_s'])} late ({clock(p['started'])}, promised by "
        f"{clock(start_by)})"
    )
    if crossed is None or crossed["wait"] is None:
        return text + (
            ": the job was submitted after start_by."
            if crossed and crossed["step"] == "submitted"
            else "."
        )
    text += (
        f": start_by passed during the {crossed['wait']} ({crossed['since'].replace('_', ' ')} "
        f"{clock(_at(steps, crossed['since']))} → {crossed['label']} "
        f"{clock(crossed['t'])}, {crossed['wait_text']})"
    )
    longest = max(
        (s for s in recorded if s["wait_s"] is not None), key=lambda s: float(s["wait_s"])
    )
    if longest is not crossed:
        text += f"; the longest wait was the {longest['wait']} ({longest['wait_text']})"
    return text + "."


def cause_sentence(c: dict[str, Any], started: bool = True) -> str:
    """The cause of a missed start with its figures (reconcile/RULES.md "Causes of a missed
    start"): "Cause: capacity, borne by the provider: for 21 min of the 26 min waited …"."""
    name, cls, gpus = c["cause"], c["placement_class"], c["gpus"]
    unit = "instance" if cls.startswith("mig") else "GPU"
    devices = f"{cls} {unit}{'s' if c['class_devices'] != 1 else ''}"
    held = f"{c['held']} held, {c['held_by_others']} by other tenants"
    if c["faulted"]:
        held += f"; {c['faulted']} faulted"
    if c["under_change"]:
        held += f"; {c['under_change']} under a fleet change"
    free = f"{c['free']} of {c['class_devices']} {devices} free"
    detail = {
        "late_submission": "the job was not yet submitted",
        "held_by_tenant": "the tenant held the job (deactivated)",
        "start_failure": "the job was admitted, but its start failed or never came",
        "fleet_change": f"it would have fit but for the devices under a fleet change: {free} "
        f"({held})",
        "fault": f"it would have fit but for the devices with an open critical fault: {free} "
        f"({held})",
        "quota": (
            f"{c['tenant']} held {c['tenant_held']} of its quota of {c['quota']} {cls} "
            f"{unit}s, and the job needs {gpus} more"
        ),
        "capacity": (
            f"fewer than {gpus} {cls} {unit}{'s' if gpus != 1 else ''} were free in the "
            f"fleet: {free} ({held})"
            if c["class_devices"]
            else f"no {cls} {unit} was free: the ledger discovered none"
        ),
        "fragmentation": f"{free} ({held}), but not {gpus} in the shape the job needs",
        "scheduler": f"it fit ({free}) and was within quota; the scheduler "
        + ("started it later" if started else "did not start it"),
    }[name]
    spent = c["cause_seconds"].get(name, 0)
    return (
        f"Cause: {name}, borne by the {c['cause_bearer']}: for {duration(spent)} of the "
        f"{duration(c['wait_s'])} waited, {detail}."
    )


def _at(steps: list[dict[str, Any]], step: str) -> str:
    return str(next(s["t"] for s in steps if s["step"] == step))


def _why_completion(packet: dict[str, Any], clock: Callable[[str | None], str]) -> str:
    p = packet["promise"]
    head = (
        f"Completed {duration(p['completion_delay_s'])} late ({clock(p['completed'])}, "
        "promised by "
        f"{clock(p['complete_by'])})"
        if p["completion_status"] == "late"
        else f"Never completed (promised by {clock(p['complete_by'])})"
    )
    causes = [
        f"attempt {a['attempt']} failed at {clock(a['ended'])}"
        + (
            f" ({a['cause']}{': ' + a['detail'] if a['detail'] else ''})"
            if a["cause"] or a["detail"]
            else ""
        )
        for a in packet["application"]["failures"]
    ]
    causes += [
        f"{d['decision']} at {clock(d['t'])}" + (f" ({d['reason']})" if d["reason"] else "")
        for d in packet["preemptions"]
    ]
    restarts = packet["application"]["restarts"]
    if causes:
        return (
            f"{head}: {'; '.join(causes)}"
            + (f"; {restarts} restart{'s' if restarts != 1 else ''}" if restarts else "")
            + "."
        )
    attempts = packet["application"]["attempts"]
    if p["started"] and p["completed"]:
        run = seconds(parse_time(p["completed"]) - parse_time(p["started"]))
        return (
            f"{head}: no failure or preemption recorded; the run took {duration(run)} "
            "from its start."
        )
    return (
        f"{head}: no failure or preemption recorded; {len(attempts)} attempt(s), none completed."
    )


def _clock(packet: dict[str, Any]) -> Callable[[str | None], str]:
    """Times as HH:MM (seconds when not whole), with the date when the window spans days."""
    same_day = packet["window"]["from"][:10] == packet["window"]["to"][:10]

    def clock(text: str | None) -> str:
        if text is None:
            return "never"
        hm = text[11:16] if text[17:19] == "00" and len(text) <= 20 else text[11:19]
        return f"{hm} UTC" if same_day else f"{text[:10]} {hm} UTC"

    return clock


# -- the zoom ------------------------------------------------------------------------------


def zoom(packet: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The span around what the sentence is about (see the module docstring)."""
    p = packet["promise"]
    w0, w1 = parse_time(packet["window"]["from"]), parse_time(packet["window"]["to"])
    start_story = p["start_status"] in ("late", "not_started") or p["completion_status"] not in (
        "late",
        "not_completed",
    )
    if start_story:
        focus = [s["t"] for s in steps if s["t"]] + [p["start_by"]]
    else:
        focus = [p["complete_by"], p["completed"] or packet["window"]["to"]]
    times = [parse_time(t) for t in focus if t]
    lo, hi = min(times), max(times)
    pad = -(-max((hi - lo) // 10, MINUTE) // MINUTE) * MINUTE
    z0, z1 = max(w0, lo - pad), min(w1, hi + pad)
    if z1 <= z0:
        z1 = z0 + MINUTE
    return {
        "about": "start" if start_story else "completion",
        "from": iso(z0),
        "to": iso(z1),
        "seconds": seconds(z1 - z0),
    }
