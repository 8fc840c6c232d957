"""The simulator's device counters against its truth (RULES.md 14): every stall without a
fault on a bound allocation of whole GPUs has dcgm-exporter samples over its gap, quiet
(the job hung) or busy (it computed but reported no progress). A pod's samples name it,
so they are its tenant's `job.counters` too, and the dispute's idle claim over that gap
says what the truth says. A Slurm job's samples name the job (`hpc_job`), and its
tenant is the one of the provider's grant of that job on the node: they too."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import ingest
import ledger
from fixtures.sim import Rates, SimConfig, simulate
from reconcile.engine.pipeline import Pipeline
from reconcile.packets.claims import claims

QUIET = Rates(**dict.fromkeys(Rates.names(), 0.0))
STALLS = SimConfig(seed=11, gpus=32, days=2, tenants=3, rates=replace(QUIET, stall=0.5))
SAYS = {"quiet": "nothing ran", "busy": "the job computed but reported no progress"}


def _t(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_each_idle_claim_over_a_stall_says_what_the_truth_says(tmp_path: Path) -> None:
    manifest = simulate(STALLS, tmp_path / "sim")
    store = ledger.Store(f"sqlite:///{tmp_path / 'ledger.db'}")
    store.init()
    appender = ledger.Appender(store)
    for entry in manifest.files:
        records = ingest.extract(
            tmp_path / "sim" / entry["path"],
            entry["format"],
            job_tenant=ledger.read.job_tenant(store),  # as `gpuledger ingest` passes it
            **entry["options"],
        )
        report = ledger.append_stream(appender, records, 5000, None)
        assert report.quarantined == 0, entry
    stalls = [
        a
        for a in map(json.loads, (tmp_path / "sim" / "anomalies.jsonl").read_text().splitlines())
        if a["kind"] == "stall"
    ]
    with store.reading() as conn:
        invoices = sorted(
            {
                json.loads(row[0])["data"]["invoice_id"]
                for row in conn.exec_driver_sql(
                    "SELECT event FROM entries WHERE type = 'billing.line'"
                )
            }
        )
    said: dict[tuple[str, str], set[str]] = {}
    with Pipeline.of_store(store) as pipe:
        for invoice in invoices:
            for claim in claims(pipe, invoice):
                activity = claim.get("device_activity")
                if claim["category"] != "idle_unexplained" or activity is None:
                    continue
                for stall in stalls:
                    lo = _t(stall["time"])
                    hi = lo + int(stall["ids"]["gap_s"])
                    inside = any(_t(s) < hi and _t(e) > lo for s, e, _ in claim["stretches"])
                    if stall["ids"]["allocation_id"] == claim["allocation_id"] and inside:
                        key = (stall["ids"]["allocation_id"], stall["time"])
                        said.setdefault(key, set()).add(activity["says"])
    store.close()
    sampled = {(s["ids"]["allocation_id"], s["time"]): s["ids"]["gpu"] for s in stalls}
    assert said, "no idle claim carries what the GPU did"
    for key, sentences in said.items():
        verdict = SAYS[sampled[key]]
        assert all(text.endswith(verdict) for text in sentences), (key, sentences)
    quiet = sum(1 for k in said if sampled[k] == "quiet")
    busy = sum(1 for k in said if sampled[k] == "busy")
    assert quiet and busy, (quiet, busy)
