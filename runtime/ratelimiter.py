"""Work-queue rate limiters (port of client-go's util/workqueue default_rate_limiters.go).

A rate limiter answers ``when(item)``: how long to wait before the item may be processed
again; ``forget(item)`` clears its failure history; ``num_requeues(item)`` counts failures.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Protocol

from runtime.ratelimit import TokenBucket


class RateLimiter(Protocol):
    def when(self, item: Hashable) -> float: ...
    def forget(self, item: Hashable) -> None: ...
    def num_requeues(self, item: Hashable) -> int: ...


class _PerItemFailures:
    """The failure count per item that per-item limiters keep, and its bookkeeping."""

    def __init__(self) -> None:
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def forget(self, item: Hashable) -> None:
        with self._lock:
            self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class ItemExponentialFailureRateLimiter(_PerItemFailures):
    """``base * 2**failures`` seconds per item, capped at ``max_delay``."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        super().__init__()
        self.base_delay = base_delay
        self.max_delay = max_delay

    def when(self, item: Hashable) -> float:
        with self._lock:
            exp = self._failures.get(item, 0)
            self._failures[item] = exp + 1
        if exp > 62:  # 2**63 overflows a Go int64; we just cap
            return self.max_delay
        return min(self.base_delay * (2**exp), self.max_delay)

class ItemFastSlowRateLimiter(_PerItemFailures):
    """``fast_delay`` for the first ``max_fast_attempts`` failures, ``slow_delay`` after."""

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        super().__init__()
        self.fast_delay = fast_delay
        self.slow_delay = slow_delay
        self.max_fast_attempts = max_fast_attempts

    def when(self, item: Hashable) -> float:
        with self._lock:
            n = self._failures.get(item, 0) + 1
            self._failures[item] = n
        return self.fast_delay if n <= self.max_fast_attempts else self.slow_delay


class BucketRateLimiter:
    """An overall token bucket: ``qps`` per second, ``burst`` at once, shared by all items."""

    def __init__(
        self, qps: float = 10.0, burst: int = 100, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.bucket = TokenBucket(qps, burst, clock=clock)

    def when(self, item: Hashable) -> float:
        return self.bucket.reserve()

    def forget(self, item: Hashable) -> None:
        return None

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters (every limiter sees every call)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("need at least one limiter")
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(lim.when(item) for lim in self.limiters)

    def forget(self, item: Hashable) -> None:
        for lim in self.limiters:
            lim.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(lim.num_requeues(item) for lim in self.limiters)


def default_controller_rate_limiter() -> MaxOfRateLimiter:
    """client-go's DefaultControllerRateLimiter: per-item 5 ms..1000 s, overall 10 qps/100."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter(10.0, 100)
    )
