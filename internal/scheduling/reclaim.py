"""Reclaim: which borrowers a queue under its nominal quota evicts, pure.

The plan is the fewest victims, taken in ``quota.reclaimable``'s order (lowest
priority, then newest first), after which the reclaiming workload both fits its
queue's quota and can be placed on the devices the victims free; a victim not
needed for both is dropped again. A borrowing queue loses workloads only while it
still borrows: once the victims taken so far bring it back to its nominal, no
more are taken from it. The plan goes through the preemption that exists: the
victims' bookings are released and the reclaimer is nominated over their pods
(docs/architecture.md, invariant 2), so its pods start once theirs are gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from api.v1alpha1.types import GPUWorkload, Placement
from internal.scheduling.gangparts import attempt_gang
from internal.scheduling.ledger import Ledger
from internal.scheduling.preemption import MAX_VICTIMS
from internal.scheduling.quota import Candidate, Queue, Quotas, reclaimable, without
from internal.scheduling.snapshot import Snapshot
from internal.scheduling.strategies.base import Strategy


def plan_reclaim(workload: GPUWorkload, snapshot: Snapshot, ledger: Ledger,
                 strategy: Strategy, counted: bool, quotas: Quotas, q: Queue,
                 need: Fraction, used: Mapping[str, Fraction],
                 candidates: list[Candidate], then: Sequence[GPUWorkload] = (),
                 ) -> tuple[list[Candidate], list[Placement]] | None:
    """(victims, placements) that admit ``workload`` (and its gang's later parts
    ``then``, ``gangparts.py``) into ``q``, or None."""

    def place(chosen: list[Candidate]) -> list[Placement] | None:
        return attempt_gang(workload, then, snapshot, ledger, strategy, counted,
                            [c.owner for c in chosen])[0]

    def still_borrowing(c: Candidate, sim: Mapping[str, Fraction]) -> bool:
        owner = quotas.get(c.queue)
        return c.queue == q.name or (owner is not None
                                     and sim.get(c.queue, Fraction(0)) > owner.nominal)

    if quotas.fits(q, need, used) and place([]) is not None:
        return None  # it fits once what is being taken already is gone: nothing to take
    ordered = reclaimable(quotas, q, workload.spec.priority, need, used, candidates)
    chosen: list[Candidate] = []
    placements: list[Placement] | None = None
    for c in ordered[:MAX_VICTIMS]:
        if not still_borrowing(c, without(used, chosen)):
            continue
        chosen.append(c)
        if quotas.fits(q, need, without(used, chosen)):
            placements = place(chosen)
            if placements is not None:
                break
    if placements is None:
        return None
    for c in sorted(chosen, key=lambda c: (-c.priority, c.created, c.key)):
        trial = [x for x in chosen if x is not c]
        if not trial or not quotas.fits(q, need, without(used, trial)):
            continue
        p = place(trial)
        if p is not None:
            chosen, placements = trial, p
    return chosen, placements
