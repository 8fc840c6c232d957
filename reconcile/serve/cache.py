"""Documents computed once per ledger size: the ledger only grows, so what was computed at
size N is the answer for every request until the next append. Each key is computed by
one thread at a time (others asking for it wait for that answer, not compute it again);
the least recently used answers go first past CAPACITY."""

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

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The answer for `key` at the ledger's current size, computed when missing."""
        full = (read.head(self.store), key)
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
                self._answers[full] = answer
                self._locks.pop(full, None)
                while len(self._answers) > self.capacity:
                    self._answers.popitem(last=False)
            return answer
