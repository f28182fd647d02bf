"""GPUQueues: their informers, the gate's book, and the queue-status controller.

``setup_queues`` reads GPUQueues and Namespaces (a namespace's labels pick its
default queue) into the manager's cache and returns the ``QueueBook`` that the
placement state's ``decide`` consults; its queue manager follows the GPUQueue,
Namespace and GPUWorkload informers' events. A GPUQueue's change wakes the waiting
workloads (its quota may have grown); a write of its status does not.

The queue-status controller writes each queue's ``status`` (used, borrowed and
lent GPUs from the ledger; admitted and pending workloads from the cache; the
``Active`` condition) when the queue is made or its spec changes, and looks again
every ``STATUS_PERIOD`` seconds: usage moves with every pod, and at most one write
per queue per period is what it costs (its own writes do not wake it). The same
figures feed the ``gpu_orchestrator_queue_*`` gauges. A queue that selects a
namespace another queue takes first (by name) says so: its ``Overlapping``
condition and a Warning Event (``AnotherQueueFirst``) when that changes.

The namespace-marks controller (``controllers/queues/marks.py``) keeps the marks on
each namespace that the queue admission policies read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import structlog

from api.v1alpha1.queues import ANOTHER_QUEUE_FIRST, QUEUE_ACTIVE, QUEUE_OVERLAPPING
from api.v1alpha1.types import API_VERSION, format_time
from controllers.queues.book import QueueBook
from controllers.queues.marks import NamespaceMarks, every_namespace, shadowed
from controllers.status.conditions import set_condition
from internal.metrics.domain import QUEUES
from internal.scheduling.quota import Queue, Quotas
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors
from runtime import Builder, FuncHandler, Manager, NotFound, Request, Result
from runtime.errors import ApiError
from runtime.predicates import GenerationChangedPredicate

log = structlog.get_logger("queues")

#: seconds between two looks at a queue's usage
STATUS_PERIOD = 5.0

JSON = Mapping[str, Any]


def _num(f: Fraction) -> float | int:
    return int(f) if f.denominator == 1 else round(float(f), 3)


class QueueStatusReconciler:
    """Writes a GPUQueue's status from the ledger (``usage``) and the cache (``book``)."""

    def __init__(self, client: Any, book: QueueBook,
                 usage: Callable[[], dict[str, Fraction] | None],
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 recorder: Any = None) -> None:
        self.client, self.book, self.usage, self.clock = client, book, usage, clock
        self.recorder = recorder

    def desired(self, name: str, used: Mapping[str, Fraction],
                quotas: Quotas, counts: Mapping[str, tuple[int, int]],
                old: JSON, shadow: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        q = quotas.get(name)
        if q is None:
            return None
        u = quotas.usage(q, used)
        admitted, pending = counts.get(name, (0, 0))
        if q.cohort is None and q.borrowing_limit:
            active = (True, "NoCohort", "admitting workloads up to nominalGPUs: "
                      "borrowingLimit is set but the queue has no cohort to borrow from")
        else:
            active = (True, "Ready", "admitting workloads")
        status = {
            "usedGPUs": _num(u.used), "borrowedGPUs": _num(u.borrowed),
            "lentGPUs": _num(u.lent), "admittedWorkloads": admitted,
            "pendingWorkloads": pending,
        }
        now = format_time(self.clock())
        conditions = set_condition(list(old.get("conditions") or ()), QUEUE_ACTIVE, active[0],
                                   active[1], active[2], now, None)
        if shadow:
            conditions = set_condition(conditions, QUEUE_OVERLAPPING, True, ANOTHER_QUEUE_FIRST,
                                       overlap_message(name, shadow), now, None)
        else:
            conditions = [c for c in conditions if c.get("type") != QUEUE_OVERLAPPING]
        status["conditions"] = conditions
        return status

    def reconcile(self, req: Request) -> Result | None:
        used = self.usage()
        if used is None:
            return Result(requeue_after=1.0)  # not leading yet, or rebuilding
        raw = self.book.queue(req.name)
        if raw is None:
            return None
        old = raw.get("status") or {}
        status = self.desired(req.name, used, self.book.quotas(), self.book.counts(), old,
                              shadowed(self.book, req.name))
        if status is None:
            return Result(requeue_after=STATUS_PERIOD)
        was, now = (_overlap(s) for s in (old, status))
        if now is not None and now != was and self.recorder is not None:
            self.recorder.warning(raw, ANOTHER_QUEUE_FIRST, now)
        if any(old.get(k) != v for k, v in status.items() if k != "conditions") or \
                _conditions(old) != _conditions(status):
            status["lastUpdateTime"] = format_time(self.clock())
            try:
                self.client.patch(API_VERSION, "GPUQueue", req.name, {"status": status},
                                  subresource="status")
            except NotFound:
                return None
        return Result(requeue_after=STATUS_PERIOD)


def overlap_message(queue: str, shadow: Mapping[str, str]) -> str:
    """Which of the queue's namespaces go to another queue by default, and how to
    use this one there."""
    by_first: dict[str, list[str]] = {}
    for ns, first in sorted(shadow.items()):
        by_first.setdefault(first, []).append(ns)
    parts = [f"namespace{'s' if len(nss) > 1 else ''} {', '.join(nss)} "
             f"{'are' if len(nss) > 1 else 'is'} also selected by GPUQueue {first}, which "
             "comes first by name" for first, nss in sorted(by_first.items())]
    return (f"{'; '.join(parts)}: their workloads without spec.queueName go there; they "
            f"use this queue only with spec.queueName: {queue}")


def _overlap(status: JSON) -> str | None:
    for c in status.get("conditions") or ():
        if c.get("type") == QUEUE_OVERLAPPING:
            return c.get("message")
    return None


def _conditions(status: JSON) -> list[tuple[Any, ...]]:
    return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or ()]


def queues_unavailable(client: Any) -> str | None:
    """Why the API server serves no GPUQueues (a sentence), or None when it does, or
    when discovery failed for another reason than 404 (the informers retry), as for
    DRA (controllers/dra_availability.py)."""
    try:
        client.resource_for(API_VERSION, "GPUQueue")
    except NotFound as exc:
        return f"the GPUQueue CRD is not installed ({exc})"
    except ApiError as exc:
        log.warning("queues.discovery.failed", code=exc.status, error=str(exc))
    return None


def setup_queues(mgr: Manager, workloads: Any, state: Callable[[], Any],
                 require_queue: bool, floors: ShareFloors = DEFAULT_FLOORS
                 ) -> QueueBook | None:
    """The queues' informers, book, status controller and gauges. ``state()`` is the
    placement state now (None while not leading). None, and nothing read, where the
    API server serves no GPUQueues: informers of a kind that is not served would
    never sync, and the manager would stop at its cache-sync timeout; workloads are
    then placed as without queues (``spec.queueName`` and ``--require-queue`` have
    no effect, said once here)."""
    why = queues_unavailable(mgr.client)
    if why is not None:
        log.warning("queues.unavailable", reason=why,
                    effect="workloads are placed as without queues; GPUQueues and "
                           "Namespaces are not read", require_queue=require_queue)
        return None
    queues = mgr.informer_for(API_VERSION, "GPUQueue")
    namespaces = mgr.informer_for("v1", "Namespace")
    # the queue manager follows the three informers (controllers/queues/manager.py)
    book = QueueBook(queues, namespaces, workloads, require_queue, floors)

    def wake(*_: Any) -> None:
        s = state()
        if s is not None and s.ready:
            s.capacity_freed()

    def spec_changed(old: JSON, new: JSON) -> None:
        # not for our own status writes: they change no quota
        gens = [(o.get("metadata") or {}).get("generation") for o in (old, new)]
        if gens[0] is None or gens[0] != gens[1]:
            wake()

    queues.add_event_handler(FuncHandler(wake, spec_changed, wake, name="queues-wake"))

    def usage() -> dict[str, Fraction] | None:
        s = state()
        return s.queue_usage()[0] if s is not None and s.ready else None

    # a GPUQueue is looked at when it is made or its spec changes, and every
    # STATUS_PERIOD: not when its status changes, or each of our own writes, back
    # through the watch, would look again and write again while usage moves (as fast
    # as a write's round trip: 25 writes in the benchmark's 400-unit burst)
    Builder(mgr).named("gpuqueue").for_(
        API_VERSION, "GPUQueue", GenerationChangedPredicate()).complete(
        QueueStatusReconciler(mgr.client, book, usage,
                              recorder=mgr.event_recorder("gpu-orchestrator")))
    # the marks the queue admission policies read (controllers/queues/marks.py)
    Builder(mgr).named("queue-namespaces").for_("v1", "Namespace").watches(
        API_VERSION, "GPUQueue", every_namespace(book), GenerationChangedPredicate()
    ).complete(NamespaceMarks(mgr.client, book, namespaces.indexer))

    def rows() -> dict[str, dict[str, float]]:
        used = usage() or {}
        quotas = book.quotas()
        counts = book.counts()
        out = {}
        for name, q in quotas.queues.items():
            u = quotas.usage(q, used)
            out[name] = {"nominal": float(q.nominal), "used": float(u.used),
                         "borrowed": float(u.borrowed),
                         "pending": float(counts.get(name, (0, 0))[1])}
        return out

    QUEUES.set_source(rows)
    return book


__all__ = ["Queue", "QueueStatusReconciler", "setup_queues"]
