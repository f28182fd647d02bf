"""The manager's one placement state, as every placing controller gets it.

The GPUWorkload reconciler, the pod binding (the seed path) and the DRA claims book
in the same ledger, so they share one ``PlacementStateSource``, passed to each of
them when it is made. Guarantees:

- ``get()`` returns a state that is ``ready``: built and filled from the informers'
  caches before its first use (docs/architecture.md, invariant 4), and filled again,
  in place, after it was invalidated (an informer's handler raised, so it may be
  short of a holder). Two callers that find no ready state fill it once between them.
- There is one state, never replaced: a reconcile that holds it across an
  invalidation decides and commits in the ledger the events feed, never in a
  discarded one (the refill bumps ``generation`` and carries the decisions still in
  flight over, ``PlacementState.rebuild``).
- ``current`` is the state the informers' handlers feed: set before it is first
  filled, so an event that arrives during the fill reaches it (every update is
  idempotent, so one the fill saw already changes nothing). None before the first
  ``get()``; handlers and metrics read it and never build one.
- The pod books (the seed path's ``SeedBook``) are registered before the first
  build (``add_pod_book``); every state is built with all of them.
- Nothing here waits for a cache: the first ``get()`` is a reconcile's, and the
  manager starts its controllers only once every informer made at setup has synced,
  the pod groups' owners (Jobs, JobSets, LeaderWorkerSets) too, so the first fill
  books each bound group member under its group's key
  (tests/integration/podgroups/test_group_keys.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from controllers.placement.pod_book import PodBook
from controllers.placement.state import PlacementState

#: makes a new, empty state with these pod books
Build = Callable[[tuple[PodBook, ...]], PlacementState]
#: fills the state from the caches, first and after an invalidation (``rebuild``)
Fill = Callable[[PlacementState], None]


class PlacementStateSource:
    def __init__(self, build: Build, fill: Fill | None = None) -> None:
        self._build = build
        self._fill = fill
        self._lock = threading.Lock()
        self.current: PlacementState | None = None
        self.pod_books: list[PodBook] = []

    def add_pod_book(self, book: PodBook) -> None:
        """Another controller books pods in this ledger; call before the first
        ``get()`` (a state reads its pod books once, when it is built)."""
        if self.current is not None:
            raise RuntimeError("a pod book must be registered before the placement state "
                               "is built")
        self.pod_books.append(book)

    def get(self) -> PlacementState:
        """The ready state, built and filled first if there is none."""
        state = self.current
        if state is not None and state.ready:
            return state
        with self._lock:
            if self.current is None:
                # the handlers feed it (not ready) during the fill
                self.current = self._build(tuple(self.pod_books))
            if not self.current.ready and self._fill is not None:
                self._fill(self.current)
            return self.current

    def if_ready(self) -> PlacementState | None:
        """The current state when it is ready, else None (never builds one)."""
        state = self.current
        return state if state is not None and state.ready else None
