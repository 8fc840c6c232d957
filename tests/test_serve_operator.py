"""The operator's pages of `gpuledger serve`: misses by cause, the device timeline around a
miss, capacity in time. The store is the two-tenant sample with each tenant's late start
(tests/serve_helpers.py `late_start_events` works its causes out by hand)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.serve_helpers import Served, make_store, make_tokens, serving


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("operator")
    store = make_store(f"sqlite:///{tmp / 'ledger.db'}", tmp, late=True)
    tokens = make_tokens(store)
    with serving(store) as base:
        yield Served(base, store, tokens)
    store.close()


def _page(served: Served, path: str, who: str = "operator") -> str:
    status, _, body = served.call(path, served.tokens[who])
    assert status == 200, (path, status, body[:300])
    return body.decode()


def _table(html: str, css: str) -> list[list[str]]:
    """The rows of the first table of class `css`, as cell texts (tags stripped)."""
    found = re.search(rf'<table class="{css}">(.*?)</table>', html, re.S)
    assert found, css
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", found[1], re.S)
    return [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows[1:]
    ]


def test_misses_grouped_by_cause(served: Served) -> None:
    # each tenant's j-200: capacity 9000 s (its cause), fault 600 s
    html = _page(served, "/promises")
    assert _table(html, "causes") == [
        ["fault", "provider", "0", "1200"],
        ["capacity", "provider", "2", "18000"],
    ]
    html = _page(served, "/promises", "acme")
    assert _table(html, "causes") == [
        ["fault", "provider", "0", "600"],
        ["capacity", "provider", "1", "9000"],
    ]
    assert "bravo" not in html
    # one cause's misses, by its link; none is the fault's
    html = _page(served, "/promises?cause=capacity&tenant=bravo")
    assert [r[1] for r in _table(html, "misses")] == ["bravo-promise-j-200"]
    html = _page(served, "/promises?cause=fault")
    assert _table(html, "misses") == [["No missed promises."]]
    assert _table(_page(served, "/promises?bearer=customer"), "causes") == [["No missed start."]]


def test_a_bad_cause_is_a_400(served: Served) -> None:
    status, _, body = served.call("/promises?cause=gremlins", served.tokens["operator"])
    assert status == 400 and b"cause: one of late_submission, held_by_tenant" in body


def test_the_device_timeline_around_a_miss(served: Served) -> None:
    html = _page(served, "/devices?tenant=acme&promise=promise-j-200")
    # its wait [11:30, 14:10), 30 min either side: 11:00 -> 14:40
    assert "2026-01-07T11:00:00Z → 2026-01-07T14:40:00Z" in html
    assert _table(html, "cause-seconds") == [["fault", "600"], ["capacity", "9000"]]
    # device 0: A-100 until 14:00, no grant 14:00-14:05, A-200 from 14:05; faulted throughout
    device0 = _table(html, "device")
    assert [(r[0][11:16], r[1][11:16], r[2], r[3], r[4]) for r in device0] == [
        ("11:00", "14:00", "10800", "faulted", "acme / A-100"),
        ("14:00", "14:05", "300", "faulted", "–"),
        ("14:05", "14:40", "2100", "faulted", "acme / A-200"),
    ]
    same = _page(served, "/promises/acme/promise-j-200/devices")
    assert _table(same, "device") == device0


@pytest.mark.parametrize(
    "path",
    [
        "/devices?tenant=acme&promise=promise-j-200",
        "/promises/acme/promise-j-200/devices",
        "/story?tenant=acme&promise=promise-j-200",
        "/capacity",
    ],
)
def test_the_fleets_pages_are_the_operators_only(served: Served, path: str) -> None:
    for who in ("acme", "bravo", "collector"):
        status, _, body = served.call(path, served.tokens[who])
        assert status == 403 and b"A-100" not in body


def test_a_promise_met_or_unknown_has_no_device_page(served: Served) -> None:
    for promise in ("promise-j-100", "no-such-promise"):
        status, _, _ = served.call(
            f"/devices?tenant=acme&promise={promise}", served.tokens["operator"]
        )
        assert status == 404


def test_capacity_in_time(served: Served) -> None:
    # 2 whole GPUs discovered 2026-01-06T08:00; the ledger's last event 2026-01-07T15:05
    html = _page(served, "/capacity")
    (whole,) = _table(html, "in-time")
    # discovered: 2 x 31 h 05 min = 62.17 GPU-h
    assert whole[:3] == ["whole", "nvl-eu-west-1", "62.2"]
    days = _table(html, "days")
    # the 6th: 08:00 -> 24:00 free on both GPUs: 32 GPU-h, all free
    assert days[0] == ["2026-01-06", "whole", "nvl-eu-west-1", "32.0", "0.0", "32.0", "0.0", "0.0"]
    assert days[1][:4] == ["2026-01-07", "whole", "nvl-eu-west-1", "30.2"]
    # a period of the 6th alone
    html = _page(
        served, "/capacity?since=2026-01-06T00:00:00Z&until=2026-01-07T00:00:00Z&class=whole"
    )
    assert _table(html, "in-time") == [
        ["whole", "nvl-eu-west-1", "32.0", "0.0", "32.0", "0.0", "0.0"]
    ]
    assert _table(_page(served, "/capacity?class=mig"), "in-time") == [
        ["No device discovered in the period."]
    ]
    status, _, body = served.call("/capacity?since=soon", served.tokens["operator"])
    assert status == 400 and b"since: an RFC 3339 time" in body
