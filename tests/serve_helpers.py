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


def two_tenant_events() -> list[dict[str, Any]]:
    """acme's sample, then bravo's: the same events with the tenant and every id renamed."""
    events = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
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


def make_store(url: str, tmp: Path) -> Store:
    path = tmp / "two-tenants.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in two_tenant_events()))
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
