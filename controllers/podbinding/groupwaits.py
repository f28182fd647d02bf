"""How long each incomplete pod group has waited for its members, what has been said
about it once, and which members of nominated groups wait for their victims to go
(``groups.GroupPath``'s memory between reconciles; docs/podgroups.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from internal.scheduling.podgroups import PodGroup

#: how long a group may wait for its members before it is reported (the in-tree
#: gang scheduling's default wait)
DEFAULT_GROUP_TIMEOUT = 300.0


class GroupWaits:
    """When each incomplete group was first seen, which have been reported as
    timed out, and which members of nominated groups wait for their victims to go
    (thread-safe: the reconciler's workers share it)."""

    def __init__(self, timeout: float = DEFAULT_GROUP_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self._since: dict[str, float] = {}
        self._reported: set[str] = set()
        self._told: dict[str, int] = {}  # group -> the member count last told
        self._said: dict[str, str] = {}  # pod UID -> the refusal last said
        self._late: set[str] = set()  # leaders' groups reported for workers not come
        self._nominated: set[str] = set()  # members (pod keys) waiting for victims
        self._lock = threading.Lock()

    def waiting(self, group: PodGroup, present: int) -> tuple[bool, bool, float]:
        """(tell the count again, report the timeout now, seconds waited)."""
        now = self._clock()
        with self._lock:
            since = self._since.setdefault(group.key, now)
            tell = self._told.get(group.key) != present
            self._told[group.key] = present
            late = now - since >= self.timeout and group.key not in self._reported
            if late:
                self._reported.add(group.key)
            return tell, late, now - since

    def tell_once(self, uid: str, message: str) -> bool:
        """True the first time ``message`` is to be said about pod ``uid``."""
        with self._lock:
            if self._said.get(uid) == message:
                return False
            self._said[uid] = message
            return True

    def late_once(self, key: str) -> bool:
        """True the first time ``key`` (a leader's group) is reported late."""
        with self._lock:
            if key in self._late:
                return False
            self._late.add(key)
            return True

    def for_victims(self, key: str, waits: bool) -> None:
        """Member ``key`` waits for its group's victims to go (``waits``), or not."""
        with self._lock:
            if waits:
                self._nominated.add(key)
            else:
                self._nominated.discard(key)

    def nominated(self) -> list[str]:
        """The members waiting for their group's victims to go: freed capacity (a
        victim's pod gone, its holding released) wakes them at once."""
        with self._lock:
            return sorted(self._nominated)

    def placed(self, group: PodGroup) -> None:
        with self._lock:
            self._since.pop(group.key, None)
            self._told.pop(group.key, None)
            self._reported.discard(group.key)
