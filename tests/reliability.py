"""Helpers of the reliability tests: the CLI in a child process, the one-line error rule,
and what a store holds, compared with what its sources hold."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import text

from ledger import Store, verify_ledger
from schemas import canonical_event, validate_event
from tests.conftest import ROOT, progress, write_jsonl

CLI = [sys.executable, "-c", "from cli import main; main()"]


def cli(
    *args: str, preexec: Callable[[], None] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec,
    )


def start_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def assert_one_line_error(done: subprocess.CompletedProcess[str], *phrases: str) -> str:
    """Exit 2, one line on stderr, no traceback; returns the line."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    message = done.stderr.strip()
    assert message.startswith("Error: ") and "\n" not in message, done.stderr
    for phrase in phrases:
        assert phrase in message, message
    return message


def source_file(path: Path, start: int, stop: int, tenants: int = 3, bad_every: int = 0) -> Path:
    """job.progress events start..stop-1 as JSON Lines; with bad_every, also one invalid
    line (step not an integer) every that many events."""
    lines = []
    for i in range(start, stop):
        lines.append(progress(i, tenant=f"t{i % tenants}"))
        if bad_every and i % bad_every == 0:
            broken = progress(i, tenant="t0")
            broken["id"], broken["data"]["step"] = f"bad{i}", "many"
            lines.append(broken)
    return write_jsonl(path, lines)


def canonical_lines(*paths: Path) -> dict[tuple[str, str], str]:
    """(source, id) → canonical event text, of every valid event in the files."""
    found: dict[tuple[str, str], str] = {}
    for path in paths:
        for line in path.read_bytes().splitlines():
            raw: dict[str, Any] = orjson.loads(line)
            if isinstance(raw["data"].get("step"), int):
                found[(raw["source"], raw["id"])] = canonical_event(validate_event(raw)).decode()
    return found


def stored_events(url: str) -> dict[tuple[str, str], str]:
    store = Store(url)
    try:
        with store.reading() as conn:
            rows = conn.execute(text("SELECT source, id, event FROM entries")).all()
    finally:
        store.close()
    found = {(r.source, r.id): r.event for r in rows}
    assert len(found) == len(rows), "a key is stored twice"
    return found


def entry_count(url: str) -> int:
    store = Store(url)
    try:
        with store.reading() as conn:
            return int(conn.execute(text("SELECT count(*) FROM entries")).scalar_one())
    finally:
        store.close()


def assert_verifies(url: str) -> int:
    store = Store(url)
    try:
        result = verify_ledger(store)
    finally:
        store.close()
    assert result.ok, str(result.problem)
    return result.entries


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of `size` at path; returns why it could not be done, or None."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else f"mount -t tmpfs failed: {done.stderr.strip()}"


def remount(path: Path, options: str) -> None:
    subprocess.run(
        ["mount", "-o", f"remount,{options}", str(path)], check=True, capture_output=True
    )


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)
