"""The queue admission rules (pure): who goes first within a queue and across a
cohort, what a preemption's quota is checked against, and what a reclaim may take
again. The queue gate (``controllers/queues/book.py``) asks these with what the
queue manager holds (``controllers/queues/manager.py``) and the ledger's usage; no
rule here reads a cache, a clock or a lock.

Order (BestEffortFIFO, as Kueue names it): within a queue by priority (higher
first), then creation time (older first), then key. Only a workload *last refused
for quota* holds a place in that order (a ``Waiting``); one refused for devices
stalls nobody.

| the workload ``key`` of queue ``q``                      | ``queued_behind``          |
| -------------------------------------------------------- | -------------------------- |
| one ahead of it in ``q`` waits and fits ``q``'s quota    | waits behind the first one |
| now                                                      |                            |
| would borrow, and a queue of its cohort with a lower     | waits for that one         |
| ``borrowed / weight`` has a waiting one that fits now    |                            |
| otherwise (one ahead that does not fit stalls nobody)    | None: it may go            |

Where both hold, the message names whichever of the two comes first in the order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from internal.scheduling.framework import PREEMPT, Decision
from internal.scheduling.ledger import Allocation
from internal.scheduling.queue_usage import OwnerUse
from internal.scheduling.quota import Candidate, Queue, Quotas, without

ZERO = Fraction(0)

#: a place in a queue's order: (-priority, creation time, key); lower goes first
Order = tuple[int, str, str]


@dataclass(frozen=True, slots=True)
class Waiting:
    """A workload last refused for quota: its queue, its place in the queue's order
    and the GPUs it needs."""

    queue: str
    priority: int
    created: str
    need: Fraction

    def order(self, key: str) -> Order:
        return (-self.priority, self.created, key)


#: one queue's waiting workloads, sorted by their ``Order``
Line = Sequence[tuple[Order, Waiting]]


Fits = Callable[[Queue, Fraction], bool]


def _fits(quotas: Quotas, used: Mapping[str, Fraction]) -> Fits:
    """``quotas.fits`` at ``used``, asked once per queue and need: what fits is
    monotone in the need (a need at least one refused is refused too), so a line
    of waiting workloads costs a comparison each, not a sum over the cohort."""
    refused: dict[str, Fraction] = {}

    def fits(p: Queue, need: Fraction) -> bool:
        least = refused.get(p.name)
        if least is not None and need >= least:
            return False
        if quotas.fits(p, need, used):
            return True
        refused[p.name] = need
        return False
    return fits


def _first_fitting(line: Line, p: Queue, fits: Fits, key: str,
                   before: Order | None) -> Order | None:
    """The first of ``line`` (ahead of ``before``) that fits ``p``'s quota now."""
    for order, e in line:
        if before is not None and order >= before:
            return None
        if order[2] != key and fits(p, e.need):
            return order
    return None


def queued_behind(key: str, me: Waiting, q: Queue, quotas: Quotas,
                  used: Mapping[str, Fraction], lines: Mapping[str, Line]) -> str | None:
    """Why ``key`` (``me``, of queue ``q``) must let another go first (the table
    above), or None. ``lines``: queue name -> its waiting workloads in order."""
    fits = _fits(quotas, used)
    first = _first_fitting(lines.get(q.name, ()), q, fits, key, me.order(key))
    why = (f"waiting behind {first[2]} in queue {q.name} (priority, then creation time)"
           if first is not None else None)
    if used.get(q.name, ZERO) + me.need <= q.nominal:
        return why  # not borrowing: the fair share does not hold it
    mine = quotas.share(q, used)
    for p in quotas.queues.values():
        if p.name == q.name or p.cohort != q.cohort or not quotas.share(p, used) < mine:
            continue
        found = _first_fitting(lines.get(p.name, ()), p, fits, key, first)
        if found is not None:
            first = found
            why = (f"waiting for {found[2]} of queue {p.name}: queue {q.name} borrows "
                   f"more for its weight (fair share {float(mine):.2f})")
    return why


def settled(used: Mapping[str, Fraction], owners: Mapping[str, OwnerUse],
            overlapped: Iterable[str], queue_of: Callable[[Allocation], str | None]
            ) -> dict[str, Fraction]:
    """``used`` once the victims of the preemptions under way are gone
    (``overlapped``: the owners that bookings are nominated over; their devices are
    their preemptors', counted in their bookings): what a reclaim plans from, so that
    it never takes again what is already being taken. A victim booked again (placed
    again before its preemptor's pods were made: it keeps its owner, as an eviction
    spends no retry) counts in full: it is not being taken any more."""
    victims = []
    for o in set(overlapped) & owners.keys():
        if not owners[o].holder.holder:
            continue  # its representative is a booking: booked again
        queue = queue_of(owners[o].holder)
        if queue is not None:
            victims.append(Candidate(o, o, queue, 0, "", owners[o].gpus))
    return without(used, victims)


def preempted(decision: Decision, allocation: Callable[[str], Allocation | None],
              owners: Mapping[str, OwnerUse]) -> list[Candidate]:
    """What a priority preemption's victims hold, against its queue (none for any
    other decision)."""
    if decision.outcome != PREEMPT:
        return []
    out = []
    for v in decision.victims:
        a = allocation(v)
        if a is not None and a.owner in owners:
            out.append(Candidate(v, a.owner, decision.queue or "", a.priority, "",
                                 owners[a.owner].gpus))
    return out


def quota_refusal(quotas: Quotas, q: Queue, need: Fraction, used: Mapping[str, Fraction],
                  preemption: bool, settled_used: Callable[[], Mapping[str, Fraction]],
                  victims: Iterable[Candidate]) -> str | None:
    """Why ``need`` more GPUs do not fit ``q``'s quota, or None. A preemption
    (within the queue) is nominated: its pods start once its victims' are gone, so it
    is held to the quota as it will be then."""
    if preemption:
        return quotas.check(q, need, without(settled_used(), victims))
    return quotas.check(q, need, used)
