"""How a booking ends: part of the placement cache (``cache.py``), under its lock.

``PlacementCache`` inherits these; they read and change only what the cache owns
(its lock, ledger, evictions and pending set) and wake the waiting workloads after
releasing the lock, as every other change of the cache does.

- ``forget``: the booking goes (its pods keep what they hold); with ``departed``,
  what it held on to after a preemption goes too.
- ``depart``: a preemption's victim gives up its booking while one of its own
  reconciles may still be creating a child on its devices (that child is in the
  ledger only once its create answers): its devices stay held under
  ``departing:<key>`` (``Ledger.depart``), counted as its booking was, by the free
  counts and the queues' usage (docs/architecture.md, invariant 3).
- ``departed``: the victim's own reconcile found none of its children left or being
  made (or it is gone): what it held on to goes.
"""

from __future__ import annotations

import threading
from typing import Any

from controllers.placement.evictions import Evictions
from controllers.placement.pending import PendingSet
from internal.scheduling.ledger import Ledger, departing_key


class Releases:
    """The cache's releases; mixed into ``PlacementCache`` (which sets these)."""

    _lock: threading.RLock
    _ledger: Ledger
    evictions: Evictions
    pending: PendingSet

    def _wake(self, waiting: list[str]) -> Any:
        raise NotImplementedError

    def forget(self, key: str, *, departed: bool = False) -> None:
        """Release ``key``'s booking (its pods keep what they hold), and with
        ``departed`` what it held on to (``depart``); wakes workloads waiting for
        capacity."""
        with self._lock:
            released = self._ledger.forget(key) is not None
            released = (departed and self._ledger.release_departed(key)) or released
            self.evictions.unblock(key)
            self.evictions.stop_waiting(key)
            waiting = list(self.pending.waiting) if released else []
        if released:
            self._wake(waiting)

    def depart(self, key: str) -> None:
        """Release ``key``'s booking while its children may still exist or be being
        made: its devices stay held (``Ledger.depart``) until ``departed``."""
        with self._lock:
            self._ledger.depart(key)
            self.evictions.unblock(key)
            self.evictions.stop_waiting(key)

    def departing(self, key: str) -> bool:
        """Does ``key`` hold on to a released booking (``depart``)?"""
        with self._lock:
            return self._ledger.holding(departing_key(key)) is not None

    def departed(self, key: str) -> None:
        """None of ``key``'s children is left: what it held on to goes; wakes."""
        with self._lock:
            released = self._ledger.release_departed(key)
            waiting = list(self.pending.waiting) if released else []
        if released:
            self._wake(waiting)
