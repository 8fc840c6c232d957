"""Documents computed once per state of what they are computed from. The ledger only
grows, so a document stays the answer until an append it reads:

- a tenant's document (the tenant's entries with the fleet's) is keyed by the tenant's
  head and the fleet's head (`read.heads`): a collector posting another tenant's events
  leaves it cached;
- a document over every tenant (an operator's, tenant None) by the tree size.

Each key is computed by one thread at a time (others asking for it wait for that answer,
not compute it again); the least recently used answers go first past CAPACITY."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from ledger import Store, read

CAPACITY = 64


class DocumentCache:
    def __init__(self, store: Store, capacity: int = CAPACITY) -> None:
        self.store = store
        self.capacity = capacity
        self._answers: OrderedDict[Hashable, Any] = OrderedDict()
        self._locks: dict[Hashable, threading.Lock] = {}
        self._guard = threading.Lock()
        self.computed = 0  # how many answers were computed (tests read it)

    def state(self, tenant: str | None) -> Hashable:
        """What a document of `tenant` (None: every tenant) is computed from, as a key."""
        if tenant is None:
            return ("all", read.head(self.store))
        return ("tenant", tenant, *read.heads(self.store, tenant))

    def get(self, tenant: str | None, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The answer for `key`, a document of `tenant`, at the store's current state."""
        full = (self.state(tenant), key)
        with self._guard:
            if full in self._answers:
                self._answers.move_to_end(full)
                return self._answers[full]
            lock = self._locks.setdefault(full, threading.Lock())
        with lock:
            with self._guard:
                if full in self._answers:
                    return self._answers[full]
            answer = compute()
            with self._guard:
                self.computed += 1
                self._answers[full] = answer
                self._locks.pop(full, None)
                while len(self._answers) > self.capacity:
                    self._answers.popitem(last=False)
            return answer
