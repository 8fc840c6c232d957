"""Quotas (docs/quotas.md): Kueue ClusterQueues and Slurm QOS become `policy.quota`, each
poll of the same limits appends nothing and a changed limit appends its next revision;
the real files read as their facts say; a failed start receipt and a MIG
reconfiguration's geometry are accepted end to end; and every command still processes a
ledger holding them, with today's figures unchanged by them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from cli import main
from ingest import choose, extract
from ingest.kueue_clusterqueue import labelled_class
from schemas import Accepted, Rejected
from tests.conftest import REALDATA, event
from tests.test_bounds_property import REPORTS, run
from tests.test_fuzz_k8s_parsers import SETTINGS, dump, noise, replaced
from tests.test_fuzz_k8s_parsers import json_values as fuzz_values
from tests.test_fuzz_parsers import run as fuzz_run

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "samples"
PINNED = "2026-01-07T10:00:00Z"
needs_realdata = pytest.mark.skipif(
    not REALDATA.is_dir(),
    reason=f"no real data at {REALDATA} (a clone without ../shared/realdata)",
)
CQ_1726 = REALDATA / "kueue-clusterqueue" / "kueue-issue-1726_clusterqueue-localqueue_v1beta1.yaml"
CQ_1309_SPEC = (
    REALDATA / "kueue-clusterqueue" / "kueue-issue-1309_gpu-a-cq_spec-fragment_cohort-gpu-hlp.yaml"
)
RF_1309 = REALDATA / "kueue-clusterqueue" / "kueue-issue-1309_resourceflavor-gpu-hlp_kubectl.yaml"
QOS_PERLMUTTER = (
    REALDATA / "sacctmgr-qos" / "lightcone-cli_test-slurm-info_perlmutter_sacctmgr-show-qos-P.txt"
)


def records(
    path: Path, fmt: str | None = None, **options: Any
) -> tuple[list[dict[str, Any]], list[Rejected]]:
    found = list(extract(path, fmt, **options))
    return (
        [orjson.loads(r.body) for r in found if isinstance(r, Accepted)],
        [r for r in found if isinstance(r, Rejected)],
    )


def ingest(db: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["ingest", "--db", db, *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def counts(out: str) -> str:
    return out.strip().splitlines()[-1].split(": ", 1)[1]


def stored_quotas(db: str) -> list[dict[str, Any]]:
    out = CliRunner().invoke(main, ["export", "--db", db, "--type", "policy.quota"]).output
    return [json.loads(line)["event"] for line in out.splitlines()]


def cluster_queue(nominal: str, generation: int = 2, borrowing: str | None = None) -> str:
    limit = f'\n        borrowingLimit: "{borrowing}"' if borrowing is not None else ""
    return f"""apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  creationTimestamp: "2026-01-02T08:00:00Z"
  generation: {generation}
  name: team-a
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-h100
      resources:
      - name: nvidia.com/gpu
        nominalQuota: "{nominal}"{limit}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  creationTimestamp: "2026-01-02T09:00:00Z"
  generation: 1
  name: lq
  namespace: acme
spec:
  clusterQueue: team-a
"""


# --- Kueue ClusterQueues ----------------------------------------------------------------


def test_the_sample_gives_each_tenant_its_quota_per_class() -> None:
    quotas, rejected = records(SAMPLES / "kueue_clusterqueues.yaml", scrape_time=PINNED)
    assert rejected == []
    figures = {
        (q["data"]["tenant"], q["data"]["placement_class"]): (
            q["data"]["gpus"],
            q["data"].get("borrowing_limit"),
            q["data"].get("lending_limit"),
            q["time"],
        )
        for q in quotas
    }
    # team-a: generation 1, created 08:00; its LocalQueue (acme) created 09:00: in force from
    # 09:00.
    # shared-l4: generation 3 (changed since creation): in force from the snapshot's time.
    assert figures == {
        ("acme", "whole"): (
            16,
            8,
            4,
            "2026-01-02T09:00:00Z",
        ),  # gpu-h100 (its nodeLabels name no MIG)
        ("acme", "mig:3g.40gb"): (
            8,
            None,
            None,
            "2026-01-02T09:00:00Z",
        ),  # a100-mig: product ...-MIG-3g.40gb
        ("acme", "mig:1g.10gb"): (
            14,
            None,
            None,
            "2026-01-02T09:00:00Z",
        ),  # resource nvidia.com/mig-1g.10gb
        ("beta", "timeslice"): (32, None, None, PINNED),
        ("gamma", "timeslice"): (32, None, None, PINNED),
        # l4 8 (lending 2) + l4b 4 (no lending limit: lends all 4) = 12, lending 6
        ("beta", "whole"): (12, None, 6, PINNED),
        ("gamma", "whole"): (12, None, 6, PINNED),
    }
    shared = [q["data"]["shared_by"] for q in quotas if q["data"]["cluster_queue"] == "shared-l4"]
    assert shared == [["beta", "gamma"]] * 4
    assert all(
        "shared_by" not in q["data"] for q in quotas if q["data"]["cluster_queue"] == "team-a"
    )


def test_the_flavor_class_option_wins_over_the_labels() -> None:
    quotas, _ = records(
        SAMPLES / "kueue_clusterqueues.yaml",
        scrape_time=PINNED,
        flavor_class="a100-mig=whole,l4=timeslice",
    )
    by_class = {
        (q["data"]["tenant"], q["data"]["placement_class"]): q["data"]["gpus"] for q in quotas
    }
    assert by_class[("acme", "whole")] == 16 + 8
    assert ("acme", "mig:3g.40gb") not in by_class
    assert by_class[("beta", "timeslice")] == 32 + 8 and by_class[("beta", "whole")] == 4


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}, "mig:1g.5gb"),
        ({"nvidia.com/mig.config": "all-3g.40gb"}, "mig:3g.40gb"),
        ({"nvidia.com/mig.config": "all-balanced"}, None),
        ({"nvidia.com/gpu.replicas": "4"}, "timeslice"),
        ({"nvidia.com/gpu.replicas": "1"}, None),
        ({"nvidia.com/gpu.sharing-strategy": "time-slicing"}, "timeslice"),
        ({"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, "timeslice"),
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, None),
        ({}, None),
    ],
)
def test_a_flavors_node_labels_name_its_class(
    labels: dict[str, str], expected: str | None
) -> None:
    assert labelled_class(labels) == expected


def test_a_cluster_queue_no_local_queue_names_takes_the_tenant_option_or_is_quarantined(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cq.yaml"
    path.write_text(cluster_queue("8", generation=1).split("---")[0])
    quotas, rejected = records(path, tenant="acme")
    assert [(q["data"]["tenant"], q["data"]["gpus"], q["time"]) for q in quotas] == [
        ("acme", 8, "2026-01-02T08:00:00Z")
    ]
    quotas, rejected = records(path)
    assert quotas == []
    assert [(r.origin.line, r.field, r.reason) for r in rejected] == [
        (
            6,
            "metadata.name",
            "no LocalQueue in this file points at ClusterQueue 'team-a': whose quota it is "
            "cannot be read (add its LocalQueues to the file, or give the tenant option)",
        )
    ]


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [
        (
            cluster_queue("1.5"),
            14,
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "nvidia.com/gpu = '1.5': not a whole number of GPUs",
        ),
        (
            cluster_queue("-2"),
            14,
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "nvidia.com/gpu = '-2': not a whole number of GPUs",
        ),
        (
            cluster_queue("8", borrowing="2k"),
            15,
            "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
            "nvidia.com/gpu = '2k': not a whole number of GPUs",
        ),
        (
            cluster_queue("8").replace(
                "kueue.x-k8s.io/v1beta1\nkind: ClusterQueue", "v1\nkind: ClusterQueue"
            ),
            1,
            "apiVersion",
            "not a Kueue API version: 'v1'",
        ),
        (
            cluster_queue("8").replace('        nominalQuota: "8"\n', ""),
            13,
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "missing",
        ),
    ],
)
def test_a_bad_cluster_queue_is_quarantined_naming_line_and_field(
    tmp_path: Path, text: str, line: int, field: str, reason: str
) -> None:
    path = tmp_path / "cq.yaml"
    path.write_text(text)
    quotas, rejected = records(path, "kueue-clusterqueue", scrape_time=PINNED)
    assert quotas == []
    assert [(r.origin.line, r.field, r.reason) for r in rejected] == [(line, field, reason)]


def test_a_quota_over_its_lending_limit_is_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "cq.yaml"
    path.write_text(
        cluster_queue("8").replace(
            'nominalQuota: "8"', 'nominalQuota: "8"\n        lendingLimit: 9'
        )
    )
    _, rejected = records(path, scrape_time=PINNED)
    assert [(r.field, r.reason) for r in rejected] == [
        ("data", "lending_limit 9 is more than the nominal quota gpus 8")
    ]


def test_a_bad_flavor_class_option_is_a_usage_error(tmp_path: Path) -> None:
    code, out = ingest(
        f"sqlite:///{tmp_path / 'l.db'}",
        "--flavor-class",
        "gpu-h100=mig",
        str(SAMPLES / "kueue_clusterqueues.yaml"),
    )
    assert code == 2
    assert "gpu-h100=mig: a class is whole, timeslice or mig:<profile> (mig:3g.40gb)" in out


def test_a_second_poll_appends_nothing_and_a_changed_quota_its_next_revision(
    tmp_path: Path,
) -> None:
    db, path = f"sqlite:///{tmp_path / 'l.db'}", tmp_path / "cq.yaml"
    polls = [
        ("8", "2026-01-05T10:00:00Z", "read 1 · appended 1 · duplicate 0 · quarantined 0"),
        ("8", "2026-01-05T10:05:00Z", "read 1 · appended 0 · duplicate 1 · quarantined 0"),
        ("4", "2026-01-05T10:10:00Z", "read 1 · appended 1 · duplicate 0 · quarantined 0"),
        ("4", "2026-01-05T10:15:00Z", "read 1 · appended 0 · duplicate 1 · quarantined 0"),
        ("8", "2026-01-05T10:20:00Z", "read 1 · appended 1 · duplicate 0 · quarantined 0"),
    ]
    for nominal, scraped, expected in polls:
        path.write_text(cluster_queue(nominal))
        code, out = ingest(db, "--scrape-time", scraped, str(path))
        assert (code, counts(out)) == (0, expected)
    # 8 -> 4 -> 8: three revisions, each from the first snapshot that showed it
    assert [(q["id"], q["time"], q["data"]["gpus"]) for q in stored_quotas(db)] == [
        ("clusterqueue/team-a:acme:whole:r1", "2026-01-05T10:00:00Z", 8),
        ("clusterqueue/team-a:acme:whole:r2", "2026-01-05T10:10:00Z", 4),
        ("clusterqueue/team-a:acme:whole:r3", "2026-01-05T10:20:00Z", 8),
    ]
    assert (
        counts(ingest(db, "--scrape-time", "2026-01-05T11:00:00Z", str(path))[1])
        == "read 1 · appended 0 · duplicate 1 · quarantined 0"
    )


def test_a_changed_borrowing_limit_is_a_new_revision(tmp_path: Path) -> None:
    db, path = f"sqlite:///{tmp_path / 'l.db'}", tmp_path / "cq.yaml"
    for borrowing in (None, "2", "2"):
        path.write_text(cluster_queue("8", borrowing=borrowing))
        ingest(db, "--scrape-time", PINNED, str(path))
    assert [q["data"].get("borrowing_limit") for q in stored_quotas(db)] == [None, 2]


def test_the_sample_ingested_without_a_pinned_time_appends_nothing_the_second_time(
    tmp_path: Path,
) -> None:
    # shared-l4 is at generation 3: its quotas are dated by the file's modification time,
    # which a later copy changes; the ledger's own revision is given again, a duplicate.
    db, copy = f"sqlite:///{tmp_path / 'l.db'}", tmp_path / "again.yaml"
    assert (
        counts(ingest(db, str(SAMPLES / "kueue_clusterqueues.yaml"))[1])
        == "read 7 · appended 7 · duplicate 0 · quarantined 0"
    )
    copy.write_bytes((SAMPLES / "kueue_clusterqueues.yaml").read_bytes())
    assert counts(ingest(db, str(copy))[1]) == "read 7 · appended 0 · duplicate 7 · quarantined 0"


def test_identify_claims_cluster_queues_and_never_workloads_or_events(tmp_path: Path) -> None:
    claimed = {
        path.name: choose(path)[0].name
        for path in (
            SAMPLES / "kueue_clusterqueues.yaml",
            SAMPLES / "kueue_workloads.yaml",
            SAMPLES / "k8s_events.json",
            SAMPLES / "sacctmgr_qos.txt",
        )
    }
    assert claimed == {
        "kueue_clusterqueues.yaml": "kueue-clusterqueue",
        "kueue_workloads.yaml": "kueue",
        "k8s_events.json": "k8s-events",
        "sacctmgr_qos.txt": "sacctmgr-qos",
    }
    about = tmp_path / "events.json"  # an Event about a ClusterQueue is an Event
    about.write_text(
        '{"kind":"EventList","apiVersion":"v1","items":[{"involvedObject":{"kind":"ClusterQueue",'
        '"name":"team-a"},"reason":"Active","type":"Normal"}]}'
    )
    assert choose(about)[0].name == "k8s-events"


# --- the real files ---------------------------------------------------------------------


@needs_realdata
def test_real_1726_the_glitched_cluster_queue_is_read_with_its_local_queues_tenant() -> None:
    # Line 1 `NapiVersion:` (a paste glitch): the ClusterQueue has no apiVersion, but its
    # kind names it. gpu-a40 8 + gpu-a100 4 (both whole: no class given, no nodeLabels);
    # no cohort, no borrowing or lending limit; the status (2 GPUs in use) is no quota.
    # Generation 4: changed since its creation, so in force from the snapshot's time.
    assert choose(CQ_1726)[0].name == "kueue-clusterqueue"
    quotas, rejected = records(CQ_1726, scrape_time="2024-02-13T12:00:00Z")
    assert rejected == []
    assert quotas == [
        {
            "specversion": "1.0",
            "id": "clusterqueue/cq-all-resources:pgrunt:whole:r1",
            "source": "kueue://default",
            "type": "policy.quota",
            "time": "2024-02-13T12:00:00Z",
            "data": {
                "tenant": "pgrunt",
                "placement_class": "whole",
                "gpus": 12,
                "pool": "clusterqueue/cq-all-resources",
                "cluster_queue": "cq-all-resources",
                "flavors": [
                    {"flavor": "gpu-a40", "resource": "nvidia.com/gpu", "nominal_quota": 8},
                    {"flavor": "gpu-a100", "resource": "nvidia.com/gpu", "nominal_quota": 4},
                ],
            },
        }
    ]


@needs_realdata
def test_real_1726_a_flavor_class_splits_the_two_flavors() -> None:
    quotas, _ = records(
        CQ_1726, scrape_time="2024-02-13T12:00:00Z", flavor_class="gpu-a100=mig:7g.80gb"
    )
    assert [(q["data"]["placement_class"], q["data"]["gpus"]) for q in quotas] == [
        ("whole", 8),
        ("mig:7g.80gb", 4),
    ]


@needs_realdata
def test_real_1309_a_spec_alone_is_quarantined_saying_why(tmp_path: Path) -> None:
    # Only `spec:` (cohort gpu-hlp, nvidia.com/gpu nominalQuota "8" borrowingLimit "0"):
    # which ClusterQueue it is cannot be read, so no later snapshot could revise it.
    assert choose(CQ_1309_SPEC)[0].name == "kueue-clusterqueue"
    quotas, rejected = records(CQ_1309_SPEC, tenant="hlp", scrape_time=PINNED)
    assert quotas == []
    assert [(r.origin.line, r.field, r.reason) for r in rejected] == [
        (
            1,
            "spec",
            "a ClusterQueue's spec alone, with no kind and no metadata.name: which ClusterQueue "
            "it is cannot be read; ingest `kubectl get clusterqueue NAME -o yaml` instead",
        )
    ]
    code, out = ingest(f"sqlite:///{tmp_path / 'l.db'}", "--tenant", "hlp", str(CQ_1309_SPEC))
    assert (code, counts(out)) == (1, "read 1 · appended 0 · duplicate 0 · quarantined 1")


@needs_realdata
def test_real_1309_a_resource_flavor_alone_holds_no_quota(tmp_path: Path) -> None:
    # `spec: {}`: no nodeLabels; a flavor is no quota: read, nothing to append, no error.
    assert choose(RF_1309)[0].name == "kueue-clusterqueue"
    assert records(RF_1309) == ([], [])
    code, out = ingest(f"sqlite:///{tmp_path / 'l.db'}", str(RF_1309))
    assert (code, counts(out)) == (0, "read 0 · appended 0 · duplicate 0 · quarantined 0")


# --- Slurm QOS --------------------------------------------------------------------------


QOS_OPTIONS = [
    "--qos-tenant",
    "gpu_acme=acme,gpu_beta_mig=beta",
    "--tenant",
    "gamma",
    "--scrape-time",
    PINNED,
]


def test_the_qos_sample_gives_each_group_gpu_limit_as_a_quota() -> None:
    quotas, rejected = records(
        SAMPLES / "sacctmgr_qos.txt",
        qos_tenant="gpu_acme=acme,gpu_beta_mig=beta",
        tenant="gamma",
        scrape_time=PINNED,
    )
    assert rejected == []
    # gpu_acme: gres/gpu=16 (the h100 entry kept); gpu_beta_mig: typed only, two MIG classes;
    # gpu_gamma: 8 (its MaxTRESPU 4 is a per-user cap); debug: MaxTRES only, no quota.
    assert [
        (
            q["data"]["qos"],
            q["data"]["tenant"],
            q["data"]["placement_class"],
            q["data"]["gpus"],
            q["data"].get("by_type"),
        )
        for q in quotas
    ] == [
        ("gpu_acme", "acme", "whole", 16, {"h100": 16}),
        ("gpu_beta_mig", "beta", "mig:1g.10gb", 14, {"1g.10gb": 14}),
        ("gpu_beta_mig", "beta", "mig:3g.40gb", 4, {"3g.40gb": 4}),
        ("gpu_gamma", "gamma", "whole", 8, None),
    ]
    assert {q["time"] for q in quotas} == {PINNED} and {q["source"] for q in quotas} == {
        "slurm://default"
    }


def test_a_qos_with_a_gpu_limit_and_no_tenant_is_quarantined_naming_it() -> None:
    quotas, rejected = records(
        SAMPLES / "sacctmgr_qos.txt", qos_tenant="gpu_acme=acme", scrape_time=PINNED
    )
    assert [q["data"]["qos"] for q in quotas] == ["gpu_acme"]
    assert [(r.origin.line, r.field, r.reason) for r in rejected] == [
        (
            4,
            "Name",
            "QOS 'gpu_beta_mig' limits GPUs (GrpTRES gres/gpu:1g.10gb=14,gres/gpu:3g.40gb=4) but "
            "names no tenant: give the qos_tenant mapping (QOS=TENANT) or the tenant option",
        ),
        (
            5,
            "Name",
            "QOS 'gpu_gamma' limits GPUs (GrpTRES gres/gpu=8) but names no tenant: give the "
            "qos_tenant mapping (QOS=TENANT) or the tenant option",
        ),
    ]


def test_qos_bad_rows_are_quarantined_and_parsable_with_a_trailing_delimiter_reads(
    tmp_path: Path,
) -> None:
    path = tmp_path / "qos.txt"
    path.write_text(
        "Name|Priority|GrpTRES|MaxWall|\n"  # `-p`: every line ends with one more `|`
        "a|10|gres/gpu=4|1-00:00:00|\n"
        "b|10|gres/gpu=four||\n"
        "c|10|gres/gpu=2\n"
        "d|10|||\n"
    )
    quotas, rejected = records(path, tenant="acme", scrape_time=PINNED)
    assert [(q["data"]["qos"], q["data"]["gpus"]) for q in quotas] == [("a", 4)]
    assert [(r.origin.line, r.field, r.reason) for r in rejected] == [
        (3, "GrpTRES", "'gres/gpu=four': not a whole number of GPUs"),
        (4, "(row)", "expected 4 fields as the header names, found 3"),
    ]


def test_a_qos_poll_twice_appends_nothing_and_a_changed_limit_appends(tmp_path: Path) -> None:
    db, path = f"sqlite:///{tmp_path / 'l.db'}", tmp_path / "qos.txt"
    for limit, scraped, expected in (
        ("16", "2026-01-05T10:00:00Z", "appended 1 · duplicate 0"),
        ("16", "2026-01-05T11:00:00Z", "appended 0 · duplicate 1"),
        ("12", "2026-01-05T12:00:00Z", "appended 1 · duplicate 0"),
    ):
        path.write_text(f"Name|Priority|GrpTRES\ngpu_acme|10|cpu=64,gres/gpu={limit}\n")
        code, out = ingest(db, "--tenant", "acme", "--scrape-time", scraped, str(path))
        assert (code, counts(out)) == (0, f"read 1 · {expected} · quarantined 0")
    assert [(q["id"], q["time"], q["data"]["gpus"]) for q in stored_quotas(db)] == [
        ("qos/gpu_acme:acme:whole:r1", "2026-01-05T10:00:00Z", 16),
        ("qos/gpu_acme:acme:whole:r2", "2026-01-05T12:00:00Z", 12),
    ]


@needs_realdata
def test_real_perlmutter_qos_has_no_group_gpu_limit_so_no_quota(tmp_path: Path) -> None:
    # Header + 9 QOS rows, 28 fields; the only gres/gpu is gpu_shared's MaxTRES
    # `gres/gpu=2,node=1`, a per-job cap; no GrpTRES anywhere: nothing is a quota, and no
    # row is quarantined (no tenant needed where there is no quota).
    assert choose(QOS_PERLMUTTER)[0].name == "sacctmgr-qos"
    assert records(QOS_PERLMUTTER, scrape_time=PINNED) == ([], [])
    header, *rows = QOS_PERLMUTTER.read_text().splitlines()
    assert (
        len(header.split("|")) == 28
        and len(rows) == 9
        and all(len(r.split("|")) == 28 for r in rows)
    )
    code, out = ingest(f"sqlite:///{tmp_path / 'l.db'}", str(QOS_PERLMUTTER))
    assert (code, counts(out)) == (0, "read 0 · appended 0 · duplicate 0 · quarantined 0")


# --- receipts that failed, MIG geometry; every command on a ledger with quotas -----------


FAILED_RECEIPT = event(
    "start.receipt",
    "receipt-ts-7",
    {
        "tenant": "acme",
        "job_id": "receipt-ts-7",
        "allocation_id": "r-ts-7",
        "placement_class": "timeslice",
        "outcome": "failed",
        "reason": "CrashLoopBackOff: CUDA error: all CUDA-capable devices are busy",
        "submitted_at": "2026-01-07T09:58:00Z",
        "launched_at": "2026-01-07T10:03:00Z",
    },
    source="receipts://k8s-a",
    time="2026-01-07T10:03:00Z",
)
MIG_CHANGE = event(
    "fleet.change",
    "chg-mig-1",
    {
        "change_id": "chg-mig-1",
        "kind": "mig-reconfigure",
        "nodes": ["gpu-node-07"],
        "started_at": "2026-01-07T06:00:00Z",
        "ended_at": "2026-01-07T06:20:00Z",
        "geometry_before": [{"node": "gpu-node-07", "device": 0, "profiles": ["1g.10gb"] * 7}],
        "geometry_after": [
            {"node": "gpu-node-07", "device": 0, "profiles": ["3g.40gb", "3g.40gb"]}
        ],
    },
    source="changes://fleet",
    time="2026-01-07T06:00:00Z",
)


def test_a_failed_receipt_and_a_mig_geometry_are_stored_as_given(tmp_path: Path) -> None:
    db, path = f"sqlite:///{tmp_path / 'l.db'}", tmp_path / "receipts.jsonl"
    bad = event(
        "start.receipt",
        "r-bad",
        {**FAILED_RECEIPT["data"], "outcome": "crashed"},
        source="receipts://k8s-a",
    )
    wrong_kind = event(
        "fleet.change", "chg-d", {**MIG_CHANGE["data"], "change_id": "chg-d", "kind": "drain"}
    )
    twice = event(
        "fleet.change",
        "chg-2",
        {
            **MIG_CHANGE["data"],
            "change_id": "chg-2",
            "geometry_after": [{"device": 0, "profiles": []}, {"device": "0", "profiles": []}],
        },
    )
    path.write_text(
        "\n".join(json.dumps(e) for e in (FAILED_RECEIPT, MIG_CHANGE, bad, wrong_kind, twice))
        + "\n"
    )
    code, out = ingest(db, str(path))
    assert code == 1 and counts(out) == "read 5 · appended 2 · duplicate 0 · quarantined 3"
    assert f"{path}:3: data.outcome: Input should be 'started' or 'failed'" in out
    assert (
        f"{path}:4: data: geometry_before and geometry_after belong to a mig-reconfigure, not a "
        "drain" in out
    )
    assert (
        f"{path}:5: data.geometry_after: device '0' is listed twice" in out
    )  # index 0 and "0": one device
    exported = CliRunner().invoke(main, ["export", "--db", db]).output
    stored = {
        json.loads(line)["event"]["id"]: json.loads(line)["event"]["data"]
        for line in exported.splitlines()
    }
    assert stored == {"receipt-ts-7": FAILED_RECEIPT["data"], "chg-mig-1": MIG_CHANGE["data"]}
    assert counts(ingest(db, str(path))[1]) == "read 5 · appended 0 · duplicate 2 · quarantined 3"


def _fleet(db: str, tmp_path: Path, quotas: bool) -> None:
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps(FAILED_RECEIPT) + "\n" + json.dumps(MIG_CHANGE) + "\n")
    assert ingest(db, str(SAMPLES / "events.jsonl"))[0] == 0
    assert ingest(db, str(extra))[0] == 0
    if quotas:
        assert (
            ingest(db, "--scrape-time", PINNED, str(SAMPLES / "kueue_clusterqueues.yaml"))[0] == 0
        )
        assert ingest(db, *QOS_OPTIONS, str(SAMPLES / "sacctmgr_qos.txt"))[0] == 0


def test_every_command_processes_a_ledger_with_quotas_and_its_figures_are_unchanged(
    tmp_path: Path,
) -> None:
    key = tmp_path / "ledger.key"
    assert CliRunner().invoke(main, ["keygen", "--out", str(key)]).exit_code == 0
    outputs: dict[bool, list[str]] = {}
    for quotas in (False, True):
        folder = tmp_path / str(quotas)
        folder.mkdir()
        db = f"sqlite:///{folder / 'l.db'}"
        _fleet(db, folder, quotas)
        texts = [run(db, "reconcile", "--format", "json").output, run(db, "reconcile").output]
        texts += [run(db, *report).output for report in REPORTS if "html" not in report]
        run(db, "reconcile", "--format", "html", "--out", str(folder / "r.html"))
        run(db, "verify")
        run(
            db,
            "packet",
            "--promise",
            "promise-j-100",
            "--tenant",
            "acme",
            "--out",
            str(folder / "packet"),
        )
        run(
            db,
            "dispute",
            "--tenant",
            "acme",
            "--invoice",
            "INV-2026-01",
            "--key",
            str(key),
            "--out",
            str(folder / "dispute.json"),
        )
        verified = CliRunner().invoke(
            main, ["verify-packet", str(folder / "dispute.json"), "--pubkey", f"{key}.pub"]
        )
        assert verified.exit_code == 0, verified.output
        outputs[quotas] = texts
    # only capacity reads a quota (GPU-seconds reserved by quota, used and unused): every
    # other figure is what it was without them
    shown = [report for report in REPORTS if "html" not in report]
    capacity = {2 + i for i, report in enumerate(shown) if "capacity" in report}
    assert len(outputs[True]) == len(outputs[False]) and capacity
    differ = {i for i, (a, b) in enumerate(zip(outputs[True], outputs[False])) if a != b}
    assert differ <= capacity
    assert all("quota" in outputs[True][i] for i in differ)


# --- fuzzing: records or the project's own IngestError, nothing else ----------------------

QUEUES: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "f"},
            "spec": {
                "nodeLabels": {
                    "nvidia.com/gpu.product": "A100-MIG-1g.5gb",
                    "nvidia.com/gpu.replicas": "2",
                }
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {
                "name": "cq",
                "generation": 1,
                "creationTimestamp": "2026-01-05T10:00:00Z",
            },
            "spec": {
                "cohort": "c",
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "f",
                                "resources": [
                                    {
                                        "name": "nvidia.com/gpu",
                                        "nominalQuota": "8",
                                        "borrowingLimit": 2,
                                        "lendingLimit": "1",
                                    },
                                    {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 7},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {
                "name": "lq",
                "namespace": "ns",
                "generation": 1,
                "creationTimestamp": "2026-01-05T11:00:00Z",
                "labels": {"t": "x"},
            },
            "spec": {"clusterQueue": "cq"},
        },
    ],
}


@SETTINGS
@given(st.integers(0, 2**32), fuzz_values, st.booleans())
def test_fuzz_cluster_queue_any_value_anywhere(seed: int, value: Any, as_yaml: bool) -> None:
    fuzz_run(
        "kueue-clusterqueue",
        dump(replaced(QUEUES, seed, value), as_yaml),
        tenant_field="t",
        scrape_time=PINNED,
        flavor_class="g=whole",
    )


@SETTINGS
@given(noise)
def test_fuzz_cluster_queue_bytes(data: bytes) -> None:
    whole = dump(QUEUES, True)
    fuzz_run("kueue-clusterqueue", whole[: len(data) * 37 % len(whole)] + data, scrape_time=PINNED)


qos_cells = st.sampled_from(
    [
        "",
        "gres/gpu=8",
        "gres/gpu:a100=2,gres/gpu:1g.10gb=3",
        "gres/gpu=",
        "gres/gpu=-1",
        "cpu=2",
        "gres/gpu=99999999",
        "|",
        "\u2603",
        "\x00",
        "gpu_acme",
    ]
)


@SETTINGS
@given(
    st.lists(st.lists(qos_cells | st.text(max_size=6), min_size=1, max_size=5), max_size=6),
    st.booleans(),
)
def test_fuzz_qos_rows(rows: list[list[str]], trailing: bool) -> None:
    end = "|\n" if trailing else "\n"
    text = "Name|Priority|GrpTRES|MaxTRES" + end + "".join("|".join(row) + end for row in rows)
    fuzz_run(
        "sacctmgr-qos",
        text.encode(),
        tenant="acme",
        qos_tenant="gpu_acme=beta",
        scrape_time=PINNED,
    )
