"""This controller's own writes of GPUWorkloads, so that a cached copy older than
one of them is not mistaken for news.

The informer's cache lags the API: right after the status writer patched a
workload, the cache may still hand out the copy from before, and acting on it
(adopting its placement, reconciling it) would undo the write. Guarantees:

- ``wrote(obj)`` records the resourceVersion where our latest write of ``obj``
  landed; ``writing(key)`` marks a write on its way, newer than any version
  (``WRITING``) until ``wrote`` says where it landed. ``writing`` returns the
  mark of that write; ``wrote(obj, mark)`` of an earlier write (one that was in
  flight when a later one was submitted) leaves the later one's mark in place.
- ``is_behind(obj)`` is true only for a copy whose resourceVersion is known and
  lower than our last write of it (a copy without one is never behind).
- ``forget(key)`` drops the record (the workload is gone).

Every method takes the lock it is given (the placement state's, so one lock
guards the state as before); it is re-entrant, so callers that hold it already
may call in.
"""

from __future__ import annotations

import itertools
import threading

from internal.objects import JSON, object_key, resource_version

#: a key's record while a write is on its way: newer than any resourceVersion
WRITING = 1 << 62

_marks = itertools.count(1)  # one per write on its way, unique across trackers




class WriteTracker:
    """workload key -> resourceVersion of this controller's last write of it."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._written: dict[str, int] = {}
        self._marks: dict[str, int] = {}  # key -> mark of the latest write on its way

    def wrote(self, obj: JSON, mark: int | None = None) -> None:
        """Records the resourceVersion of this controller's write of ``obj``; with
        ``mark`` (``writing``'s), only if no later write of it is on its way."""
        rv = resource_version(obj)
        if rv:
            key = object_key(obj)
            with self._lock:
                latest = self._marks.get(key)
                if mark is not None and latest is not None and mark != latest:
                    return  # a later write is on its way: every cached copy is older
                self._written[key] = rv
                self._marks.pop(key, None)

    def writing(self, key: str) -> int:
        """A write of ``key`` is on its way (the status writer): until ``wrote`` says
        where it landed, every cached copy is older than it. Returns its mark."""
        mark = next(_marks)
        with self._lock:
            self._written[key] = WRITING
            self._marks[key] = mark
        return mark

    def is_behind(self, obj: JSON) -> bool:
        """Is ``obj`` (from the cache) older than this controller's last write of it?
        (The cache lags the API; acting on an older copy would undo the write.)"""
        rv = resource_version(obj)
        with self._lock:
            return bool(rv) and rv < self._written.get(object_key(obj), 0)

    def forget(self, key: str) -> None:
        """``key`` is gone: its writes no longer matter."""
        with self._lock:
            self._written.pop(key, None)
            self._marks.pop(key, None)
