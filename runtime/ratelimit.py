"""A token bucket (port of golang.org/x/time/rate's reservation semantics).

Used for the client's QPS/burst limit and the work queue's overall bucket limiter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` saved up.

    ``reserve()`` always succeeds and returns how long the caller must wait before acting
    (tokens may go negative, which queues later callers behind earlier ones).
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if qps <= 0:
            raise ValueError("qps must be > 0")
        if burst < 1:
            raise ValueError("burst must be >= 1")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def _advance(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = now

    def reserve(self, n: int = 1) -> float:
        """Take ``n`` tokens; return the delay in seconds until they are really available."""
        with self._lock:
            now = self._clock()
            self._advance(now)
            self._tokens -= n
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self.qps

    def try_accept(self) -> bool:
        """Take a token only if one is available right now."""
        with self._lock:
            self._advance(self._clock())
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False

    def wait(self, stop: threading.Event | None = None) -> None:
        """Block until a token is available (or ``stop`` is set)."""
        delay = self.reserve()
        if delay > 0:
            if stop is not None:
                stop.wait(delay)
            else:
                time.sleep(delay)

    def tokens(self) -> float:
        with self._lock:
            self._advance(self._clock())
            return self._tokens
