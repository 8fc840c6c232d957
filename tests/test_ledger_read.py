"""The ledger's read API (ledger/read.py), on both backends: what it returns is counted
by hand from the events appended, and no module outside ledger/ queries the tables."""

from __future__ import annotations

import re
from pathlib import Path

from ledger import Store, read
from tests.conftest import ROOT, event, run_cli, write_jsonl


def _ledger(tmp_path: Path, db_url: str) -> None:
    events = [
        event("allocation.granted", "g1", {"tenant": "acme", "allocation_id": "a1", "gpus": 2}),
        event("allocation.granted", "g2", {"tenant": "zeta", "allocation_id": "z1", "gpus": 1}),
        event("health.fault", "f1", {"node": "n1", "code": "xid-79", "severity": "critical"}),
        event("job.submitted", "s1", {"tenant": "acme", "job_id": "j1"}),
    ]
    assert (
        run_cli("ingest", "--db", db_url, str(write_jsonl(tmp_path / "e.jsonl", events)))[0] == 0
    )


def test_entries_by_tenant_type_and_seq_range(tmp_path: Path, db_url: str) -> None:
    _ledger(tmp_path, db_url)
    store = Store(db_url)
    try:
        assert [e.seq for e in read.entries(store)] == [1, 2, 3, 4]
        assert [e.id for e in read.entries(store, tenant="acme")] == ["g1", "s1"]
        assert [e.id for e in read.entries(store, tenant=None)] == ["f1"]
        assert [e.id for e in read.entries(store, type="allocation.granted")] == ["g1", "g2"]
        assert [e.seq for e in read.entries(store, first_seq=2, last_seq=3)] == [2, 3]
        assert [e.seq for e in read.entries(store, seqs=[4, 1, 4])] == [1, 4]
        assert [e.id for e in read.entries(store, type=("health.fault", "job.submitted"))] == [
            "f1",
            "s1",
        ]
        assert [e.id for e in read.each_entry(store, tenant="acme", last_seq=3)] == ["g1"]
        assert [e.id for e in read.each_entry(store, tenant=None, type=("health.fault",))] == [
            "f1"
        ]
        assert read.tenants(store) == ["acme", "zeta"]
        assert read.has_tenant(store, "zeta") and not read.has_tenant(store, "nobody")
        assert read.head(store) == 4
        assert read.checkpoints(store) == []
    finally:
        store.close()


def test_a_recorded_event_is_never_another_tenants(tmp_path: Path, db_url: str) -> None:
    _ledger(tmp_path, db_url)
    store = Store(db_url)
    try:
        assert read.recorded_event(store, "test://fleet", "g1", "acme") is not None
        assert read.recorded_event(store, "test://fleet", "g1", "zeta") is None
        assert read.recorded_event(store, "test://fleet", "g1", None) is None
        assert read.recorded_event(store, "test://fleet", "f1", None) is not None
    finally:
        store.close()


def test_checkpoints_are_listed_oldest_first(tmp_path: Path, db_url: str) -> None:
    _ledger(tmp_path, db_url)
    key = tmp_path / "key"
    assert run_cli("keygen", "--out", str(key))[0] == 0
    for _ in range(2):
        assert run_cli("checkpoint", "--db", db_url, "--key", str(key))[0] == 0
    store = Store(db_url)
    try:
        found = read.checkpoints(store)
    finally:
        store.close()
    assert [(c.checkpoint_seq, c.tree_size) for c in found] == [(1, 4), (2, 4)]
    assert all(c.note.startswith(c.origin + "\n4\n") for c in found)


def test_no_module_outside_ledger_reads_the_tables() -> None:
    """The tables are ledger/'s own: every other folder reads through ledger/read.py (the
    tests, which check the tables themselves, excepted)."""
    pattern = re.compile(r"^\s*from ledger\.tables import|^\s*import ledger\.tables", re.M)
    readers = sorted(
        str(p.relative_to(ROOT))
        for folder in ("reconcile", "ingest", "fixtures", "bench")
        for p in (ROOT / folder).rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    )
    readers += ["cli.py"] if pattern.search((ROOT / "cli.py").read_text(encoding="utf-8")) else []
    assert readers == []
