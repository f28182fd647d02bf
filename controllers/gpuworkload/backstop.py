"""The backstop: every workload that is not settled is reconciled again within a
bounded time, whether or not an event or a timer asks for it.

Events and requeues drive every reconcile; the backstop is what controller-runtime's
periodic resync is, for the workloads that still have something to do (Pending,
Scheduled, or being deleted: Running ones are driven by their children's events,
and Succeeded/Failed ones have nothing left). Every ``period`` it enqueues those
that no reconcile has looked at for a whole period, and marks them; when a marked
workload's reconcile then changes what a user sees (its status, our finalizer),
the reconcile was owed and no event or timer asked for it: a lost requeue. That is
counted (``gpu_orchestrator_backstop_reconciles_total{outcome="acted"}``) and
logged as a warning; it should stay at 0, and a run where it does not has a bug to
find. A marked reconcile that changes nothing is counted ``idle`` (a workload that
waits for pods to go, for instance, has no timer of its own).

Guarantees: a workload is enqueued by the backstop at most once per period; a
reconcile clears its mark whether or not the backstop started it. ``sweep`` is
called every half period by a ``runtime.ticker.Ticker``, a leader runnable of the
manager: only the leader sweeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

import structlog

from internal.metrics.domain import BACKSTOP_RECONCILES
from internal.objects import JSON, object_key

log = structlog.get_logger("backstop")


#: default seconds between two sweeps (``--resync-unsettled-period``)
DEFAULT_PERIOD = 60.0


def unsettled(obj: JSON) -> bool:
    """Has this workload something left to do that no child event may announce?"""
    meta = obj.get("metadata") or {}
    phase = (obj.get("status") or {}).get("phase") or "Pending"
    return bool(meta.get("deletionTimestamp")) or phase in ("Pending", "Scheduled")



class Backstop:
    """Reconciles, every ``period``, the unsettled workloads nobody reconciled."""

    def __init__(self, workloads: Callable[[], Iterable[JSON]],
                 enqueue: Callable[[str], None], period: float = DEFAULT_PERIOD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._workloads = workloads
        self._enqueue = enqueue
        self.period = period
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # key -> when a reconcile last looked at it
        self._marked: set[str] = set()

    # ------------------------------------------------------------ reconcile side

    def reconciled(self, key: str, acted: bool) -> None:
        """A reconcile of ``key`` reported; ``acted``: it changed what a user sees."""
        with self._lock:
            self._last[key] = self._clock()
            marked = key in self._marked
            self._marked.discard(key)
        if not marked:
            return
        BACKSTOP_RECONCILES.labels("acted" if acted else "idle").inc()
        if acted:
            log.warning("backstop.acted", workload=key,
                        why="a reconcile no event or timer asked for changed the status")

    def forget(self, key: str) -> None:
        with self._lock:
            self._last.pop(key, None)
            self._marked.discard(key)

    # ------------------------------------------------------------------ sweeping

    def sweep(self) -> list[str]:
        """Enqueues (and marks) every unsettled workload no reconcile looked at for a
        whole period; returns their keys."""
        now = self._clock()
        due = []
        with self._lock:
            for obj in self._workloads():
                key = object_key(obj)
                if not unsettled(obj):
                    continue
                last = self._last.setdefault(key, now)  # first seen: a period from now
                if now - last >= self.period and key not in self._marked:
                    self._marked.add(key)
                    due.append(key)
        for key in due:
            self._enqueue(key)
        return due
