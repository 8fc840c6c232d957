"""A real `gpuledger serve` for tests: uvicorn on a loopback port in a thread, over a store
holding two tenants (acme, and bravo: acme's sample with every id renamed), and tokens."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from ledger import Store
from ledger.tokens import Role, create, revoke
from reconcile.serve import create_app
from schemas.owners import Owner
from tests.conftest import run_cli

SAMPLE = Path(__file__).parent.parent / "fixtures" / "samples" / "events.jsonl"
ID_FIELDS = (
    "job_id",
    "allocation_id",
    "invoice_id",
    "line_id",
    "promise_id",
    "checkpoint_id",
    "result_id",
)


def late_start_events() -> list[dict[str, Any]]:
    """acme's job j-200: 1 whole GPU, submitted at 11:30 and promised to start by 11:35, on
    the sample's one node, whose 2 GPUs A-100 holds until 14:00; granted A-200 (device 0) at
    14:05, started at 14:10: 9300 s late. The sample's XID 79 fault of 10:52 names the fabric
    domain, so it faults both GPUs, and stays open (its health.cleared names no domain: not
    the same place, RULES.md). So the wait [11:30, 14:10) is, by RULES.md's causes:
    11:30-14:00 `capacity` (9000 s: no device free, and the faulted ones are held by another
    grant), 14:00-14:10 `fault` (600 s: it fits once the faulted devices are added)."""
    where = {"node": "gpu-node-07", "fabric_domain": "nvl-eu-west-1", "placement_class": "whole"}
    rows: list[tuple[str, str, str, dict[str, Any]]] = [
        ("j-200:submitted", "job.submitted", "11:30", {"job_id": "j-200", "gpus": 1}),
        (
            "promise-j-200",
            "policy.promise",
            "11:30",
            {
                "promise_id": "promise-j-200",
                "job_id": "j-200",
                "start_by": "2026-01-07T11:35:00Z",
                "placement_class": "whole",
                "gpus": 1,
            },
        ),
        (
            "A-200:granted",
            "allocation.granted",
            "14:05",
            {"allocation_id": "A-200", "gpus": 1, "devices": [0], **where},
        ),
        (
            "j-200:started:1",
            "job.started",
            "14:10",
            {"job_id": "j-200", "allocation_id": "A-200", "attempt": 1},
        ),
        ("j-200:completed", "job.completed", "14:50", {"job_id": "j-200"}),
        ("A-200:released", "allocation.released", "14:55", {"allocation_id": "A-200"}),
    ]
    return [
        {
            "specversion": "1.0",
            "id": event_id,
            "source": "scheduler://neocloud/eu-west",
            "type": type_,
            "time": f"2026-01-07T{clock}:00Z",
            "data": {"tenant": "acme", **data},
        }
        for event_id, type_, clock, data in rows
    ]


def two_tenant_events(late: bool = False) -> list[dict[str, Any]]:
    """acme's sample, then bravo's: the same events with the tenant and every id renamed;
    with `late`, each tenant also has the late start of `late_start_events`."""
    events = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    if late:
        events += late_start_events()
    bravo = []
    for e in events:
        if e["data"].get("tenant") != "acme":
            continue  # fleet events once
        copy = json.loads(json.dumps(e).replace("acme", "bravo"))
        copy["id"] = f"bravo-{copy['id']}"
        for name in ID_FIELDS:
            if isinstance(copy["data"].get(name), str):
                copy["data"][name] = f"bravo-{copy['data'][name]}"
        bravo.append(copy)
    return events + bravo


@dataclass
class Served:
    base: str
    store: Store
    tokens: dict[str, str]  # role name -> token text
    key: Path | None = None  # the provider's signing key the server signs packets with

    def call(
        self,
        path: str,
        token: str | None = None,
        method: str = "GET",
        body: bytes | None = None,
        content_type: str | None = None,
        cookie: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.base + path, data=body, method=method)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        if content_type is not None:
            request.add_header("Content-Type", content_type)
        if cookie is not None:
            request.add_header("Cookie", cookie)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()


def make_store(url: str, tmp: Path, late: bool = False) -> Store:
    path = tmp / "two-tenants.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in two_tenant_events(late)))
    assert run_cli("init", "--db", url)[0] == 0
    assert run_cli("ingest", "--db", url, str(path))[0] == 0
    return Store(url)


def make_key(tmp: Path) -> Path:
    from ledger.note import write_keypair

    key = tmp / "provider-key"
    write_keypair(key, "provider.example")
    return key


def make_tokens(store: Store) -> dict[str, str]:
    tokens = {
        "operator": create(store, Role.parse("operator"))[1],
        "acme": create(store, Role.parse("tenant:acme"))[1],
        "bravo": create(store, Role.parse("tenant:bravo"))[1],
        "collector": create(store, Role.parse("collector:app://acme"), Owner("acme"))[1],
        "provider-collector": create(store, Role.parse("collector:dcgm://"))[1],
    }
    revoked, text = create(store, Role.parse("operator"))
    revoke(store, revoked.token_id)
    tokens["revoked"] = text
    return tokens


@contextmanager
def serving(store: Store, key: Path | None = None) -> Iterator[str]:
    """The app on a free loopback port, for as long as the block runs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(store, key), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
