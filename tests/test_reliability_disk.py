"""A store whose disk fills, or that turns read-only, under an ingest: the ingest stops
with one line on stderr and exit 2 (no traceback), whole batches only are stored, the
store verifies, and once space or write access is back a re-run ends with exactly the
sources' events.

Disk full is real where this runs as root (a size-limited tmpfs; on PostgreSQL a
tablespace on one), and a file-size limit (RLIMIT_FSIZE: writes fail with EFBIG)
everywhere. Read-only is a tmpfs remounted read-only (root), file modes (as root, for a process
that
has dropped the capabilities overriding them), and on PostgreSQL a server that refuses
write transactions.
"""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from ledger import Store
from tests.conftest import PG_SKIP_REASON, PG_URL, ROOT
from tests.reliability import (
    CLI,
    assert_one_line_error,
    assert_verifies,
    canonical_lines,
    cli,
    entry_count,
    mount_tmpfs,
    remount,
    source_file,
    stored_events,
    unmount,
)

BATCH = 250


def _mount_unavailable() -> str | None:
    """Why no test tmpfs can be mounted here, found by mounting one (None: it can)."""
    if os.geteuid() != 0:
        return "mounting a size-limited tmpfs needs root"
    probe = Path(f"/tmp/gpuledger-mount-probe-{uuid.uuid4().hex[:8]}")
    try:
        reason = mount_tmpfs(probe, "64k")
        unmount(probe)
        return reason
    finally:
        probe.rmdir()


MOUNT_UNAVAILABLE = _mount_unavailable()
needs_mount = pytest.mark.skipif(MOUNT_UNAVAILABLE is not None, reason=str(MOUNT_UNAVAILABLE))


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB file system of its own."""
    path = tmp_path / "disk"
    reason = mount_tmpfs(path, "1m")
    assert reason is None, reason
    try:
        yield path
    finally:
        unmount(path)


def file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # then write() fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def resume_and_compare(url: str, *sources: Path) -> None:
    """Run the ingest again with nothing in its way: exactly the sources' events."""
    for source in sources:
        done = cli("ingest", "--db", url, str(source))
        assert done.returncode == 0, done.stderr
    assert stored_events(url) == canonical_lines(*sources)
    assert_verifies(url)


def test_a_file_size_limit_stops_the_ingest_between_batches(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    first = source_file(tmp_path / "first.jsonl", 0, 400)
    assert cli("ingest", "--db", url, str(first)).returncode == 0
    second = source_file(tmp_path / "second.jsonl", 400, 8400)
    limit = max(f.stat().st_size for f in tmp_path.glob("ledger.db*")) + 200_000
    done = cli(
        "ingest",
        "--db",
        url,
        "--batch-size",
        str(BATCH),
        str(second),
        preexec=file_size_limit(limit),
    )
    assert_one_line_error(done, "cannot write to", f"{second}:", "rolled back", "run it again")
    count = assert_verifies(url)
    assert 400 <= count < 8400 and (count - 400) % BATCH == 0, count  # whole batches only
    resume_and_compare(url, first, second)


@needs_mount
def test_a_full_disk_stops_the_ingest_between_batches(tmp_path: Path, disk: Path) -> None:
    url = f"sqlite:///{disk / 'ledger.db'}"
    source = source_file(tmp_path / "events.jsonl", 0, 10_000)
    done = cli("ingest", "--db", url, "--batch-size", str(BATCH), str(source))
    assert_one_line_error(done, "cannot write to", "disk is full")
    count = assert_verifies(url)  # on the full disk itself
    assert count < 10_000 and count % BATCH == 0, count
    remount(disk, "size=64m")
    resume_and_compare(url, source)


@needs_mount
def test_a_store_remounted_read_only(tmp_path: Path, disk: Path) -> None:
    url = f"sqlite:///{disk / 'ledger.db'}"
    first = source_file(tmp_path / "first.jsonl", 0, 300)
    second = source_file(tmp_path / "second.jsonl", 300, 600)
    assert cli("ingest", "--db", url, str(first)).returncode == 0
    remount(disk, "ro")
    try:
        assert_one_line_error(cli("ingest", "--db", url, str(second)), "--db: cannot ")
    finally:
        remount(disk, "rw")
    assert assert_verifies(url) == 300
    resume_and_compare(url, first, second)


def _file_modes_unenforceable() -> str | None:
    if os.geteuid() == 0 and shutil.which("capsh") is None:
        return "root writes through file modes, and there is no capsh to drop that capability"
    return None


def ingest_under_file_modes(url: str, source: Path) -> subprocess.CompletedProcess[str]:
    """The ingest as a process bound by file modes: as root, one that has dropped the
    capabilities that override them."""
    command = [*CLI, "ingest", "--db", url, str(source)]
    if os.geteuid() == 0:
        command = [
            "capsh",
            "--drop=cap_dac_override,cap_dac_read_search,cap_fowner",
            "--",
            "-c",
            shlex.join(command),
        ]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(
    _file_modes_unenforceable() is not None, reason=str(_file_modes_unenforceable())
)
def test_a_store_whose_files_are_read_only(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    url = f"sqlite:///{folder / 'ledger.db'}"
    first = source_file(tmp_path / "first.jsonl", 0, 300)
    second = source_file(tmp_path / "second.jsonl", 300, 600)
    assert cli("ingest", "--db", url, str(first)).returncode == 0
    files = [folder, *folder.iterdir()]
    for path in files:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        assert_one_line_error(ingest_under_file_modes(url, second), "--db: cannot ")
    finally:
        for path in files:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert assert_verifies(url) == 300
    resume_and_compare(url, first, second)


def test_postgres_refusing_writes(tmp_path: Path, pg_url: str) -> None:
    """A server in read-only mode (as a hot standby is): every write transaction refused."""
    first = source_file(tmp_path / "first.jsonl", 0, 300)
    second = source_file(tmp_path / "second.jsonl", 300, 600)
    assert cli("ingest", "--db", pg_url, str(first)).returncode == 0
    read_only = pg_url + "%20-cdefault_transaction_read_only%3Don"
    assert_one_line_error(cli("ingest", "--db", read_only, str(second)), "read-only transaction")
    assert entry_count(pg_url) == 300
    resume_and_compare(pg_url, first, second)


def _tablespace_unavailable() -> str | None:
    if PG_SKIP_REASON:
        return PG_SKIP_REASON
    if MOUNT_UNAVAILABLE:
        return MOUNT_UNAVAILABLE
    if subprocess.run(["id", "postgres"], capture_output=True).returncode != 0:
        return "no local postgres user to own a tablespace folder (the server is elsewhere)"
    return None


@pytest.fixture
def small_tablespace() -> Iterator[tuple[str, Path]]:
    """A schema whose tables live in a tablespace on a 3 MiB tmpfs (outside pytest's
    private temporary folder, which the server may not enter)."""
    folder = Path(f"/tmp/gpuledger-tablespace-{uuid.uuid4().hex[:8]}")
    reason = mount_tmpfs(folder, "3m")
    assert reason is None, reason
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = Store(PG_URL)
    try:
        subprocess.run(["chown", "postgres:postgres", str(folder)], check=True)
        with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"CREATE TABLESPACE {name} LOCATION '{folder}'"))
            conn.execute(text(f"CREATE SCHEMA {name}"))
        yield f"{PG_URL}?options=-csearch_path%3D{name}%20-cdefault_tablespace%3D{name}", folder
    finally:
        with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
            conn.execute(text(f"DROP TABLESPACE IF EXISTS {name}"))
        admin.close()
        unmount(folder)
        folder.rmdir()


@pytest.mark.skipif(_tablespace_unavailable() is not None, reason=str(_tablespace_unavailable()))
def test_postgres_tablespace_full(tmp_path: Path, small_tablespace: tuple[str, Path]) -> None:
    url, folder = small_tablespace
    source = source_file(tmp_path / "events.jsonl", 0, 10_000)
    done = cli("ingest", "--db", url, "--batch-size", str(BATCH), str(source))
    assert_one_line_error(done, "cannot write to", "No space left on device")
    count = assert_verifies(url)
    assert count < 10_000 and count % BATCH == 0, count
    remount(folder, "size=64m")
    resume_and_compare(url, source)


# -- a checkpoint that fails signs nothing ----------------------------------------------

#: The CLI with pages of 16 entries (65,536 by default): a checkpoint of a small store then
#: has pages to seal, as one of a real store does, and sealing needs more room than signing.
SMALL_PAGES_CLI = [
    sys.executable,
    "-c",
    "import ledger.store\nledger.store.SEALED_ENTRIES = 16\nfrom cli import main\nmain()",
]


def small_pages_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SMALL_PAGES_CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def fill(folder: Path, leave_kib: int) -> Path:
    """A file taking all the free space of `folder`'s file system but `leave_kib` KiB."""
    stat = os.statvfs(folder)
    free_kib = stat.f_bavail * stat.f_frsize // 1024
    filler = folder / "filler"
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={filler}", "bs=1k", f"count={max(free_kib - leave_kib, 0)}"],
        capture_output=True,
        check=False,
    )  # dd stops at a full disk: that is the point
    return filler


def signed_rows(url: str) -> tuple[int, int]:
    """(checkpoints, checkpoint_tenants) rows stored."""
    store = Store(url)
    try:
        with store.reading() as conn:
            return (
                int(conn.execute(text("SELECT count(*) FROM checkpoints")).scalar_one()),
                int(conn.execute(text("SELECT count(*) FROM checkpoint_tenants")).scalar_one()),
            )
    finally:
        store.close()


def keygen(folder: Path) -> Path:
    key = folder / "key"
    assert cli("keygen", "--out", str(key)).returncode == 0
    return key


def assert_signed_nothing(done: subprocess.CompletedProcess[str], url: str, *phrases: str) -> None:
    assert_one_line_error(done, *phrases)
    assert done.stdout == ""  # no note printed
    assert signed_rows(url) == (0, 0)  # and none stored
    assert_verifies(url)


def sign_after_space_is_back(url: str, key: Path, entries: int, tenants: int = 3) -> None:
    done = small_pages_cli("checkpoint", "--db", url, "--key", str(key))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["gpuledger.local/ledger", str(entries)]
    assert signed_rows(url) == (1, tenants)
    assert_verifies(url)


@needs_mount
def test_a_checkpoint_on_a_full_disk_signs_nothing(tmp_path: Path, disk: Path) -> None:
    url, key = f"sqlite:///{disk / 'ledger.db'}", keygen(tmp_path)
    assert (
        cli("ingest", "--db", url, str(source_file(tmp_path / "events.jsonl", 0, 1000))).returncode
        == 0
    )
    # Room for the checkpoint's rows (about 70 KiB with SQLite's WAL), not for the 62
    # pages to seal: once, the checkpoint was stored and the seal after it failed.
    filler = fill(disk, 100)
    done = small_pages_cli("checkpoint", "--db", url, "--key", str(key))
    assert_signed_nothing(done, url, "cannot write to", "disk is full", "nothing was signed")
    filler.unlink()
    remount(disk, "size=64m")
    sign_after_space_is_back(url, key, 1000)


@pytest.mark.skipif(_tablespace_unavailable() is not None, reason=str(_tablespace_unavailable()))
def test_a_checkpoint_on_a_full_tablespace_signs_nothing(
    tmp_path: Path, small_tablespace: tuple[str, Path]
) -> None:
    (url, folder), key = small_tablespace, keygen(tmp_path)
    assert (
        cli("ingest", "--db", url, str(source_file(tmp_path / "events.jsonl", 0, 2000))).returncode
        == 0
    )
    filler = fill(folder, 128)  # the checkpoint's rows fit; 125 pages to seal do not
    done = small_pages_cli("checkpoint", "--db", url, "--key", str(key))
    assert_signed_nothing(
        done, url, "cannot write to", "No space left on device", "nothing was signed"
    )
    filler.unlink()
    sign_after_space_is_back(url, key, 2000)


@needs_mount
def test_a_witness_request_that_cannot_be_written_signs_nothing(
    tmp_path: Path, disk: Path
) -> None:
    url, key = f"sqlite:///{tmp_path / 'ledger.db'}", keygen(tmp_path)
    assert (
        cli("ingest", "--db", url, str(source_file(tmp_path / "events.jsonl", 0, 300))).returncode
        == 0
    )
    fill(disk, 0)
    out = disk / "request.txt"
    done = cli(
        "checkpoint",
        "--db",
        url,
        "--key",
        str(key),
        "--witness-request-from",
        "0",
        "--out",
        str(out),
    )
    assert_signed_nothing(done, url, f"--out: cannot write {out}", "no checkpoint was stored")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no request, staged or not
    (disk / "filler").unlink()
    done = cli(
        "checkpoint",
        "--db",
        url,
        "--key",
        str(key),
        "--witness-request-from",
        "0",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert signed_rows(url) == (1, 3)
    assert out.read_text().splitlines()[:2] == [
        "old 0",
        "",
    ]  # the request: old size 0, no proof, the note
    assert sorted(p.name for p in disk.iterdir()) == ["request.txt"]


def test_a_checkpoint_refused_by_postgres_signs_nothing(tmp_path: Path, pg_url: str) -> None:
    key = keygen(tmp_path)
    assert (
        cli(
            "ingest", "--db", pg_url, str(source_file(tmp_path / "events.jsonl", 0, 300))
        ).returncode
        == 0
    )
    read_only = pg_url + "%20-cdefault_transaction_read_only%3Don"
    assert_signed_nothing(
        cli("checkpoint", "--db", read_only, "--key", str(key)), pg_url, "read-only transaction"
    )
