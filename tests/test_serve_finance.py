"""Finance's drill-down and the filters of `gpuledger serve`, on a real uvicorn over loopback.

The sample (fixtures/samples/events.jsonl) has one line, INV-2026-01:A-100: A-100 holds 2
GPUs 10:00-14:00; the job marks progress at 10:10, saves ckpt-1 at 10:33, fails for a
hardware cause at 10:53 (XID 79 at 10:52 on its GPU 1) and progresses again at 11:20. The
expected figures below are worked out from those times by hand, by RULES.md's rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from ledger import Store, read
from tests.conftest import run_cli
from tests.serve_helpers import (
    ID_FIELDS,
    Served,
    make_key,
    make_tokens,
    serving,
    two_tenant_events,
)

#: carol: acme's sample again, with ids no path could hold (`/`, `?`, `&`, `#`, `%`)
ODD = "c/x?y=1&z#%2F"


def _carol() -> list[dict[str, Any]]:
    out = []
    for e in two_tenant_events():
        if e["data"].get("tenant") != "acme":
            continue
        copy = json.loads(json.dumps(e).replace("acme", "carol"))
        copy["id"] = f"carol-{copy['id']}"
        for name in ID_FIELDS:
            if isinstance(copy["data"].get(name), str):
                copy["data"][name] = f"{ODD}{copy['data'][name]}"
        out.append(copy)
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("finance")
    url = f"sqlite:///{tmp / 'ledger.db'}"
    path = tmp / "events.jsonl"
    events = two_tenant_events() + _carol()
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert run_cli("init", "--db", url)[0] == 0
    assert run_cli("ingest", "--db", url, str(path))[0] == 0
    store = Store(url)
    from ledger.tokens import Role, create

    tokens = make_tokens(store)
    tokens["carol"] = create(store, Role.parse("tenant:carol"))[1]
    key = make_key(tmp)
    with serving(store, key) as base:
        yield Served(base, store, tokens, key)
    store.close()


def _json(served: Served, path: str, who: str) -> Any:
    status, _, body = served.call(path, served.tokens[who])
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


def _seq(served: Served, tenant: str, entry_id: str) -> int:
    (found,) = [e.seq for e in read.entries(served.store, tenant=tenant) if e.id == entry_id]
    return found


def test_the_findings_of_an_invoice_worked_by_hand(served: Served) -> None:
    doc = _json(served, "/api/v1/findings", "acme")
    by_category = {f["category"]: f for f in doc["items"]}
    assert doc["page"]["total"] == 4
    # restart_lost: back to the checkpoint, 10:33 -> the failure at 10:53, 2 GPUs: 2400 GPU-s
    lost = by_category["restart_lost"]
    assert lost["stretches"] == [["2026-01-07T10:33:00Z", "2026-01-07T10:53:00Z", 2]]
    assert (lost["gpu_seconds"], lost["bearer"], lost["amount"]) == (2400, "provider", "2.00")
    # restart_recovery: the failure at 10:53 to the first progress after it, 11:20: 3240 GPU-s
    assert by_category["restart_recovery"]["gpu_seconds"] == 27 * 60 * 2
    # idle_unexplained: 10:10 -> 10:30, no mark, nothing explains it: the customer disputes it
    idle = by_category["idle_unexplained"]
    assert (idle["gpu_seconds"], idle["bearer"]) == (2400, "disputed")
    # restart_lost cites the failure, the checkpoint it counts back to, the fault, the line
    for entry_id in (
        "j-100:failed:1",
        "j-100:ckpt-1:saved",
        "INV-2026-01:A-100",
        "A-100:granted",
    ):
        assert _seq(served, "acme", entry_id) in lost["cites"], entry_id
    (fault,) = [e.seq for e in read.entries(served.store, type="health.fault")]
    assert fault in lost["cites"]


def test_each_filter_keeps_what_it_names(served: Served) -> None:
    def categories(query: str) -> list[str]:
        return [f["category"] for f in _json(served, f"/api/v1/findings?{query}", "acme")["items"]]

    assert categories("bearer=disputed") == ["idle_unexplained"]
    assert categories("category=restart_lost") == ["restart_lost"]
    assert categories("class=mig") == []  # A-100 is whole
    assert len(categories("class=whole&period=2026-01")) == 4
    assert categories("period=2026-02") == []
    assert len(categories("since=2026-01-07T10:00:00Z&until=2026-01-07T10:00:01Z")) == 4
    assert categories("since=2026-01-07T10:00:01Z") == []  # a line belongs by its start
    operator = _json(served, "/api/v1/lines?tenant=bravo", "operator")["items"]
    assert [line["invoice_id"] for line in operator] == ["bravo-INV-2026-01"]
    both = _json(served, "/api/v1/lines", "operator")["items"]
    assert {line["tenant"] for line in both} == {"acme", "bravo", "carol"}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("bearer=nobody", "bearer: one of provider, customer, disputed, not 'nobody'"),
        ("category=lunch", "category: one of unallocated,"),
        ("class=gold", "class: one of whole, mig, timeslice, not 'gold'"),
        ("period=2026-13", "period: a month as YYYY-MM, not '2026-13'"),
        ("period=January", "period: a month as YYYY-MM"),
        ("since=yesterday", "since: an RFC 3339 time, not 'yesterday'"),
        ("until=2026-01-01T00:00:00Z&since=2026-02-01T00:00:00Z", "until: must be after since"),
        ("period=2026-01&since=2026-01-01T00:00:00Z", "period: give a period or since"),
        ("page=0", "page: a page number, 1 or more, not '0'"),
        ("page=-1", "page: a page number"),
    ],
)
@pytest.mark.parametrize("path", ["/api/v1/findings", "/api/v1/lines", "/findings", "/invoices"])
def test_a_bad_filter_is_a_400_naming_it(
    served: Served, path: str, query: str, message: str
) -> None:
    status, _, body = served.call(f"{path}?{query}", served.tokens["acme"])
    assert status == 400, body
    assert json.loads(body)["error"].startswith(message)


def test_a_tenant_cannot_filter_by_another_tenant(served: Served) -> None:
    for path in ("/api/v1/findings?tenant=bravo", "/findings?tenant=bravo", "/line?tenant=bravo"):
        status, _, body = served.call(path, served.tokens["acme"])
        assert status == 403 and b"bravo-" not in body


def test_every_list_paginates_and_its_links_keep_the_filters(served: Served) -> None:
    from reconcile.serve.filters import PAGE_SIZE

    first = _json(served, "/api/v1/findings?bearer=provider", "operator")
    total = first["page"]["total"]
    assert total == 9  # three tenants, three provider findings each
    assert first["page"]["next"] is None and first["page"]["first"] == 1
    far = _json(served, "/api/v1/findings?bearer=provider&page=2", "operator")
    assert (
        far["items"] == [] and far["page"]["previous"] == "/api/v1/findings?bearer=provider&page=1"
    )
    assert PAGE_SIZE >= total  # one page here; the pager's arithmetic below
    from reconcile.serve.filters import Filters

    rows = list(range(2 * PAGE_SIZE + 3))
    f = Filters(bearer="provider", page=2, given=(("bearer", "provider"), ("page", "2")))
    shown, page = f.paginate("/findings", rows)
    assert shown == rows[PAGE_SIZE : 2 * PAGE_SIZE]
    assert page["next"] == "/findings?bearer=provider&page=3"
    assert page["previous"] == "/findings?bearer=provider&page=1"
    assert (page["first"], page["last"], page["total"]) == (
        PAGE_SIZE + 1,
        2 * PAGE_SIZE,
        len(rows),
    )


def test_ids_holding_slashes_and_query_characters_work(served: Served, tmp_path: Path) -> None:
    invoice, line = f"{ODD}INV-2026-01", f"{ODD}INV-2026-01:A-100"
    q = {"tenant": "carol", "invoice": invoice}
    for path in (
        "/invoice?" + urlencode(q),
        "/line?" + urlencode(q | {"line": line}),
        "/finding?" + urlencode(q | {"line": line, "category": "restart_lost"}),
        "/findings?" + urlencode(q),
        "/letter?" + urlencode(q),
    ):
        status, _, body = served.call(path, served.tokens["carol"])
        assert status == 200, (path, body[:300])
        assert b"acme" not in body and b"bravo" not in body
    status, _, body = served.call("/invoice?" + urlencode(q), served.tokens["carol"])
    # the page's own links carry the id escaped, so following them gives the same line
    assert urlencode({"line": line}).encode() in body.replace(b"&amp;", b"&")
    status, _, body = served.call("/api/v1/dispute?" + urlencode(q), served.tokens["carol"])
    assert status == 200 and json.loads(body)["invoice_id"] == invoice
    findings = _json(served, "/api/v1/findings?" + urlencode(q), "carol")["items"]
    assert {f["line_id"] for f in findings} == {line}


def test_a_finding_page_links_every_cited_entry(served: Served) -> None:
    q = urlencode(
        {
            "tenant": "acme",
            "invoice": "INV-2026-01",
            "line": "INV-2026-01:A-100",
            "category": "stalled_fault",
        }
    )
    status, _, body = served.call(f"/finding?{q}", served.tokens["acme"])
    finding = [
        f for f in _json(served, "/api/v1/findings?category=stalled_fault", "acme")["items"]
    ][0]
    assert status == 200
    for seq in finding["cites"]:
        assert f'href="/entries/{seq}"'.encode() in body
    missing = urlencode(
        {"tenant": "acme", "invoice": "INV-2026-01", "line": "no", "category": "x"}
    )
    status, _, _ = served.call(f"/finding?{missing}", served.tokens["acme"])
    assert status == 404
    status, _, body = served.call("/line?tenant=acme&invoice=INV-2026-01", served.tokens["acme"])
    assert status == 400 and json.loads(body)["error"] == "line: needed"


def test_the_lists_are_their_documents_and_openapi_references_their_schemas(
    served: Served,
) -> None:
    from schemas.documents import DOCUMENTS

    for path, name in (("/api/v1/lines", "serve.lines"), ("/api/v1/findings", "serve.findings")):
        status, _, body = served.call(path, served.tokens["operator"])
        assert status == 200
        DOCUMENTS[name].from_json(body)  # InvalidDocument if not of the format
    status, _, body = served.call("/api/v1/openapi.json")
    doc = json.loads(body)
    refs: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            ref = value.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                refs.add(ref)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(doc["paths"])
    assert {
        "/api/v1/schemas/reconciliation.json",
        "/api/v1/schemas/dispute-packet.json",
        "/api/v1/schemas/serve.lines.json",
        "/api/v1/schemas/serve.findings.json",
        "/api/v1/schemas/report.promises.json",
        "/api/v1/schemas/report.capacity.json",
    } <= refs
    root = Path(__file__).parent.parent / "schemas" / "json" / "documents"
    for ref in refs:  # each is served, with no token, byte for byte as in the repository
        status, headers, body = served.call(ref)
        assert status == 200, ref
        assert body == (root / ref.rsplit("/", 1)[1]).read_bytes()
    for bad in ("../events.json", "..%2F..%2Fpyproject.toml", "nope.json", "reconciliation"):
        status, _, _ = served.call(f"/api/v1/schemas/{bad}")
        assert status == 404, bad


def test_an_invoice_page_lists_its_lines_a_page_at_a_time_and_filters_them(
    served: Served,
) -> None:
    status, _, body = served.call("/invoices/acme/INV-2026-01", served.tokens["acme"])
    assert status == 200 and b"Lines (1)" in body and b"1\xe2\x80\x931 of 1" in body
    # the one line has disputed time but no unallocated time
    status, _, body = served.call(
        "/invoice?tenant=acme&invoice=INV-2026-01&bearer=disputed", served.tokens["acme"]
    )
    assert status == 200 and b"Lines (1)" in body
    status, _, body = served.call(
        "/invoice?tenant=acme&invoice=INV-2026-01&category=unallocated", served.tokens["acme"]
    )
    assert status == 200 and b"Lines (0)" in body
    status, _, _ = served.call(
        "/invoice?tenant=acme&invoice=INV-2026-01&page=x", served.tokens["acme"]
    )
    assert status == 400
    status, _, _ = served.call("/invoice?tenant=acme&invoice=nope", served.tokens["acme"])
    assert status == 404


def test_the_tenants_list_paginates_and_a_tenant_sees_itself(served: Served) -> None:
    doc = _json(served, "/api/v1/tenants", "operator")
    assert doc["tenants"] == ["acme", "bravo", "carol"]
    assert (doc["page"]["total"], doc["page"]["next"]) == (3, None)
    assert _json(served, "/api/v1/tenants?page=2", "operator")["tenants"] == []
    assert _json(served, "/api/v1/tenants", "bravo")["tenants"] == ["bravo"]
    status, _, _ = served.call("/api/v1/tenants?page=0", served.tokens["operator"])
    assert status == 400


def test_periods_sum_the_lines_of_each_month(served: Served) -> None:
    """acme's one line, 2026-01-07 10:00-14:00 on 2 GPUs (28800 GPU-s, billed 24.0000 USD):
    the customer's are startup 10:00-10:10 (1200), checkpoint 10:30-10:33 (360) and
    idle_reserved 13:40-14:00 (2400); the provider's restart_lost 10:33-10:53 (2400),
    restart_recovery 10:53-11:20 (3240), stalled_fault 11:20-13:40 (16800); disputed
    idle_unexplained 10:10-10:30 (2400)."""
    status, _, body = served.call("/periods", served.tokens["acme"])
    text = body.decode()
    row = re.search(r'<table class="periods">.*?</tr>\s*<tr>(.*?)</tr>', text, re.S)
    assert status == 200 and row
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row[1])]
    assert cells == ["2026-01", "1", "1", "24.0000 USD", "3960", "22440", "2400"]
    status, _, body = served.call("/periods", served.tokens["operator"])
    assert b"72.0000 USD" in body  # acme, bravo and carol: the same line thrice
    status, _, body = served.call("/periods?period=2026-02", served.tokens["acme"])
    assert b"No billed line." in body
    assert b'href="/invoices?period=2026-01"' in served.call("/periods", served.tokens["acme"])[2]


def _cards(body: bytes) -> dict[str, str]:
    """The home page's headline cards: label → figure."""
    found = re.findall(
        r'<div class="note">(.*?)</div><div class="figure[^"]*">(.*?)</div>', body.decode()
    )
    return dict(found)


def test_the_headline_and_envelope_take_the_period(served: Served) -> None:
    """acme's one line (above) is billed in January: credit due (provider-borne) 2400 +
    3240 + 16800 = 22440 GPU-s at 24.0000 / 28800 a GPU-second = 18.70 USD; in dispute
    2400 GPU-s = 2.00 USD. February holds none of its lines."""
    acme = served.tokens["acme"]
    status, _, body = served.call("/?period=2026-01", acme)
    assert status == 200
    assert _cards(body) == {
        "invoices": "1",
        "credit due (USD)": "18.70",
        "in dispute (USD)": "2.00",
    }
    assert b"Lines billed in [2026-01-01T00:00:00Z, 2026-02-01T00:00:00Z)" in body
    status, _, body = served.call("/?since=2026-02-01T00:00:00Z", acme)
    assert status == 200 and _cards(body) == {"invoices": "0"}
    # a tenant reads its own only, whatever the period
    assert served.call("/?period=2026-01&tenant=bravo", acme)[0] == 403
    status, _, body = served.call("/invoices?period=2026-02", acme)
    assert status == 200 and b"INV-2026-01" not in body
    assert b"INV-2026-01" in served.call("/invoices?period=2026-01", acme)[2]
    # the envelope: A-100 (neocloud's, whole) and its job are January's; February has none
    status, _, january = served.call("/envelope?period=2026-01", acme)
    status_feb, _, february = served.call("/envelope?period=2026-02", acme)
    assert (status, status_feb) == (200, 200)
    assert "neocloud · whole".encode() in january and b"Envelope: 0 groups" not in january
    assert b"Envelope: 0 groups" in february
    assert served.call("/envelope?period=2026-01&tenant=bravo", acme)[0] == 403
    assert served.call("/envelope?period=2026-13", acme)[0] == 400


def test_each_finding_shows_the_provider_s_answer(tmp_path: Path) -> None:
    """acme's INV-2026-01 (above): the provider accepts restart_lost (2400 GPU-s, 2.00 USD),
    answers idle_unexplained partly (0.50 of its 2.00 USD) and leaves the rest open; bravo's
    same findings stay open (an answer is its tenant's). The findings list, the line and
    the finding pages show each state; the API's findings carry it."""
    from ledger.note import read_signer
    from ledger.tokens import Role, create
    from reconcile.packets.answers import Asked, record_answers
    from tests.serve_helpers import make_store

    store = make_store(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path)
    signer = read_signer(make_key(tmp_path))
    line = "INV-2026-01:A-100"
    recorded = record_answers(
        store,
        "acme",
        "INV-2026-01",
        signer,
        [
            Asked(line, "restart_lost", "accepted"),
            Asked(line, "idle_unexplained", "partly", amount="0.50"),
        ],
    )
    assert recorded.appended == 2
    acme = create(store, Role.parse("tenant:acme"))[1]
    bravo = create(store, Role.parse("tenant:bravo"))[1]
    with serving(store) as base:
        served = Served(base, store, {"acme": acme, "bravo": bravo})
        states = {
            f["category"]: f["answer"] for f in _json(served, "/api/v1/findings", "acme")["items"]
        }
        assert states == {
            "restart_lost": "accepted",
            "idle_unexplained": "partly: 0.50 accepted",
            "restart_recovery": "open",
            "stalled_fault": "open",
        }
        others = _json(served, "/api/v1/findings", "bravo")["items"]
        assert {f["answer"] for f in others} == {"open"}
        status, _, body = served.call("/findings", acme)
        cells = re.findall(r'<td class="answer">(.*?)</td>', body.decode())
        assert status == 200 and sorted(cells) == sorted(states.values())
        q = urlencode({"tenant": "acme", "invoice": "INV-2026-01", "line": line})
        status, _, body = served.call(f"/line?{q}", acme)
        assert status == 200 and b'<td class="answer">accepted</td>' in body
        status, _, body = served.call(f"/finding?{q}&category=idle_unexplained", acme)
        assert status == 200
        assert b'answer: <strong class="answer">partly: 0.50 accepted</strong>' in body
        # bravo cannot read acme's finding, answered or not
        assert served.call(f"/finding?{q}&category=restart_lost", bravo)[0] in (403, 404)
    store.close()
