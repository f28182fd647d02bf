"""The seed path's door to the placement cache (``PlacementState.seeds``): a seed
pod's or a pod group's plan made on a read-only view (``PlacementView``) and booked
in the pod binding's book; and the book's bindings and releases.

A plan is a scheduling pass like a GPUWorkload's (``decider.py``): made outside the
cache's lock on the cache as it stands (``PassView``), then booked in one locked
section unless what it read of the nodes it books, or of its victims, changed
meanwhile (``decider.stale_reason``); a stale plan is made again, at most ``STALE_TRIES`` times,
then under the lock. So no plan holds the lock while it walks the nodes, and
nothing is booked that its plan did not see.
It is the cache's seed side, as ``events`` is its informers' side: it touches the
cache's lock and ledger, and nothing outside this package does.

A pod group may preempt (docs/podgroups.md): its plan then names victims
(``Preemption``), and ``book_group`` books it as ``decide`` books a GPUWorkload's
preemption (``PlacementState.assume_decision``), in the same section: the group's booking
nominated over the victims' owners, each GPUWorkload victim's booking released and
held on to (``Ledger.depart``) until its own reconcile takes in its eviction and
finds its children gone, each seed-path victim (another group, a StatefulSet's
pods) asked through its book to go, its booking kept until its pods are. The
group's members bind once nothing of the victims is left on its devices
(``group_blockers``). Unlike a GPUWorkload preemptor the group is never recorded
as waiting in ``Evictions``: a victim's acknowledgement enqueues its preemptors as
GPUWorkloads, whose reconcile would take the group's key for a workload gone and
forget its booking; the victims' departing holdings keep it waiting instead."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from api.v1alpha1.types import GPUWorkload
from controllers.placement.decider import STALE_TRIES, stale_reason
from controllers.placement.door import PlacementView
from controllers.placement.evictions import preempted_message
from internal.metrics.domain import STALE_DECISIONS
from internal.scheduling.framework import PREEMPT, Decision
from internal.scheduling.ledger import LedgerConflict
from internal.scheduling.scheduler import Scheduler
from internal.scheduling.search import check_exact
from internal.scheduling.snapshot import NodeInfo

if TYPE_CHECKING:
    from controllers.placement.state import PlacementState
    from controllers.podbinding.seedbook import Entry, SeedBook

_Plan = TypeVar("_Plan", bound=tuple)
#: what a plan would book: its nodes, its victims, and whether any booking made
#: meanwhile makes it stale (``decider.stale_reason``)
_Touched = tuple[Iterable[str], Iterable[str], bool]


class Preemption(NamedTuple):
    """What a group's plan takes to fit: ``victims`` (ledger keys, lowest priority
    first), their owners the booking is nominated over (``overlap``), and what each
    victim is told (``message``)."""

    victims: tuple[str, ...]
    overlap: tuple[str, ...]
    message: str
    #: a reclaim's decision message (``queues/outcomes.reclaiming``), else ""
    reclaim: str = ""

    @classmethod
    def of(cls, decision: Decision, ledger_key: str, priority: int) -> Preemption | None:
        """The victims of a ``PREEMPT`` decision for ``ledger_key`` (of ``priority``)
        and what each is told, as a GPUWorkload preemptor's are; None for any
        other decision."""
        if decision.outcome != PREEMPT:
            return None
        if decision.evict_message:  # a reclaim of its queue's quota: told so
            return cls(tuple(decision.victims), tuple(decision.overlap),
                       decision.evict_message, decision.message)
        return cls(tuple(decision.victims), tuple(decision.overlap),
                   preempted_message(ledger_key, priority))


#: a group's plan: (pod key -> entry, "") or (None, why not), and what it preempts
GroupPlan = tuple["dict[str, Entry] | None", str, "Preemption | None"]


class PassView(PlacementView):
    """The view a plan made outside the lock reads: the same questions as
    ``PlacementView``'s, asked of the scheduler's snapshot and ledger as they stand
    when the pass began (``PlacementState.mark_pass``), without the lock, as a
    GPUWorkload's pass reads them. What changed under it is the stale check's to
    find before anything is booked."""

    def __init__(self, state: PlacementState, sched: Scheduler) -> None:
        super().__init__(state)
        self._sched = sched

    def node(self, name: str) -> NodeInfo | None:
        return self._sched.snapshot.get(name)

    def schedule(self, w: GPUWorkload, then: Sequence[GPUWorkload] = ()) -> Decision:
        return self._sched.schedule(w, then=then)

    def check_exact(self, w: GPUWorkload, owner: str, node: str,
                    devices: tuple[int, ...]) -> str | None:
        return check_exact(w, self._sched.snapshot, self._sched.ledger, owner, node, devices)

    def _ask(self, question: str) -> Any:
        return getattr(self._sched.ledger, question)


class SeedDoor:
    """The seed path's bookings in a ``PlacementState``: a plan outside the lock
    then one locked section to book it (the module's docstring); every other
    method one section."""

    def __init__(self, state: PlacementState) -> None:
        self._state = state

    def _pass_then_book(self, plan: Callable[[PlacementView], _Plan],
                        touched: Callable[[_Plan], _Touched | None],
                        book: Callable[[_Plan], _Plan]) -> _Plan:
        """``plan`` made outside the lock, then ``book`` of what it planned in one
        section unless it is stale; ``touched`` names what a plan would book (its
        nodes, its victims), None when it books nothing (then it is kept if nothing
        at all changed while it was made, as ``Decider`` keeps an Unschedulable) and
        whether any booking made meanwhile makes it stale.
        The last try plans under the lock too."""
        st = self._state
        for _ in range(STALE_TRIES):
            sched, mark = st.mark_pass()
            try:
                planned = plan(PassView(st, sched))
            except Exception:
                if not st.changed_since(mark):
                    raise
            else:
                what = touched(planned)
                if what is None:
                    if st.unchanged(mark):
                        return book(planned)
                else:
                    nodes, victims, any_hold = what
                    with st._lock:
                        if not stale_reason(st._ledger, nodes, victims, mark,
                                            any_hold or st.queues is not None):
                            return book(planned)
            STALE_DECISIONS.labels("retried").inc()
        STALE_DECISIONS.labels("locked").inc()
        with st._lock:
            return book(plan(st.view()))

    def book_seed(self, book: SeedBook, key: str,
                  plan: Callable[[PlacementView], tuple[Entry | None, str]]
                  ) -> tuple[Entry | None, str]:
        """Plans seed pod ``key`` on a read-only view and books the plan in ``book``,
        so that nothing is booked between the two that the plan did not see (the
        module's docstring). Seed pods take whole GPUs. Returns (the booked entry,
        "") or (None, why not)."""
        st = self._state

        def touched(planned: tuple[Entry | None, str]) -> _Touched | None:
            entry = planned[0]
            # a group member's slot: its plan read the group's booking (a vacancy)
            return None if entry is None else ((entry.placement.node,), (),
                                               entry.slot is not None)

        def booked(planned: tuple[Entry | None, str]) -> tuple[Entry | None, str]:
            entry, why = planned
            if entry is None:
                return None, why
            try:
                st._ledger.refuse_mig(entry.placement)
                book.book(st._ledger, key, entry)
            except LedgerConflict as exc:
                return None, str(exc)
            return entry, ""

        return self._pass_then_book(plan, touched, booked)

    def book_group(self, book: SeedBook, plan: Callable[[PlacementView], GroupPlan],
                   approved: frozenset[str] = frozenset()) -> GroupPlan:
        """Plans a pod group on a read-only view and books every member's entry in
        ``book`` in one step: the whole group or nothing, and nothing booked
        between the plan and its booking that the plan did not see (the module's
        docstring).

        A plan that preempts is booked only when each of its victims is in
        ``approved`` (the caller checked, outside the lock, that their disruption
        budgets let them all go); then it is booked as a nomination over them and
        they are evicted in the same step (the module's docstring).

        | the plan | returns | booked |
        | --- | --- | --- |
        | fits | (entries, "", None) | the entries |
        | does not fit | (None, why, None) | nothing |
        | preempts victims not all approved | (None, "", preemption) | nothing |
        | preempts approved victims | (entries, "", preemption) | a nomination |
        | refused by the ledger | (None, its conflict, None) | nothing |
        """
        st = self._state
        workloads: list[str] = []  # GPUWorkload victims: their reconcile is told
        booked: list[str] = []  # seed-path victims: their book asks their pods to go

        def touched(planned: GroupPlan) -> _Touched | None:
            entries, _, preemption = planned
            if entries is None or (preemption is not None
                                   and not set(preemption.victims) <= approved):
                return None
            return ({e.placement.node for e in entries.values()},
                    preemption.victims if preemption is not None else (), True)

        def book_it(planned: GroupPlan) -> GroupPlan:
            entries, why, preemption = planned
            if entries is None:
                return None, why, None
            if preemption is not None and not set(preemption.victims) <= approved:
                return None, "", preemption
            try:
                for entry in entries.values():
                    st._ledger.refuse_mig(entry.placement)
                book.book_all(st._ledger, entries,
                              overlap=preemption.overlap if preemption else ())
            except LedgerConflict as exc:
                return None, str(exc), None
            if preemption is not None:
                for v in preemption.victims:
                    if st._booked_elsewhere(v):
                        booked.append(v)  # its booking stays till its pods go
                    else:
                        st._ledger.depart(v)  # held on to till its children are gone
                        workloads.append(v)
                key = next(iter(entries.values())).ledger_key
                st.evictions.evict(key, workloads, preemption.message)
                st.evictions.stop_waiting(key)  # never a GPUWorkload's wait (above)
            return entries, "", preemption

        entries, why, preemption = self._pass_then_book(plan, touched, book_it)
        if workloads:
            st._enqueue_waiting(workloads)
        for v in booked:
            next(b for b in st.pod_books if b.owns_key(v)).evict(v, preemption.message)
        return entries, why, preemption

    def schedule(self, w: GPUWorkload, *, across_namespaces: bool,
                 then: Sequence[GPUWorkload] = ()) -> Decision:
        """Where ``w`` (and a gang's later parts ``then``, ``gangparts.py``) would
        go now, booking nothing; a preemption it plans takes victims of other
        namespaces only ``across_namespaces``. Part of a plan's
        pass: asked without the lock, of the cache as it stands (what it read is
        checked when the plan is booked, ``decider.stale_reason``)."""
        return self._state.scheduler.schedule(w, across_namespaces=across_namespaces,
                                              then=then)

    def reclaim(self, w: GPUWorkload, key: str, queue: str, need: Fraction,
                then: Sequence[GPUWorkload] = ()) -> Decision | None:
        """A pod group's reclaim of ``need`` GPUs of ``queue``'s quota from its
        cohort's borrowers, ``w`` its gang (``then`` its later parts) booked as
        ``key`` (``QueueBook.reclaim``,
        the gate's own plan): a ``PREEMPT`` decision naming them, or None. Part of a
        plan's pass, without the lock, as ``schedule``."""
        st = self._state
        q = st.queues.quotas().get(queue) if st.queues is not None else None
        if q is None:
            return None
        sched = st.scheduler
        decision = sched.schedule(w, across_namespaces=False, then=then)
        return st.queues.reclaim(w, key, q, need, sched.ledger, sched, decision, then)

    def group_blockers(self, ledger_key: str) -> dict[str, list[str]]:
        """node -> what a nominated group still waits for on (or of) its devices:
        its victims' pods, bookings and departing holdings. When nothing is left,
        its booking is a nomination no more (``end_nomination``) and {} is
        returned; also {} for a booking that never was one."""
        st = self._state
        with st._lock:
            a = st._ledger.allocation(ledger_key)
            if a is None or not a.overlap:
                return {}
            out = st._ledger.blockers(ledger_key)
            if not out:
                st._ledger.end_nomination(ledger_key)
            return out

    def mark_seed_bound(self, book: SeedBook, key: str) -> None:
        """Seed pod ``key`` is bound: its owner's booking commits once all are."""
        st = self._state
        with st._lock:
            book.mark_bound(st._ledger, key)

    def adopt_seed(self, book: SeedBook, key: str, want: Entry | None,
                   keep: Callable[[Entry], bool]) -> tuple[Entry | None, str]:
        """A bound seed pod: what ``book`` already books for ``key`` stays (marked
        bound) when ``keep`` says so, else ``want`` is booked. Returns (what the pod
        is taken to hold, the conflict that refused ``want`` or "")."""
        st = self._state
        with st._lock:
            have = book.entry(key)
            if have is not None and want is not None and keep(have):
                book.mark_bound(st._ledger, key)
                return have, ""
            if want is not None:
                try:
                    book.book(st._ledger, key, want)
                except LedgerConflict as exc:
                    return want, str(exc)
            return want, ""

    def release_seed(self, book: SeedBook, key: str) -> Entry | None:
        """Releases seed pod ``key``'s booking in ``book``; what it held, or None.
        The caller wakes the waiting (``capacity_freed``) once it has said so."""
        st = self._state
        with st._lock:
            return book.release(st._ledger, key)

    def seed_pod_keys(self, book: SeedBook, ledger_key: str) -> list[str]:
        """The pods (``ns/name``) whose bookings make up ``ledger_key`` in ``book``."""
        st = self._state
        with st._lock:
            return book.pod_keys(ledger_key)
