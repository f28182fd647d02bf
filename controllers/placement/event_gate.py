"""How the informers' events enter the placement cache without a watch thread ever
waiting for a scheduling pass.

The placement handlers run on the watch's thread (``inline``, runtime/informer.py:
a thread switch per event and handler halved nothing but the throughput). The
cache's lock is held by ``decide`` across a whole scheduling pass, the queue gate and
reclaim planning included, so a handler that took it would stall the watch, and
every other handler of that informer, behind the pass (issue: "watch threads wait on
scheduling"). The gate takes the lock only if it is free:

- free, and no earlier event deferred: the event is applied now, on the watch's
  thread, under the lock (the common case: one uncontended acquire, as before);
- held, or earlier events still deferred: the event is queued, and the gate's one
  drainer thread applies the queue in order as soon as the lock is free.

Either way every event is applied under the cache's lock, one at a time, in the
order the watches delivered them (an event never overtakes an earlier deferred one).
A reader may meanwhile see the cache a few events behind the informers, as it may
between a store update and its handler; our own writes are booked when made
(``hold_created``), not through the events. The handlers' wake-ups therefore run
under the lock: each is a leaf (a work-queue add, an Event queued to the recorder),
so no lock is taken after it.

A deferred event that raises is lost like an inline one: logged, counted, and
handed to ``on_lost`` (the state is invalidated and filled again from the caches).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger("placement")

#: an event to apply, and what to do when applying it raised (it is lost)
Item = tuple[Callable[[], None], Callable[[BaseException], None]]


class EventGate:
    def __init__(self, lock: Any, name: str = "placement") -> None:
        self._lock = lock  # the cache's lock (re-entrant)
        self._name = name
        self._queue: deque[Item] = deque()
        self._cond = threading.Condition(threading.Lock())  # guards _queue, _thread
        self._thread: threading.Thread | None = None
        #: events that found the lock held or the queue non-empty (tests, metrics)
        self.deferred = 0

    def apply(self, event: Callable[[], None], on_lost: Callable[[BaseException], None]
              ) -> None:
        """Applies ``event`` now if the cache's lock is free and nothing waits
        before it; else queues it for the drainer. Never waits for the lock."""
        if self._lock.acquire(blocking=False):
            try:
                with self._cond:
                    behind = bool(self._queue)
                    if behind:
                        self._defer(event, on_lost)
                if not behind:
                    event()  # raises to the informer, which hands it to on_error
            finally:
                self._lock.release()
            return
        with self._cond:
            self._defer(event, on_lost)

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def _defer(self, event: Callable[[], None], on_lost: Callable[[BaseException], None]
               ) -> None:
        """Under ``_cond``: queue the event and make sure the drainer runs."""
        self._queue.append((event, on_lost))
        self.deferred += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain_forever,
                                            name=f"{self._name}-events", daemon=True)
            self._thread.start()
        elif len(self._queue) == 1:
            self._cond.notify()

    def _drain_forever(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
            with self._lock:
                self._drain()

    def _drain(self) -> None:
        """Under the cache's lock: applies the queue in order, including events
        queued while it runs."""
        while True:
            with self._cond:
                if not self._queue:
                    return
                event, on_lost = self._queue.popleft()
            try:
                event()
            except Exception as exc:  # lost: the state is filled again from the caches
                log.error("placement.event_lost", exc_info=exc)
                try:
                    on_lost(exc)
                except Exception:
                    log.exception("placement.event_lost_hook_failed")
