"""Manifest paths stay in the manifest's folder (or one `--allow-path` names), and no
ingest reads a special file (/proc, /sys, /dev, FIFOs, sockets, devices). A refused path
is one line on stderr, exit 2, and nothing stored: not in the ledger, not in the
quarantine (so /proc/self/environ never puts the environment in the store)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger import Store
from tests.conftest import progress, run_cli, write_jsonl
from tests.test_write_rights import quarantine_rows, stored


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    inside = tmp_path / "collect"
    inside.mkdir()
    write_jsonl(inside / "ok.jsonl", [progress(1)])
    return inside


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_jsonl(elsewhere / "secret.jsonl", [progress(2)])
    return elsewhere


def manifest(folder: Path, *paths: str) -> Path:
    made = folder / "m.json"
    made.write_text(json.dumps({"files": [{"path": p} for p in paths]}))
    return made


def refused(db: str, *args: str) -> str:
    """The one-line error of a refused ingest, after checking it stored nothing."""
    Store(db).init()  # an existing store: a refused path must leave it empty
    code, out, err = run_cli("ingest", "--db", db, *args)
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert stored(db) == [] and quarantine_rows(db) == []
    return err


def test_a_path_inside_the_manifests_folder_is_read(folder: Path, db_url: str) -> None:
    code, _, _ = run_cli(
        "ingest", "--db", db_url, "--manifest", str(manifest(folder, "ok.jsonl", "./ok.jsonl"))
    )
    assert code == 0 and [i for _, _, i, _ in stored(db_url)] == ["p1"]


def test_dot_dot_is_refused_unless_its_folder_is_allowed(
    folder: Path, outside: Path, db_url: str
) -> None:
    made = manifest(folder, "ok.jsonl", "../elsewhere/secret.jsonl")
    err = refused(db_url, "--manifest", str(made))
    assert err == (
        f"Error: --allow-path: {made}:1: files[1].path: {folder}/../elsewhere/secret.jsonl "
        f"resolves to {outside}/secret.jsonl, outside the manifest's folder {folder}: refused "
        "(allow its folder to read it)\n"
    )
    code, _, _ = run_cli(
        "ingest", "--db", db_url, "--allow-path", str(outside), "--manifest", str(made)
    )
    assert code == 0 and [i for _, _, i, _ in stored(db_url)] == ["p1", "p2"]


def test_an_absolute_path_outside_is_refused_unless_allowed(
    folder: Path, outside: Path, db_url: str
) -> None:
    made = manifest(folder, str(outside / "secret.jsonl"))
    assert "outside the manifest's folder" in refused(db_url, "--manifest", str(made))
    code, _, _ = run_cli(
        "ingest", "--db", db_url, "--allow-path", str(outside), "--manifest", str(made)
    )
    assert code == 0
    inside = manifest(folder, str(folder / "ok.jsonl"))  # absolute, but inside: read
    assert run_cli("ingest", "--db", db_url, "--manifest", str(inside))[0] == 0


def test_a_symbolic_link_leading_out_is_refused(folder: Path, outside: Path, db_url: str) -> None:
    (folder / "link.jsonl").symlink_to(outside / "secret.jsonl")
    (folder / "sub").symlink_to(outside, target_is_directory=True)
    for path in ("link.jsonl", "sub/secret.jsonl"):
        assert "outside the manifest's folder" in refused(
            db_url, "--manifest", str(manifest(folder, path))
        )
    (folder / "inner.jsonl").symlink_to(folder / "ok.jsonl")  # a link that stays inside is read
    assert (
        run_cli("ingest", "--db", db_url, "--manifest", str(manifest(folder, "inner.jsonl")))[0]
        == 0
    )


def test_proc_self_environ_never_reaches_the_store(folder: Path, db_url: str) -> None:
    os.environ["GPULEDGER_TEST_SECRET"] = "hunter2-do-not-store"
    try:
        for allowed in ((), ("--allow-path", "/proc")):
            err = refused(
                db_url, *allowed, "--manifest", str(manifest(folder, "/proc/self/environ"))
            )
            assert "hunter2" not in err
        err = refused(db_url, str(Path("/proc/self/environ")))
        assert (
            err == "Error: /proc/self/environ: not a regular file (a pseudo file under /proc): "
            "refused\n"
        )
    finally:
        del os.environ["GPULEDGER_TEST_SECRET"]


@pytest.fixture
def fifo(folder: Path) -> Iterator[Path]:
    path = folder / "pipe.jsonl"
    os.mkfifo(path)
    yield path


def test_a_fifo_is_refused_without_being_opened(folder: Path, fifo: Path, db_url: str) -> None:
    """Opening a FIFO with no writer would block the ingest for good: the check comes first."""
    assert refused(db_url, "--manifest", str(manifest(folder, "pipe.jsonl"))).endswith(
        f"files[0].path: {fifo}: not a regular file (a FIFO): refused\n"
    )
    assert refused(db_url, str(fifo)) == f"Error: {fifo}: not a regular file (a FIFO): refused\n"
    assert refused(db_url, "--format", "cloudevents", str(fifo)).endswith("(a FIFO): refused\n")


def test_devices_and_sockets_are_refused(folder: Path, db_url: str) -> None:
    assert refused(db_url, "/dev/null").endswith(
        "/dev/null: not a regular file (a character device): refused\n"
    )
    unix = socket.socket(socket.AF_UNIX)
    path = folder / "s.sock"
    try:
        unix.bind(str(path))
        assert refused(db_url, "--manifest", str(manifest(folder, "s.sock"))).endswith(
            "(a socket): refused\n"
        )
    finally:
        unix.close()
    (folder / "dev").symlink_to("/dev/zero")
    assert "outside the manifest's folder" in refused(
        db_url, "--manifest", str(manifest(folder, "dev"))
    )
    assert refused(
        db_url, "--allow-path", "/dev", "--manifest", str(manifest(folder, "dev"))
    ).endswith("(a character device): refused\n")


def test_a_manifest_that_is_not_a_regular_file_is_refused(
    folder: Path, fifo: Path, db_url: str
) -> None:
    assert (
        refused(db_url, "--manifest", str(fifo))
        == f"Error: --manifest: {fifo}: not a regular file (a FIFO): refused\n"
    )


def test_a_reader_refuses_what_is_not_a_regular_file_when_it_opens_it(fifo: Path) -> None:
    """Past the plan's checks (a path swapped for a FIFO, or a caller of the library), the
    opening itself refuses, without blocking on a FIFO that has no writer."""
    from ingest import IngestError, extract

    with pytest.raises(IngestError, match="not a regular file: refused"):
        list(extract(fifo, "cloudevents"))
    with pytest.raises(IngestError, match="/dev/zero: not a regular file: refused"):
        list(extract(Path("/dev/zero"), "cloudevents"))
