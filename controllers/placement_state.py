"""The placing side's view of the cluster: the snapshot of nodes and GPUs, the
ledger of who holds which device, and the scheduler over both, behind one lock.

It is rebuilt from the informers' caches before the first placement after a start
(docs/architecture.md, invariant 4) and then kept current by their events
(``placement_events.CacheEvents``, which ``PlacementState`` inherits). Every
update is idempotent, so an event that the rebuild already saw and then delivers
again changes nothing. Only the leader's reconciler uses it: it is created when
the controller starts leading.

One lock (``PlacementState.lock``, re-entrant) guards all of it, and the parts it
owns rely on it: ``NodeViews`` (what the scheduler sees of each node's GPUs),
``Evictions`` (victims to tell, preemptors waiting) and ``WriteTracker`` (our own
writes, so an older cached copy is not taken for news). Every public method here
takes the lock for what it reads and changes and calls out (the queue, the pod
books) only after releasing it; ``decide`` books a preemption under it in one go.

Every pod event goes to the ledger (``Ledger.sync_pod``): pods are the holders, so
a device comes back only when the last pod holding it is deleted or finishes, and
then whatever waits for capacity (or for a preemption's victims) is woken. A pod
that cannot be read is reported (``on_problem``) and skipped, never raised.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.evictions import Evictions, preempted_message
from controllers.node_views import NodeViews
from controllers.pending import PendingSet
from controllers.placement_events import CacheEvents
from controllers.queue_book import QueueBook
from controllers.write_tracker import WriteTracker
from internal.metrics.domain import BAD_OBJECTS
from internal.scheduling.framework import PREEMPT, Decision
from internal.scheduling.inventory import DEFAULT_STALE_AFTER
from internal.scheduling.ledger import Ledger
from internal.scheduling.resourceslices import SliceInventory
from internal.scheduling.scheduler import Scheduler
from internal.scheduling.snapshot import Snapshot

log = structlog.get_logger("placement")

JSON = Mapping[str, Any]
#: (nodes, gpunodes, workloads, pods) as listed from the caches
Sources = tuple[list[JSON], list[JSON], list[JSON], list[JSON]]
#: (resourceslices, resourceclaims) as listed from the caches (DRA on)
DraSources = tuple[list[JSON], list[JSON]]


class PodBook(Protocol):
    """Another placing controller that books pods of its own in this ledger (the
    seed path's pod binding). Its pods are never counted as foreign GPU pods."""

    def owns(self, pod: JSON) -> bool:
        """Is ``pod`` booked by this book (and so not a foreign pod)?"""
        ...

    def rebuild(self, ledger: Ledger, pods: list[JSON]) -> list[str]:
        """Re-book its bound pods in a freshly rebuilt ``ledger`` (called under the
        state lock, after the workloads' placements). Returns problems found."""
        ...

    def wake(self) -> None:
        """Capacity was freed: retry the pods waiting for it (called unlocked)."""
        ...

    def owns_key(self, ledger_key: str) -> bool:
        """Is ``ledger_key`` one of this book's bookings?"""
        ...

    def evict(self, ledger_key: str, message: str) -> None:
        """A preemptor took this booking's devices: ask its pods to go (called
        unlocked). The booking stays until they are gone."""
        ...


class PlacementState(CacheEvents):
    """The snapshot, the ledger and the scheduler, kept by the informers' events
    (``CacheEvents``) and asked by the reconcilers; every method takes ``lock``."""

    def __init__(self, default_exposure: DeviceExposure, rng: random.Random | None = None,
                 enqueue_waiting: Callable[[Iterable[str]], None] | None = None,
                 enqueue_on_node: Callable[[str], None] | None = None,
                 stale_after: float = DEFAULT_STALE_AFTER.total_seconds(),
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 pod_books: Sequence[PodBook] = (),
                 on_problem: Callable[[JSON, str, str], None] | None = None,
                 dra_driver: str | None = None, queues: QueueBook | None = None) -> None:
        self.lock = threading.RLock()
        self.queues = queues  # the GPUQueues' gate (None: no queues)
        self.nodes = NodeViews(stale_after, clock,
                               SliceInventory(dra_driver) if dra_driver else None)
        self.evictions = Evictions()
        self.writes = WriteTracker(self.lock)
        self._reported: set[str] = set()  # pod/Job UIDs whose problem was reported
        self.default_exposure = default_exposure
        self.rng = rng or random.Random()
        self.ledger = Ledger()
        self.snapshot = Snapshot(self.ledger)
        self.scheduler = Scheduler(self.snapshot, self.ledger, rng=self.rng,
                                   default_exposure=default_exposure)
        self.pending = PendingSet()
        self.ready = False
        self._enqueue_waiting = enqueue_waiting or (lambda keys: None)
        self._enqueue_on_node = enqueue_on_node or (lambda node: None)
        self._on_problem = on_problem or (lambda obj, reason, message: None)
        self.pod_books = tuple(pod_books)

    @property
    def slices(self) -> SliceInventory | None:
        """ResourceSlices of the DRA driver (None: DRA off); see resourceslices.py."""
        return self.nodes.slices

    # ------------------------------------------------------------------ rebuild

    def rebuild(self, read: Callable[[], Sources],
                read_dra: Callable[[], DraSources] | None = None, *,
                read_jobs: Callable[[], list[JSON]] | None = None) -> list[str]:
        """The ledger from the caches: pods and our Jobs first, then committed
        placements, claims, the pod books' pods, and last the nominations of
        preemptors still waiting for their victims (``status.nominatedOver``), whose
        preemption goes on: a victim whose eviction a previous run decided but
        never told it is evicted again.

        ``read`` lists the caches (``read_jobs`` the Jobs); it runs under the lock,
        so an event whose handler waits on the lock meanwhile is applied after the
        rebuild (events are idempotent, so one the rebuild already saw changes
        nothing)."""
        with self.lock:
            nodes, gpunodes, workloads, pods = read()
            jobs = read_jobs() if read_jobs is not None else []
            ours = [p for p in pods if not self._owned(p)]
            slices, claims = read_dra() if read_dra is not None and self.slices else ([], [])
            for sl in slices:
                self.slices.upsert(sl)  # type: ignore[union-attr]
            ledger, problems = Ledger.rebuild(workloads, ours, jobs=jobs, nominations=False)
            for c in claims:
                problems += self._sync_claim(ledger, c)
            for book in self.pod_books:
                problems += book.rebuild(ledger, pods)
            problems += ledger.book_nominations(workloads)
            self.ledger = ledger
            self.snapshot = Snapshot.build(nodes, self.nodes.reset(gpunodes), ledger)
            self.scheduler = Scheduler(self.snapshot, ledger, rng=self.rng,
                                       default_exposure=self.default_exposure)
            self.pending = PendingSet()
            for w in workloads:
                self._track_pending(w)
            self.evictions.reset_blocked(a.key for a in ledger.bookings() if a.overlap)
            victims = [v for a in ledger.bookings() if a.overlap
                       for v in self.evictions.resume(ledger, a, self._booked_elsewhere)]
            self.ready = True
        if victims:
            self._enqueue_waiting(victims)
        for p in problems:
            BAD_OBJECTS.labels("rebuild").inc()
            log.warning("ledger.rebuild.problem", problem=p)
        log.info("ledger.rebuilt", nodes=len(self.snapshot), holders=len(ledger.allocations()))
        return problems

    def invalidate(self, why: str) -> None:
        """An event of the caches was lost (its handler raised): this state may be
        short of a holder. From now on it takes in no event (``ready`` false), and the
        reconciler's next ``ensure_state()`` rebuilds a new one from the caches
        before any placement."""
        with self.lock:
            self.ready = False
            waiting = list(self.pending.waiting)
        log.error("placement.invalidated", reason=why,
                  effect="rebuilt from the caches before the next placement")
        # the lost event may have freed room: the waiting workloads' reconciles
        # rebuild the state first, and find it
        self._wake(waiting)

    def refresh_stale(self) -> None:
        """Re-judges heartbeats (time passes without events); call periodically."""
        with self.lock:
            if not self.ready:
                return
            for view in self.nodes.views():
                self.snapshot.upsert_gpunode(view)

    # ------------------------------------------------------------- placing

    def decide(self, w: GPUWorkload) -> Decision:
        """Schedule ``w`` and, if it fits, book it in the ledger (assumed, uncommitted).

        A preemption is booked here too, under the same lock: the victims' bookings
        are released (their own reconcile then deletes their children, which are
        queued) and ``w`` is nominated over the devices their pods still hold."""
        victims: list[str] = []
        booked: list[tuple[PodBook, str]] = []  # victims of a pod book: their pods go
        with self.lock:
            decision = (self.queues.gate(w, self.ledger, self.scheduler) if self.queues
                        else self.scheduler.schedule(w))
            if decision.ok:
                decision.assume(self.ledger, w)
                self.evictions.unblock(w.key)
            elif decision.outcome == PREEMPT:
                for v in decision.victims:
                    book = next((b for b in self.pod_books if b.owns_key(v)), None)
                    if book is not None:
                        booked.append((book, v))  # its booking stays till its pods go
                        continue
                    self.ledger.forget(v)
                    victims.append(v)
                # workload victims acknowledge their eviction in their own reconcile
                self.evictions.evict(w.key, victims, decision.evict_message
                                     or preempted_message(w.key, w.spec.priority))
                decision.assume(self.ledger, w)
                self.evictions.block(w.key)
            if decision.ok or decision.outcome == PREEMPT:
                self.pending.discard(w.key)
        if victims:
            self._enqueue_waiting(victims)
        for book, key in booked:
            book.evict(key, f"preempted by {w.key} (priority {w.spec.priority}) to make room")
        return decision

    def queue_usage(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(queue -> GPUs used, owner -> what it holds), for the queues' status."""
        with self.lock:
            return self.queues.usage(self.ledger) if self.queues else ({}, {})

    def commit(self, key: str) -> None:
        with self.lock:
            if self.ledger.allocation(key) is not None:
                self.ledger.commit(key)

    def forget(self, key: str) -> None:
        """Release ``key``'s booking (its pods keep what they hold); wakes workloads
        waiting for capacity."""
        with self.lock:
            released = self.ledger.forget(key)
            self.evictions.unblock(key)
            self.evictions.stop_waiting(key)
            waiting = list(self.pending.waiting) if released is not None else []
        if released is not None:
            self._wake(waiting)

    def claim(self, key: str, uid: str | None) -> None:
        """A booking under ``key`` made for another object of that name (deleted and
        re-created) is not this one's: release it."""
        with self.lock:
            a = self.ledger.allocation(key)
            stale = a is not None and bool(a.uid) and bool(uid) and a.uid != uid
        if stale:
            self.forget(key)

    def capacity_freed(self) -> None:
        """Devices were released outside ``forget`` (a pod book's own release):
        wake whatever waits for capacity."""
        with self.lock:
            waiting = list(self.pending.waiting)
        self._wake(waiting)

    def _wake(self, waiting: list[str]) -> None:
        """Unlocked: enqueue ``waiting`` and the blocked preemptors; wake the books."""
        with self.lock:
            waiting = waiting + self.evictions.blocked()
        if waiting:
            self._enqueue_waiting(waiting)
        for book in self.pod_books:
            book.wake()

    def _owned(self, pod: JSON) -> bool:
        """Is ``pod`` booked by one of the pod books (not by the pod events)?"""
        return any(book.owns(pod) for book in self.pod_books)

    def is_committed(self, key: str) -> bool:
        with self.lock:
            return self.ledger.is_committed(key)

    def booking(self, key: str) -> Any:
        """The ledger's booking of ``key`` (an Allocation), or None."""
        with self.lock:
            return self.ledger.allocation(key)

    def held_by(self, key: str) -> bool:
        with self.lock:
            return self.ledger.allocation(key) is not None

    def blockers(self, key: str) -> dict[str, list[str]]:
        """node -> pods that ``key``'s nomination still waits for (empty: none)."""
        with self.lock:
            out = self.ledger.blockers(key)
            if out:
                self.evictions.block(key)
            else:
                self.evictions.unblock(key)
            return out

    def block(self, key: str) -> None:
        """``key`` waits for pods to go: any pod's deletion wakes it."""
        with self.lock:
            self.evictions.block(key)

    def has_node(self, node: str) -> bool:
        with self.lock:
            return self.snapshot.get(node) is not None

    def uuids(self, node: str, devices: list[int]) -> list[str] | None:
        with self.lock:
            info = self.snapshot.get(node)
            if info is None or not info.has_gpunode:
                return None
            out = [info.devices[d].uuid if d in info.devices else "" for d in devices]
        return out if all(out) else None

    def higher_priority_fresh(self, key: str, priority: int) -> bool:
        with self.lock:
            return self.pending.higher_fresh(key, priority)

    def node_gpus(self) -> tuple[dict[str, int], dict[str, int]]:
        """(total usable, allocated) GPUs per node, for the metrics."""
        with self.lock:
            total, used = {}, {}
            for name in self.snapshot.names:
                t = len(self.ledger.usable(name))
                total[name] = t
                used[name] = max(0, t - self.ledger.free_count(name))
            return total, used

    # ------------------------------------------------------- preemption

    def eviction(self, key: str) -> str | None:
        """The eviction ``key``'s reconcile is to take in (its message), or None."""
        with self.lock:
            return self.evictions.message(key)

    def evicted(self, key: str) -> None:
        """The victim's own reconcile took in its eviction (and asked its children
        to go): its preemptors wait only for its pods from now on."""
        with self.lock:
            waiting = self.evictions.acknowledge(key)
        if waiting:
            self._enqueue_waiting(waiting)

    def unacknowledged(self, key: str) -> list[str]:
        """Victims of ``key``'s preemption whose reconcile has not yet taken in the
        eviction: one of theirs may still be creating pods on the nominated devices
        (a victim chosen while its own placement was being committed)."""
        with self.lock:
            return self.evictions.unacknowledged(key)

    def _booked_elsewhere(self, ledger_key: str) -> bool:
        """Is ``ledger_key`` a pod book's booking (evicted through its book)?"""
        return any(book.owns_key(ledger_key) for book in self.pod_books)

    # ------------------------------------------------------- own writes

    def wrote(self, obj: JSON, mark: int | None = None) -> None:
        """Records the resourceVersion of this controller's write of ``obj`` (with
        ``writing``'s ``mark``: unless a later write of it is on its way)."""
        self.writes.wrote(obj, mark)

    def writing(self, key: str) -> int:
        """A write of ``key`` is on its way (the status writer): until ``wrote`` says
        where it landed, every cached copy is older than it. Returns its mark."""
        return self.writes.writing(key)

    def is_behind(self, obj: JSON) -> bool:
        """Is ``obj`` (from the cache) older than this controller's last write of it?"""
        return self.writes.is_behind(obj)
