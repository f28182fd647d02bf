"""The seed path's door to the placement cache (``PlacementState.seeds``): a seed
pod's or a pod group's plan made on a read-only view (``PlacementView``) and booked
in the pod binding's book, each in one section of the cache's lock, so nothing is
booked between the plan and its booking; and the book's bindings and releases.
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

from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, NamedTuple

from api.v1alpha1.types import GPUWorkload
from controllers.placement.door import PlacementView
from controllers.placement.evictions import preempted_message
from internal.scheduling.framework import PREEMPT, Decision
from internal.scheduling.ledger import LedgerConflict

if TYPE_CHECKING:
    from controllers.placement.state import PlacementState
    from controllers.podbinding.seedbook import Entry, SeedBook


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


class SeedDoor:
    """The seed path's bookings in a ``PlacementState``; every method one section."""

    def __init__(self, state: PlacementState) -> None:
        self._state = state

    def book_seed(self, book: SeedBook, key: str,
                  plan: Callable[[PlacementView], tuple[Entry | None, str]]
                  ) -> tuple[Entry | None, str]:
        """Plans seed pod ``key`` on a read-only view and books the plan in ``book``,
        both under the lock, so nothing is booked between the two. Seed pods take
        whole GPUs. Returns (the booked entry, "") or (None, why not)."""
        st = self._state
        with st._lock:
            entry, why = plan(st.view())
            if entry is None:
                return None, why
            try:
                st._ledger.refuse_mig(entry.placement)
                book.book(st._ledger, key, entry)
            except LedgerConflict as exc:
                return None, str(exc)
            return entry, ""

    def book_group(self, book: SeedBook, plan: Callable[[PlacementView], GroupPlan],
                   approved: frozenset[str] = frozenset()) -> GroupPlan:
        """Plans a pod group on a read-only view and books every member's entry in
        ``book`` in one step, both under the lock: the whole group or nothing.

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
        with st._lock:
            entries, why, preemption = plan(st.view())
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
        if workloads:
            st._enqueue_waiting(workloads)
        for v in booked:
            next(b for b in st.pod_books if b.owns_key(v)).evict(v, preemption.message)
        return entries, "", preemption

    def schedule(self, w: GPUWorkload, *, across_namespaces: bool) -> Decision:
        """Where ``w`` would go now, booking nothing; a preemption it plans takes
        victims of other namespaces only ``across_namespaces``."""
        st = self._state
        with st._lock:
            return st.scheduler.schedule(w, across_namespaces=across_namespaces)

    def reclaim(self, w: GPUWorkload, key: str, queue: str, need: Fraction) -> Decision | None:
        """A pod group's reclaim of ``need`` GPUs of ``queue``'s quota from its
        cohort's borrowers, ``w`` its gang booked as ``key`` (``QueueBook.reclaim``,
        the gate's own plan): a ``PREEMPT`` decision naming them, or None."""
        st = self._state
        with st._lock:
            q = st.queues.quotas().get(queue) if st.queues is not None else None
            if q is None:
                return None
            decision = st.scheduler.schedule(w, across_namespaces=False)
            return st.queues.reclaim(w, key, q, need, st._ledger, st.scheduler, decision)

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
