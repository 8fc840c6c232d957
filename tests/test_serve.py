"""`gpuledger serve` as people and attackers use it, on a real uvicorn over loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import read
from ledger.tokens import Role, TokenError, authenticate, create, listed
from tests.conftest import run_cli
from tests.serve_helpers import (
    Served,
    make_key,
    make_store,
    make_tokens,
    serving,
    two_tenant_events,
)

BATCH = "application/cloudevents-batch+json"
STRUCTURED = "application/cloudevents+json"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("serve")
    store = make_store(f"sqlite:///{tmp / 'ledger.db'}", tmp)
    tokens = make_tokens(store)
    key = make_key(tmp)
    with serving(store, key) as base:
        yield Served(base, store, tokens, key)
    store.close()


# The authorization matrix (every route of the app × 7 credentials × two tenants) is
# tests/test_serve_matrix.py.


def test_a_customer_downloads_its_signed_packet_and_verifies_it_offline(
    served: Served, tmp_path: Path
) -> None:
    assert served.key is not None
    status, headers, body = served.call("/api/v1/disputes/INV-2026-01", served.tokens["acme"])
    assert status == 200 and headers["content-disposition"].startswith("attachment;")
    packet = tmp_path / "dispute.json"
    packet.write_bytes(body)
    code, out, err = run_cli(
        "verify-packet",
        str(packet),
        "--pubkey",
        f"{served.key}.pub",
        "--tenant",
        "acme",
        "--invoice",
        "INV-2026-01",
    )
    assert code == 0, (out, err)
    assert b"bravo" not in body
    status, headers, body = served.call("/invoices/acme/INV-2026-01/letter", served.tokens["acme"])
    assert status == 200 and b"<script" not in body
    assert "script-src" not in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]


def test_a_tenant_naming_another_tenant_is_refused(served: Served) -> None:
    for path in (
        "/api/v1/reconciliation?tenant=bravo",
        "/api/v1/reports/promises?tenant=bravo",
        "/invoices?tenant=bravo",
    ):
        status, _, body = served.call(path, served.tokens["acme"])
        assert status == 403 and b"bravo-" not in body


def test_an_operator_reads_every_tenant_and_a_tenant_its_own(served: Served) -> None:
    _, _, body = served.call("/api/v1/reconciliation", served.tokens["operator"])
    assert set(json.loads(body)["tenants"]) == {"acme", "bravo"}
    _, _, body = served.call("/api/v1/reconciliation", served.tokens["bravo"])
    doc = json.loads(body)
    assert set(doc["tenants"]) == {"bravo"}
    assert {line["invoice_id"] for line in doc["lines"]} == {"bravo-INV-2026-01"}


def test_the_api_returns_the_commands_documents(served: Served, tmp_path: Path) -> None:
    """The reconciliation the API returns is `reconcile --format json`'s, figure for figure."""
    out = tmp_path / "r.json"
    code, _, _ = run_cli(
        "reconcile",
        "--db",
        served.store.url,
        "--tenant",
        "acme",
        "--format",
        "json",
        "--out",
        str(out),
    )
    assert code == 0
    _, _, body = served.call("/api/v1/reconciliation?tenant=acme", served.tokens["operator"])
    assert json.loads(body) == json.loads(out.read_text())


def test_an_entry_comes_with_a_proof_that_checks(served: Served) -> None:
    from base64 import b64decode

    from ledger.proofs import verify_inclusion

    entries = read.entries(served.store, tenant="acme", type="billing.line")
    status, _, body = served.call(f"/api/v1/entries/{entries[0].seq}", served.tokens["acme"])
    doc = json.loads(body)
    assert status == 200 and doc["type"] == "billing.line"
    proof = doc["inclusion"]
    verify_inclusion(
        doc["seq"] - 1,
        proof["tree_size"],
        b64decode(doc["leaf_hash"]),
        [b64decode(h) for h in proof["proof"]],
        b64decode(proof["root"]),
    )
    bravo = read.entries(served.store, tenant="bravo")[0]
    status, _, body = served.call(f"/api/v1/entries/{bravo.seq}", served.tokens["acme"])
    assert status == 404 and b"bravo" not in body  # another tenant's entry: as if missing


def test_posted_events_give_the_same_ledger_as_the_file(tmp_path: Path) -> None:
    """The same events, POSTed in batch mode by an operator and ingested from a file:
    the same entries (source, id, type, tenant and canonical bytes), in the same order."""
    events = two_tenant_events()
    by_file = make_store(f"sqlite:///{tmp_path / 'file.db'}", tmp_path)
    assert run_cli("init", "--db", f"sqlite:///{tmp_path / 'http.db'}")[0] == 0
    from ledger import Store

    by_http = Store(f"sqlite:///{tmp_path / 'http.db'}")
    token = create(by_http, Role.parse("operator"))[1]
    with serving(by_http) as base:
        served = Served(base, by_http, {})
        status, _, body = served.call(
            "/api/v1/events", token, "POST", json.dumps(events).encode(), BATCH
        )
        assert status == 200, body
        answer = json.loads(body)
        assert answer["appended"] == len(events) and answer["quarantined"] == 0
        # polled again: nothing twice
        status, _, body = served.call(
            "/api/v1/events", token, "POST", json.dumps(events).encode(), BATCH
        )
        assert json.loads(body)["duplicate"] == len(events)

    def rows(store: object) -> list[tuple[object, ...]]:
        return [
            (e.source, e.id, e.type, e.tenant, e.event)
            for e in read.entries(store)  # type: ignore[arg-type]
        ]

    assert rows(by_http) == rows(by_file)


def test_a_collector_writes_only_under_its_source_and_as_its_owner(served: Served) -> None:
    ok: dict[str, Any] = {
        "specversion": "1.0",
        "id": "c-1",
        "source": "app://acme/trainer",
        "type": "job.progress",
        "time": "2026-01-05T11:00:00Z",
        "data": {"tenant": "acme", "job_id": "j-1", "step": 9},
    }
    foreign = ok | {"id": "c-2", "source": "scheduler://neocloud/eu-west"}
    other_tenant = ok | {"id": "c-3", "data": ok["data"] | {"tenant": "bravo"}}
    fleet = ok | {
        "id": "c-4",
        "type": "health.fault",
        "data": {"node": "gpu-node-07", "code": "xid-79"},
    }
    quarantined_before = read.quarantined_count(served.store)
    status, _, body = served.call(
        "/api/v1/events",
        served.tokens["collector"],
        "POST",
        json.dumps([ok, foreign, other_tenant, fleet, {"no": "event"}]).encode(),
        BATCH,
    )
    assert status == 200
    answer = json.loads(body)
    assert [e["status"] for e in answer["events"]] == [
        "appended",
        "quarantined",
        "quarantined",
        "quarantined",
        "quarantined",
    ]
    assert answer["events"][1]["field"] == "source"
    assert read.quarantined_count(served.store) == quarantined_before + 4
    # one event, structured mode: the same key again is a duplicate
    status, _, body = served.call(
        "/api/v1/events", served.tokens["collector"], "POST", json.dumps(ok).encode(), STRUCTURED
    )
    assert json.loads(body)["events"] == [
        {
            "id": "c-1",
            "source": "app://acme/trainer",
            "status": "duplicate",
            "seq": answer["events"][0]["seq"],
        }
    ]
    # the same key with other content: a conflict, quarantined, the stored one kept
    changed = ok | {"data": ok["data"] | {"step": 10}}
    status, _, body = served.call(
        "/api/v1/events",
        served.tokens["collector"],
        "POST",
        json.dumps(changed).encode(),
        STRUCTURED,
    )
    assert json.loads(body)["events"][0]["status"] == "quarantined"


@pytest.mark.parametrize(
    "content_type,body,status",
    [
        ("application/json", b"[]", 415),
        (None, b"[]", 415),
        (BATCH, b"[{", 400),
        (BATCH, b"{}", 400),
    ],
)
def test_bad_posts_get_one_line_and_append_nothing(
    served: Served, content_type: str | None, body: bytes, status: int
) -> None:
    size = read.head(served.store)
    got, _, answer = served.call(
        "/api/v1/events", served.tokens["collector"], "POST", body, content_type
    )
    assert got == status and list(json.loads(answer)) == ["error"]
    assert b"Traceback" not in answer and read.head(served.store) == size


def test_readers_cannot_write_and_writers_cannot_read(served: Served) -> None:
    status, _, _ = served.call("/api/v1/events", served.tokens["acme"], "POST", b"[]", BATCH)
    assert status == 403
    status, _, _ = served.call("/api/v1/reconciliation", served.tokens["collector"])
    assert status == 403
    # a signed-in browser's cookie never writes
    status, _, _ = served.call(
        "/api/v1/events",
        None,
        "POST",
        b"[]",
        BATCH,
        cookie=f"gpuledger_token={served.tokens['operator']}",
    )
    assert status == 401


def test_metrics_are_prometheus_text_with_data_escaped(served: Served) -> None:
    status, headers, body = served.call("/metrics", served.tokens["operator"])
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    assert 'gpuledger_entries{type="billing.line"} 2' in text
    assert 'gpuledger_amount{tenant="acme",category=' in text
    for line in text.splitlines():
        assert line.startswith("#") or line.startswith("gpuledger_"), line


def test_openapi_lists_every_api_route(served: Served) -> None:
    status, _, body = served.call("/api/v1/openapi.json")
    doc = json.loads(body)
    assert status == 200 and doc["openapi"].startswith("3.1")
    assert {
        "/api/v1/events",
        "/api/v1/reconciliation",
        "/api/v1/reports/{name}",
        "/api/v1/entries/{seq}",
    } <= set(doc["paths"])


def test_tokens_are_stored_hashed_and_revocation_holds(tmp_path: Path) -> None:
    from sqlalchemy import select

    from ledger import Store
    from ledger.tables import api_tokens

    url = f"sqlite:///{tmp_path / 't.db'}"
    assert run_cli("init", "--db", url)[0] == 0
    code, out, _ = run_cli(
        "token", "create", "--db", url, "--role", "tenant:acme", "--label", "acme's CI"
    )
    assert code == 0
    text = out.strip().splitlines()[-1]
    store = Store(url)
    with store.reading() as conn:
        stored = conn.execute(select(api_tokens)).one()
    assert text.encode() not in bytes(stored.digest) and text not in str(tuple(stored))
    assert authenticate(store, text) is not None
    assert authenticate(store, text[:-1] + ("A" if text[-1] != "A" else "B")) is None
    code, out, _ = run_cli("token", "list", "--db", url)
    assert code == 0 and "tenant:acme" in out and text not in out
    assert run_cli("token", "revoke", "--db", url, stored.token_id)[0] == 0
    assert authenticate(store, text) is None and listed(store)[0].revoked_at is not None
    code, _, err = run_cli("token", "revoke", "--db", url, "nope")
    assert code == 2 and "no token" in err


@pytest.mark.parametrize("role", ["", "admin", "tenant:", "collector:", "tenant:a\x1b[2J"])
def test_bad_roles_are_refused(role: str) -> None:
    with pytest.raises(TokenError):
        Role.parse(role)


@pytest.mark.postgres
def test_the_app_serves_while_a_collector_posts_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    import threading

    store = make_store(pg_url, tmp_path)
    tokens = make_tokens(store)
    with serving(store) as base:
        served = Served(base, store, tokens)
        failures: list[str] = []

        def post() -> None:
            for n in range(20):
                batch = [
                    {
                        "specversion": "1.0",
                        "id": f"live-{n}-{k}",
                        "source": "app://acme/live",
                        "type": "job.progress",
                        "time": "2026-01-05T11:00:00Z",
                        "data": {"tenant": "acme", "job_id": "j-1", "step": n * 10 + k},
                    }
                    for k in range(10)
                ]
                status, _, body = served.call(
                    "/api/v1/events",
                    tokens["collector"],
                    "POST",
                    json.dumps(batch).encode(),
                    BATCH,
                )
                if status != 200 or json.loads(body)["appended"] != 10:
                    failures.append(f"post {n}: {status} {body[:200]!r}")

        writer = threading.Thread(target=post)
        writer.start()
        while writer.is_alive():
            status, _, _ = served.call("/api/v1/reconciliation?tenant=acme", tokens["acme"])
            if status != 200:
                failures.append(f"read: {status}")
        writer.join()
        assert failures == []
        assert len(read.entries(store, tenant="acme", type="job.progress")) >= 200
    store.close()


def test_an_append_is_seen_by_the_next_read(served: Served) -> None:
    """Documents are cached per ledger size: one appended event and the answer changes."""

    def promise_ids() -> set[str]:
        _, _, body = served.call("/api/v1/reports/promises?tenant=acme", served.tokens["operator"])
        return {p["promise_id"] for p in json.loads(body)["promises"]}

    before = promise_ids()
    assert promise_ids() == before  # the cached answer
    promise = {
        "specversion": "1.0",
        "id": "late-promise",
        "source": "scheduler://neocloud/eu-west",
        "type": "policy.promise",
        "time": "2026-01-05T09:00:00Z",
        "data": {
            "tenant": "acme",
            "promise_id": "promise-late",
            "job_id": "j-late",
            "start_by": "2026-01-05T10:00:00Z",
        },
    }
    status, _, body = served.call(
        "/api/v1/events",
        served.tokens["operator"],
        "POST",
        json.dumps(promise).encode(),
        STRUCTURED,
    )
    assert json.loads(body)["appended"] == 1
    assert promise_ids() == before | {"promise-late"}


def test_the_grafana_dashboard_reads_metrics_the_server_exposes(served: Served) -> None:
    import re

    dashboard = json.loads(
        (Path(__file__).parent.parent / "docs/grafana/gpuledger.json").read_text()
    )
    _, _, body = served.call("/metrics", served.tokens["operator"])
    exposed = {line.split()[2] for line in body.decode().splitlines() if line.startswith("# TYPE")}
    used = {
        name
        for p in dashboard["panels"]
        for t in p["targets"]
        for name in re.findall(r"gpuledger_[a-z_]+", t["expr"])
    }
    assert used and used <= exposed, used - exposed


HOSTILE = '<script>alert(1)</script>\u202e"=HYPERLINK("x")\x1b[2J'


def test_hostile_bytes_in_ids_never_control_a_page_or_the_metrics(tmp_path: Path) -> None:
    """A tenant, invoice and line id of markup, a bidi override, a formula and a terminal
    escape: pages show them escaped and isolated, metrics quote them on one line."""
    from ledger import Store

    def hostile(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: hostile(v) for k, v in value.items()}
        if isinstance(value, list):
            return [hostile(v) for v in value]
        return value.replace("acme", HOSTILE) if isinstance(value, str) else value

    events = [hostile(e) for e in two_tenant_events() if e["data"].get("tenant") == "acme"]
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run_cli("init", "--db", url)[0] == 0
    assert run_cli("ingest", "--db", url, str(path))[0] == 0
    store = Store(url)
    tenants = read.tenants(store)
    assert len(tenants) == 1 and "<script>" in tenants[0]
    token = create(store, Role.parse("operator"))[1]
    with serving(store) as base:
        served = Served(base, store, {})
        from urllib.parse import urlencode

        q = {"tenant": tenants[0], "invoice": "INV-2026-01", "line": "INV-2026-01:A-100"}
        routes = (
            "/",
            "/invoices",
            "/promises",
            "/findings",
            "/capacity",
            "/invoice?" + urlencode(q),
            "/line?" + urlencode(q),
            "/finding?" + urlencode(q | {"category": "restart_lost"}),
        )
        for route in routes:
            status, headers, body = served.call(route, token)
            assert status == 200, route
            assert (
                b"<script>" not in body and "\u202e".encode() not in body and b"\x1b" not in body
            )
            assert "script-src 'self'" in headers["content-security-policy"]
        status, _, body = served.call("/metrics", token)
        lines = body.decode().splitlines()
        amount = [line for line in lines if line.startswith("gpuledger_amount{")]
        assert amount and all(line.count('tenant="') == 1 for line in amount)
        assert all(line.startswith(("#", "gpuledger_")) for line in lines)
    store.close()
