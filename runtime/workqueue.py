"""A work queue with client-go's guarantees (util/workqueue: queue, delaying, rate limiting).

* A key waiting in the queue is there once, however often it is added (dedup).
* A key handed out by ``get`` is *processing* until ``done``; it is never handed to a
  second worker meanwhile. Adding it while it is processing marks it dirty, and ``done``
  puts it back, so the change is processed again.
* ``add_after`` delays an add (the earliest pending delay wins); ``add_rate_limited``
  delays by the rate limiter's answer; ``forget`` clears the item's failure history.
* ``shut_down`` makes ``get`` return ``(None, True)`` once the queue is empty; adds are
  ignored from then on; pending delayed adds are dropped. ``shut_down_with_drain`` also
  waits until every queued and processing item is done.
* ``idle_for`` says how long the queue has had nothing queued and nothing in hand
  (0 while it has): a caller that yields to the workers (the status writer) asks
  whether work has paused, not whether it paused this very instant.
* Wake-ups are counted: an add (or a ``done`` that puts a dirty item back) wakes one
  idle worker, never all of them; the last ``done`` wakes only a drain waiter. Idle
  workers sleep on one condition, the drain waiter on another over the same lock.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Hashable
from typing import Any

from runtime import metrics
from runtime.ratelimiter import RateLimiter, default_controller_rate_limiter


class WorkQueue:
    """Deduplicating, delaying, rate-limiting FIFO of hashable items."""

    def __init__(self, name: str = "", rate_limiter: RateLimiter | None = None) -> None:
        self.name = name
        self.rate_limiter: RateLimiter = rate_limiter or default_controller_rate_limiter()
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # idle workers in ``get``
        self._drained = threading.Condition(lock)  # ``shut_down_with_drain``
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()
        self._processing: dict[Hashable, float] = {}  # item -> start time
        self._added_at: dict[Hashable, float] = {}
        self._shutting_down = False
        self._drain = False
        self._idle_since: float | None = time.monotonic()  # None: an item queued or in hand
        # delaying part
        self._dcond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Hashable]] = []
        self._waiting: dict[Hashable, tuple[float, int]] = {}
        self._seq = itertools.count()
        self._dthread: threading.Thread | None = None
        if name:
            self._m_adds: Any = metrics.workqueue_adds_total.labels(name)
            self._m_retries: Any = metrics.workqueue_retries_total.labels(name)
            self._m_qdur: Any = metrics.workqueue_queue_duration_seconds.labels(name)
            self._m_wdur: Any = metrics.workqueue_work_duration_seconds.labels(name)
            metrics.queue_gauges.track(self)

    # ---------------------------------------------------------------- basic queue
    def add(self, item: Hashable) -> None:
        with self._cond:
            if self._shutting_down or item in self._dirty:
                return
            if self.name:
                self._m_adds.inc()
            self._dirty.add(item)
            if item in self._processing:
                return
            self._queue.append(item)
            self._added_at[item] = time.monotonic()
            self._idle_since = None
            self._cond.notify()

    def get(self, timeout: float | None = None) -> tuple[Any, bool]:
        """Block for the next item: ``(item, False)``; ``(None, True)`` after shutdown;
        ``(None, False)`` when ``timeout`` passes with nothing to do."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._queue and not self._shutting_down:
                if deadline is None:
                    self._cond.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None, False
                    self._cond.wait(left)
            if not self._queue:
                return None, True
            item = self._queue.popleft()
            now = time.monotonic()
            added = self._added_at.pop(item, None)
            if self.name and added is not None:
                self._m_qdur.observe(now - added)
            self._processing[item] = now
            self._dirty.discard(item)
            return item, False

    def done(self, item: Hashable) -> None:
        with self._cond:
            start = self._processing.pop(item, None)
            if self.name and start is not None:
                self._m_wdur.observe(time.monotonic() - start)
            if item in self._dirty:
                self._queue.append(item)
                self._added_at[item] = time.monotonic()
                self._cond.notify()
            elif not self._processing and not self._queue:
                self._idle_since = time.monotonic()
                if self._drain:
                    self._drained.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def processing(self) -> int:
        with self._cond:
            return len(self._processing)

    def idle_for(self) -> float:
        """Seconds since the queue last had an item queued or in hand (0: it has one)."""
        with self._cond:
            return 0.0 if self._idle_since is None else time.monotonic() - self._idle_since

    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def shut_down(self) -> None:
        with self._dcond:
            self._heap.clear()
            self._waiting.clear()
            self._dcond.notify_all()
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()
            self._drained.notify_all()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """Shut down, then wait until queued and processing items are all done.

        Returns False if ``timeout`` passed first (workers must keep calling ``get``)."""
        self.shut_down()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._drain = True
            while self._queue or self._processing:
                if deadline is None:
                    self._drained.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._drained.wait(left)
            return True

    def _metric_snapshot(self) -> tuple[int, list[float]]:
        with self._cond:
            return len(self._queue), list(self._processing.values())

    # ---------------------------------------------------------------- delaying
    def add_after(self, item: Hashable, delay: float) -> None:
        """Add ``item`` after ``delay`` seconds (now if ``delay <= 0``)."""
        if delay <= 0:
            self.add(item)
            return
        with self._cond:
            if self._shutting_down:
                return
        ready = time.monotonic() + delay
        with self._dcond:
            cur = self._waiting.get(item)
            if cur is not None and cur[0] <= ready:
                return
            seq = next(self._seq)
            self._waiting[item] = (ready, seq)
            heapq.heappush(self._heap, (ready, seq, item))
            if self._dthread is None:
                self._dthread = threading.Thread(
                    target=self._delay_loop, name=f"workqueue-delay-{self.name}", daemon=True
                )
                self._dthread.start()
            self._dcond.notify()

    def pending_delayed(self) -> int:
        with self._dcond:
            return len(self._waiting)

    def _delay_loop(self) -> None:
        while True:
            ready_items: list[Hashable] = []
            with self._dcond:
                if self.shutting_down():
                    return
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, seq, item = heapq.heappop(self._heap)
                    cur = self._waiting.get(item)
                    if cur is not None and cur[1] == seq:
                        del self._waiting[item]
                        ready_items.append(item)
                if not ready_items:
                    wait = self._heap[0][0] - now if self._heap else 10.0
                    self._dcond.wait(min(wait, 10.0))
                    continue
            for item in ready_items:
                self.add(item)

    # ---------------------------------------------------------------- rate limiting
    def add_rate_limited(self, item: Hashable) -> None:
        if self.name:
            self._m_retries.inc()
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: Hashable) -> None:
        self.rate_limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return self.rate_limiter.num_requeues(item)
