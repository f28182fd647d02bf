"""The placement cache's lock: re-entrant, and able to say whether any thread is
inside one of its sections right now.

A scheduling pass reads the cache without the lock (``state.decide``); the stamps
it compares (``internal/scheduling/stamps.py``) are bumped at the end of each
change, so a reader must also know that no writer is half-way through one when it
takes its mark and when it accepts a decision that books nothing. ``busy`` says so:
it is set before a section's first change and cleared after its last stamp.
"""

from __future__ import annotations

import threading
from types import TracebackType


class SectionLock:
    """A ``threading.RLock`` that counts the sections entered (``busy``)."""

    __slots__ = ("_depth", "_lock")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # sections entered and not left, re-entries included

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    @property
    def busy(self) -> bool:
        """Is some thread inside a section now (a writer may be mid-change)?"""
        return self._depth > 0
