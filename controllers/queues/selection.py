"""Which GPUQueues select a namespace, remembered per namespace (``QueueBook.selecting``).

Every holder's quota goes through a namespace's default queue, so the question is
asked once per holder at each recount; answered afresh it evaluates every queue's
namespaceSelector (about 1 µs a queue: 114 µs with 100 queues, against 0.7 µs
remembered).

Guarantees:

- **One entry per namespace**, keyed by its name and tagged with the
  resourceVersion it was answered for: a newer version of the namespace (its labels
  may have changed) replaces the entry, it never adds one.
- **Only namespaces there are.** A namespace the cache does not hold is answered
  but not remembered, and a namespace's delete event drops its entry
  (``controllers/queues/status.py`` wires ``drop`` to the Namespace informer).
- **Never older than the queues.** ``reset(queues)`` (a GPUQueue's spec changed)
  forgets every answer; an answer computed from any other list of queues than the
  latest reset's (one read before the change) is not kept.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any


class SelectionMemo:
    """namespace -> (resourceVersion, the queues that select it, first by name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a leaf: nothing is called while it is held
        self._entries: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._queues: Sequence[Any] | None = None  # what the answers are computed from

    def get(self, namespace: str, rv: str) -> tuple[str, ...] | None:
        """The queues remembered for ``namespace`` at ``rv``, or None."""
        with self._lock:
            seen = self._entries.get(namespace)
        return seen[1] if seen is not None and seen[0] == rv else None

    def put(self, namespace: str, rv: str, found: tuple[str, ...],
            queues: Sequence[Any]) -> None:
        """Remembers ``found``, computed from ``queues``, for ``namespace`` at ``rv`` (an
        ``rv`` of "": the cache holds no such namespace; nothing is kept, and any
        older entry goes)."""
        with self._lock:
            if not rv:
                self._entries.pop(namespace, None)
            elif queues is self._queues:
                self._entries[namespace] = (rv, found)

    def drop(self, namespace: str) -> None:
        """The namespace was deleted."""
        with self._lock:
            self._entries.pop(namespace, None)

    def reset(self, queues: Sequence[Any]) -> None:
        """The queues changed (now ``queues``): every answer goes."""
        with self._lock:
            self._entries.clear()
            self._queues = queues

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
