"""This controller's own writes of GPUWorkloads, so that a cached copy older than
one of them is not mistaken for news.

The informer's cache lags the API: right after the status writer patched a
workload, the cache may still hand out the copy from before, and acting on it
(adopting its placement, reconciling it) would undo the write. Guarantees:

- ``wrote(obj)`` records the resourceVersion where our latest write of ``obj``
  landed; ``writing(key)`` marks a write on its way, newer than any version
  (``WRITING``) until ``wrote`` says where it landed.
- ``is_behind(obj)`` is true only for a copy whose resourceVersion is known and
  lower than our last write of it (a copy without one is never behind).
- ``forget(key)`` drops the record (the workload is gone).

Every method takes the lock it is given (the placement state's, so one lock
guards the state as before); it is re-entrant, so callers that hold it already
may call in.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

JSON = Mapping[str, Any]

#: a key's record while a write is on its way: newer than any resourceVersion
WRITING = 1 << 62


def object_key(obj: JSON) -> str:
    """``namespace/name`` of a namespaced object (``default`` when it has none)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def resource_version(obj: JSON) -> int:
    """etcd's resourceVersions are increasing integers (opaque by contract, but
    kube-apiserver's are revisions); 0 when unknown."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


class WriteTracker:
    """workload key -> resourceVersion of this controller's last write of it."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._written: dict[str, int] = {}

    def wrote(self, obj: JSON) -> None:
        """Records the resourceVersion of this controller's latest write of ``obj``."""
        rv = resource_version(obj)
        if rv:
            with self._lock:
                self._written[object_key(obj)] = rv

    def writing(self, key: str) -> None:
        """A write of ``key`` is on its way (the status writer): until ``wrote`` says
        where it landed, every cached copy is older than it."""
        with self._lock:
            self._written[key] = WRITING

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
