"""The appender's shortcuts give the ledger the careful path would: the tree built a level
at a time, inserts that let the unique index find stored keys, and a head reused from the
previous batch only while no other writer has moved it."""

from __future__ import annotations

from hashlib import sha256

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from ledger import Appender, Store, append_stream, verify_ledger
from ledger.merkle import Frontier
from ledger.tables import entries, quarantine
from schemas import Accepted, Origin, validate_event
from tests.conftest import progress


def leaf(i: int) -> bytes:
    return sha256(i.to_bytes(4, "big")).digest()


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 300), st.lists(st.integers(0, 70), max_size=6))
def test_extend_is_push_one_leaf_at_a_time(start: int, runs: list[int]) -> None:
    one_by_one, by_levels = Frontier(0), Frontier(0)
    for i in range(start):
        one_by_one.push(leaf(i))
    by_levels = Frontier(one_by_one.size, list(one_by_one.hashes))
    one_by_one.completed.clear()
    n = start
    for run in runs:
        for i in range(n, n + run):
            one_by_one.push(leaf(i))
        by_levels.extend([leaf(i) for i in range(n, n + run)])
        n += run
        assert (by_levels.size, by_levels.hashes) == (one_by_one.size, one_by_one.hashes)
    assert sorted(by_levels.completed) == sorted(one_by_one.completed)


def accepted(i: int, step: int | None = None, tenant: str = "acme") -> Accepted:
    raw = progress(i, tenant=tenant)
    if step is not None:
        raw["data"]["step"] = step
    return Accepted.of(validate_event(raw), Origin("t.jsonl", i))


def stored(store: Store) -> list[tuple[str, str]]:
    with store.reading() as conn:
        return [
            (r.id, r.event)
            for r in conn.execute(select(entries.c.id, entries.c.event).order_by(entries.c.seq))
        ]


def test_a_batch_mixing_stored_and_new_keys(store: Store) -> None:
    appender = Appender(store)
    appender.append([accepted(i) for i in range(0, 10)])
    # Keys 5..9 are stored (two of them with other content), 10..14 are new.
    batch = [accepted(i) for i in range(5, 15)]
    batch[1] = accepted(6, step=600)
    batch[3] = accepted(8, step=800)
    result = appender.append(batch)
    assert (
        result.appended,
        result.duplicates,
        result.quarantined,
        result.first_seq,
        result.last_seq,
    ) == (5, 3, 2, 11, 15)
    assert [i for i, _ in stored(store)] == [f"p{i}" for i in range(15)]
    with store.reading() as conn:
        assert sorted(r.line for r in conn.execute(select(quarantine.c.line))) == [6, 8]
    # A batch with no stored key: the one after it inserts first again.
    assert appender.append([accepted(i) for i in range(15, 20)]).appended == 5
    assert verify_ledger(store).ok


def test_two_appenders_taking_turns_keep_one_chain(store: Store) -> None:
    """Each appender's remembered head goes stale when the other one writes."""
    first, second = Appender(store), Appender(store)
    for turn in range(6):
        writer = first if turn % 2 == 0 else second
        writer.append([accepted(turn * 40 + i, tenant=f"t{i % 3}") for i in range(40)])
    result = verify_ledger(store)
    assert (result.ok, result.entries, result.tenants) == (True, 240, 3), str(result.problem)


def test_a_head_the_caller_rolled_back_is_not_reused(store: Store) -> None:
    appender = Appender(store)
    appender.append([accepted(i) for i in range(20)])
    try:
        with store.writing():
            appender.append([accepted(i) for i in range(20, 40)])
            raise RuntimeError("the caller's transaction fails after the batch")
    except RuntimeError:
        pass
    append_stream(appender, [accepted(i) for i in range(20, 60)], batch_size=7)
    assert [i for i, _ in stored(store)] == [f"p{i}" for i in range(60)]
    assert verify_ledger(store).ok
