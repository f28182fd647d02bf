"""The unplaced workloads: those never tried yet (by priority, for the priority
gate) and those waiting for capacity (woken when devices free up)."""

from __future__ import annotations

import bisect

from api.v1alpha1.types import GPUWorkload, Phase
from internal.objects import JSON, object_key


def is_placed(status: JSON) -> bool:
    return bool(status.get("placements"))


def is_terminal(status: JSON) -> bool:
    return status.get("phase") in (Phase.SUCCEEDED.value, Phase.FAILED.value)


class PendingSet:
    """Unplaced workloads: those never tried yet (by priority, for the priority gate)
    and those waiting for capacity (woken when devices free up)."""

    def __init__(self) -> None:
        self._fresh: dict[str, int] = {}  # key -> priority, never attempted
        self._prios: list[int] = []  # sorted priorities of _fresh (multiset)
        self.waiting: set[str] = set()  # attempted, unschedulable

    def update(self, obj: JSON) -> None:
        key = object_key(obj)
        self.discard(key)
        status = obj.get("status") or {}
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp") or is_placed(status) or is_terminal(status):
            return
        attempted = any(c.get("type") == "Scheduled" for c in status.get("conditions") or ())
        if attempted:
            self.waiting.add(key)
            return
        try:
            prio = GPUWorkload.model_validate({"spec": obj.get("spec") or {}}).spec.priority
        except ValueError:
            return
        self._fresh[key] = prio
        bisect.insort(self._prios, prio)

    def discard(self, key: str) -> None:
        self.waiting.discard(key)
        prio = self._fresh.pop(key, None)
        if prio is not None:
            del self._prios[bisect.bisect_left(self._prios, prio)]

    def higher_fresh(self, key: str, priority: int) -> bool:
        """Is a never-tried workload other than ``key`` of higher priority waiting?"""
        if not self._prios or self._prios[-1] <= priority:
            return False
        return any(p > priority for k, p in self._fresh.items() if k != key)
