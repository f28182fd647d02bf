"""The placement cache: the snapshot of nodes and GPUs and the ledger of who holds
which device, behind one lock, with the informers' changes applied to them and the
questions the reconcilers ask of them. ``PlacementState`` (``state.py``)
is this cache with the scheduler on top: it rebuilds it, places workloads in it,
and is the only class that extends it.

Like kube-scheduler's cache, it has one door: its lock (re-entrant), ledger and
snapshot are private, and every change or question is a method that takes the lock
for what it reads and changes and calls out (the queue, the pod books) only after
releasing it. The parts it owns rely on that lock: ``NodeViews`` (what the scheduler
sees of each node's GPUs), ``Evictions`` (victims to tell, preemptors waiting),
``PendingSet`` (who waits for capacity), ``QueueCounts`` (each queue's usage, which
the ledger counts in its own apply/release). Our own writes the caches have not shown
yet are the controller's ``OwnWrites`` (a collaborator with a lock of its own, a
leaf: asked under this lock, it never calls out), so an older cached copy is not
taken for news. Nothing outside this module,
``state`` and ``events`` of this package touches them
(``tests/unit/controllers/placement/test_one_door.py`` greps for it).

The informers' changes of nodes, slices, claims, pods and Jobs are applied by
the cache's event side, ``events.CacheEvents`` (each under this lock, returning
what to wake so that it wakes unlocked: ``wake_if``); a workload's change and
delete are here (``set_workload``, ``workload_gone``). Bookings are committed here
(``commit``) and released here:

- ``forget``: the booking goes (its pods keep what they hold); with ``departed``,
  what it held on to after a preemption goes too.
- ``depart``: a preemption's victim gives up its booking while one of its own
  reconciles may still be creating a child on its devices (that child is in the
  ledger only once its create answers): its devices stay held under
  ``departing:<key>`` (``Ledger.depart``), counted as its booking was, by the free
  counts and the queues' usage (docs/architecture.md, invariant 3).
- ``departed``: the victim's own reconcile found none of its children left or being
  made (or it is gone): what it held on to goes.

Every change of the cache is made by this class, ``state`` or ``events``, under
the lock: the three modules are the cache split by what drives the change (the
reconcilers, the scheduler, the informers). A committed placement this ledger does
not know is adopted from the workload's status (``adopt``), as kube-scheduler's
cache adds a pod it finds bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from api.v1alpha1.types import GPUWorkload
from controllers.placement.evictions import Evictions
from controllers.placement.node_views import NodeViews
from controllers.placement.pending import PendingSet, is_placed, is_terminal
from controllers.placement.pod_book import PodBook
from controllers.placement.queue_counts import QueueCounts
from controllers.placement.section_lock import SectionLock
from controllers.placement.standing import booking_copy, uuids_of
from controllers.shared.own_writes import OwnWrites
from internal.objects import JSON, object_key
from internal.scheduling.bounds import MAX_GPUS_PER_NODE, event_message
from internal.scheduling.holdings import Allocation, DeviceUse
from internal.scheduling.inventory import DEFAULT_STALE_AFTER
from internal.scheduling.ledger import Ledger, LedgerConflict, booking_owner, departing_key
from internal.scheduling.resourceslices import (
    SliceInventory,
    claim_holder_key,
    claim_holding,
    results_for,
)
from internal.scheduling.snapshot import NodeInfo, Snapshot

if TYPE_CHECKING:
    from controllers.queues.book import QueueBook

log = structlog.get_logger("placement")

T = TypeVar("T")

#: the ledger's questions a reader may ask (none of them changes it)
LEDGER_READS = frozenset({
    "allocation", "allocations", "bookings", "blockers", "counted", "counted_total",
    "device_holds", "device_owners", "free_count", "free_devices", "holder",
    "holders", "holding", "is_committed", "job", "pod", "sharing", "usable"})


class PlacementCache:
    """The snapshot and the ledger behind one lock, kept by the informers' changes
    and asked by the reconcilers; every method takes the lock."""

    def __init__(self, enqueue_waiting: Callable[[Iterable[str]], None] | None = None,
                 stale_after: float = DEFAULT_STALE_AFTER.total_seconds(),
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 pod_books: Sequence[PodBook] = (),
                 dra_driver: str | None = None,
                 own_writes: OwnWrites | None = None,
                 max_gpus_per_node: int = MAX_GPUS_PER_NODE,
                 queues: QueueBook | None = None) -> None:
        self._lock = SectionLock()
        self.queues = queues  # the GPUQueues' gate (None: no queues)
        #: each queue's usage, counted by the ledger itself (``queue_counts.py``)
        self._counts = QueueCounts(queues)
        #: GPUs a node may report before it is refused (``bounds.py``)
        self.max_gpus_per_node = max_gpus_per_node
        self._nodes = NodeViews(stale_after, clock,
                               SliceInventory(dra_driver) if dra_driver else None)
        self.evictions = Evictions()
        #: our writes the caches have not shown yet (shared with the reconciler)
        self.own_writes = own_writes if own_writes is not None else OwnWrites()
        self._ledger = self._counts.count(Ledger())
        self._snapshot = Snapshot(self._ledger, max_gpus_per_node)
        self.pending = PendingSet()
        self.ready = False
        self._enqueue_waiting = enqueue_waiting or (lambda keys: None)
        self.pod_books = tuple(pod_books)
        #: UIDs of claims the claim controller is releasing (``release_claim_unless``)
        self._claims_going: set[str] = set()

    @property
    def slices(self) -> SliceInventory | None:
        """ResourceSlices of the DRA driver (None: DRA off); see resourceslices.py."""
        return self._nodes.slices

    def take_refusals(self) -> list[tuple[JSON, str]]:
        """(the Node, its Warning Event's message) of each node refused since last
        asked (``bounds.py``): each refusal once, not once per decision."""
        with self._lock:
            snap = self._snapshot
            return [(dict(raw), event_message(str(raw["metadata"]["name"]), why, source,
                                              snap.max_gpus))
                    for raw, why, source in snap.take_refused()]

    def _sync_claim(self, ledger: Ledger, claim: JSON) -> list[str]:
        """Records in ``ledger`` what ``claim`` holds now (under the lock)."""
        key = claim_holder_key(str((claim.get("metadata") or {}).get("uid") or ""))
        slices = self._nodes.slices
        assert slices is not None
        return ledger.sync(key, lambda: claim_holding(claim, slices), key)

    def capacity_freed(self) -> None:
        """Devices were released outside ``forget`` (a pod book's own release):
        wake whatever waits for capacity."""
        with self._lock:
            waiting = list(self.pending.waiting)
        self._wake(waiting)

    def wake_if(self, waiting: list[str] | None) -> None:
        """Unlocked: wakes ``waiting`` unless None (nothing freed)."""
        if waiting is not None:
            self._wake(waiting)

    def _wake(self, waiting: list[str]) -> None:
        """Unlocked: enqueue ``waiting`` and the blocked preemptors; wake the books."""
        with self._lock:
            waiting = waiting + self.evictions.blocked()
        self._wake_unlocked(waiting)

    def _wake_unlocked(self, waiting: list[str]) -> None:
        """Unlocked: enqueue ``waiting`` (the blocked preemptors already in it)."""
        if waiting:
            self._enqueue_waiting(waiting)
        for book in self.pod_books:
            book.wake()

    def owned(self, pod: JSON) -> bool:
        """Is ``pod`` booked by one of the pod books (not by the pod events)?"""
        return any(book.owns(pod) for book in self.pod_books)

    def is_committed(self, key: str) -> bool:
        with self._lock:
            return self._ledger.is_committed(key)

    def booking(self, key: str) -> Allocation | None:
        """A copy of the ledger's booking of ``key``, or None: read after the lock
        is released, so never the live one."""
        with self._lock:
            return booking_copy(self._ledger.allocation(key))

    def held_by(self, key: str) -> bool:
        with self._lock:
            return self._ledger.allocation(key) is not None

    def has_node(self, node: str) -> bool:
        with self._lock:
            return self._snapshot.get(node) is not None

    def node_devices(self, node: str) -> frozenset[int] | None:
        """Every device index ``node`` has (healthy or not); None while unknown."""
        with self._lock:
            info = self._snapshot.get(node)
            return frozenset(info.devices) if info is not None and info.devices else None

    def uuids(self, node: str, devices: list[int]) -> list[str] | None:
        with self._lock:
            return uuids_of(self._snapshot.get(node), devices)

    def node_records(self, names: Iterable[str]) -> dict[str, NodeInfo]:
        """What the snapshot knows of each of ``names`` (one missing: no such node
        now). Read without the lock: a NodeInfo is replaced, never changed, on an
        event, and a refill replaces the whole snapshot, so each record is one
        moment's, as one read under the lock would be (the lock is let go before
        the records are used either way)."""
        snapshot = self._snapshot
        got = {n: snapshot.get(n) for n in names}
        return {n: info for n, info in got.items() if info is not None}

    # ------------------------------------------------------------ readers

    def node_info(self, node: str) -> NodeInfo | None:
        """The snapshot's view of ``node`` (None: unknown)."""
        with self._lock:
            return self._snapshot.get(node)

    def ledger_read(self, question: str) -> Callable[..., Any]:
        """The ledger's read-only method ``question``, asked under the lock."""
        if question not in LEDGER_READS:
            raise AttributeError(question)

        def ask(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return getattr(self._ledger, question)(*args, **kwargs)
        return ask

    # ------------------------------------------------------------ DRA claims

    def release_claim_unless(self, uid: str, key: str,
                             wanted: Callable[[Allocation | None], bool]) -> bool:
        """Atomically with the bookings: unless ``wanted`` (asked with a copy of
        workload ``key``'s booking) keeps it, claim ``uid`` is marked as going, and
        no placement adopts it any more (``claim_going``). True when marked."""
        with self._lock:
            if wanted(booking_copy(self._ledger.allocation(key))):
                return False
            self._claims_going.add(uid)
            return True

    def claim_gone(self, uid: str) -> None:
        """Claim ``uid`` is deleted, or was kept after all: no longer marked going."""
        with self._lock:
            self._claims_going.discard(uid)

    def claim_going(self, uid: str) -> bool:
        with self._lock:
            return uid in self._claims_going

    def slice_results(self, node: str, devices: Iterable[int], request: str
                      ) -> list[dict[str, Any]] | None:
        """Allocation results naming ``devices`` of ``node`` in the ResourceSlices
        (None: one is not published, or DRA is off)."""
        with self._lock:
            slices = self._nodes.slices
            return results_for(slices, node, devices, request) if slices else None

    def higher_priority_fresh(self, key: str, priority: int,
                              current: Callable[[str], JSON | None] | None = None
                              ) -> str | None:
        """A never-tried workload of higher priority than ``key``'s, which ``key``
        lets go first (the priority gate), or None; ``current`` reads the cache
        (``PendingSet.higher_fresh``). When no never-tried workload has a higher
        priority (nearly always) it is answered from ``PendingSet.top`` without
        the lock, as if asked a moment earlier."""
        top = self.pending.top
        if top is None or top <= priority:
            return None
        with self._lock:
            return self.pending.higher_fresh(key, priority, current)

    def _queue_counts_current(self) -> None:
        """Each queue's usage counted again under the lock if a GPUQueue or a
        namespace's queues changed since (``queue_counts.py``)."""
        if self._counts.stale():
            with self._lock:
                if self._counts.stale():
                    self._counts.count(self._ledger)

    def queue_usage(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(queue -> GPUs used, owner -> what it holds), copied under the lock."""
        with self._lock:
            self._queue_counts_current()
            usage = self._ledger.usage
            return (dict(usage.used), dict(usage.owners)) if usage is not None else ({}, {})

    def node_gpus(self) -> tuple[dict[str, int], dict[str, int]]:
        """(total usable, allocated) GPUs per node, for the metrics."""
        with self._lock:
            total, used = {}, {}
            for name in self._snapshot.names:
                t = len(self._ledger.usable(name))
                total[name] = t
                used[name] = max(0, t - self._ledger.free_count(name))
            return total, used

    def device_shares(self) -> list[tuple[str, int, float, int | None]]:
        """(node, device, part its shares take, its memory in MiB or None) for every
        device held by shares, for the metrics."""
        with self._lock:
            return [(name, d, float(part), mib) for name in self._snapshot.names
                    for d, (part, mib) in self._ledger.share_use(name).items()]

    def device_use(self) -> list[tuple[str, int, DeviceUse]]:
        """(node, device, how it is held and by whom) for every device held by name,
        for the metrics."""
        with self._lock:
            return [(name, d, use) for name in self._snapshot.names
                    for d, use in self._ledger.device_use(name).items()]

    def _booked_elsewhere(self, ledger_key: str) -> bool:
        """Is ``ledger_key`` a pod book's booking (evicted through its book)?"""
        return any(book.owns_key(ledger_key) for book in self.pod_books)

    # ----------------------------------------------------------- bookings

    def forget(self, key: str, *, departed: bool = False) -> None:
        """Release ``key``'s booking (its pods keep what they hold), and with
        ``departed`` what it held on to (``depart``); wakes workloads waiting for
        capacity."""
        with self._lock:
            waiting = self._forget(key, departed)
        if waiting is not None:
            self._wake_unlocked(waiting)

    def _forget(self, key: str, departed: bool) -> list[str] | None:
        """Under the lock: releases ``key``'s booking (and, with ``departed``, what
        it held on to); what to wake (the waiting and the blocked preemptors), or
        None when nothing was released."""
        released = self._ledger.forget(key) is not None
        released = (departed and self._ledger.release_departed(key)) or released
        self.evictions.unblock(key)
        self.evictions.stop_waiting(key)
        return [*self.pending.waiting, *self.evictions.blocked()] if released else None

    def depart(self, key: str) -> None:
        """Release ``key``'s booking while its children may still exist or be being
        made: its devices stay held (``Ledger.depart``) until ``departed``."""
        with self._lock:
            self._ledger.depart(key)
            self.evictions.unblock(key)
            self.evictions.stop_waiting(key)

    def departing(self, key: str) -> bool:
        """Does ``key`` hold on to a released booking (``depart``)?"""
        with self._lock:
            return self._ledger.holding(departing_key(key)) is not None

    def departed(self, key: str) -> None:
        """None of ``key``'s children is left: what it held on to goes; wakes."""
        with self._lock:
            released = self._ledger.release_departed(key)
            waiting = list(self.pending.waiting) if released else []
        if released:
            self._wake(waiting)

    def commit(self, key: str) -> bool:
        """Commits ``key``'s booking; False when there is none to commit: the
        workload went meanwhile, or a refill dropped its decision (``state.rebuild``:
        its devices turned out held), and the caller's next reconcile decides again."""
        with self._lock:
            if self._ledger.allocation(key) is None:
                lost = True
            else:
                self._ledger.commit(key)
                lost = False
        if lost:
            log.info("placement.booking_lost", workload=key,
                     effect="nothing committed; the next reconcile reads what is there")
        return not lost

    # ------------------------------------------------------------ workloads

    def _track_pending(self, obj: JSON) -> None:
        """Under the lock: ``obj`` waits for capacity unless the ledger books it."""
        key = object_key(obj)
        if self._ledger.allocation(key) is not None:
            self.pending.discard(key)
        else:
            self.pending.update(obj)

    def set_workload(self, obj: JSON) -> None:
        """Keeps the pending set current, and adopts a committed placement that this
        ledger does not know (written by a previous leader). Objects older than this
        controller's own last write of them are skipped: they would undo it."""
        victims: list[str] = []
        with self._lock:
            if not self.ready:
                return
            if not self.own_writes.is_behind(obj):
                _, victims = self._adopt(obj)
            self._track_pending(obj)
        if victims:
            self._enqueue_waiting(victims)

    def adopt(self, obj: JSON) -> bool:
        """Books the committed placement of ``obj`` if this ledger does not hold it.
        False when it conflicts with what the ledger holds for other owners (running
        pods win)."""
        with self._lock:
            ok, victims = self._adopt(obj)
        if victims:
            self._enqueue_waiting(victims)
        return ok

    def _adopt(self, obj: JSON) -> tuple[bool, list[str]]:
        """Under the lock: (adopted or nothing to adopt, the victims of its
        nomination to enqueue once the lock is released)."""
        status = obj.get("status") or {}
        key = object_key(obj)
        meta = obj.get("metadata") or {}
        if not is_placed(status) or is_terminal(status) or self._ledger.allocation(key) or \
                self.evictions.is_evicting(key) or meta.get("deletionTimestamp"):
            return True, []
        try:
            w = GPUWorkload.model_validate(obj)
            a = self._ledger.assume(key, w.status.placements, gpus_per_replica=w.spec.gpus,
                                   priority=w.spec.priority, committed=True,
                                   check_capacity=False, owner=booking_owner(w),
                                   uid=w.metadata.uid or "", overlap=w.status.nominated_over)
            log.info("ledger.adopted", workload=key, nominated_over=w.status.nominated_over)
            if not a.overlap:
                return True, []
            self.evictions.block(key)
            return True, self.evictions.resume(self._ledger, a, self._booked_elsewhere)
        except (ValueError, LedgerConflict) as exc:
            log.warning("ledger.adopt.failed", workload=key, error=str(exc))
            return False, []

    def workload_gone(self, key: str, uid: str) -> None:
        """Workload ``key`` (UID ``uid``) is deleted: its booking and pending entry
        go (its own-writes record goes with the delete event, by UID), in one
        critical section. Identity is the UID: a late delete of an older object of
        the same name (the reconciler reads the cache, which shows the new object
        before this runs) releases nothing of the new object's; only the old one's
        eviction is taken in (its preemptors stop waiting for it)."""
        with self._lock:
            if not self.ready:
                return
            booked = self._ledger.allocation(key)
            late = bool(uid) and booked is not None and bool(booked.uid) and booked.uid != uid
            acknowledged = self.evictions.acknowledge(key)
            freed = None
            if not late:
                self.pending.discard(key)
                freed = self._forget(key, departed=True)
        if late:
            log.info("workload.delete.stale", workload=key, uid=uid, booked_uid=booked.uid)
        if acknowledged:
            self._enqueue_waiting(acknowledged)
        if freed is not None:
            self._wake_unlocked(freed)
