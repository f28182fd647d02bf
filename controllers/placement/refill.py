"""What a refill of the placement cache from the informers' caches keeps beside
them (``PlacementState.rebuild``): the decisions in flight, as kube-scheduler's
cache keeps its assumed pods, and the children we created that the caches do not
show yet. Pure: each is handed what it reads."""

from __future__ import annotations

from collections.abc import Callable

from internal.objects import JSON
from internal.scheduling.holdings import Allocation
from internal.scheduling.ledger import Ledger, LedgerConflict

#: (nodes, gpunodes, workloads, pods) as listed from the caches
Sources = tuple[list[JSON], list[JSON], list[JSON], list[JSON]]
#: (resourceslices, resourceclaims) as listed from the caches (DRA on)
DraSources = tuple[list[JSON], list[JSON]]


def in_flight(ledger: Ledger, booked_elsewhere: Callable[[str], bool]) -> list[Allocation]:
    """The bookings of ``ledger`` decided and not yet committed (a reconcile is
    between ``decide`` and ``commit``), which a refill keeps. A preemption in flight
    is not kept: its victims are read again from the caches, and its commit finds
    no booking (``commit`` says False), so its reconcile decides again. Nor is a pod
    book's booking (``booked_elsewhere``): its book books it again."""
    return [a for a in ledger.bookings()
            if not a.committed and not a.overlap and not a.key.startswith("departing:")
            and not booked_elsewhere(a.key)]


def carry(ledger: Ledger, carried: list[Allocation]) -> list[str]:
    """Books ``carried`` (decisions in flight) in a ledger just filled from the
    caches; one that now conflicts (the lost event was a holder of its devices) is
    dropped, and its commit finds no booking (``commit`` says False)."""
    problems = []
    for a in carried:
        try:
            ledger.assume(a.key, a.placements, gpus_per_replica=a.gpus_per_replica,
                          priority=a.priority, owner=a.owner, uid=a.uid)
        except LedgerConflict as exc:
            problems.append(f"{a.key}: its decision in flight is dropped: {exc}")
    return problems


def with_created(pods: list[JSON], jobs: list[JSON], made: list[JSON]
                 ) -> tuple[list[JSON], list[JSON]]:
    """``pods`` and ``jobs`` and the children we created (``made``) that they do not
    show yet: those hold their devices too (the informer will show them)."""
    if not made:
        return pods, jobs
    seen = {(o.get("metadata") or {}).get("uid") for o in (*pods, *jobs)}
    new = [o for o in made if (o.get("metadata") or {}).get("uid") not in seen]
    return ([*pods, *(o for o in new if o.get("kind") == "Pod")],
            [*jobs, *(o for o in new if o.get("kind") == "Job")])
