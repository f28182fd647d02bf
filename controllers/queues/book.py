"""The queue gate: a workload in a GPUQueue is admitted only when it fits its
queue's quota *and* can be placed now, in the one decision that picks its devices
(``PlacementState.decide``'s pass calls ``QueueBook.gate`` on the cache as it
stands, outside its lock; what it read is checked when the decision is booked).

| the workload                                   | the decision                               |
| ---------------------------------------------- | ------------------------------------------ |
| in no queue (none named, none selects its      | today's: placed, or unschedulable with the |
| namespace), ``--require-queue`` off            | retry policy                               |
| in no queue, ``--require-queue`` on            | waits, ``NoQueue``                         |
| names a queue that does not exist              | waits, ``QueueNotFound``                   |
| names a queue that does not select its         | waits, ``QueueNotAllowed``                 |
| namespace                                      |                                            |
| behind another of its queue that fits now, or  | waits, ``Queued`` (the order below)        |
| borrowing while a fairer queue's waits         |                                            |
| fits its quota (and the devices)               | the scheduler's decision                   |
| does not fit, may reclaim or preempt within    | ``Preempting``: the victims' bookings go,  |
| its queue                                      | it is nominated over their pods            |
| does not fit, nothing to reclaim               | waits, ``WaitingForQuota``, with the quota |
|                                                | (``queue a: 16 of 16 GPUs used; ...``)     |

A workload that waits in a queue spends no retry (``controllers/queues/wait.py``).

Order (BestEffortFIFO, as Kueue names it): within a queue by priority, then
creation time. A workload waits while one ahead of it in its queue, last refused
for quota, fits the quota now (it goes first); one ahead that does not fit does
not stall it. Across the queues of a cohort, a workload that would borrow waits
while a queue with a lower ``borrowed / weight`` has such a workload.

The queues, the namespaces' selections, the workloads and each queue's waiting
line are the queue manager's (``controllers/queues/manager.py``), kept from the
informers' events: a decision lists no informer and sorts nothing. The rules are
``internal/scheduling/admission.py`` and ``quota.py`` (pure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from api.v1alpha1.queues import GPUQueue
from api.v1alpha1.types import GPUWorkload
from controllers.queues.manager import QueueManager
from controllers.queues.outcomes import not_across_queues, reclaiming, wait, workload_need
from controllers.status.builder import parse_time
from internal.metrics.domain import QUEUE_ADMISSION_WAIT
from internal.scheduling.admission import Waiting, preempted, quota_refusal, settled
from internal.scheduling.framework import PREEMPT, Decision
from internal.scheduling.ledger import DEPARTING, Allocation, Ledger, is_departing
from internal.scheduling.queue_usage import OwnerUse, UsageIndex, namespace_of, placements_held
from internal.scheduling.quota import Candidate, Queue, Quotas
from internal.scheduling.reclaim import plan_reclaim
from internal.scheduling.scheduler import Scheduler
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors

JSON = Mapping[str, Any]

NO_QUEUE = "NoQueue"
QUEUE_NOT_FOUND = "QueueNotFound"
QUEUE_NOT_ALLOWED = "QueueNotAllowed"
QUEUED = "Queued"
WAITING_FOR_QUOTA = "WaitingForQuota"
#: a pod group's booking (``controllers/podbinding/seedentry.is_group_key``)
GROUP_PREFIX = "PodGroup:"


def _namespace_of_key(key: str) -> str:
    """The namespace of a booking's key: ``ns/name``, or the pod binding's
    ``Kind:ns/name`` (``PodGroup:``, ``StatefulSet:``; a namespace has no ':')."""
    return key.partition("/")[0].rpartition(":")[2]


class QueueBook:
    """The gate of ``decide``, on what the queue manager keeps (``manager``)."""

    def __init__(self, queues: Any, namespaces: Any, workloads: Any,
                 require_queue: bool = False, floors: ShareFloors = DEFAULT_FLOORS) -> None:
        """``queues``, ``namespaces``, ``workloads``: the informers (anything with
        ``add_event_handler``) the manager follows; never read here."""
        self.manager = QueueManager()
        self.manager.watch(queues, namespaces, workloads)
        self.require_queue = require_queue
        self.floors = floors  # what a share counts at least (sharefloor.py)

    # ------------------------------------------------------------ reading

    def queues(self) -> list[GPUQueue]:
        """The GPUQueues by name (the same list while no queue's spec changes)."""
        return self.manager.queues()

    def queue(self, name: str) -> JSON | None:
        """The GPUQueue ``name`` as cached, or None."""
        return self.manager.raw_queue(name)

    def quotas(self) -> Quotas:
        return self.manager.quotas()

    def selecting(self, namespace: str, queues: list[GPUQueue] | None = None
                  ) -> tuple[str, ...]:
        """Every queue whose namespaceSelector selects ``namespace``, by name (the first
        is its default queue). (``queues``: unused, the manager's are current.)"""
        return self.manager.selecting(namespace)

    def namespace_deleted(self, name: str) -> None:
        """Namespace ``name`` is gone: nothing of it is remembered."""
        self.manager.namespace_deleted(name)

    def default_queue(self, namespace: str, queues: list[GPUQueue] | None = None) -> str | None:
        """The first queue (by name) whose namespaceSelector selects ``namespace``."""
        return next(iter(self.manager.selecting(namespace)), None)

    def namespaces(self) -> list[str]:
        """Every namespace in the cache, by name."""
        return self.manager.namespaces()

    def resolve(self, w: GPUWorkload) -> tuple[str | None, str, str]:
        """(queue, refusal reason, message): the workload's queue, or why it has none."""
        ns = w.metadata.namespace or "default"
        selecting = self.manager.selecting(ns)
        name = w.spec.queue_name
        if name:
            if self.manager.quotas().get(name) is None:
                return name, QUEUE_NOT_FOUND, f"GPUQueue {name} does not exist"
            if name not in selecting:
                return name, QUEUE_NOT_ALLOWED, (
                    f"GPUQueue {name} does not admit namespace {ns} (its namespaceSelector)")
            return name, "", ""
        name = next(iter(selecting), None)
        if name is None and self.require_queue:
            return None, NO_QUEUE, (
                f"no GPUQueue selects namespace {ns} and spec.queueName is unset; this "
                "manager admits only workloads in a queue (--require-queue)")
        return name, "", ""

    def queue_of_key(self, key: str, namespace: str) -> str | None:
        """The queue of the workload ``key`` (``namespace/name``), else the namespace's."""
        return self.manager.queue_of_key(key, namespace)

    def queue_of(self, a: Allocation) -> str | None:
        """Whose quota a holder counts against: its booking's workload's queue, else
        its namespace's queue."""
        ns = namespace_of(a)
        if is_departing(a.key):  # a victim's, as its booking was
            return self.queue_of_key(a.name.removeprefix(DEPARTING), ns)
        if not a.holder and not a.job:
            return self.queue_of_key(a.name, ns)
        return self.default_queue(ns)

    def usage(self, ledger: Ledger) -> tuple[dict[str, Fraction], Mapping[str, OwnerUse]]:
        """(queue -> GPUs used, owner -> what it holds). Every holder counts: a
        preemption's victims while their pods terminate, and the preemptor's
        nomination booked over them, so that no queue's live pods exceed its quota
        at any moment. Read from the counts ``ledger`` keeps itself (``Ledger.usage``,
        given by the placement cache, ``controllers/placement/queue_counts.py``):
        this book keeps no index and takes no lock of its own for it."""
        index = self._index_of(ledger)
        return dict(index.used), index.owners

    def _index_of(self, ledger: Ledger) -> UsageIndex:
        """The usage ``ledger`` counts, or, for a ledger that counts none (one not
        the placement cache's), the same summed from scratch."""
        index = ledger.usage
        return index if index is not None else UsageIndex(ledger, self.queue_of, self.floors)

    def _settled(self, used: Mapping[str, Fraction], owners: Mapping[str, OwnerUse],
                 ledger: Ledger) -> dict[str, Fraction]:
        """``used`` once the preemptions under way are done (``admission.settled``)."""
        overlapped = (o for a in ledger.bookings() if a.overlap for o in a.overlap)
        return settled(used, owners, overlapped, self.queue_of)

    # ------------------------------------------------------------ the gate

    def gate(self, w: GPUWorkload, ledger: Ledger, scheduler: Scheduler,
             across_namespaces: bool = False) -> Decision:
        """The decision for ``w``: the scheduler's, held to its queue's quota
        (``across_namespaces``: its priority is an admin's, see ``admin_priority``)."""
        name, reason, message = self.resolve(w)
        strategy = (w.spec.scheduling_strategy.value if w.spec.scheduling_strategy
                    else "leastLoaded")
        if reason:
            return wait(strategy, name, reason, message)
        decision = scheduler.schedule(w, across_namespaces=across_namespaces)
        if decision.outcome == PREEMPT and any(
                self.queue_of_key(v, _namespace_of_key(v)) != name for v in decision.victims):
            decision = not_across_queues(decision)
        if name is None:
            return decision  # outside any queue: today's meaning
        decision.queue = name
        if decision.wait_reason:
            return decision  # its spec waits whatever the quota (below a share floor)
        quotas = self.quotas()
        q = quotas.get(name)
        assert q is not None  # resolve() found it
        used, owners = self.usage(ledger)
        need, note = self._need(w, decision, ledger)
        me = Waiting(name, w.spec.priority, w.metadata.creation_timestamp or "", need)
        ahead = self.manager.ahead(w.key, me, q, quotas, used)
        if ahead is not None:
            return wait(decision.strategy, name, QUEUED, ahead)
        placed = decision.ok or decision.outcome == PREEMPT
        why = quota_refusal(quotas, q, need, used, decision.outcome == PREEMPT,
                            lambda: self._settled(used, owners, ledger),
                            preempted(decision, ledger.allocation, owners))
        if why is None and placed:
            self._admitted(w, name)
            return decision
        taken = self.reclaim(w, w.key, q, need, ledger, scheduler, decision)
        if taken is not None:
            self._admitted(w, name)
            return taken
        if why is None:
            self.manager.settle(w.key)  # refused for capacity, not quota: stalls nobody
            return decision
        self.manager.wait(w.key, me)
        return wait(decision.strategy, name, WAITING_FOR_QUOTA,
                    why + note + self._others_hint(w, name))

    def _need(self, w: GPUWorkload, decision: Decision, ledger: Ledger) -> tuple[Fraction, str]:
        """(GPUs ``decision`` would count against ``w``'s queue, a note on share floors):
        what its placements hold exactly, or the spec's need when it has none."""
        if decision.placements and not decision.counted:
            held = placements_held(decision.placements, ledger.sharing)
            return held.count(self.floors), held.floor_note(self.floors)
        return workload_need(w, self.floors), ""

    def still_admits(self, w: GPUWorkload, decision: Decision, ledger: Ledger) -> bool:
        """Does ``decision`` (placed, taking nobody, admitted by ``gate`` into
        ``decision.queue``) still fit its queue's quota with the holders ``ledger``
        has now? Asked when holders changed elsewhere while it was made, so that a
        booking on another node does not send it round again (the placement state's
        stale check). Call under the placement state's lock."""
        if not decision.queue or not decision.ok or decision.victims:
            return False
        quotas = self.quotas()
        q = quotas.get(decision.queue)
        if q is None:
            return False
        used, _ = self.usage(ledger)
        need, _ = self._need(w, decision, ledger)
        return quotas.check(q, need, used) is None

    def reclaim(self, w: GPUWorkload, key: str, q: Queue, need: Fraction, ledger: Ledger,
                scheduler: Scheduler, decision: Decision,
                then: Sequence[GPUWorkload] = ()) -> Decision | None:
        """``decision`` (the scheduler's for ``w``) made a reclaim into ``q`` of
        ``need`` GPUs for ``key`` (``internal/scheduling/reclaim.py``), or None when
        nothing may or need be taken. The gate's, and a pod group's (``w`` its gang,
        ``then`` its later parts, ``key`` its booking's,
        ``controllers/podbinding/groupquota.py``). Call under the placement state's
        lock."""
        quotas = self.quotas()
        index = self._index_of(ledger)
        used, owners = dict(index.used), index.owners
        plan = plan_reclaim(w, scheduler.snapshot, ledger, scheduler.strategy(decision.strategy),
                            decision.counted, quotas, q, need,
                            self._settled(used, owners, ledger),
                            self._candidates(w, key, ledger, index), then)
        return None if plan is None else reclaiming(decision, key, q, need, *plan)

    def _others_hint(self, w: GPUWorkload, queue: str) -> str:
        """For a workload that took its namespace's default queue: the other queues
        that select its namespace, which it could name (else nothing)."""
        if w.spec.queue_name:
            return ""
        ns = w.metadata.namespace or "default"
        others = [q for q in self.selecting(ns) if q != queue]
        if not others:
            return ""
        return (f"; namespace {ns} is also selected by GPUQueue {', '.join(others)}: a "
                f"workload without spec.queueName goes to {queue}, the first by name; set "
                "spec.queueName to use another")

    def _admitted(self, w: GPUWorkload, queue: str) -> None:
        self.manager.settle(w.key)
        created = parse_time(w.metadata.creation_timestamp)
        if created is not None:
            wait = (datetime.now(UTC) - created).total_seconds()
            QUEUE_ADMISSION_WAIT.labels(queue).observe(max(0.0, wait))

    def forget(self, key: str) -> None:
        """The workload is gone: it waits for nothing (the manager also hears of it
        from the workload's delete event)."""
        self.manager.settle(key)

    def remembered(self) -> int:
        """Entries kept (namespaces' queues, workloads waiting for quota): for tests.
        (Not ``__len__``: an empty book must not read as no book.)"""
        return self.manager.remembered()

    def _candidates(self, w: GPUWorkload, key: str, ledger: Ledger,
                    index: UsageIndex) -> list[Candidate]:
        """What a reclaim (or a preemption within a queue) may take for ``w``,
        booked as ``key``: each GPUWorkload's booking whose pods hold it, and each
        pod group's whose members are all bound (``PodGroup:...``; taken whole:
        its booking is every member's, and the pod binding evicts them all or none,
        ``PodBindingReconciler.evict_holder``)."""
        out = []
        owners = index.owners
        for a in ledger.bookings():
            if a.job or a.key in (w.key, key) or a.owner not in owners:
                continue
            if a.key.startswith(GROUP_PREFIX):
                created = self.manager.group_created(a.key)
                if not a.committed:
                    continue  # a member is still to be bound: it is being placed
            else:
                if not index.backed(a.owner):
                    continue  # its pods are still being made: see UsageIndex.backed
                tracked = self.manager.workload(a.key)
                if tracked is None:
                    continue  # not a workload's booking (another pod book's)
                created = tracked.created
            queue = self.queue_of(a)
            if queue is None:
                continue
            # a group with no members left to say its age (None): taken as the
            # oldest of its priority (the last of them)
            out.append(Candidate(a.key, a.owner, queue, a.priority, created or "",
                                 owners[a.owner].gpus))
        return out

    # ------------------------------------------------------------ reporting

    def counts(self) -> dict[str, tuple[int, int]]:
        """queue -> (admitted, pending) workloads, from the manager."""
        return self.manager.counts()
