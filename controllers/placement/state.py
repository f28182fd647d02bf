"""The placing side's view of the cluster: the placement cache (the snapshot of
nodes and GPUs and the ledger of who holds which device, behind one lock:
``cache.PlacementCache``) with the scheduler over both.

It is rebuilt from the informers' caches (and the children we created that they do
not show yet, ``OwnWrites``) before the first placement after a start
(docs/architecture.md, invariant 4) and then kept current by their events
(``events.CacheEvents``, composed onto it as ``events``). Every
update is idempotent, so an event that the rebuild already saw and then delivers
again changes nothing. Only the leader's reconciler uses it: it is created when
the controller starts leading.

The cache's one lock (re-entrant) guards all of it (see ``cache`` for the
parts it owns). Every public method here takes the lock for what it reads and
changes and calls out (the queue, the pod books) only after releasing it;
``decide`` books a preemption under it in one go. The seed path books through
``book_seed`` and its kin, planning outside the lock on a read-only view and
booking in one section unless the plan is stale (``seeds.py``), as ``decide`` does.

Every pod event goes to the ledger (``Ledger.sync_pod``): pods are the holders, so
a device comes back only when the last pod holding it is deleted or finishes, and
then whatever waits for capacity (or for a preemption's victims) is woken. A pod
that cannot be read is reported (``on_problem``) and skipped, never raised.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

import structlog

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.placement.cache import PlacementCache
from controllers.placement.decider import Decider, budget_wait, evict_message, stale_reason
from controllers.placement.door import PlacementView
from controllers.placement.event_gate import EventGate
from controllers.placement.events import CacheEvents
from controllers.placement.evictions import Evictions, preempted_message
from controllers.placement.pending import PendingSet
from controllers.placement.pod_book import PodBook
from controllers.placement.refill import DraSources, Sources, carry, in_flight, with_created
from controllers.placement.seeds import SeedDoor
from controllers.placement.standing import Standing, Waits, booking_copy, read_unlocked
from controllers.shared.own_writes import OwnWrites
from internal.metrics.domain import BAD_OBJECTS
from internal.objects import JSON
from internal.scheduling.bounds import MAX_GPUS_PER_NODE
from internal.scheduling.framework import PREEMPT, UNSCHEDULABLE, Decision
from internal.scheduling.inventory import DEFAULT_STALE_AFTER
from internal.scheduling.ledger import Ledger, LedgerConflict, booking_owner, departing_key
from internal.scheduling.nodefit import PodFit
from internal.scheduling.nodeusage import NodeUsage
from internal.scheduling.scheduler import Scheduler
from internal.scheduling.search import check_exact
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors
from internal.scheduling.snapshot import Snapshot
from internal.scheduling.stamps import Mark, StaleDecision

if TYPE_CHECKING:
    from controllers.queues.book import QueueBook

log = structlog.get_logger("placement")

T = TypeVar("T")



class PlacementState(PlacementCache):
    """The placement cache and the scheduler over it, kept by the informers' events
    (``events``, a ``CacheEvents``) and asked by the reconcilers; every method
    takes the lock. Readers get ``view()``, the seed path ``book_seed`` and its
    kin, the claims `release_claim_unless` and its kin."""

    def __init__(self, default_exposure: DeviceExposure, rng: random.Random | None = None,
                 enqueue_waiting: Callable[[Iterable[str]], None] | None = None,
                 enqueue_on_node: Callable[[str], None] | None = None,
                 stale_after: float = DEFAULT_STALE_AFTER.total_seconds(),
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 pod_books: Sequence[PodBook] = (),
                 on_problem: Callable[[JSON, str, str], None] | None = None,
                 dra_driver: str | None = None,
                 priority_class_value: Callable[[str], int | None] | None = None,
                 own_writes: OwnWrites | None = None,
                 queues: QueueBook | None = None,
                 max_gpus_per_node: int = MAX_GPUS_PER_NODE,
                 share_floors: ShareFloors = DEFAULT_FLOORS) -> None:
        super().__init__(enqueue_waiting, stale_after, clock, pod_books, dra_driver,
                         own_writes, max_gpus_per_node, queues)
        self.default_exposure = default_exposure
        self.rng = rng or random.Random()
        self.share_floors = share_floors
        self.scheduler = self._scheduler_over(self._snapshot, self._ledger)
        #: the informers' handlers (controllers/gpuworkload/setup.py wires them),
        #: entered through the gate so that a watch thread never waits for a decide
        self.events = CacheEvents(self, on_problem, enqueue_on_node)
        #: the seed path's door (controllers/podbinding): plans booked in its book
        self.seeds = SeedDoor(self)
        #: the scheduler's cycle over this cache: a pass, then ``assume_decision``
        self.decider = Decider(self)
        self._gate = EventGate(self._lock)
        #: a PriorityClass's value by name (None: no such class), from the cache
        self._class_value = priority_class_value or (lambda name: None)
        #: how many times it was filled from the caches (``rebuild``)
        self.generation = 0

    def _scheduler_over(self, snapshot: Snapshot, ledger: Ledger) -> Scheduler:
        """The scheduler over a fill's snapshot and ledger, as the state is set."""
        return Scheduler(snapshot, ledger, rng=self.rng, default_exposure=self.default_exposure,
                         floors=self.share_floors)

    # ------------------------------------------------------------------ rebuild

    def rebuild(self, read: Callable[[], Sources],
                read_dra: Callable[[], DraSources] | None = None, *,
                read_jobs: Callable[[], list[JSON]] | None = None) -> list[str]:
        """The ledger from the caches: what holds first (pods and our Jobs,
        allocated claims, the pod books' bound pods), then committed placements,
        the nominations of preemptors still waiting for their victims
        (``status.nominatedOver``), and last what the pod books keep for pods not
        bound yet that nobody took (``PodBook.refill``). A preemption goes on: a
        victim whose eviction a previous run decided but never told it is evicted again. A
        status is a decision that may be stale (its write died with the previous
        process): a placement that collides with a holder is the one not booked.

        ``read`` lists the caches (``read_jobs`` the Jobs); it runs under the lock,
        so an event whose handler waits on the lock meanwhile is applied after the
        rebuild (events are idempotent, so one the rebuild already saw changes
        nothing)."""
        with self._lock:
            carried = in_flight(self._ledger, self._booked_elsewhere) if self.generation else []
            nodes, gpunodes, workloads, pods = read()
            jobs = read_jobs() if read_jobs is not None else []
            pods, jobs = with_created(pods, jobs, self.own_writes.all_children())
            ours = [p for p in pods if not self.owned(p)]
            slices, claims = read_dra() if read_dra is not None and self.slices else ([], [])
            for sl in slices:
                self.slices.upsert(sl)  # type: ignore[union-attr]
            # the nodes first: a pod over-committing its node is found so as it is booked
            snapshot = Snapshot.build(nodes, self._nodes.reset(gpunodes), None,
                                      self.max_gpus_per_node)
            snapshot.attach(fresh := Ledger())
            ledger, problems = Ledger.rebuild(workloads, ours, jobs=jobs, placements=False,
                                              nominations=False, into=fresh)
            for c in claims:
                problems += self._sync_claim(ledger, c)
            for book in self.pod_books:
                problems += book.rebuild(ledger, pods)
            problems += ledger.book_placements(workloads)
            problems += ledger.book_nominations(workloads)
            for book in self.pod_books:
                book.refill(ledger, pods)
            self._ledger = self._counts.count(ledger)  # each queue's usage, from its holders
            self.generation += 1
            self.evictions = Evictions()
            self._snapshot = snapshot
            self._snapshot.usage = NodeUsage(pods)
            problems += carry(ledger, carried)  # once the ledger knows the nodes
            self.scheduler = self._scheduler_over(snapshot, ledger)
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
        self.events.report_refused()
        return problems

    def hold_created(self, children: list[JSON], commit: str | None = None) -> bool:
        """Children we just created (Pods or Jobs) hold their devices from now
        on, before the informer shows them: recorded as their events will record
        them (events are idempotent; a rebuild meanwhile books them from
        ``OwnWrites``). With ``commit``, that workload's booking is committed in the
        same section (its first bound pod is its commit point); False when there was
        none to commit (as ``commit``). One section for a reconcile's children."""
        with self._lock:  # re-entered by each event: the same section
            for child in children:
                if child.get("kind") == "Job":
                    self.events.on_job(child)
                else:
                    self.events.on_pod(child)
            return self.commit(commit) if commit is not None else True

    def apply_event(self, event: Callable[[], None],
                    on_lost: Callable[[BaseException], None]) -> None:
        """An informer's event (``events.on_*``), applied now if the lock is free,
        else in order by the gate's drainer: never waits (``event_gate.py``)."""
        self._gate.apply(event, on_lost)

    def events_deferred(self) -> int:
        """How many events found the lock held (or earlier ones waiting) so far."""
        return self._gate.deferred

    def invalidate(self, why: str) -> None:
        """An event of the caches was lost (its handler raised): this state may be
        short of a holder. From now on it takes in no event (``ready`` false), and the
        reconciler's next ``ensure_state()`` fills it again from the caches, in
        place, before any placement."""
        with self._lock:
            self.ready = False
            waiting = list(self.pending.waiting)
        log.error("placement.invalidated", reason=why,
                  effect="rebuilt from the caches before the next placement")
        # the lost event may have freed room: the waiting rebuild first, and find it
        self._wake(waiting)

    def refresh_stale(self) -> None:
        """Re-judges heartbeats (time passes without events), periodically: only
        the nodes whose verdict changed are rebuilt (``NodeViews.flipped``)."""
        with self._lock:
            if not self.ready:
                return
            for view in self._nodes.flipped():
                self._snapshot.upsert_gpunode(view)
        self.events.report_refused()

    # ------------------------------------------------------------- placing

    def decide(self, w: GPUWorkload) -> Decision:
        """Schedule ``w`` and, if it fits, book it (assumed, uncommitted): the
        scheduler's cycle, a pass outside the lock then ``assume_decision`` (``Decider``).
        """
        return self.decider.decide(w)

    def admin_priority(self, w: GPUWorkload) -> bool:
        """Does ``w``'s priority come from an admin: a PriorityClass that exists with
        exactly that value? Only then may it preempt workloads of other namespaces (a
        tenant writes its own ``spec.priority``, never a PriorityClass)."""
        name = w.spec.priority_class_name
        return bool(name) and self._class_value(str(name)) == w.spec.priority

    # ----------------------------------------- the scheduler's side (``Decider``)

    def mark_pass(self) -> tuple[Scheduler, Mark]:
        """The scheduler and where the cache stands (``stamps.Mark``), read without
        the lock, for a pass made outside it (the queues' counts made current first)."""
        self._queue_counts_current()
        sched = self.scheduler
        return sched, sched.ledger.stamps.mark()

    def changed_since(self, mark: Mark) -> bool:
        """Has anything changed since ``mark``? Under the lock, so a writer half-way
        through its change ends it first."""
        with self._lock:
            return self._ledger.stamps.changed_since(mark)

    def unchanged(self, mark: Mark) -> bool:
        """Has nothing changed since ``mark``? Asked without the lock unless a
        section is in progress (a writer stamps at the end of its change)."""
        if self._lock.busy:
            return not self.changed_since(mark)
        return not self._ledger.stamps.changed_since(mark)

    def assume_locked(self, w: GPUWorkload,
                      plan: Callable[[Scheduler], Decision]) -> Decision:
        """The last resort of a decision refused as stale again and again: ``plan``
        (a pass, which changes nothing) made under the lock, then booked in the same
        section, so it cannot be stale."""
        with self._lock:
            sched, mark = self.mark_pass()
            return self.assume_decision(w, plan(sched), mark)

    def assume_decision(self, w: GPUWorkload, decision: Decision, mark: Mark) -> Decision:
        """Books ``decision`` for ``w`` unless it is stale (raises ``StaleDecision``:
        a node it books or takes victims on, or for a queue's decision any holder,
        changed after ``mark``, or the cache was filled again).

        A preemption is booked here too, in the same section: the victims' bookings
        are released (their own reconcile then deletes their children, which are
        queued) and ``w`` is nominated over the devices their pods still hold; a
        pod book that asks none of its pods to go (a PodDisruptionBudget refuses a
        pod group's eviction: it goes whole or not at all; asked before, in
        ``Decider.refused``, this is a budget changed meanwhile) makes ``w`` give
        its nomination up and wait with the book's reason."""
        victims: list[str] = []
        booked: list[tuple[PodBook, str]] = []  # victims of a pod book: their pods go
        with self._lock:
            queues = self.queues
            self._queue_counts_current()  # a queue changed during the pass: checked again
            why = stale_reason(self._ledger, (p.node for p in decision.placements),
                               decision.victims, mark, bool(decision.queue),
                               None if queues is None else
                               (lambda: queues.still_admits(w, decision, self._ledger)))
            if why:
                raise StaleDecision(why)
            if decision.ok:
                decision = self._book(decision, w)
            elif decision.outcome == PREEMPT:
                for v in decision.victims:
                    book = next((b for b in self.pod_books if b.owns_key(v)), None)
                    if book is not None:
                        booked.append((book, v))  # its booking stays till its pods go
                        continue
                    # held on till its reconcile finds its children gone (one may be made now)
                    self._ledger.depart(v)
                    victims.append(v)
                # workload victims acknowledge their eviction in their own reconcile
                self.evictions.evict(w.key, victims, decision.evict_message
                                     or preempted_message(w.key, w.spec.priority))
                decision.assume(self._ledger, w)
                self._reserve(w, decision)
                self.evictions.block(w.key)
            if decision.ok or decision.outcome == PREEMPT:
                self.pending.discard(w.key)
        if victims:
            self._enqueue_waiting(victims)
        for book, key in booked:
            refused = book.evict(key, evict_message(w, decision))
            if refused is not None:  # nobody of it goes: w would wait for it for ever
                self.forget(w.key)
                return budget_wait(decision, refused)
        return decision

    def _book(self, decision: Decision, w: GPUWorkload) -> Decision:
        """Under the lock: assumes ``decision``; a refusal of the ledger (a rule the
        filters missed) is the workload's Unschedulable status, never a reconcile
        error retried every few seconds."""
        try:
            decision.assume(self._ledger, w)
        except LedgerConflict as exc:
            log.warning("placement.refused", workload=w.key, reason=str(exc),
                        effect="Unschedulable; the filters should have said so")
            return Decision(UNSCHEDULABLE, decision.strategy, message=str(exc),
                            visited=decision.visited)
        self._reserve(w, decision)
        decision.blocked = self.blockers(w.key)  # re-entered: the same section
        return decision

    def _reserve(self, w: GPUWorkload, decision: Decision) -> None:
        """Under the lock: ``w``'s pods' requests count on the nodes it is booked
        on until its pods show there (node fit, ``nodeusage.py``)."""
        self._snapshot.usage.reserve(
            w.key, booking_owner(w), PodFit.of((w.spec.template or {}).get("spec")),
            [p.node for p in decision.placements], self._ledger)

    def standing_of(self, key: str, uid: str | None) -> Standing:
        """Workload ``key``'s standing in the cache, read at the start of its
        reconcile as one moment's. A booking or a hold left by another object of
        that name (deleted and re-created: ``uid`` differs) is let go first: it is
        not this one's.

        Read without the lock when no section is in progress and nothing changed
        while it was read (``standing.read_unlocked``), else in one section."""
        standing = read_unlocked(self._lock, lambda: self._ledger, self.evictions, key, uid)
        return standing if standing is not None else self._standing_locked(key, uid)

    def _standing_locked(self, key: str, uid: str | None) -> Standing:
        """``standing_of`` in one section."""
        waiting: list[str] | None = None
        with self._lock:
            a = self._ledger.allocation(key)
            if a is not None and a.uid and uid and a.uid != uid:
                waiting = self._forget(key, departed=False)
            h = self._ledger.holding(departing_key(key))
            if h is not None and h.uid and uid and h.uid != uid and \
                    self._ledger.release_departed(key):
                waiting = [*(waiting or ()), *self.pending.waiting, *self.evictions.blocked()]
            standing = Standing(booking_copy(self._ledger.allocation(key)),
                                self.evictions.message(key),
                                self._ledger.holding(departing_key(key)) is not None)
        if waiting is not None:
            self._wake_unlocked(waiting)
        return standing

    def children_wait(self, key: str) -> Waits:
        """What ``key``'s children wait for before they are made on its devices, in
        one section: the victims of its preemption that have not taken in their
        eviction, and each node's pods (and holds) still on its devices. When there
        is nothing, its booking is no longer a nomination (``nomination_done``)."""
        with self._lock:
            victims = self.evictions.unacknowledged(key)
            blockers = self.blockers(key)  # re-entered: the same section
            a = self._ledger.allocation(key)
            nominated = bool(victims) or (a is not None and bool(a.overlap))
            if not victims and not blockers:
                self._ledger.end_nomination(key)
            return Waits(victims, blockers, nominated)

    def nomination_done(self, key: str) -> None:
        """``key``'s children are made, or about to be with nothing left to wait
        for: its booking is no longer a nomination over anybody. (A victim placed
        again keeps its owner, as an eviction spends no retry: an overlap left behind
        would keep counting it as being taken, for the queues' reclaim plans.)"""
        with self._lock:
            self._ledger.end_nomination(key)

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

    def schedule(self, w: GPUWorkload, then: Sequence[GPUWorkload] = ()) -> Decision:
        """Where ``w`` (and a gang's later parts ``then``) would go now, booking
        nothing (``decide`` books)."""
        with self._lock:
            return self.scheduler.schedule(w, then=then)

    def check_exact(self, w: GPUWorkload, owner: str, node: str,
                    devices: tuple[int, ...]) -> str | None:
        """The shared filters' exact-map check (``search.check_exact``) of one
        replica of ``w`` booked under ``owner``: the reason ``node`` refuses exactly
        ``devices``, or None. Books nothing."""
        with self._lock:
            return check_exact(w, self._snapshot, self._ledger, owner, node, devices)

    def view(self) -> PlacementView:
        """A read-only view of the nodes and holders (see ``PlacementView``)."""
        return PlacementView(self)

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

