"""The queue gate: a workload in a GPUQueue is admitted only when it fits its
queue's quota *and* can be placed now, in the one decision that picks its devices
(``PlacementState.decide`` calls ``QueueBook.gate`` under the state's lock).

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

The queues, the namespaces' labels and the workloads are read from the informers'
caches at each decision; nothing here is a second truth.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from pydantic import ValidationError

from api.v1alpha1.keys import QUEUED_LABEL
from api.v1alpha1.queues import GPUQueue
from api.v1alpha1.types import GPUWorkload, Phase
from controllers.queues.outcomes import not_across_queues, reclaiming, wait, workload_need
from controllers.queues.selection import SelectionMemo
from controllers.status.builder import parse_time
from internal.metrics.domain import QUEUE_ADMISSION_WAIT
from internal.scheduling.framework import PREEMPT, Decision
from internal.scheduling.ledger import DEPARTING, Allocation, Ledger, is_departing
from internal.scheduling.queue_usage import OwnerUse, UsageIndex, namespace_of, placements_held
from internal.scheduling.quota import Candidate, Queue, Quotas, without
from internal.scheduling.reclaim import plan_reclaim
from internal.scheduling.scheduler import Scheduler
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors

JSON = Mapping[str, Any]

NO_QUEUE = "NoQueue"
QUEUE_NOT_FOUND = "QueueNotFound"
QUEUE_NOT_ALLOWED = "QueueNotAllowed"
QUEUED = "Queued"
WAITING_FOR_QUOTA = "WaitingForQuota"


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A workload last refused for quota: its place in its queue's order."""

    queue: str
    priority: int
    created: str
    need: Fraction

    def ahead_of(self, other: _Waiting, key: str, other_key: str) -> bool:
        return (-self.priority, self.created, key) < (-other.priority, other.created, other_key)


def _spec_key(raw: JSON) -> tuple[str, str, str]:
    """(name, uid, generation) of a GPUQueue; the resourceVersion and the cached copy
    where it has no generation (an object not from an API server)."""
    m = raw.get("metadata") or {}
    gen = m.get("generation")
    return (m.get("name") or "", m.get("uid") or "",
            str(gen) if gen is not None else f"{m.get('resourceVersion')}/{id(raw)}")


class QueueBook:
    """Queues and namespaces from the caches; the gate of ``decide``."""

    def __init__(self, queues: Any, namespaces: Any, workloads: Any,
                 require_queue: bool = False, floors: ShareFloors = DEFAULT_FLOORS) -> None:
        self._queues, self._namespaces, self._workloads = queues, namespaces, workloads
        self.require_queue = require_queue
        self.floors = floors  # what a share counts at least (sharefloor.py)
        self._lock = threading.Lock()
        self._waiting: dict[str, _Waiting] = {}
        # parsed queues, and the queues selecting each namespace, while no queue changes
        self._seen: tuple[Any, ...] = ()
        self._parsed: list[GPUQueue] = []
        self._selecting = SelectionMemo()
        self._index: UsageIndex | None = None
        self._index_seen: tuple[Any, ...] = ()

    # ------------------------------------------------------------ reading

    def queues(self) -> list[GPUQueue]:
        """The GPUQueues by name (parsed again only when one's spec changed: keyed by
        uid and generation, which the queue-status controller's writes leave alone)."""
        raws = self._queues.list()
        seen = tuple(sorted(_spec_key(r) for r in raws))
        with self._lock:
            if seen == self._seen:
                return self._parsed
        out = []
        for raw in raws:
            try:
                out.append(GPUQueue.model_validate(raw))
            except ValidationError:
                continue  # the CRD's schema refuses what would fail here
        out.sort(key=lambda q: q.metadata.name)
        with self._lock:
            self._seen, self._parsed = seen, out
            self._selecting.reset(out)  # its lock is a leaf
        return out

    def queue(self, name: str) -> JSON | None:
        """The GPUQueue ``name`` as cached, or None."""
        return self._queues.get_by_name(name)

    def quotas(self) -> Quotas:
        return Quotas(Queue.of(q) for q in self.queues())

    def _labels(self, namespace: str) -> dict[str, str]:
        """The namespace's labels a selector reads: not the manager's own mark, which
        follows the selection (a selector on it would chase itself)."""
        ns = self._namespaces.get_by_name(namespace) if namespace else None
        labels = dict(((ns or {}).get("metadata") or {}).get("labels") or {})
        labels.pop(QUEUED_LABEL, None)
        labels.setdefault("kubernetes.io/metadata.name", namespace)
        return labels

    def selecting(self, namespace: str, queues: list[GPUQueue] | None = None
                  ) -> tuple[str, ...]:
        """Every queue whose namespaceSelector selects ``namespace``, by name (the first
        is its default queue)."""
        queues = self.queues() if queues is None else queues
        if not queues:
            return ()
        ns = self._namespaces.get_by_name(namespace) if namespace else None
        rv = ((ns or {}).get("metadata") or {}).get("resourceVersion") or ""
        seen = self._selecting.get(namespace, rv) if rv else None
        if seen is not None:
            return seen
        labels = self._labels(namespace)
        found = tuple(q.metadata.name for q in queues if q.spec.namespace_selector is not None
                      and q.spec.namespace_selector.selects(labels))
        self._selecting.put(namespace, rv, found, queues)
        return found

    def namespace_deleted(self, name: str) -> None:
        """Namespace ``name`` is gone: nothing of it is remembered."""
        self._selecting.drop(name)

    def default_queue(self, namespace: str, queues: list[GPUQueue] | None = None) -> str | None:
        """The first queue (by name) whose namespaceSelector selects ``namespace``."""
        return next(iter(self.selecting(namespace, queues)), None)

    def namespaces(self) -> list[str]:
        """Every namespace in the cache, by name."""
        return sorted(((n.get("metadata") or {}).get("name") or "")
                      for n in self._namespaces.list())

    def resolve(self, w: GPUWorkload) -> tuple[str | None, str, str]:
        """(queue, refusal reason, message): the workload's queue, or why it has none."""
        ns = w.metadata.namespace or "default"
        queues = self.queues()
        name = w.spec.queue_name
        if name:
            q = next((q for q in queues if q.metadata.name == name), None)
            if q is None:
                return name, QUEUE_NOT_FOUND, f"GPUQueue {name} does not exist"
            sel = q.spec.namespace_selector
            if sel is None or not sel.selects(self._labels(ns)):
                return name, QUEUE_NOT_ALLOWED, (
                    f"GPUQueue {name} does not admit namespace {ns} (its namespaceSelector)")
            return name, "", ""
        name = self.default_queue(ns, queues)
        if name is None and self.require_queue:
            return None, NO_QUEUE, (
                f"no GPUQueue selects namespace {ns} and spec.queueName is unset; this "
                "manager admits only workloads in a queue (--require-queue)")
        return name, "", ""

    def queue_of_key(self, key: str, namespace: str) -> str | None:
        """The queue of the workload ``key`` (``namespace/name``), else the namespace's."""
        ns, _, name = key.partition("/")
        raw = self._workloads.get_by_name(name, ns) if name else None
        named = ((raw or {}).get("spec") or {}).get("queueName")
        return named or self.default_queue(namespace, self._parsed)

    def queue_of(self, a: Allocation) -> str | None:
        """Whose quota a holder counts against: its booking's workload's queue, else
        its namespace's queue."""
        ns = namespace_of(a)
        if is_departing(a.key):  # a victim's, as its booking was
            return self.queue_of_key(a.name.removeprefix(DEPARTING), ns)
        if not a.holder and not a.job:
            return self.queue_of_key(a.name, ns)
        return self.default_queue(ns, self._parsed)

    def usage(self, ledger: Ledger) -> tuple[dict[str, Fraction], Mapping[str, OwnerUse]]:
        """(queue -> GPUs used, owner -> what it holds). Every holder counts: a
        preemption's victims while their pods terminate, and the preemptor's
        nomination booked over them, so that no queue's live pods exceed its quota
        at any moment. Kept by a ``UsageIndex`` that follows ``ledger`` (built again
        for another ledger, or when a GPUQueue changed). Call under the placement
        state's lock, as every change of the ledger is made."""
        self.queues()  # parsed again if a queue changed
        with self._lock:
            index, seen = self._index, self._seen
        if index is None or index.ledger is not ledger or self._index_seen != seen:
            if index is not None:
                index.close()
            index = UsageIndex(ledger, self.queue_of, self.floors)
            with self._lock:
                self._index, self._index_seen = index, seen
        return dict(index.used), index.owners

    def _settled(self, used: Mapping[str, Fraction], owners: Mapping[str, OwnerUse],
                 ledger: Ledger) -> dict[str, Fraction]:
        """``used`` once the victims of the preemptions under way are gone (their
        devices are their preemptors', counted in their bookings): what a reclaim
        plans from, so that it never takes again what is already being taken. A
        victim booked again (placed again before its preemptor's pods were made: it
        keeps its owner, as an eviction spends no retry) counts in full: it is not
        being taken any more."""
        gone = {o for a in ledger.bookings() if a.overlap for o in a.overlap}
        victims = []
        for o in gone & owners.keys():
            if not owners[o].holder.holder:
                continue  # its representative is a booking: booked again
            queue = self.queue_of(owners[o].holder)
            if queue is not None:
                victims.append(Candidate(o, o, queue, 0, "", owners[o].gpus))
        return without(used, victims)

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
                self.queue_of_key(v, v.partition("/")[0]) != name for v in decision.victims):
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
        need, note = workload_need(w, self.floors), ""
        if decision.placements and not decision.counted:  # what it would hold exactly
            held = placements_held(decision.placements, ledger.sharing)
            need, note = held.count(self.floors), held.floor_note(self.floors)
        me = _Waiting(name, w.spec.priority, w.metadata.creation_timestamp or "", need)
        ahead = self._ahead(w.key, me, q, quotas, used)
        if ahead is not None:
            return wait(decision.strategy, name, QUEUED, ahead)
        placed = decision.ok or decision.outcome == PREEMPT
        # a preemption (within the queue) is nominated: its pods start once its
        # victims' are gone, so it is held to the quota as it will be then
        why = (quotas.check(q, need, without(self._settled(used, owners, ledger),
                                             self._victims(decision, ledger, owners)))
               if decision.outcome == PREEMPT else quotas.check(q, need, used))
        if why is None and placed:
            self._admitted(w, name)
            return decision
        settled = self._settled(used, owners, ledger)
        plan = plan_reclaim(w, scheduler.snapshot, ledger, scheduler.strategy(decision.strategy),
                            decision.counted, quotas, q, need, settled,
                            self._candidates(w, ledger, owners))
        if plan is not None:
            self._admitted(w, name)
            return reclaiming(decision, w.key, q, need, *plan)
        if why is None:
            self._settle(w.key)  # refused for capacity, not quota: stalls nobody
            return decision
        with self._lock:
            self._waiting[w.key] = me
        return wait(decision.strategy, name, WAITING_FOR_QUOTA,
                    why + note + self._others_hint(w, name))

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
        self._settle(w.key)
        created = parse_time(w.metadata.creation_timestamp)
        if created is not None:
            wait = (datetime.now(UTC) - created).total_seconds()
            QUEUE_ADMISSION_WAIT.labels(queue).observe(max(0.0, wait))

    def _settle(self, key: str) -> None:
        with self._lock:
            self._waiting.pop(key, None)

    def forget(self, key: str) -> None:
        """The workload is gone: it waits for nothing (its place in its queue's order
        goes; ``controllers/queues/status.py`` calls it on the workload's delete)."""
        self._settle(key)

    def remembered(self) -> int:
        """Entries kept (namespaces' queues, workloads waiting for quota): for tests.
        (Not ``__len__``: an empty book must not read as no book.)"""
        with self._lock:
            waiting = len(self._waiting)
        return waiting + len(self._selecting)

    def _ahead(self, key: str, me: _Waiting, q: Queue, quotas: Quotas,
               used: Mapping[str, Fraction]) -> str | None:
        """Why ``key`` must let another go first, or None."""
        borrowing = used.get(q.name, Fraction(0)) + me.need > q.nominal
        mine = quotas.share(q, used)
        with self._lock:
            entries = list(self._waiting.items())
        for other_key, e in sorted(entries, key=lambda kv: (-kv[1].priority, kv[1].created)):
            if other_key == key or not self._exists(other_key):
                continue
            p = quotas.get(e.queue)
            if p is None or not quotas.fits(p, e.need, used):
                continue
            if e.queue == q.name and e.ahead_of(me, other_key, key):
                return (f"waiting behind {other_key} in queue {q.name} "
                        "(priority, then creation time)")
            if e.queue != q.name and borrowing and p.cohort == q.cohort \
                    and quotas.share(p, used) < mine:
                return (f"waiting for {other_key} of queue {p.name}: queue {q.name} borrows "
                        f"more for its weight (fair share {float(mine):.2f})")
        return None

    def _exists(self, key: str) -> bool:
        ns, _, name = key.partition("/")
        raw = self._workloads.get_by_name(name, ns)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp") or \
                (raw.get("status") or {}).get("placements"):
            self._settle(key)
            return False
        return True

    @staticmethod
    def _victims(decision: Decision, ledger: Ledger,
                 owners: Mapping[str, OwnerUse]) -> list[Candidate]:
        if decision.outcome != PREEMPT:
            return []
        out = []
        for v in decision.victims:
            a = ledger.allocation(v)
            if a is not None and a.owner in owners:
                out.append(Candidate(v, a.owner, decision.queue or "", a.priority, "",
                                     owners[a.owner].gpus))
        return out

    def _candidates(self, w: GPUWorkload, ledger: Ledger,
                    owners: Mapping[str, OwnerUse]) -> list[Candidate]:
        out = []
        index = self._index
        for a in ledger.bookings():
            if a.job or a.key == w.key or a.owner not in owners:
                continue
            if index is None or not index.backed(a.owner):
                continue  # its pods are still being made: see UsageIndex.backed
            ns, _, name = a.key.partition("/")
            raw = self._workloads.get_by_name(name, ns) if name else None
            if raw is None:
                continue  # not a workload's booking (a pod book's)
            queue = self.queue_of(a)
            if queue is None:
                continue
            created = (raw.get("metadata") or {}).get("creationTimestamp") or ""
            out.append(Candidate(a.key, a.owner, queue, a.priority, created,
                                 owners[a.owner].gpus))
        return out

    # ------------------------------------------------------------ reporting

    def counts(self) -> dict[str, tuple[int, int]]:
        """queue -> (admitted, pending) workloads, from the cache."""
        out: dict[str, tuple[int, int]] = {}
        queues = self.queues()
        for raw in self._workloads.list():
            status = raw.get("status") or {}
            phase = status.get("phase") or Phase.PENDING.value
            if phase in (Phase.SUCCEEDED.value, Phase.FAILED.value):
                continue
            meta = raw.get("metadata") or {}
            name = ((raw.get("spec") or {}).get("queueName")
                    or self.default_queue(meta.get("namespace") or "default", queues))
            if name is None:
                continue
            admitted, pending = out.get(name, (0, 0))
            if status.get("placements") or phase != Phase.PENDING.value:
                admitted += 1
            else:
                pending += 1
            out[name] = (admitted, pending)
        return out
