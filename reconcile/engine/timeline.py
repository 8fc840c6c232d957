"""The device timeline: every discovered device's state in time (reconcile/RULES.md,
"Causes of a missed start", where **free** is defined).

Stage `device_timeline` makes two relations:

- `timeline_devices`: one row per discovered device (node, device) with its
  `placement_class` (`whole`, `mig:<profile>`, `timeslice`, `unknown`: the device's own
  class and profile, each completed from the first grant holding it when that grant's
  class is the device's own or it has none) and `fabric_domain`, and `discovered_at`.
- `device_timeline`: each device's states as half-open intervals
  [`state_from`, `state_until`) (µs; `state_until` is rules.INF while it lasts), from its
  discovery on, cut wherever one of these changes:
  - `held_by_tenant`, `held_by_allocation`: the grant holding it. A grant holds the
    devices it lists on its nodes (`node` and `nodes`; a MIG instance `<gpu>/<gi>` listed
    holds that instance or its GPU, as `rules.device_held_sql`), from its first
    `allocation.granted` until its first `allocation.released`. A grant listing no devices
    holds `gpus` devices of its nodes: those not held at its grant time, of its own class
    first, in node order (its nodes as listed) then device order; when too few are free, it
    holds the free ones only. Grants are taken in time (then ledger) order.
  - `fault_code`, `fault_seq`: an open critical `health.fault` touching it: a fault naming a
    device takes that device of its node (of every node when it names none), a fault with
    no device every device of its node, a fabric fault every device of its domain.
  - `change_id`: a `fleet.change` on its node, from `started_at` to its latest `ended_at`
    (open while none is given).
  - `state`: one word for the interval, the first that applies: `under_change`,
    `faulted`, `allocated`, `free`. A device is **free** when it is discovered, held by no
    grant, not faulted and not under a change.

Fleet events are few beside a ledger's progress marks: they are read out of DuckDB once,
the intervals are cut in Python (the greedy choice of an unlisted grant's devices is a
sequential rule), and the result goes back as one Arrow table.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from reconcile.engine.figures import placement_sql
from reconcile.engine.rules import INF, fault_windows_sql

STATES = ("under_change", "faulted", "allocated", "free")

DEVICES = """
WITH device AS (
    SELECT node, device, fabric_domain, placement_class AS cls, profile, t FROM ev
    WHERE type = 'device.discovered' AND node IS NOT NULL AND device IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY node, device ORDER BY t, seq) = 1)
SELECT node, device, fabric_domain, cls, profile, t FROM device ORDER BY node, device
"""

GRANTS = f"""
WITH grant_ AS (
    SELECT tenant, allocation_id, t, seq, node, nodes, devices, gpus, fabric_domain,
           {placement_sql("placement_class", "profile")} AS placement,
           placement_class AS cls, profile
    FROM ev WHERE type = 'allocation.granted'
    QUALIFY row_number() OVER (PARTITION BY tenant, allocation_id ORDER BY t, seq) = 1),
released AS (
    SELECT g.tenant, g.allocation_id, min(r.t) AS released FROM grant_ g
    JOIN ev r ON r.type = 'allocation.released' AND r.tenant = g.tenant
     AND r.allocation_id = g.allocation_id AND r.t >= g.t
    GROUP BY ALL)
SELECT g.tenant, g.allocation_id, g.t, coalesce(r.released, {INF}) AS released, g.node, g.nodes,
       g.devices, g.gpus, g.placement, g.cls, g.profile
FROM grant_ g LEFT JOIN released r USING (tenant, allocation_id) ORDER BY g.t, g.seq
"""

FAULTS = f"""
SELECT seq, node, device, fabric_domain, code, open_t, close_t
FROM ({fault_windows_sql("ev", critical_only=True)}) ORDER BY open_t, seq
"""

CHANGES = f"""
SELECT change_id, list_distinct(flatten(list(coalesce(nodes, [])))) AS nodes,
       arg_min(started_at, (t, seq)) AS started_at, coalesce(max(ended_at), {INF}) AS ended_at
FROM ev WHERE type = 'fleet.change' AND change_id IS NOT NULL GROUP BY change_id ORDER BY change_id
"""

COLUMNS = (
    "node",
    "device",
    "placement_class",
    "fabric_domain",
    "state_from",
    "state_until",
    "state",
    "held_by_tenant",
    "held_by_allocation",
    "fault_code",
    "fault_seq",
    "change_id",
)


@dataclass
class Device:
    node: str
    device: str
    fabric_domain: str | None
    placement_class: str
    discovered_at: int
    holds: list[tuple[int, int, str, str]] = field(
        default_factory=list
    )  # from, until, tenant, alloc
    faults: list[tuple[int, int, str, int]] = field(default_factory=list)  # from, until, code, seq
    changes: list[tuple[int, int, str]] = field(default_factory=list)  # from, until, change_id

    def held_at(self, t: int) -> bool:
        return any(lo <= t < hi for lo, hi, _, _ in self.holds)


def _placement(cls: str | None, profile: str | None) -> str:
    if cls is None:
        return "unknown"
    return f"mig:{profile}" if cls == "mig" and profile is not None else str(cls)


def _held(device: str, listed: list[str]) -> bool:
    return device in listed or device in {d.split("/", 1)[0] for d in listed}


def devices_of(con: duckdb.DuckDBPyConnection) -> list[Device]:
    """Every discovered device with its holds, faults and changes (the rules above)."""
    devices: list[Device] = []
    own_class: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for node, device, domain, cls, profile, t in con.execute(DEVICES).fetchall():
        devices.append(Device(node, device, domain, _placement(cls, profile), t))
        own_class[(node, device)] = (cls, profile)
    by_node: dict[str, list[Device]] = defaultdict(list)
    for d in devices:
        by_node[d.node].append(d)
    for (
        tenant,
        aid,
        t,
        released,
        node,
        nodes,
        listed,
        gpus,
        placement,
        cls,
        profile,
    ) in con.execute(GRANTS).fetchall():
        names = list(dict.fromkeys([n for n in [node, *(nodes or [])] if n is not None]))
        mine = [d for n in names for d in by_node.get(n, [])]
        if listed:
            taken = [d for d in mine if _held(d.device, listed)]
        else:
            free = [d for d in mine if not d.held_at(t) and d.discovered_at <= t]
            free.sort(key=lambda d: 0 if d.placement_class == placement else 1)  # stable
            taken = free[: int(gpus or 0)]
        for d in taken:
            own, own_profile = own_class[(d.node, d.device)]
            if not d.holds and (own is None or own == cls):  # completed from the first grant
                d.placement_class = _placement(own or cls, own_profile or profile)
            d.holds.append((t, released, tenant, aid))
    by_domain: dict[str, list[Device]] = defaultdict(list)
    for d in devices:
        if d.fabric_domain is not None:
            by_domain[d.fabric_domain].append(d)
    for seq, node, device, domain, code, lo, hi in con.execute(FAULTS).fetchall():
        touched: list[Device] = []
        if domain is not None:
            touched += by_domain.get(domain, [])
        if node is not None:
            touched += [
                d
                for d in by_node.get(node, [])
                if device is None or _held(device, [d.device]) or d.device == device
            ]
        elif device is not None:
            touched += [d for d in devices if d.device == device or _held(d.device, [device])]
        for d in {id(d): d for d in touched}.values():
            d.faults.append((lo, hi, code, seq))
    for change_id, nodes, lo, hi in con.execute(CHANGES).fetchall():
        if lo is None:
            continue
        for n in nodes or []:
            for d in by_node.get(n, []):
                d.changes.append((lo, hi, change_id))
    return devices


def _first(spans: list[Any], t: int) -> Any:
    """The first (in order given) span [lo, hi) holding t, else None."""
    for span in spans:
        if span[0] <= t < span[1]:
            return span
    return None


def intervals(d: Device) -> list[dict[str, Any]]:
    """The device's states, cut where its holder, fault or change changes, merged when equal."""
    cuts = {d.discovered_at}
    spans = [(h[0], h[1]) for h in d.holds] + [(f[0], f[1]) for f in d.faults]
    spans += [(c[0], c[1]) for c in d.changes]
    cuts.update(x for span in spans for x in span if d.discovered_at <= x < INF)
    points = sorted(cuts)
    out: list[dict[str, Any]] = []
    for i, lo in enumerate(points):
        hi = points[i + 1] if i + 1 < len(points) else INF
        hold, fault, change = _first(d.holds, lo), _first(d.faults, lo), _first(d.changes, lo)
        state = (
            "under_change" if change else "faulted" if fault else "allocated" if hold else "free"
        )
        row = {
            "node": d.node,
            "device": d.device,
            "placement_class": d.placement_class,
            "fabric_domain": d.fabric_domain,
            "state_from": lo,
            "state_until": hi,
            "state": state,
            "held_by_tenant": hold[2] if hold else None,
            "held_by_allocation": hold[3] if hold else None,
            "fault_code": fault[2] if fault else None,
            "fault_seq": fault[3] if fault else None,
            "change_id": change[2] if change else None,
        }
        if out and all(
            out[-1][k] == row[k] for k in COLUMNS if k not in ("state_from", "state_until")
        ):
            out[-1]["state_until"] = hi
        else:
            out.append(row)
    return out


_TYPES = {
    "state_from": pa.int64(),
    "state_until": pa.int64(),
    "fault_seq": pa.int64(),
    "discovered_at": pa.int64(),
}


def _table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pa.Table:
    return pa.table(
        {c: pa.array([r[c] for r in rows], _TYPES.get(c, pa.string())) for c in columns}
    )


def build_timeline(con: duckdb.DuckDBPyConnection) -> None:
    """Makes `timeline_devices` and `device_timeline` (the module docstring)."""
    devices = devices_of(con)
    rows = [row for d in devices for row in intervals(d)]
    listing = [
        {
            "node": d.node,
            "device": d.device,
            "placement_class": d.placement_class,
            "fabric_domain": d.fabric_domain,
            "discovered_at": d.discovered_at,
        }
        for d in devices
    ]
    for name, page in (
        (
            "timeline_devices",
            _table(
                listing, ("node", "device", "placement_class", "fabric_domain", "discovered_at")
            ),
        ),
        ("device_timeline", _table(rows, COLUMNS)),
    ):
        con.register(f"{name}_page", page)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {name}_page")
        con.unregister(f"{name}_page")


def state_at(
    timeline: dict[tuple[str, str], list[dict[str, Any]]], key: tuple[str, str], t: int
) -> dict[str, Any] | None:
    """The interval of device `key` holding time t (None before its discovery)."""
    rows = timeline.get(key, [])
    i = bisect_right([r["state_from"] for r in rows], t) - 1
    return rows[i] if i >= 0 and t < rows[i]["state_until"] else None
