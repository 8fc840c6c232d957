"""The nvidia-smi-topo ingestor (ingest/topo.py): the real captures' facts, the layouts
people paste, the quarantine, the options and idempotence. Expected values are read off
the matrices by hand (and listed in the real data's PROBES.md)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from cli import main
from ingest import INGESTORS, IngestError, extract
from schemas import Accepted, Rejected
from tests.conftest import REALDATA

TOPO = REALDATA / "topo"
ABSENT_REASON = "real data not present at {} (it lives beside the project, not in it)"

#: Two GPUs on an NVLink pair and one NIC, as the tool prints it (tabs, legends).
TABS = (
    "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV4\tPXB\t0-31\t0\t\tN/A\n"
    "GPU1\tNV4\t X \tSYS\t32-63\t1\t\tN/A\n"
    "NIC0\tPXB\tSYS\t X \t\t\t\n"
    "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\nNIC Legend:\n\n  NIC0: mlx5_4\n"
)
#: The same capture re-aligned with spaces, inside a session.
SPACES = (
    "$ ssh gpu-07\n$ nvidia-smi topo -m\n"
    "        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
    "GPU0     X      NV4     PXB     0-31    0               N/A\n"
    "GPU1    NV4      X      SYS     32-63   1               N/A\n"
    "NIC0    PXB     SYS      X\n\nNIC Legend:\n\n  NIC0: mlx5_4\n$ exit\n"
)
EXPECTED = {
    "gpus": [
        {"name": "GPU0", "cpu_affinity": "0-31", "numa_affinity": "0", "gpu_numa_id": "N/A"},
        {"name": "GPU1", "cpu_affinity": "32-63", "numa_affinity": "1", "gpu_numa_id": "N/A"},
    ],
    "nics": [{"name": "NIC0", "device": "mlx5_4"}],
    "links": [
        {"a": "GPU0", "b": "GPU1", "link": "NV4"},
        {"a": "GPU0", "b": "NIC0", "link": "PXB"},
        {"a": "GPU1", "b": "NIC0", "link": "SYS"},
    ],
}
OPTIONS = {
    "tenant": "acme",
    "allocation": "alloc-9",
    "node": "gpu-07",
    "scrape_time": "2026-03-01T08:00:00Z",
}


def write(tmp_path: Path, text: str, name: str = "topo.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def events(path: Path, **options: Any) -> list[dict[str, Any]]:
    found = list(extract(path, "nvidia-smi-topo", **options))
    assert all(isinstance(r, Accepted) for r in found), found
    return [orjson.loads(r.body) for r in found if isinstance(r, Accepted)]


def rejected(tmp_path: Path, text: str) -> tuple[int, str, str]:
    [record] = list(extract(write(tmp_path, text), "nvidia-smi-topo", **OPTIONS))
    assert isinstance(record, Rejected), record
    return record.origin.line, record.field, record.reason


def test_a_capture_is_one_placement_with_every_gpu_nic_and_pair(tmp_path: Path) -> None:
    [event] = events(write(tmp_path, TABS), **OPTIONS)
    assert (event["type"], event["source"], event["time"]) == (
        "placement.observed",
        "nvidia-smi-topo://alloc-9",
        "2026-03-01T08:00:00Z",
    )
    assert event["data"] == {
        "tenant": "acme",
        "allocation_id": "alloc-9",
        "node": "gpu-07",
        "tool": "nvidia-smi topo -m",
        "topology": EXPECTED,
    }


def test_tabs_or_spaces_prompts_around_it_read_alike_and_are_one_run(tmp_path: Path) -> None:
    [tabs] = events(write(tmp_path, TABS, "a.txt"), **OPTIONS)
    [spaces] = events(write(tmp_path, SPACES, "b.txt"), **OPTIONS)
    assert spaces["data"]["topology"] == EXPECTED
    assert spaces["id"] == tabs["id"]


def test_a_lost_tab_and_ansi_codes_on_the_header(tmp_path: Path) -> None:
    text = (
        "NVIDIA Topology: \t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA "
        "ID\x1b[0m\n"
        "GPU0\t X \tNV4PXB\t0-31\t0\t\tN/A\n"  # a paste lost the tab between NV4 and PXB
        "GPU1\tNV4\t X \tSYS\t32-63\t1\t\tN/A\n"
        "NIC0\tPXB\tSYS\t X\n\nNIC Legend:\n\n  NIC0: mlx5_4\n"
    )
    assert events(write(tmp_path, text), **OPTIONS)[0]["data"]["topology"] == EXPECTED


def test_the_first_matrix_is_read_and_the_p2p_one_after_it_is_not(tmp_path: Path) -> None:
    text = TABS + "$ nvidia-smi topo -p2p p\n\tGPU0\tGPU1\n GPU0\tX\tNS\n GPU1\tNS\tX\n"
    assert events(write(tmp_path, text), **OPTIONS)[0]["data"]["topology"] == EXPECTED


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [
        (
            TABS.replace("GPU1\tNV4\t X \tSYS", "GPU1\tNV2\t X \tSYS"),
            3,
            "GPU1/GPU0",
            "GPU1–GPU0 is NV2 but GPU0–GPU1 is NV4",
        ),
        (
            TABS.replace("GPU0\t X \tNV4\tPXB", "GPU0\t X \tNS\tPXB"),
            2,
            "GPU0/GPU1",
            "not a link of the legend: 'NS'",
        ),
        (
            TABS.replace("GPU0\t X \tNV4", "GPU0\tNV4\tNV4"),
            2,
            "GPU0/GPU0",
            "a device's link to itself is X, found NV4",
        ),
        (
            TABS.replace("\t0-31\t0\t\tN/A", "\t0-31\t0\tN/A\t7"),
            2,
            "GPU0",
            "4 values after the links, but the header names 3 affinity columns: '0-31 0 N/A 7'",
        ),
        (
            TABS.replace("NIC0\tPXB\tSYS\t X \t\t\t\n", ""),
            4,
            "NIC0",
            "expected the row of NIC0 here, found ''",
        ),
    ],
)
def test_a_matrix_that_cannot_be_read_goes_to_the_quarantine_whole(
    tmp_path: Path, text: str, line: int, field: str, reason: str
) -> None:
    assert rejected(tmp_path, text) == (line, field, reason)


def test_tenant_and_allocation_are_required_and_job_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path, TABS)
    with pytest.raises(IngestError, match=r"required: nvidia-smi-topo output names no allocation"):
        list(extract(path, "nvidia-smi-topo", tenant="acme"))
    with pytest.raises(IngestError, match=r"required: nvidia-smi-topo output names no tenant"):
        list(extract(path, "nvidia-smi-topo", allocation="a"))
    with pytest.raises(
        IngestError,
        match=r"required: tenant, allocation \(nvidia-smi-topo output names none of them\)$",
    ):
        list(extract(path, "nvidia-smi-topo", job="pilot-1"))
    assert events(path, **OPTIONS, job="pilot-1")[0]["data"]["job_id"] == "pilot-1"


def test_without_node_and_time_the_file_names_them(tmp_path: Path) -> None:
    path = write(tmp_path, TABS, "gpu-11.txt")
    os.utime(path, (1767225600, 1767225600))  # 2026-01-01T00:00:00Z
    [event] = events(path, tenant="acme", allocation="a")
    assert (event["data"]["node"], event["time"]) == ("gpu-11", "2026-01-01T00:00:00Z")


def test_the_cli_requires_the_options_appends_once_and_takes_a_copy_as_the_same_run(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    first, copy = write(tmp_path, TABS, "first.txt"), write(tmp_path, SPACES, "copy.txt")
    os.utime(first, (1767225600, 1767225600))
    os.utime(
        copy, (1767229200, 1767229200)
    )  # an hour later: another modification time, the same run
    missing = CliRunner().invoke(main, ["ingest", "--db", db, "--tenant", "acme", str(first)])
    assert (missing.exit_code, missing.output) == (
        2,
        f"Error: --set allocation: {first}: required: nvidia-smi-topo output names no "
        "allocation\n",
    )
    base = [
        "ingest",
        "--db",
        db,
        "--tenant",
        "acme",
        "--allocation",
        "alloc-9",
        "--node",
        "gpu-07",
    ]
    outputs = [CliRunner().invoke(main, base + [str(p)]) for p in (first, first, copy)]
    assert [(r.exit_code, r.stdout.partition(": ")[2]) for r in outputs] == [
        (0, "read 1 · appended 1 · duplicate 0 · quarantined 0\n"),
        (0, "read 1 · appended 0 · duplicate 1 · quarantined 0\n"),
        (0, "read 1 · appended 0 · duplicate 1 · quarantined 0\n"),
    ]


def test_identify_claims_captures_and_nothing_else_claims_them(tmp_path: Path) -> None:
    for text in (TABS, SPACES):
        path = write(tmp_path, text)
        assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes())] == [
            "nvidia-smi-topo"
        ]
    p2p_only = write(tmp_path, "\tGPU0\tGPU1\n GPU0\tX\tNS\n GPU1\tNS\tX\n")
    assert not [i.name for i in INGESTORS if i.identify(p2p_only, p2p_only.read_bytes())]


def pairs(event: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(x["a"], x["b"]): x["link"] for x in event["data"]["topology"]["links"]}


def real(name: str) -> dict[str, Any]:
    path = TOPO / name
    if not path.exists():
        pytest.skip(ABSENT_REASON.format(path))
    assert [i.name for i in INGESTORS if i.identify(path, path.read_bytes()[:65536])] == [
        "nvidia-smi-topo"
    ]
    [event] = events(path, tenant="t", allocation="a")
    return event


def shape(event: dict[str, Any]) -> tuple[int, int, dict[str, int]]:
    topology = event["data"]["topology"]
    return (
        len(topology["gpus"]),
        len(topology["nics"]),
        dict(Counter(x["link"] for x in topology["links"])),
    )


def affinities(event: dict[str, Any]) -> list[tuple[str | None, str | None, str | None]]:
    return [
        (g.get("cpu_affinity"), g.get("numa_affinity"), g.get("gpu_numa_id"))
        for g in event["data"]["topology"]["gpus"]
    ]


def test_real_della_a100_two_gpus_sys_and_nics_named_directly() -> None:
    event = real("jdh4-della-gpu-A100_README_della-a100-2gpu-pcie-sys-node.txt")
    # 2 GPUs + 2 NICs: 6 pairs; GPU0-GPU1 SYS, each GPU NODE to its own NIC, the rest SYS.
    assert shape(event) == (2, 2, {"SYS": 4, "NODE": 2})
    assert [n for n in event["data"]["topology"]["nics"]] == [
        {"name": "mlx5_0"},
        {"name": "mlx5_1"},
    ]
    links = pairs(event)
    assert (links["GPU0", "GPU1"], links["GPU0", "mlx5_0"], links["GPU1", "mlx5_1"]) == (
        "SYS",
        "NODE",
        "NODE",
    )
    assert affinities(event) == [("0-63", "0", None), ("64-127", "1", None)]


def test_real_traverse_v100_nv3_pairs_and_power9_numa() -> None:
    event = real("jdh4-della-gpu-A100_README_traverse-v100-4gpu-nv3-pix.txt")
    # 8 devices: 28 pairs. NV3 twice; PIX twice (mlx5_0-1, mlx5_2-3); NODE: GPU0/1 and GPU2/3 to
    # their 2 NICs (8); the remaining 16 SYS.
    assert shape(event) == (4, 4, {"NV3": 2, "SYS": 16, "NODE": 8, "PIX": 2})
    links = pairs(event)
    assert (
        links["GPU0", "GPU1"],
        links["GPU2", "GPU3"],
        links["mlx5_0", "mlx5_1"],
        links["mlx5_2", "mlx5_3"],
    ) == ("NV3", "NV3", "PIX", "PIX")
    assert (links["GPU0", "mlx5_0"], links["GPU1", "mlx5_1"]) == ("NODE", "NODE")
    assert [a[1] for a in affinities(event)] == ["0", "0", "8", "8"]


def test_real_autodl_2080ti_space_separated_before_a_p2p_matrix() -> None:
    event = real("Anthony-Hoo-github-io_AutoDL-post_2080ti-2gpu-pix.txt")
    assert shape(event) == (2, 0, {"PIX": 1})
    assert affinities(event) == [("24-47,72-95", "1", "N/A")] * 2


@pytest.mark.parametrize(
    ("name", "link", "cpus"),
    [
        (
            "stas00-ml-engineering_network-README_a100-8gpu-nv12-space-aligned.txt",
            "NV12",
            ("0-23", "24-47"),
        ),
        (
            "stas00-ml-engineering_network-README_h100-8gpu-nv18-space-aligned.txt",
            "NV18",
            ("0-51", "52-103"),
        ),
    ],
)
def test_real_space_aligned_8gpu_nvlink_without_legend(
    name: str, link: str, cpus: tuple[str, str]
) -> None:
    event = real(name)
    assert shape(event) == (8, 0, {link: 28})  # 56 off-diagonal cells, 28 pairs
    assert affinities(event) == [(cpus[0], "0", None)] * 4 + [(cpus[1], "1", None)] * 4


def test_real_b300_env_block_nine_nics_with_aliases() -> None:
    event = real("sglang-issue-26039_env-block_b300-8gpu-nv18-9nic.txt")
    # 17 devices, 136 pairs: 28 NV18; each GPU i PXB to NIC i (8); NIC8 has no PXB.
    gpus, nics, links = shape(event)
    assert (gpus, nics, links["NV18"], links["PXB"], sum(links.values())) == (8, 9, 28, 8, 136)
    each = pairs(event)
    assert all(each[f"GPU{i}", f"NIC{i}"] == "PXB" for i in range(8))
    assert all(each[f"GPU{i}", "NIC8"] != "PXB" for i in range(8))
    assert event["data"]["topology"]["nics"][0] == {"name": "NIC0", "device": "mlx5_10"}
    assert [n["device"] for n in event["data"]["topology"]["nics"]] == [
        f"mlx5_1{i}" for i in range(8)
    ] + ["mlx5_bond_0"]
    assert (
        affinities(event)
        == [("0-63,128-191", "0", "N/A")] * 4 + [("64-127,192-255", "1", "N/A")] * 4
    )


def test_real_b200_sixteen_nics_read_through_twelve_lost_tabs() -> None:
    event = real("nccl-tests-issue-333_b200-8gpu-nv18-16nic_tabs-lost.txt")
    gpus, nics, links = shape(event)
    assert (gpus, nics, links["NV18"], sum(links.values())) == (
        8,
        16,
        28,
        276,
    )  # 24 devices: 276 pairs
    assert [n["device"] for n in event["data"]["topology"]["nics"]] == [
        f"mlx5_{i}" for i in range(16)
    ]
    each = pairs(event)
    assert all(each[f"NIC{i}", f"NIC{j}"] == "PIX" for i in range(4) for j in range(i + 1, 4))
    # the glued cells: GPU2's `PXBNODE` is NIC7 PXB then NIC8 NODE (NIC8's own row says GPU2 PXB).
    assert (
        each["GPU2", "NIC8"],
        each["GPU2", "NIC9"],
        each["GPU4", "NIC8"],
        each["GPU4", "NIC9"],
    ) == ("PXB", "NODE", "SYS", "SYS")
    assert (
        affinities(event)
        == [("0-55,112-167", "0", "N/A")] * 4 + [("56-111,168-223", "1", "N/A")] * 4
    )


def test_a_manifest_gives_allocation_and_job(tmp_path: Path) -> None:
    write(tmp_path, TABS, "gpu-07.txt")
    manifest = tmp_path / "m.json"
    manifest.write_text(
        orjson.dumps(
            {
                "files": [
                    {
                        "path": "gpu-07.txt",
                        "format": "nvidia-smi-topo",
                        "options": {
                            "tenant": "acme",
                            "allocation": "alloc-9",
                            "job": "pilot-1",
                            "scrape_time": "2026-03-01T08:00:00Z",
                        },
                    }
                ]
            }
        ).decode()
    )
    db = f"sqlite:///{tmp_path / 'l.db'}"
    result = CliRunner().invoke(main, ["ingest", "--db", db, "--manifest", str(manifest)])
    assert result.exit_code == 0, result.output
    [entry] = [
        orjson.loads(line)
        for line in CliRunner().invoke(main, ["export", "--db", db]).stdout.splitlines()
    ]
    data = entry["event"]["data"]
    assert (data["allocation_id"], data["job_id"], data["node"], entry["event"]["time"]) == (
        "alloc-9",
        "pilot-1",
        "gpu-07",
        "2026-03-01T08:00:00Z",
    )


def test_a_second_capture_in_one_file_is_refused_not_dropped(tmp_path: Path) -> None:
    first, second = list(
        extract(
            write(tmp_path, TABS + "$ ssh gpu-08 nvidia-smi topo -m\n" + TABS),
            "nvidia-smi-topo",
            **OPTIONS,
        )
    )
    assert isinstance(first, Accepted) and isinstance(second, Rejected)
    # TABS is 13 lines; the prompt is line 14, the second header line 15.
    assert (second.origin.line, second.field, second.reason) == (
        15,
        "(capture)",
        "a second `nvidia-smi topo -m` matrix in one file: give each capture its own file and "
        "--node",
    )


def test_a_file_too_large_to_be_one_capture_is_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path, TABS + " " * (16 << 20))
    with pytest.raises(
        IngestError, match=r"larger than 16 MiB: not one nvidia-smi topo -m output"
    ):
        list(extract(path, "nvidia-smi-topo", **OPTIONS))


def test_the_cli_quarantines_a_bad_capture_with_exit_1_naming_line_and_cell(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, TABS.replace("GPU1\tNV4\t X \tSYS", "GPU1\tNV2\t X \tSYS"))
    result = CliRunner().invoke(
        main,
        [
            "ingest",
            "--db",
            f"sqlite:///{tmp_path / 'l.db'}",
            *[f"--{k.replace('_', '-')}={v}" for k, v in OPTIONS.items()],
            str(path),
        ],
    )
    assert result.exit_code == 1
    assert f"{path}:3: GPU1/GPU0: GPU1–GPU0 is NV2 but GPU0–GPU1 is NV4" in result.output
    assert result.stdout.endswith("read 1 · appended 0 · duplicate 0 · quarantined 1\n")


def test_a_column_the_ingestor_does_not_know_is_kept_by_its_name(tmp_path: Path) -> None:
    text = (
        TABS.replace("NUMA Affinity\tGPU NUMA ID\n", "NUMA Affinity\tGPU NUMA ID\tNVLink Domain\n")
        .replace("\t0\t\tN/A\n", "\t0\t\tN/A\tnvl-3\n")
        .replace("\t1\t\tN/A\n", "\t1\t\tN/A\tnvl-3\n")
    )
    gpus = events(write(tmp_path, text), **OPTIONS)[0]["data"]["topology"]["gpus"]
    assert gpus[0] == {
        "name": "GPU0",
        "cpu_affinity": "0-31",
        "numa_affinity": "0",
        "gpu_numa_id": "N/A",
        "other_columns": {"NVLink Domain": "nvl-3"},
    }
