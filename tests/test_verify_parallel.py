"""Verify on every core: the ledger checked in ranges by parallel processes
(ledger/verify_ranges.py) passes a good ledger, and a ledger tampered with at a range
boundary is still named at its first bad seq, as the walk from seq 1 names it.

Every ledger here is test_verify_tamper's: 120 entries, batches of 25, tenants acme
(seq not divisible by 3) and zeta (seq divisible by 3). With ranges of at least 20
entries on 2 processes (8 ranges wanted, 120 // 20 = 6 allowed) the ranges are
1-20, 21-40, 41-60, 61-80, 81-100, 101-120: the tampering sits on those boundaries.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from hashlib import sha256
from typing import Any, TypedDict

import pytest
from sqlalchemy import Connection, text

import ledger.evidence
from ledger import Store, verify_ledger
from ledger.checkpoint import sign_checkpoint
from ledger.evidence import build_bundle, verify_bundle
from ledger.note import Signer
from ledger.proofs import ProofError
from ledger.verify_ranges import cut, leaves_in_processes
from tests.test_verify_tamper import (
    SIZE,
    append_unrecorded_row,
    drop_guards,
    edit_tree_node,
    good_ledger,
    sign_a_second_history_at_the_same_size,
    signed_ledger,
    truncate_tail,
)


class Parallel(TypedDict):
    processes: int
    smallest_range: int


PARALLEL: Parallel = {"processes": 2, "smallest_range": 20}


def test_the_ranges_cut_the_ledger_as_worked_out_by_hand() -> None:
    assert cut(120, 8, 20) == [(1, 20), (21, 40), (41, 60), (61, 80), (81, 100), (101, 120)]
    assert cut(121, 8, 20) == [(1, 21), (22, 42), (43, 63), (64, 84), (85, 105), (106, 121)]
    assert cut(19, 8, 20) == [(1, 19)]  # too small to split
    assert cut(1_000_000, 8, 100_000) == [(1 + i * 125_000, (i + 1) * 125_000) for i in range(8)]
    assert cut(0, 8, 20) == []  # an empty ledger


def test_an_empty_ledger_verifies_on_every_core(store: Store) -> None:
    """A store initialised and never appended to (a first ingest killed before its first
    batch committed, say) verifies clean; the parallel pass once crashed cutting seqs 1..0."""
    result = verify_ledger(store, processes=2, smallest_range=1)
    assert result.ok, str(result.problem)
    assert (result.entries, result.ranges) == (0, 0)


def test_a_good_ledger_passes_in_ranges(store: Store) -> None:
    good_ledger(store)
    result = verify_ledger(store, **PARALLEL)
    assert result.ok, str(result.problem)
    assert (result.ranges, result.entries, result.tenants) == (6, SIZE, 2)
    assert result.checked[0] == "leaves (in 6 ranges on 2 processes)"


def test_checkpoints_at_a_range_boundary_are_checked_with_their_signatures(store: Store) -> None:
    signer = Signer.generate("test.example/log")
    signed_ledger(store, signer)  # checkpoints at 60 (a boundary) and 120 (the end)
    result = verify_ledger(store, [signer.verifier], **PARALLEL)
    assert result.ok, str(result.problem)
    assert result.ranges == 6 and "2 checkpoints and their signatures" in result.checked


def test_a_checkpoint_signed_over_other_tenant_heads_is_found(store: Store) -> None:
    """The tenant-head root at size 60 takes heads from ranges before (zeta's last is
    seq 60, acme's seq 59, both in range 41-60); a checkpoint row whose tenant root is
    another makes the pass fall back, and the walk names it."""
    signer = Signer.generate("test.example/log")
    signed_ledger(store, signer)
    with store.engine.begin() as conn:
        drop_guards(conn)
        conn.execute(
            text("UPDATE checkpoints SET tenant_root = :r WHERE tree_size = 60"), {"r": bytes(32)}
        )
    result = verify_ledger(store, **PARALLEL)
    assert result.problem is not None and result.ranges == 0
    assert (result.problem.seq, result.problem.kind) == (60, "checkpoint")
    assert "tenant-head root signed 00000000" in result.problem.message


def _edit_event(seq: int) -> Callable[[Connection], None]:
    def edit(conn: Connection) -> None:
        event = conn.execute(text(f"SELECT event FROM entries WHERE seq = {seq}")).scalar_one()
        conn.execute(
            text(f"UPDATE entries SET event = :e WHERE seq = {seq}"),
            {"e": event.replace(f'"step":{seq}', f'"step":{seq + 1}')},
        )

    return edit


def _delete(seq: int) -> Callable[[Connection], object]:
    return lambda conn: conn.execute(text(f"DELETE FROM entries WHERE seq = {seq}"))


def _zero(column: str, seq: int) -> Callable[[Connection], object]:
    return lambda conn: conn.execute(
        text(f"UPDATE entries SET {column} = :z WHERE seq = {seq}"), {"z": bytes(32)}
    )


def _swap(first: int, second: int) -> Callable[[Connection], None]:
    def swap(conn: Connection) -> None:
        conn.execute(text(f"UPDATE entries SET seq = -1 WHERE seq = {first}"))
        conn.execute(text(f"UPDATE entries SET seq = {first} WHERE seq = {second}"))
        conn.execute(text(f"UPDATE entries SET seq = {second} WHERE seq = -1"))

    return swap


#: (tamper, first bad seq, kind, whether the parallel pass still runs to the end: the
#: end checks, after it, name a tail cut or added).
BOUNDARY_CASES: dict[str, tuple[Callable[[Connection], Any], int, str, bool]] = {
    "the last entry of a range edited": (_edit_event(40), 40, "edited", False),
    "the first entry of a range edited": (_edit_event(41), 41, "edited", False),
    "the last entry of a range deleted": (_delete(40), 40, "deleted", False),
    "the first entry of a range deleted": (_delete(41), 41, "deleted", False),
    # the next range starts from this stored chain hash: the range ending here must catch it
    "the chain hash a range starts from changed": (_zero("chain_hash", 40), 40, "chain", False),
    "the entries either side of a boundary swapped": (_swap(40, 41), 40, "moved", False),
    # tenant_prev is outside the leaf: only the stitch between ranges sees these
    "acme's first tenant_prev of a range changed": (
        _zero("tenant_prev", 41),
        41,
        "tenant-chain",
        False,
    ),
    "zeta's first tenant_prev of a range changed": (
        _zero("tenant_prev", 42),
        42,
        "tenant-chain",
        False,
    ),
    # level 5, index 1 covers seq 33..64, across three ranges; completed by seq 64
    "a tree node across boundaries edited": (edit_tree_node, 33, "tree", False),
    "the tail truncated at a boundary": (truncate_tail, 101, "truncated", True),
    "a row appended outside any batch": (append_unrecorded_row, SIZE + 1, "inserted", True),
}


@pytest.mark.parametrize("case", list(BOUNDARY_CASES), ids=list(BOUNDARY_CASES))
def test_tampering_at_a_range_boundary_is_found_at_the_first_bad_seq(
    store: Store, case: str
) -> None:
    tamper, seq, kind, passed_in_ranges = BOUNDARY_CASES[case]
    good_ledger(store)
    with store.engine.begin() as conn:
        drop_guards(conn)
        tamper(conn)
    result = verify_ledger(store, **PARALLEL)
    assert result.problem is not None, case
    assert (result.problem.seq, result.problem.kind) == (seq, kind), str(result.problem)
    assert (result.ranges > 0) == passed_in_ranges
    walked = verify_ledger(store, processes=1)
    assert walked.problem == result.problem  # the same words as the walk in one process


def test_a_fork_signed_at_a_boundary_is_found(store: Store) -> None:
    signer = Signer.generate("test.example/log")
    signed_ledger(store, signer)
    sign_a_second_history_at_the_same_size(store, signer)
    result = verify_ledger(store, [signer.verifier], **PARALLEL)
    assert result.problem is not None and result.ranges == 0
    assert (result.problem.seq, result.problem.kind) == (60, "fork")
    assert "checkpoints #1 and #3 both sign size 60" in result.problem.message


def test_one_process_walks_as_before(store: Store) -> None:
    good_ledger(store)
    result = verify_ledger(store, processes=1, smallest_range=20)
    assert result.ok and result.ranges == 0 and result.checked[0] == "leaves"


# -- verify-packet's leaf hashing on every core -------------------------------------------


def test_leaves_hashed_in_processes_are_the_leaves_in_order() -> None:
    items = [str(i).encode() for i in range(100)]
    expected = [sha256(item).digest() for item in items]
    assert leaves_in_processes(lambda item: sha256(item).digest(), items, 2, 10) == expected


def test_leaves_are_not_hashed_in_processes_when_an_item_fails_or_the_list_is_small() -> None:
    items: list[Any] = [str(i).encode() for i in range(100)]
    items[57] = None  # sha256(None) raises TypeError in a child: the caller's loop must meet it
    assert leaves_in_processes(lambda item: sha256(item).digest(), items, 2, 10) is None
    assert (
        leaves_in_processes(lambda item: sha256(item).digest(), items[:15], 2, 10) is None
    )  # one range: not worth it
    assert (
        leaves_in_processes(lambda item: sha256(item).digest(), items[:40], 1, 10) is None
    )  # one core


def test_a_bundle_checked_with_leaves_hashed_in_processes(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """acme's 80 entries (seq not divisible by 3) in ranges of 10 or more: the bundle passes;
    one event edited fails as the one-process loop says (its leaf is no longer in the tree)."""
    store = Store(sqlite_url)
    store.init()
    good_ledger(store)
    signer = Signer.generate("test.example/log")
    sign_checkpoint(store, signer)
    bundle = json.loads(json.dumps(build_bundle(store, "acme")))
    assert len(bundle["entries"]) == 80
    monkeypatch.setattr(ledger.evidence, "SMALLEST_LEAF_RANGE", 10)
    hashed: list[Any] = []

    def recorded(*a: Any) -> Any:
        hashed.append(leaves_in_processes(*a))
        return hashed[-1]

    monkeypatch.setattr(ledger.evidence, "leaves_in_processes", recorded)
    assert verify_bundle(bundle, signer.verifier, processes=2).size == SIZE
    assert (
        hashed and hashed[0] is not None and len(hashed[0]) == 80
    )  # the leaves came from the processes
    bundle["entries"][50]["event"] = bundle["entries"][50]["event"].replace('"step":', '"step":1')
    with pytest.raises(ProofError) as in_ranges:
        verify_bundle(bundle, signer.verifier, processes=2)
    with pytest.raises(ProofError) as in_one:
        verify_bundle(bundle, signer.verifier)
    assert str(in_ranges.value) == str(in_one.value)
