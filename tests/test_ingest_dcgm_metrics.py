"""The dcgm-metrics ingestor: the rules of ingest/dcgm_metrics.py, one test each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from ingest import IngestError, extract, ingestor_for
from ingest.dcgm_metrics import parse_sample
from schemas import Accepted, Rejected
from tests.conftest import run_cli

H07 = 'gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",Hostname="node-07"'
T = 1767780000000  # 2026-01-07T10:00:00Z


def xid(labels: str, value: str, ts: int | None = T) -> str:
    return f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {value}" + ("" if ts is None else f" {ts}")


def faults(tmp_path: Path, lines: list[str], **options: str) -> list[dict[str, Any]]:
    path = tmp_path / "scrape.prom"
    path.write_text(
        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n"
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n" + "\n".join(lines) + "\n"
    )
    found = list(extract(path, "dcgm-metrics", **options))
    assert all(isinstance(r, Accepted) for r in found), found
    events = [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]
    return [e for e in events if e["type"] == "health.fault"]  # counters: test_dcgm_counters


def test_a_change_of_the_last_xid_is_a_fault(tmp_path: Path) -> None:
    values = ["0", "79", "79", "0", "79", "13"]
    events = faults(tmp_path, [xid(H07, v, T + 30000 * i) for i, v in enumerate(values)])
    assert [(e["data"]["code"], e["data"].get("previous_xid")) for e in events] == [
        ("xid-79", 0),
        ("xid-79", 0),
        ("xid-13", 79),
    ]
    first = events[0]
    assert (first["type"], first["source"], first["time"]) == (
        "health.fault",
        "dcgm-exporter://node-07",
        "2026-01-07T10:00:30Z",
    )
    # The second 79 came after the gauge was reset to 0: a new occurrence, its id takes its time.
    assert [e["id"] for e in events] == [
        "node-07:0:GPU-a:-:xid:79",
        f"node-07:0:GPU-a:-:xid:79:{T + 120000}",
        "node-07:0:GPU-a:-:xid:13",
    ]
    assert (first["data"]["node"], first["data"]["device"], first["data"]["model"]) == (
        "node-07",
        0,
        "NVIDIA H100 80GB HBM3",
    )


def test_the_first_nonzero_value_of_a_series_is_a_fault(tmp_path: Path) -> None:
    [event] = faults(tmp_path, [xid(H07, "48"), xid(H07, "48", T + 1000)])
    assert "previous_xid" not in event["data"] and "first value" in event["data"]["detail"]


@pytest.mark.parametrize(
    ("value", "severity"),
    [
        ("48", "critical"),
        ("63", "critical"),
        ("64", "critical"),
        ("74", "critical"),
        ("79", "critical"),
        ("94", "critical"),
        ("95", "critical"),
        ("119", "critical"),
        ("120", "critical"),
        ("13", "warning"),
        ("31", "warning"),
        ("43", "warning"),
    ],
)
def test_severity_by_xid(tmp_path: Path, value: str, severity: str) -> None:
    [event] = faults(tmp_path, [xid(H07, value)])
    assert event["data"]["severity"] == severity


def test_series_are_told_apart_by_host_gpu_uuid_and_gpu_instance(tmp_path: Path) -> None:
    mig = 'gpu="0",UUID="GPU-a",GPU_I_PROFILE="3g.40gb",GPU_I_ID="{}",hostname="node-09"'
    lines = [
        xid(mig.format(1), "31"),
        xid(mig.format(2), "31"),
        xid(H07, "31"),
        xid(H07.replace("node-07", "node-08"), "31"),
        xid(mig.format(1), "31", T + 1000),
    ]
    events = faults(tmp_path, lines)
    assert [e["id"] for e in events] == [
        "node-09:0:GPU-a:1:xid:31",
        "node-09:0:GPU-a:2:xid:31",
        "node-07:0:GPU-a:-:xid:31",
        "node-08:0:GPU-a:-:xid:31",
    ]
    labels = events[0]["data"]["labels"]
    assert (labels["GPU_I_PROFILE"], labels["GPU_I_ID"], events[0]["data"]["node"]) == (
        "3g.40gb",
        "1",
        "node-09",
    )
    # A MIG instance's fault names that instance (GPU 0, GPU instance 1), so it touches that
    # instance only.
    assert [e["data"]["device"] for e in events] == ["0/1", "0/2", 0, 0]


def test_hostname_label_wins_over_lowercase_and_option(tmp_path: Path) -> None:
    both = 'gpu="1",UUID="GPU-b",Hostname="node-07",hostname="k8s-node-a"'
    neither = 'gpu="2",UUID="GPU-c"'
    events = faults(tmp_path, [xid(both, "13"), xid(neither, "13")], node="fallback-node")
    assert [e["data"]["node"] for e in events] == ["node-07", "fallback-node"]


def test_without_gpu_label_the_device_is_the_uuid(tmp_path: Path) -> None:
    [event] = faults(tmp_path, [xid('UUID="GPU-5d3c",Hostname="node-07"', "79")])
    assert event["data"]["device"] == "GPU-5d3c" and event["id"] == "node-07:-:GPU-5d3c:-:xid:79"


def test_other_metrics_and_blank_values_are_not_faults(tmp_path: Path) -> None:
    lines = [
        f"DCGM_FI_DEV_GPU_UTIL{{{H07}}} 97 {T}",
        f"DCGM_FI_DEV_POWER_USAGE{{{H07}}} 612.5 {T}",
        xid(H07, "9223372036854775794"),
        xid(H07, "9.223372036854776e+18", T + 1),
    ]
    assert faults(tmp_path, lines) == []


def test_scrape_time_stands_for_missing_timestamps(tmp_path: Path) -> None:
    [event] = faults(tmp_path, [xid(H07, "79", None)], scrape_time="2026-01-07T11:00:00+01:00")
    assert event["time"] == "2026-01-07T10:00:00Z"


def test_a_sample_without_time_is_an_input_error_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "scrape.prom"
    path.write_text(
        f"# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n{xid(H07, '0', None)}\n{xid(H07, '79', None)}\n"
    )
    with pytest.raises(
        IngestError,
        match=r"scrape.prom:3: timestamp: the sample has no timestamp; give the scrape time",
    ):
        list(extract(path, "dcgm-metrics"))
    with pytest.raises(IngestError, match=r"^not an RFC 3339 time: 'noon'") as bad:
        list(extract(path, "dcgm-metrics", scrape_time="noon"))
    assert bad.value.option == "scrape_time"


def test_workload_labels_are_left_out_of_a_fleet_fault(tmp_path: Path) -> None:
    # as dcgm-exporter 4.x writes them on Kubernetes (err_code, err_msg; the pod using the GPU)
    labels = H07 + (
        ',container="main",err_code="79",err_msg="GPU has fallen off the '
        'bus",namespace="team-a",pod="train-0",pod_uid=""'
    )
    [event] = faults(tmp_path, [xid(labels, "79")])
    assert sorted(event["data"]["labels"]) == [
        "Hostname",
        "UUID",
        "err_code",
        "err_msg",
        "gpu",
        "modelName",
    ]


@pytest.mark.parametrize("both", [False, True])
def test_relabelled_workload_labels_are_left_out_too(tmp_path: Path, both: bool) -> None:
    """A scrape configuration that renames the pod labels (`pod_name`, `pod_namespace`,
    `container_name`, as Kubernetes before 1.16 named them), with or without dcgm-exporter's
    own beside them: no form reaches the fleet's fault."""
    labels = H07 + ',pod_name="train-0",pod_namespace="team-a",container_name="main"'
    if both:
        labels += ',pod="train-1",namespace="team-b",container="side"'
    [event] = faults(tmp_path, [xid(labels, "79")])
    assert sorted(event["data"]["labels"]) == ["Hostname", "UUID", "gpu", "modelName"]
    text = orjson.dumps(event).decode()
    assert "team-" not in text and "train-" not in text


def test_a_fault_keeps_the_device_and_error_labels_only(tmp_path: Path) -> None:
    """An allow list: a DRA claim's namespace and name, a pod's own labels (exporter option
    --kubernetes-enable-pod-labels) and a relabelling rule's additions may all name a
    tenant, and a fault rides whole in every packet of that node's tenants."""
    labels = H07 + (
        ',pci_bus_id="00000000:18:00.0",device="nvidia0",DCGM_FI_DRIVER_VERSION="570.1",'
        'err_code="79",err_msg="fallen off the bus",dra_claim_namespace="globex",'
        'dra_claim_name="globex-claim-xyz",team="globex-research",app="globex-llm"'
    )
    [event] = faults(tmp_path, [xid(labels, "79")])
    assert sorted(event["data"]["labels"]) == [
        "DCGM_FI_DRIVER_VERSION",
        "Hostname",
        "UUID",
        "device",
        "err_code",
        "err_msg",
        "gpu",
        "modelName",
        "pci_bus_id",
    ]
    assert "globex" not in orjson.dumps(event).decode()


def test_fabric_domain_option(tmp_path: Path) -> None:
    [event] = faults(tmp_path, [xid(H07, "79")], fabric_domain="nvl-eu-1")
    assert event["data"]["fabric_domain"] == "nvl-eu-1"


def test_label_values_are_unescaped() -> None:
    sample = parse_sample(r'DCGM_FI_DEV_XID_ERRORS{err_msg="say \"hi\"\\ now\n",gpu="0",} 0 1')
    assert (
        sample.labels == {"err_msg": 'say "hi"\\ now\n', "gpu": "0"} and sample.timestamp_ms == 1
    )


@pytest.mark.parametrize(
    ("labels", "field", "reason"),
    [
        (
            'gpu="0",UUID="GPU-a"',
            "Hostname",
            "no Hostname or hostname label, and no node named for the file",
        ),
        ('Hostname="n"', "gpu", "no gpu or UUID label to name the device"),
        ('gpu="zero",Hostname="n"', "gpu", "not a GPU index: 'zero'"),
    ],
)
def test_samples_that_name_no_place_are_rejected(
    tmp_path: Path, labels: str, field: str, reason: str
) -> None:
    path = tmp_path / "scrape.prom"
    path.write_text(xid(labels, "79") + "\n")
    [record] = list(extract(path, "dcgm-metrics"))
    assert isinstance(record, Rejected) and (record.field, record.reason) == (field, reason)


def test_identify(tmp_path: Path) -> None:
    prom = tmp_path / "metrics"
    prom.write_text(f"# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n{xid(H07, '0')}\n")
    other = tmp_path / "other.prom"
    other.write_text('node_cpu_seconds_total{cpu="0",mode="idle"} 12.5\n')
    assert ingestor_for(prom).name == "dcgm-metrics"
    with pytest.raises(
        IngestError, match="other.prom: no format recognises this file; choose one"
    ):
        ingestor_for(other)  # claimed by none: an error, never a guess


def test_a_scrape_pasted_with_its_prompt_and_cut_lines_reads_those_lines_as_nothing(
    tmp_path: Path,
) -> None:
    # As the dcgm-exporter docs and issues show a scrape: the command after a prompt, `...` for
    # lines cut.
    path = tmp_path / "pasted.prom"
    path.write_text(
        "$ curl localhost:9400/metrics\n"
        "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n"
        "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
        f"DCGM_FI_DEV_SM_CLOCK{{{H07}}} 139\n"
        "...\n"
        f"{xid(H07, '79', None)}\n"
        "…\n"
        "ubuntu@node-07:~$ curl -s node-07:9400/metrics | grep XID\n"
        "[root@node-07 ~]# \n"
        "$\n"
    )
    assert ingestor_for(path).name == "dcgm-metrics"
    [fault] = list(extract(path, scrape_time="2026-01-07T10:00:00Z"))
    assert isinstance(fault, Accepted) and fault.origin.line == 6
    assert orjson.loads(fault.body)["data"]["code"] == "xid-79"
    assert ingest_output(tmp_path, path) == (
        0,
        f"{path}: read 1 · appended 1 · duplicate 0 · quarantined 0\n",
    )
    assert ingest_output(tmp_path, path) == (
        0,
        f"{path}: read 1 · appended 0 · duplicate 1 · quarantined 0\n",
    )


def test_a_line_that_only_looks_pasted_is_still_read_for_its_form(tmp_path: Path) -> None:
    path = tmp_path / "scrape.prom"
    path.write_text(f"{xid(H07, '0')}\n.. DCGM_FI_DEV_XID_ERRORS 3\n")
    [bad] = list(extract(path, "dcgm-metrics"))
    assert isinstance(bad, Rejected) and bad.origin.line == 2


def ingest_output(tmp_path: Path, path: Path) -> tuple[int, str]:
    from click.testing import CliRunner

    from cli import main

    result = CliRunner().invoke(
        main,
        [
            "ingest",
            "--db",
            f"sqlite:///{tmp_path / 'l.db'}",
            "--scrape-time",
            "2026-01-07T10:00:00Z",
            str(path),
        ],
    )
    return result.exit_code, result.output


def dbe(labels: str, total: str, ts: int) -> str:
    return f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{labels}}} {total} {ts}"


def test_an_error_counter_that_rises_is_a_fault_each_time(tmp_path: Path) -> None:
    """DCGM's double-bit ECC total and PCIe replay count since the driver loaded: a fault
    each time one rises (as dcgm-stats names them: ecc-dbe critical, pcie-replay
    warning); a fall is the driver reloaded, and the next rise is a fault again."""
    replay = f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{H07}}}"
    lines = [
        dbe(H07, "0", T),
        dbe(H07, "2", T + 30_000),  # 0 -> 2: a fault
        dbe(H07, "2", T + 60_000),  # unchanged
        dbe(H07, "0", T + 90_000),  # the driver reloaded
        dbe(H07, "1", T + 120_000),  # 0 -> 1: a fault
        f"{replay} 5 {T}",  # the file's first value, above 0: a fault
        f"{replay} 9 {T + 30_000}",  # 5 -> 9: a fault
    ]
    found = faults(tmp_path, lines)
    said = [
        (e["data"]["code"], e["data"]["severity"], e["data"]["count"], e["time"]) for e in found
    ]
    assert said == [
        ("ecc-dbe", "critical", 2, "2026-01-07T10:00:30Z"),
        ("ecc-dbe", "critical", 1, "2026-01-07T10:02:00Z"),
        ("pcie-replay", "warning", 5, "2026-01-07T10:00:00Z"),
        ("pcie-replay", "warning", 9, "2026-01-07T10:00:30Z"),
    ]  # fmt: skip
    assert found[0]["data"]["detail"] == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL = 2 (from 0)"
    assert (
        found[2]["data"]["detail"]
        == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER = 5 (first value in this file)"
    )
    assert found[0]["id"] == "node-07:0:GPU-a:-:ecc-dbe:2"


def test_an_error_total_seen_again_on_the_next_poll_is_a_duplicate(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    first = tmp_path / "a.prom"
    first.write_text(dbe(H07, "0", T) + "\n" + dbe(H07, "3", T + 30_000) + "\n")
    later = tmp_path / "b.prom"  # the next scrape still shows the total
    later.write_text(dbe(H07, "3", T + 60_000) + "\n")
    assert run_cli("ingest", "--db", url, str(first))[1].endswith(
        "appended 1 · duplicate 0 · quarantined 0\n"
    )
    assert run_cli("ingest", "--db", url, str(later))[1].endswith(
        "appended 0 · duplicate 1 · quarantined 0\n"
    )
