"""The serve document cache: a tenant's documents stand on its own entries and the fleet's,
so another tenant's appends leave them cached and a fleet append or its own renews them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ledger import read
from reconcile.serve.cache import DocumentCache
from tests.conftest import run_cli
from tests.serve_helpers import make_store


def _append(url: str, tmp: Path, event: Mapping[str, Any]) -> None:
    path = tmp / f"{event['id']}.jsonl"
    path.write_text(json.dumps(event) + "\n")
    assert run_cli("ingest", "--db", url, str(path))[0] == 0


def test_another_tenants_append_keeps_a_tenants_documents(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = make_store(url, tmp_path)
    cache = DocumentCache(store)
    calls: list[str] = []

    def compute(name: str) -> object:
        calls.append(name)
        return name

    def ask() -> None:
        cache.get("acme", ("doc", "acme"), lambda: compute("acme"))
        cache.get(None, ("doc", None), lambda: compute("all"))

    ask()
    assert calls == ["acme", "all"]
    ask()
    assert calls == ["acme", "all"]  # nothing appended: both cached
    bravo: dict[str, Any] = {
        "specversion": "1.0",
        "id": "bravo-terms-2027",
        "source": "contracts://neocloud",
        "type": "policy.terms",
        "time": "2026-06-01T00:00:00Z",
        "data": {
            "tenant": "bravo",
            "warmup_allowance_s": 600,
            "stall_threshold_s": 300,
            "reclaim_notice_s": 120,
        },
    }
    before = read.heads(store, "acme")
    _append(url, tmp_path, bravo)
    assert read.heads(store, "acme") == before
    ask()
    assert calls == ["acme", "all", "all"]  # bravo's append: acme's kept, the all-tenant renewed
    fleet = {
        "specversion": "1.0",
        "id": "gpu-node-07:0:xid-48:2027",
        "source": "dcgm://gpu-node-07",
        "type": "health.fault",
        "time": "2026-06-07T10:52:00Z",
        "data": {
            "node": "gpu-node-07",
            "device": 0,
            "fabric_domain": "nvl-eu-west-1",
            "code": "xid-48",
            "severity": "warning",
            "detail": "double-bit ECC error",
        },
    }
    _append(url, tmp_path, fleet)
    ask()
    assert calls == ["acme", "all", "all", "acme", "all"]  # the fleet's: both renewed
    acme = bravo | {"id": "acme-terms-2027", "data": {**bravo["data"], "tenant": "acme"}}
    _append(url, tmp_path, acme)
    ask()
    assert calls[-2:] == ["acme", "all"]  # its own append renews it
    store.close()
