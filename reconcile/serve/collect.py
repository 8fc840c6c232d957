"""`POST /api/v1/events`: collectors push CloudEvents into the ledger, one batch a request.

The body is read as a file of events would be (ingest/http.py), appended in one
transaction (all of it or none), through the server's one writer: appends are serialised
by a lock, so the ledger sees one batch after another, as from `gpuledger ingest`. The
answer names, for each event in the body's order, what became of it:

- `appended`, with its `seq`;
- `duplicate`: the ledger already held its key with the same bytes (or an earlier event
  of the same request did);
- `quarantined`, with the field and reason: it did not validate, its collector may not
  write it, or its key is held with other bytes (a conflict).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger import Appender, Store, read
from ledger.read import EventKey
from ledger.tokens import TokenInfo
from schemas import Accepted, Record, Rejected
from schemas.owners import Owner

#: The largest body read: a batch of about a thousand events of the usual size.
MAX_BODY_BYTES = 32 << 20


@dataclass
class Counters:
    """What the collector endpoint did since the server started (for /metrics)."""

    requests: int = 0
    by_status: dict[str, int] = field(
        default_factory=lambda: {"appended": 0, "duplicate": 0, "quarantined": 0}
    )


class Writer:
    """The server's one writer path: appends a request's records as one batch at a time."""

    def __init__(self, store: Store) -> None:
        self.appender = Appender(store)
        self.lock = threading.Lock()
        self.counters = Counters()

    def append(self, records: Sequence[Record]) -> list[dict[str, Any]]:
        with self.lock:
            result = self.appender.append(records)
            stored = read.stored_keys(
                self.appender.store, [_key(r) for r in records if isinstance(r, Accepted)]
            )
            answers = _answers(records, stored, result.first_seq, result.last_seq)
            self.counters.requests += 1
            for answer in answers:
                self.counters.by_status[answer["status"]] += 1
            return answers


def caller_rights(info: TokenInfo) -> tuple[Owner, str | None]:
    """A collector writes with its owner's rights under its source; an operator as the
    provider, under any source."""
    if info.role.kind == "collector":
        return info.owner, info.role.name
    return Owner(), None


def _key(record: Accepted) -> EventKey:
    return (record.tenant, record.source, record.id)


def _answers(
    records: Sequence[Record],
    stored: dict[EventKey, tuple[int, str]],
    first: int | None,
    last: int | None,
) -> list[dict[str, Any]]:
    seen: set[EventKey] = set()
    answers = []
    for record in records:
        if isinstance(record, Rejected):
            answers.append(
                {"status": "quarantined", "field": record.field, "reason": record.reason}
            )
            continue
        key = _key(record)
        seq, body = stored.get(key, (None, None))
        answer: dict[str, Any] = {"id": record.id, "source": record.source}
        if body is None or body.encode() != record.body:
            answer |= {
                "status": "quarantined",
                "field": "id",
                "reason": "the ledger holds this source and id with other content (a conflict)",
            }
        elif (
            key not in seen
            and seq is not None
            and first is not None
            and last is not None
            and first <= seq <= last
        ):
            answer |= {"status": "appended", "seq": seq}
        else:
            answer |= {"status": "duplicate", "seq": seq}
        seen.add(key)
        answers.append(answer)
    return answers
