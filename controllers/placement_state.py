"""The placing side's view of the cluster: the snapshot of nodes and GPUs, the
ledger of who holds which device, and the scheduler over both, behind one lock.

It is rebuilt from the informers' caches before the first placement after a start
(docs/architecture.md, invariant 4) and then kept current by their events
(``placement_events.CacheEvents``, composed onto it as ``events``). Every
update is idempotent, so an event that the rebuild already saw and then delivers
again changes nothing. Only the leader's reconciler uses it: it is created when
the controller starts leading.

One lock (``PlacementState._lock``, re-entrant) guards all of it, and the parts it
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
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import structlog

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.evictions import Evictions, preempted_message
from controllers.node_views import NodeViews
from controllers.pending import PendingSet, is_placed, is_terminal
from controllers.placement_events import CacheEvents, Holder, holds_less, more_room
from controllers.write_tracker import WriteTracker, object_key
from internal.metrics.domain import BAD_OBJECTS
from internal.scheduling.framework import PREEMPT, Decision
from internal.scheduling.inventory import DEFAULT_STALE_AFTER
from internal.scheduling.ledger import Ledger, LedgerConflict, booking_owner
from internal.scheduling.resourceslices import SliceInventory, claim_holder_key, claim_holding
from internal.scheduling.scheduler import Scheduler
from internal.scheduling.snapshot import NodeInfo, Snapshot

if TYPE_CHECKING:
    from controllers.seedbook import Entry, SeedBook

log = structlog.get_logger("placement")

JSON = Mapping[str, Any]
#: (nodes, gpunodes, workloads, pods) as listed from the caches
Sources = tuple[list[JSON], list[JSON], list[JSON], list[JSON]]
#: (resourceslices, resourceclaims) as listed from the caches (DRA on)
DraSources = tuple[list[JSON], list[JSON]]
T = TypeVar("T")


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


class PlacementView:
    """A read-only view of the state's nodes and holders, as a kube-scheduler plugin
    gets a snapshot: what a seed pod's plan (``PlacementState.book_seed``) and the
    tests read. Every question takes the state's lock (re-entrant: a plan already
    runs under it), and always asks the state's current ledger (a rebuild replaces
    it)."""

    #: the ledger's questions a reader may ask (none of them changes it)
    READS = frozenset({
        "allocation", "allocations", "bookings", "blockers", "counted", "counted_total",
        "device_holds", "device_owners", "free_count", "free_devices", "holder",
        "holders", "holding", "is_committed", "job", "pod", "sharing", "usable"})

    def __init__(self, state: PlacementState) -> None:
        self._state = state

    def node(self, name: str) -> NodeInfo | None:
        """What the snapshot knows of node ``name`` (None: no such node)."""
        return self._state.node_info(name)

    def schedule(self, w: GPUWorkload) -> Decision:
        """Where ``w`` would go now (nothing is booked)."""
        return self._state.schedule(w)

    def __getattr__(self, name: str) -> Any:
        if name not in self.READS:
            raise AttributeError(f"the placement view reads the ledger only; {name!r} "
                                 "is not one of its questions")
        return self._state.ledger_read(name)


class PlacementState:
    """The snapshot, the ledger and the scheduler, kept by the informers' events
    (``events``, a ``CacheEvents``) and asked by the reconcilers; every method
    takes the lock.

    Its lock, ledger and snapshot are private: nothing outside this module and
    ``placement_events`` touches them (``tests/unit/controllers/test_one_door.py``
    greps for it). Readers get ``view()``, the seed path ``book_seed`` and its
    kin, the claims ``atomically``."""

    def __init__(self, default_exposure: DeviceExposure, rng: random.Random | None = None,
                 enqueue_waiting: Callable[[Iterable[str]], None] | None = None,
                 enqueue_on_node: Callable[[str], None] | None = None,
                 stale_after: float = DEFAULT_STALE_AFTER.total_seconds(),
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 pod_books: Sequence[PodBook] = (),
                 on_problem: Callable[[JSON, str, str], None] | None = None,
                 dra_driver: str | None = None,
                 priority_class_value: Callable[[str], int | None] | None = None) -> None:
        self._lock = threading.RLock()
        self.nodes = NodeViews(stale_after, clock,
                               SliceInventory(dra_driver) if dra_driver else None)
        self.evictions = Evictions()
        self.writes = WriteTracker(self._lock)
        self.default_exposure = default_exposure
        self.rng = rng or random.Random()
        self._ledger = Ledger()
        self._snapshot = Snapshot(self._ledger)
        self.scheduler = Scheduler(self._snapshot, self._ledger, rng=self.rng,
                                   default_exposure=default_exposure)
        self.pending = PendingSet()
        self.ready = False
        self._enqueue_waiting = enqueue_waiting or (lambda keys: None)
        #: the informers' handlers (``setup.py`` wires the informers to them)
        self.events = CacheEvents(self, on_problem, enqueue_on_node)
        self.pod_books = tuple(pod_books)
        #: a PriorityClass's value by name (None: no such class), from the cache
        self._class_value = priority_class_value or (lambda name: None)

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
        with self._lock:
            nodes, gpunodes, workloads, pods = read()
            jobs = read_jobs() if read_jobs is not None else []
            ours = [p for p in pods if not self.owned(p)]
            slices, claims = read_dra() if read_dra is not None and self.slices else ([], [])
            for sl in slices:
                self.slices.upsert(sl)  # type: ignore[union-attr]
            ledger, problems = Ledger.rebuild(workloads, ours, jobs=jobs, nominations=False)
            for c in claims:
                problems += self._sync_claim(ledger, c)
            for book in self.pod_books:
                problems += book.rebuild(ledger, pods)
            problems += ledger.book_nominations(workloads)
            self._ledger = ledger
            self._snapshot = Snapshot.build(nodes, self.nodes.reset(gpunodes), ledger)
            self.scheduler = Scheduler(self._snapshot, ledger, rng=self.rng,
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
        log.info("ledger.rebuilt", nodes=len(self._snapshot), holders=len(ledger.allocations()))
        return problems

    def invalidate(self, why: str) -> None:
        """An event of the caches was lost (its handler raised): this state may be
        short of a holder. From now on it takes in no event (``ready`` false), and the
        reconciler's next ``ensure_state()`` rebuilds a new one from the caches
        before any placement."""
        with self._lock:
            self.ready = False
            waiting = list(self.pending.waiting)
        log.error("placement.invalidated", reason=why,
                  effect="rebuilt from the caches before the next placement")
        # the lost event may have freed room: the waiting workloads' reconciles
        # rebuild the state first, and find it
        self._wake(waiting)

    def refresh_stale(self) -> None:
        """Re-judges heartbeats (time passes without events); call periodically."""
        with self._lock:
            if not self.ready:
                return
            for view in self.nodes.views():
                self._snapshot.upsert_gpunode(view)

    # ------------------------------------------- changes from the informers
    # Called by ``events`` (CacheEvents); each applies one change under the lock and
    # returns what to wake (None: nothing, or not ready: the rebuild reads it).

    def set_node(self, node: JSON) -> list[str] | None:
        name = str((node.get("metadata") or {}).get("name"))
        with self._lock:
            return self._node_changed(name, lambda: self._snapshot.upsert_node(node)) \
                if self.ready else None

    def remove_node(self, name: str, uid: str) -> bool:
        """Drops node ``name`` unless it is another object (``uid``); dropped?"""
        with self._lock:
            return self.ready and self._snapshot.remove_node(name, uid)

    def set_gpunode(self, gpunode: JSON) -> list[str] | None:
        name = str((gpunode.get("metadata") or {}).get("name"))
        with self._lock:
            if not self.ready:
                return None
            return self._node_changed(
                name, lambda: self._snapshot.upsert_gpunode(self.nodes.set_gpunode(gpunode)))

    def remove_gpunode(self, name: str, uid: str) -> None:
        with self._lock:
            if self.ready and self.nodes.drop_gpunode(name, uid):
                self._refresh_node(name)

    def set_slice(self, rslice: JSON) -> list[str] | None:
        """Records a ResourceSlice (before the rebuild too: the rebuild reads it)."""
        slices = self.nodes.slices
        if slices is None:
            return None
        with self._lock:
            node = slices.upsert(rslice)
            if not self.ready or node is None:
                return None
            return self._node_changed(node, lambda: self._refresh_node(node))

    def remove_slice(self, rslice: JSON) -> None:
        slices = self.nodes.slices
        if slices is None:
            return
        with self._lock:
            node = slices.remove(rslice)
            if self.ready and node is not None:
                self._refresh_node(node)

    def _node_changed(self, name: str, change: Callable[[], None]) -> list[str] | None:
        """Under the lock: applies ``change`` to node ``name`` in the snapshot; the
        workloads to wake (unlocked) when the node could now fit more, else None."""
        before = self._snapshot.get(name)
        change()
        return list(self.pending.waiting) if more_room(before, self._snapshot.get(name)) \
            else None

    def _refresh_node(self, name: str) -> None:
        """Re-derives ``name``'s devices from its GPUNode and its ResourceSlices."""
        view = self.nodes.view(name)
        if view is not None:
            self._snapshot.upsert_gpunode(view)
        else:
            self._snapshot.remove_gpunode(name)

    def set_claim(self, claim: JSON) -> tuple[list[str], list[str] | None] | None:
        """Records what an allocated ResourceClaim holds: (problems, what to wake);
        None when DRA is off or before the rebuild."""
        if self.nodes.slices is None:
            return None
        key = claim_holder_key(str((claim.get("metadata") or {}).get("uid") or ""))
        with self._lock:
            if not self.ready:
                return None
            before = self._ledger.holding(key)
            problems = self._sync_claim(self._ledger, claim)
            after = self._ledger.holding(key)
            freed = before is not None and (after is None or holds_less(after, before))
            return problems, list(self.pending.waiting) if freed else None

    def _sync_claim(self, ledger: Ledger, claim: JSON) -> list[str]:
        """Records in ``ledger`` what ``claim`` holds now (under the lock)."""
        key = claim_holder_key(str((claim.get("metadata") or {}).get("uid") or ""))
        slices = self.nodes.slices
        assert slices is not None
        return ledger.sync(key, lambda: claim_holding(claim, slices), key)

    def remove_holder_key(self, key: str) -> list[str] | None:
        """Forgets the holder ``key`` (a claim); what to wake if it held anything."""
        with self._lock:
            if not self.ready or not self._ledger.remove_holder(key):
                return None
            return list(self.pending.waiting)

    def set_holder(self, obj: JSON, holder: Holder
                   ) -> tuple[list[str], list[str] | None] | None:
        """Records what ``obj`` (a pod, a Job) holds now: (problems, what to wake
        when it holds less than before); None before the rebuild."""
        uid = holder.uid(obj)
        with self._lock:
            if not self.ready:
                return None
            before = holder.held(self._ledger, uid)
            problems = holder.sync(self._ledger, obj)
            after = holder.held(self._ledger, uid)
            freed = before is not None and (after is None or holds_less(after, before))
            return problems, list(self.pending.waiting) if freed else None

    def remove_holder(self, uid: str, holder: Holder) -> list[str] | None:
        """Forgets the pod or Job ``uid``; what to wake if it held anything."""
        with self._lock:
            if not self.ready or not holder.remove(self._ledger, uid):
                return None
            return list(self.pending.waiting)

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
            if not self.writes.is_behind(obj):
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
        """Workload ``key`` (UID ``uid``) is deleted: its booking, pending entry and
        write record go. Identity is the UID: a late delete of an older object of
        the same name (the reconciler reads the cache, which shows the new object
        before this runs) releases nothing of the new object's; only the old one's
        eviction is taken in (its preemptors stop waiting for it)."""
        with self._lock:
            if not self.ready:
                return
            booked = self._ledger.allocation(key)
            late = bool(uid) and booked is not None and bool(booked.uid) and booked.uid != uid
            waiting = self.evictions.acknowledge(key) if late else []
        if late:
            log.info("workload.delete.stale", workload=key, uid=uid, booked_uid=booked.uid)
            if waiting:
                self._enqueue_waiting(waiting)
            return
        with self._lock:
            if not self.ready:
                return
            self.pending.discard(key)
            self.writes.forget(key)
            waiting = self.evictions.acknowledge(key)
        if waiting:
            self._enqueue_waiting(waiting)
        with self._lock:
            self.evictions.stop_waiting(key)
        self.forget(key)

    # ------------------------------------------------------------- placing

    def admin_priority(self, w: GPUWorkload) -> bool:
        """Does ``w``'s priority come from an admin: a PriorityClass that exists with
        exactly that value? Only then may it preempt workloads of other namespaces (a
        tenant writes its own ``spec.priority``, never a PriorityClass)."""
        name = w.spec.priority_class_name
        return bool(name) and self._class_value(str(name)) == w.spec.priority

    def decide(self, w: GPUWorkload) -> Decision:
        """Schedule ``w`` and, if it fits, book it in the ledger (assumed, uncommitted).

        A preemption is booked here too, under the same lock: the victims' bookings
        are released (their own reconcile then deletes their children, which are
        queued) and ``w`` is nominated over the devices their pods still hold."""
        victims: list[str] = []
        booked: list[tuple[PodBook, str]] = []  # victims of a pod book: their pods go
        across = self.admin_priority(w)
        with self._lock:
            decision = self.scheduler.schedule(w, across_namespaces=across)
            if decision.ok:
                decision.assume(self._ledger, w)
                self.evictions.unblock(w.key)
            elif decision.outcome == PREEMPT:
                for v in decision.victims:
                    book = next((b for b in self.pod_books if b.owns_key(v)), None)
                    if book is not None:
                        booked.append((book, v))  # its booking stays till its pods go
                        continue
                    self._ledger.forget(v)
                    victims.append(v)
                # workload victims acknowledge their eviction in their own reconcile
                self.evictions.evict(w.key, victims, preempted_message(w.key, w.spec.priority))
                decision.assume(self._ledger, w)
                self.evictions.block(w.key)
            if decision.ok or decision.outcome == PREEMPT:
                self.pending.discard(w.key)
        if victims:
            self._enqueue_waiting(victims)
        for book, key in booked:
            book.evict(key, f"preempted by {w.key} (priority {w.spec.priority}) to make room")
        return decision

    def commit(self, key: str) -> None:
        with self._lock:
            if self._ledger.allocation(key) is not None:
                self._ledger.commit(key)

    def forget(self, key: str) -> None:
        """Release ``key``'s booking (its pods keep what they hold); wakes workloads
        waiting for capacity."""
        with self._lock:
            released = self._ledger.forget(key)
            self.evictions.unblock(key)
            self.evictions.stop_waiting(key)
            waiting = list(self.pending.waiting) if released is not None else []
        if released is not None:
            self._wake(waiting)

    def claim(self, key: str, uid: str | None) -> None:
        """A booking under ``key`` made for another object of that name (deleted and
        re-created) is not this one's: release it."""
        with self._lock:
            a = self._ledger.allocation(key)
            stale = a is not None and bool(a.uid) and bool(uid) and a.uid != uid
        if stale:
            self.forget(key)

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

    def booking(self, key: str) -> Any:
        """The ledger's booking of ``key`` (an Allocation), or None."""
        with self._lock:
            return self._ledger.allocation(key)

    def held_by(self, key: str) -> bool:
        with self._lock:
            return self._ledger.allocation(key) is not None

    def blockers(self, key: str) -> dict[str, list[str]]:
        """node -> pods that ``key``'s nomination still waits for (empty: none)."""
        with self._lock:
            out = self._ledger.blockers(key)
            if out:
                self.evictions.block(key)
            else:
                self.evictions.unblock(key)
            return out

    def block(self, key: str) -> None:
        """``key`` waits for pods to go: any pod's deletion wakes it."""
        with self._lock:
            self.evictions.block(key)

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
            info = self._snapshot.get(node)
            if info is None or not info.has_gpunode:
                return None
            out = [info.devices[d].uuid if d in info.devices else "" for d in devices]
        return out if all(out) else None

    # ------------------------------------------------------------ readers

    def node_info(self, node: str) -> NodeInfo | None:
        """The snapshot's view of ``node`` (None: unknown)."""
        with self._lock:
            return self._snapshot.get(node)

    def schedule(self, w: GPUWorkload) -> Decision:
        """Where ``w`` would go now, booking nothing (``decide`` books)."""
        with self._lock:
            return self.scheduler.schedule(w)

    def view(self) -> PlacementView:
        """A read-only view of the nodes and holders (see ``PlacementView``)."""
        return PlacementView(self)

    def ledger_read(self, question: str) -> Callable[..., Any]:
        """The ledger's read-only method ``question``, asked under the lock."""
        if question not in PlacementView.READS:
            raise AttributeError(question)

        def ask(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return getattr(self._ledger, question)(*args, **kwargs)
        return ask

    def atomically(self, fn: Callable[[], T]) -> T:
        """Runs ``fn`` under the state's lock: atomically with every booking (the
        claim controller's decision to release a claim, the slices it reads)."""
        with self._lock:
            return fn()

    # ------------------------------------------------------------ seed pods

    def book_seed(self, book: SeedBook, key: str,
                  plan: Callable[[PlacementView], tuple[Entry | None, str]]
                  ) -> tuple[Entry | None, str]:
        """Plans seed pod ``key`` on a read-only view and books the plan in ``book``,
        both under the lock, so nothing is booked between the two. Seed pods take
        whole GPUs. Returns (the booked entry, "") or (None, why not)."""
        with self._lock:
            entry, why = plan(self.view())
            if entry is None:
                return None, why
            try:
                self._ledger.refuse_mig(entry.placement)
                book.book(self._ledger, key, entry)
            except LedgerConflict as exc:
                return None, str(exc)
            return entry, ""

    def mark_seed_bound(self, book: SeedBook, key: str) -> None:
        """Seed pod ``key`` is bound: its owner's booking commits once all are."""
        with self._lock:
            book.mark_bound(self._ledger, key)

    def adopt_seed(self, book: SeedBook, key: str, want: Entry | None,
                   keep: Callable[[Entry], bool]) -> tuple[Entry | None, str]:
        """A bound seed pod: what ``book`` already books for ``key`` stays (marked
        bound) when ``keep`` says so, else ``want`` is booked. Returns (what the pod
        is taken to hold, the conflict that refused ``want`` or "")."""
        with self._lock:
            have = book.entry(key)
            if have is not None and want is not None and keep(have):
                book.mark_bound(self._ledger, key)
                return have, ""
            if want is not None:
                try:
                    book.book(self._ledger, key, want)
                except LedgerConflict as exc:
                    return want, str(exc)
            return want, ""

    def release_seed(self, book: SeedBook, key: str) -> Entry | None:
        """Releases seed pod ``key``'s booking in ``book``; what it held, or None.
        The caller wakes the waiting (``capacity_freed``) once it has said so."""
        with self._lock:
            return book.release(self._ledger, key)

    def seed_pod_keys(self, book: SeedBook, ledger_key: str) -> list[str]:
        """The pods (``ns/name``) whose bookings make up ``ledger_key`` in ``book``."""
        with self._lock:
            return book.pod_keys(ledger_key)

    def higher_priority_fresh(self, key: str, priority: int) -> bool:
        with self._lock:
            return self.pending.higher_fresh(key, priority)

    def node_gpus(self) -> tuple[dict[str, int], dict[str, int]]:
        """(total usable, allocated) GPUs per node, for the metrics."""
        with self._lock:
            total, used = {}, {}
            for name in self._snapshot.names:
                t = len(self._ledger.usable(name))
                total[name] = t
                used[name] = max(0, t - self._ledger.free_count(name))
            return total, used

    # ------------------------------------------------------- preemption

    def eviction(self, key: str) -> str | None:
        """The eviction ``key``'s reconcile is to take in (its message), or None."""
        with self._lock:
            return self.evictions.message(key)

    def evicted(self, key: str) -> None:
        """The victim's own reconcile took in its eviction (and asked its children
        to go): its preemptors wait only for its pods from now on."""
        with self._lock:
            waiting = self.evictions.acknowledge(key)
        if waiting:
            self._enqueue_waiting(waiting)

    def unacknowledged(self, key: str) -> list[str]:
        """Victims of ``key``'s preemption whose reconcile has not yet taken in the
        eviction: one of theirs may still be creating pods on the nominated devices
        (a victim chosen while its own placement was being committed)."""
        with self._lock:
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
