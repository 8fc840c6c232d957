"""Every checked-in sample in fixtures/samples/ ingests whole, with the counts worked out by
hand from the file, and a second ingest appends nothing. One row per sample: add yours."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from cli import main
from ingest import ingestor_for
from ledger import Store

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "samples"

#: file, format, ingest options, expected entries by type (counted by hand; see each note).
ROWS: list[tuple[str, str, list[str], dict[str, int]]] = [
    # One event of every type, two device.discovered, job.submitted and job.started, three
    # job.progress.
    (
        "events.jsonl",
        "cloudevents",
        [],
        {
            "policy.terms": 1,
            "device.discovered": 2,
            "job.submitted": 2,
            "policy.promise": 1,
            "policy.decision": 1,
            "allocation.granted": 1,
            "job.started": 2,
            "job.progress": 3,
            "checkpoint.started": 1,
            "checkpoint.saved": 1,
            "health.fault": 1,
            "job.failed": 1,
            "health.cleared": 1,
            "checkpoint.restored": 1,
            "job.completed": 1,
            "job.cancelled": 1,
            "allocation.released": 1,
            "billing.line": 1,
            "work.accepted": 1,
            "work.rejected": 1,
        },
    ),
    # A batch of three; the job.progress carries its data as data_base64.
    (
        "events_batch.json",
        "cloudevents",
        [],
        {"allocation.granted": 1, "job.progress": 1, "allocation.released": 1},
    ),
    # 12 job rows: 10 started (not 5009, 5011); 9 GPU jobs started (5001-5008, 5010), 8 of them
    # ended;
    # COMPLETED 5001, 5012; FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, BOOT_FAIL, PREEMPTED;
    # CANCELLED 5008, 5009.
    (
        "sacct.txt",
        "sacct",
        ["--cluster", "eu-west", "--timezone", "UTC"],
        {
            "job.submitted": 12,
            "allocation.granted": 9,
            "job.started": 10,
            "job.completed": 2,
            "job.failed": 6,
            "job.cancelled": 2,
            "allocation.released": 8,
        },
    ),
    # Three GPU-hour usage rows, a credit, a correction.
    ("focus.csv", "focus", [], {"billing.line": 5}),
    # GPU 1: two XIDs; GPU 2: ECC DBE; GPU 3: PCIe replays; GPU 4: one XID and ECC DBE: each
    # cleared at End
    # (counts with no time open at Start); GPU 6 (still running): PCIe replays at Start, not
    # cleared yet.
    (
        "dcgm_stats.txt",
        "dcgm-stats",
        ["--node", "gpu-node-07", "--timezone", "UTC"],
        {"health.fault": 7, "health.cleared": 6},
    ),
    # Four scrapes; XID series: 0,0,79,79 (one fault), 13,13,0,13 (two), 0,31,31,43 (two), 0,0,0,0
    # (none). Counters: GPU_UTIL of the two H100s in each scrape (8 device-instants), and the
    # profiling fields of the last scrape for them (the same instants); the MIG instances 0/1
    # and 0/2 have GR_ENGINE_ACTIVE in each scrape (8 more), 0/1 its other profiling fields
    # in the last (the same instant). 0/1's pod labels make its tenant's job.counters (4);
    # 0/2's are empty.
    (
        "dcgm_metrics.prom",
        "dcgm-metrics",
        [],
        {"health.fault": 5, "device.counters": 16, "job.counters": 4},
    ),
    # Two devices' SM active (and one's tensor active) at three instants: 6 device-instants;
    # GPU 0's pod labels make 3 job.counters of team-acme.
    (
        "prometheus_query_range.json",
        "prometheus-range",
        [],
        {"device.counters": 6, "job.counters": 3},
    ),
    # Six v1beta1 Workloads: admitted (2, each a grant), QuotaReserved with its admission check
    # pending (nothing yet),
    # Finished (a release), Evicted+Preempted+Requeued (3 decisions, a release), Pending (1),
    # Evicted PodsReadyTimeout
    # (1, a release).
    (
        "kueue_workloads.json",
        "kueue",
        [],
        {"policy.decision": 7, "allocation.granted": 2, "allocation.released": 3},
    ),
    # Seven v1beta2 Workloads in four documents (the third a List of three); decisions 1+4+3+1+1+2,
    # releases 0+1+1+1+1+1.
    (
        "kueue_workloads.yaml",
        "kueue",
        ["--cluster", "eu-west"],
        {"policy.decision": 12, "allocation.granted": 3, "allocation.released": 5},
    ),
    # 20 Events; Job Started, Job SuccessfulCreate, Pod Pulled, Normal NodeHasDiskPressure are
    # skipped.
    (
        "k8s_events.json",
        "k8s-events",
        [],
        {"policy.decision": 12, "health.fault": 3, "health.cleared": 1},
    ),
    # Three `vllm bench serve` blocks (concurrency 1, 8, 32), laid end to end from --window-start.
    (
        "serving_bench.txt",
        "serving-bench",
        ["--tenant", "acme", "--job", "chat-api", "--window-start", "2026-01-07T10:00:00Z"],
        {"inference.window": 3},
    ),
    # One capture: 4 GPUs (two NV12 pairs of pairs), 2 NICs.
    (
        "nvidia_smi_topo.txt",
        "nvidia-smi-topo",
        ["--tenant", "acme", "--allocation", "a1", "--node", "gpu-07"],
        {"placement.observed": 1},
    ),
    # One run: two testcases measured, one waived.
    (
        "nvbandwidth.txt",
        "nvbandwidth",
        ["--tenant", "acme", "--allocation", "a1"],
        {"probe.result": 2},
    ),
    # Two runs after their prompts: all_reduce_perf, all_gather_perf.
    (
        "nccl_tests.txt",
        "nccl-tests",
        ["--tenant", "acme", "--allocation", "a1", "--job", "pilot-1"],
        {"probe.result": 2},
    ),
    # ClusterQueue team-a (LocalQueue in acme): whole 16, mig:3g.40gb 8 (its flavor's nodeLabels),
    # mig:1g.10gb 14;
    # cpu-only: no GPU, nothing; shared-l4 (LocalQueues in beta and gamma): timeslice 32 and whole
    # 8+4, each tenant.
    (
        "kueue_clusterqueues.yaml",
        "kueue-clusterqueue",
        ["--scrape-time", "2026-01-07T10:00:00Z"],
        {"policy.quota": 3 + 2 * 2},
    ),
    # normal and debug: no GrpTRES GPU limit; gpu_acme 1, gpu_beta_mig 2 (two MIG types), gpu_gamma
    # 1 (--tenant).
    (
        "sacctmgr_qos.txt",
        "sacctmgr-qos",
        [
            "--qos-tenant",
            "gpu_acme=acme,gpu_beta_mig=beta",
            "--tenant",
            "gamma",
            "--scrape-time",
            "2026-01-07T10:00:00Z",
        ],
        {"policy.quota": 1 + 2 + 1},
    ),
    # One DCGM 3.x run on GPUs 0 and 1 (`-i 0,1`). Faults: Page Retirement/Row Remap Fail (its
    # Error names GPU 1), GPU Memory Fail on GPU 1, Targeted Stress Warn on GPUs 0 and 1.
    # Clearings: Denylist, NVML Library and PCIe (Pass - All) each on the node and GPUs 0, 1
    # (3 x 3), GPU Memory on GPU 0 (1). Persistence Mode and Diagnostic: Skip, nothing.
    (
        "dcgmi_diag.txt",
        "dcgmi-diag",
        ["--node", "gpu-07", "--scrape-time", "2026-01-07T10:00:00Z"],
        {"health.fault": 4, "health.cleared": 10},
    ),
]


def _ingest(db: str, fmt: str, options: list[str], path: Path) -> str:
    result = CliRunner().invoke(main, ["ingest", "--db", db, "--format", fmt, *options, str(path)])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize(
    ("name", "fmt", "options", "expected"), [pytest.param(*row, id=row[0]) for row in ROWS]
)
def test_sample_ingests_whole_and_once(
    tmp_path: Path, name: str, fmt: str, options: list[str], expected: dict[str, int]
) -> None:
    path, db, total = SAMPLES / name, f"sqlite:///{tmp_path / 'ledger.db'}", sum(expected.values())
    first = _ingest(db, fmt, options, path)
    assert f"read {total} · appended {total} · duplicate 0 · quarantined 0" in first
    store = Store(db)
    with store.engine.connect() as conn:
        found = {
            kind: count
            for kind, count in conn.execute(
                text("SELECT type, COUNT(*) FROM entries GROUP BY type")
            )
        }
    store.close()
    assert found == expected
    again = _ingest(db, fmt, options, path)
    assert f"appended 0 · duplicate {total} · quarantined 0" in again


@pytest.mark.parametrize(
    ("name", "fmt"), [(row[0], row[1]) for row in ROWS], ids=[row[0] for row in ROWS]
)
def test_sample_is_recognised_without_format(name: str, fmt: str) -> None:
    assert ingestor_for(SAMPLES / name).name == fmt
