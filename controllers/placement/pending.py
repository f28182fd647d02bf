"""The unplaced workloads: those never tried yet (by priority, for the priority
gate) and those waiting for capacity (woken when devices free up).

The set follows the workloads' informer events. The priority gate does not take
its word alone: before a workload waits behind a never-tried one, the cache is
asked whether that one is still never tried (``higher_fresh``'s ``current``). An
entry the cache contradicts (the workload placed, tried or gone, its event not
taken in here yet) is dropped: else every workload of lower priority would wait
behind it for ever, each wait a reconcile, so the backstop would not step in."""

from __future__ import annotations

import bisect
from collections.abc import Callable

import structlog

from api.v1alpha1.types import GPUWorkload, Phase
from internal.objects import JSON, object_key

log = structlog.get_logger("pending")


def is_placed(status: JSON) -> bool:
    return bool(status.get("placements"))


def is_terminal(status: JSON) -> bool:
    return status.get("phase") in (Phase.SUCCEEDED.value, Phase.FAILED.value)


def _settled(obj: JSON) -> bool:
    """Placed, ended or being deleted: neither never tried nor waiting."""
    status = obj.get("status") or {}
    return bool((obj.get("metadata") or {}).get("deletionTimestamp")) or \
        is_placed(status) or is_terminal(status)


def _attempted(obj: JSON) -> bool:
    """Has a placement been tried for ``obj`` (its ``Scheduled`` condition)?"""
    return any(c.get("type") == "Scheduled"
               for c in (obj.get("status") or {}).get("conditions") or ())


def never_tried(obj: JSON) -> bool:
    """Is ``obj`` a workload no placement was tried for yet (no ``Scheduled``
    condition, not placed, not ended, not being deleted)?"""
    return not _settled(obj) and not _attempted(obj)


class PendingSet:
    """Unplaced workloads: those never tried yet (by priority, for the priority gate)
    and those waiting for capacity (woken when devices free up)."""

    def __init__(self) -> None:
        self._fresh: dict[str, int] = {}  # key -> priority, never attempted
        self._prios: list[int] = []  # sorted priorities of _fresh (multiset)
        self.waiting: set[str] = set()  # attempted, unschedulable
        #: the highest priority of a never-tried workload (None: none); an int
        #: replaced whole on each change, so it may be read without the lock
        self.top: int | None = None

    def update(self, obj: JSON) -> None:
        key = object_key(obj)
        self.discard(key)
        if _settled(obj):
            return
        if _attempted(obj):  # unschedulable
            self.waiting.add(key)
            return
        try:
            prio = GPUWorkload.model_validate({"spec": obj.get("spec") or {}}).spec.priority
        except ValueError:
            return
        self._fresh[key] = prio
        bisect.insort(self._prios, prio)
        self.top = self._prios[-1]

    def discard(self, key: str) -> None:
        self.waiting.discard(key)
        prio = self._fresh.pop(key, None)
        if prio is not None:
            del self._prios[bisect.bisect_left(self._prios, prio)]
            self.top = self._prios[-1] if self._prios else None

    def higher_fresh(self, key: str, priority: int,
                     current: Callable[[str], JSON | None] | None = None) -> str | None:
        """A never-tried workload other than ``key`` of higher priority (the first
        found), or None. ``current`` reads a workload from the cache (None: gone);
        entries it shows placed, tried or gone are dropped."""
        if not self._prios or self._prios[-1] <= priority:
            return None
        for k, p in list(self._fresh.items()):
            if p <= priority or k == key:
                continue
            if current is not None:
                obj = current(k)
                if obj is None or not never_tried(obj):
                    status = (obj or {}).get("status") or {}
                    log.debug("pending.stale", workload=k, gone=obj is None,
                              phase=status.get("phase"), placed=is_placed(status),
                              effect="no longer holds lower priorities back")
                    self.discard(k)
                    continue
            return k
        return None
