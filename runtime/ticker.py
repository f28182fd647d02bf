"""A runnable that calls a function every period, on a thread of its own.

For the periodic chores of a controller that no event announces (time passing):
added to the manager as a leader runnable, it ticks only while this manager leads.
Guarantees: ticks never overlap (one thread); the first comes one period after
``start``; a tick that raises is logged and the next one comes on time; ``stop``
returns once the thread has ended (or says it has not, after ``timeout``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger("ticker")


class Ticker:
    def __init__(self, name: str, period: float, tick: Callable[[], object]) -> None:
        self.name, self.period, self._tick = name, period, tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self._tick()
            except Exception:
                log.exception("ticker.tick_failed", ticker=self.name)

    def stop(self, timeout: float = 5.0) -> bool:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True
