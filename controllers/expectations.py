"""Children this controller created that its informer has not shown yet.

The ReplicaSet controller's expectations, keyed by what the create answered: a
reconcile that runs before a new pod reaches the cache (the pod's own watch event
wakes the workload, but so do status writes) sees the child it made instead of
sending a second create that can only answer AlreadyExists (and then a GET).

Guarantees: an expectation ends when the informer shows the object (any event of
that UID), when the owner is forgotten, or after ``ttl`` seconds (a pod created and
deleted between two lists is never seen; the next create then answers AlreadyExists
or makes it again, as without expectations).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from internal.objects import JSON

#: how long a created child is assumed to exist without the informer showing it
TTL = 60.0


class Expectations:
    def __init__(self, ttl: float = TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self._lock = threading.Lock()
        # owner UID -> child UID -> (the created object, when)
        self._by_owner: dict[str, dict[str, tuple[JSON, float]]] = {}
        self._owner_of: dict[str, str] = {}  # child UID -> owner UID

    def created(self, owner_uid: str, obj: JSON) -> None:
        uid = (obj.get("metadata") or {}).get("uid")
        if not uid:
            return
        with self._lock:
            self._by_owner.setdefault(owner_uid, {})[uid] = (obj, self.clock())
            self._owner_of[uid] = owner_uid

    def observed(self, obj: Any) -> None:
        """An informer event (add, update or delete) of ``obj``: the cache knows it."""
        raw = getattr(obj, "obj", obj) or {}
        uid = (raw.get("metadata") or {}).get("uid") if isinstance(raw, Mapping) else None
        if not uid:
            return
        with self._lock:
            owner = self._owner_of.pop(uid, None)
            if owner is None:
                return
            children = self._by_owner.get(owner)
            if children is not None:
                children.pop(uid, None)
                if not children:
                    del self._by_owner[owner]

    def pending(self, owner_uid: str) -> list[JSON]:
        """Children of ``owner_uid`` created and not yet seen (fresher than ``ttl``)."""
        with self._lock:
            children = self._by_owner.get(owner_uid)
            if not children:
                return []
            now = self.clock()
            for uid in [u for u, (_, t) in children.items() if now - t > self.ttl]:
                del children[uid]
                self._owner_of.pop(uid, None)
            if not children:
                del self._by_owner[owner_uid]
                return []
            return [o for o, _ in children.values()]

    def forget(self, owner_uid: str) -> None:
        with self._lock:
            for uid in self._by_owner.pop(owner_uid, {}):
                self._owner_of.pop(uid, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._owner_of)
