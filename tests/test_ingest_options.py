"""Format options as configuration objects: each format declares its options as one frozen
object (ingest/options.py), and every way of giving them goes through it: `--set KEY=VALUE`,
the old flags (hidden aliases of --set), a manifest entry's `options`, a library caller."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from cli import FORMAT_OPTION_ALIASES, main
from ingest import INGESTORS, IngestError, IngestOptions, Ingestor, extract
from tests.conftest import ROOT

SAMPLES = ROOT / "fixtures" / "samples"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def exported(db: str) -> list[str]:
    """The events stored, each with its source and tenant (not when or with what salt)."""
    code, out = run("export", "--db", db)
    assert code == 0, out
    entries = [json.loads(line) for line in out.splitlines()]
    return [json.dumps([e["source"], e["tenant"], e["event"]], sort_keys=True) for e in entries]


@pytest.mark.parametrize("ingestor", INGESTORS, ids=lambda i: i.name)
def test_every_format_declares_documented_frozen_options(ingestor: Ingestor) -> None:
    declared = ingestor.options
    assert issubclass(declared, IngestOptions) and declared.format == ingestor.name
    assert declared.model_config.get("frozen") and declared.model_config.get("extra") == "forbid"
    undocumented = [
        name
        for name, field in declared.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert undocumented == []
    assert declared.model_fields  # every format takes at least one option


def test_the_hidden_aliases_are_exactly_the_declared_options() -> None:
    declared = {name for i in INGESTORS for name in i.options.model_fields}
    assert sorted(FORMAT_OPTION_ALIASES) == sorted(declared)


def test_an_options_object_is_frozen_and_refuses_what_its_format_does_not_take(
    tmp_path: Path,
) -> None:
    options = INGESTORS[1].options.of({"cluster": "eu-west"})  # sacct
    with pytest.raises(ValidationError):
        options.cluster = "other"  # type: ignore[attr-defined]
    with pytest.raises(
        IngestError, match=r"^sacct takes no option 'node' \(its options: fields, "
    ) as info:
        INGESTORS[1].options.of({"node": "n1"})
    assert info.value.option == "node"


def test_set_and_the_old_flag_give_the_same_events(tmp_path: Path) -> None:
    sample = SAMPLES / "sacct.txt"
    by_set, by_flag = f"sqlite:///{tmp_path / 'set.db'}", f"sqlite:///{tmp_path / 'flag.db'}"
    code, out = run(
        "ingest", "--db", by_set, "--set", "cluster=eu-west", "--set", "timezone=UTC", str(sample)
    )
    assert code == 0, out
    code, out = run(
        "ingest", "--db", by_flag, "--cluster", "eu-west", "--timezone", "UTC", str(sample)
    )
    assert code == 0, out
    assert exported(by_set) == exported(by_flag)
    sources = {json.loads(line)[0] for line in exported(by_set)}
    assert sources == {"slurm://eu-west"}
    # a KEY spelt with a dash, as its flag is, is the same option
    dashed, flagged = f"sqlite:///{tmp_path / 'dash.db'}", f"sqlite:///{tmp_path / 'flagged.db'}"
    code, out = run(
        "ingest",
        "--db",
        dashed,
        "--set",
        "tenant-field=User",
        "--set",
        "timezone=UTC",
        str(sample),
    )
    assert code == 0, out
    code, out = run(
        "ingest", "--db", flagged, "--tenant-field", "User", "--timezone", "UTC", str(sample)
    )
    assert code == 0, out
    assert exported(dashed) == exported(flagged) != exported(by_flag)  # User, not Account


def test_an_alias_and_set_that_disagree_are_refused(tmp_path: Path) -> None:
    code, out = run(
        "ingest",
        "--db",
        f"sqlite:///{tmp_path / 'l.db'}",
        "--set",
        "cluster=a",
        "--cluster",
        "b",
        str(SAMPLES / "sacct.txt"),
    )
    assert (code, out) == (2, "Error: --set: cluster is given twice, with different values\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "nod=x"], "Error: --set: no format takes an option 'nod' (known: allocation, "),
        (["--set", "cluster"], "Error: --set: expected KEY=VALUE, found 'cluster'"),
        (
            ["--set", "node=n1"],
            "Error: --set node: {path}: no file here takes the option 'node' (sacct takes ",
        ),
        (
            ["--node", "n1"],
            "Error: --node: {path}: no file here takes the option 'node' (sacct takes ",
        ),
        (
            ["--set", "timezone=Mars/Olympus"],
            "Error: --set timezone: unknown time zone 'Mars/Olympus'",
        ),
        (["--timezone", "Mars/Olympus"], "Error: --timezone: unknown time zone 'Mars/Olympus'"),
        (["--set", "tenant= "], "Error: --set tenant: empty tenant name"),
    ],
)
def test_an_unknown_option_or_a_bad_value_is_exit_2_naming_it(
    tmp_path: Path, args: list[str], message: str
) -> None:
    path = SAMPLES / "sacct.txt"
    result = CliRunner().invoke(
        main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", *args, str(path)]
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith(message.format(path=path)), result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "l.db").exists()  # refused before anything is read or the store opened


def test_a_bad_time_given_with_set_is_named_by_its_key(tmp_path: Path) -> None:
    path = SAMPLES / "nvbandwidth.txt"
    code, out = run(
        "ingest",
        "--db",
        f"sqlite:///{tmp_path / 'l.db'}",
        "--set",
        "tenant=acme",
        "--set",
        "allocation=a1",
        "--set",
        "scrape_time=yesterday",
        str(path),
    )
    assert (code, out) == (2, "Error: --set scrape_time: not an RFC 3339 time: 'yesterday'\n")


def test_every_missing_required_option_is_named_at_once(tmp_path: Path) -> None:
    path = SAMPLES / "nvbandwidth.txt"
    code, out = run("ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", str(path))
    assert (code, out) == (
        2,
        f"Error: {path}: required: tenant, allocation (nvbandwidth output names none of them)\n",
    )
    code, out = run(
        "ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--set", "tenant=acme", str(path)
    )
    assert (code, out) == (
        2,
        f"Error: --set allocation: {path}: required: nvbandwidth output names no allocation\n",
    )


def test_command_options_go_only_to_the_files_whose_format_takes_them(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    code, out = run(
        "ingest",
        "--db",
        db,
        "--set",
        "cluster=eu-west",
        "--set",
        "timezone=UTC",
        "--set",
        "node=gpu-node-07",
        str(SAMPLES / "sacct.txt"),
        str(SAMPLES / "dcgm_stats.txt"),
    )
    assert code == 0, out
    sources = {json.loads(line)[0] for line in exported(db)}
    # sacct took cluster (not node); dcgm-stats took node (not cluster)
    assert "slurm://eu-west" in sources and any("gpu-node-07" in s for s in sources), sources


def manifest_with(tmp_path: Path, options: dict[str, object], fmt: str = "sacct") -> Path:
    shutil.copy(SAMPLES / "sacct.txt", tmp_path / "sacct.txt")
    made = tmp_path / "m.json"
    entry = {"path": "sacct.txt", "format": fmt, "options": options}
    made.write_text(
        json.dumps({"files": [{"path": "sacct.txt", "format": "sacct"}, entry]}, indent=2)
    )
    return made


def test_a_manifest_configures_each_entry_through_the_same_object(tmp_path: Path) -> None:
    made = manifest_with(tmp_path, {"cluster": "eu-west", "timezone": "UTC"})
    by_manifest = f"sqlite:///{tmp_path / 'm.db'}"
    code, out = run(
        "ingest", "--db", by_manifest, "--set", "timezone=UTC", "--manifest", str(made)
    )
    assert code == 0, out
    by_set = f"sqlite:///{tmp_path / 's.db'}"
    run("ingest", "--db", by_set, "--set", "timezone=UTC", str(SAMPLES / "sacct.txt"))
    run(
        "ingest",
        "--db",
        by_set,
        "--set",
        "timezone=UTC",
        "--set",
        "cluster=eu-west",
        str(SAMPLES / "sacct.txt"),
    )
    assert exported(by_manifest) == exported(by_set)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # the second entry begins on line 7: `{`, `"files": [`, the first entry's 4 lines
        (
            {"node": "n1"},
            "files[1].options.node: sacct takes no such option (its options: fields, ",
        ),
        (
            {"timezone": "Mars/Olympus"},
            "files[1].options.timezone: unknown time zone 'Mars/Olympus'",
        ),
        (
            {"tenant": "acme", "tenant_field": "User"},
            "files[1].options.tenant_field: give a fixed tenant or the tenant field to read it "
            "from, not both",
        ),
        ({"clustr": "x"}, "files[1].options.clustr: unknown option (known: allocation, "),
    ],
)
def test_a_manifest_entry_with_a_bad_option_is_named_by_file_line_and_field(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    made = manifest_with(tmp_path, options)
    result = CliRunner().invoke(
        main, ["ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--manifest", str(made)]
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {made}:7: {message}"), result.output
    assert "Traceback" not in result.output and not (tmp_path / "l.db").exists()


def test_a_manifest_entry_missing_a_required_option_is_named(tmp_path: Path) -> None:
    shutil.copy(SAMPLES / "nvbandwidth.txt", tmp_path / "nvbandwidth.txt")
    made = tmp_path / "m.json"
    made.write_text(
        json.dumps({"files": [{"path": "nvbandwidth.txt", "options": {"tenant": "acme"}}]})
    )
    code, out = run("ingest", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--manifest", str(made))
    assert (code, out) == (
        2,
        f"Error: {made}:1: files[0]: {tmp_path / 'nvbandwidth.txt'}: required: "
        "nvbandwidth output names no allocation\n",
    )


def test_the_library_checks_options_the_same_way() -> None:
    with pytest.raises(IngestError, match="focus takes no option 'cluster'") as info:
        list(extract(SAMPLES / "focus.csv", "focus", cluster="x"))
    assert info.value.option == "cluster"


def test_list_formats_shows_every_format_and_option_from_the_objects() -> None:
    code, out = run("ingest", "--list-formats")
    assert code == 0
    for ingestor in INGESTORS:
        assert f"{ingestor.name}: {ingestor.description}\n" in out
        for name, required, description in ingestor.options.listing():
            assert f"  {name}{' (required)' if required else ''}: {description}\n" in out
    assert "  allocation (required): " in out and "  tenant (required): " in out


def test_help_shows_set_and_not_the_aliases() -> None:
    code, out = run("ingest", "--help")
    assert code == 0 and "--set KEY=VALUE" in out and "--list-formats" in out
    hidden = [f"--{name.replace('_', '-')} " for name in FORMAT_OPTION_ALIASES]
    assert [flag for flag in hidden if flag in out] == []
