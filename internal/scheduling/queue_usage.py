"""What each queue uses, counted from the ledger's holders (pure).

Every holder counts (docs/architecture.md, invariant 1): our workloads' bookings,
pods and Jobs, the seed path's pods, and anybody's pod that requests
``nvidia.com/gpu``. One owner (one attempt of one workload, or a pod of nobody's)
counts once: the largest of what its bookings, its pods and its Jobs hold, as the
ledger counts a node's free GPUs. A share counts as its part of the device (a
memory share of a device whose memory is unknown counts whole), a MIG instance as
its profile's compute slices out of 7 (an instance not reported counts whole).

Which queue an owner's GPUs count against: its booking's workload's queue when it
has a booking, else its namespace's queue (``QueueOf``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from api.v1alpha1.types import Placement
from internal.scheduling.ledger import DEPARTING, Allocation, Ledger, is_departing
from internal.scheduling.shares import NodeSharing, placement_portion

ONE = Fraction(1)
#: compute slices of a whole device (A100, H100): ``3g.40gb`` is 3/7 of it
MIG_SLICES = 7

#: (the owner's representative holder) -> its queue's name, or None
QueueOf = Callable[[Allocation], str | None]


def placement_gpus(p: Placement, sharing: NodeSharing) -> Fraction:
    """GPUs one replica's placement holds."""
    portion = placement_portion(p)
    if portion is None:
        return Fraction(len(p.devices))
    if portion.is_mig:
        for d in p.devices:
            inst = sharing.instance(d, portion.mig)
            m = re.match(r"([1-8])g\.", inst.profile) if inst is not None else None
            if m:
                return Fraction(int(m.group(1)), MIG_SLICES)
        return ONE
    part = portion.part(sharing.memory.get(p.devices[0]) if p.devices else None)
    return part if part is not None else ONE


def holder_gpus(a: Allocation, sharing: Callable[[str], NodeSharing]) -> Fraction:
    """GPUs ``a`` holds: its placements' and what it counts without naming devices."""
    named = sum((placement_gpus(p, sharing(p.node)) for p in a.placements), Fraction(0))
    return named + sum(a.counted.values())


@dataclass(slots=True)
class OwnerUse:
    """One owner's GPUs and the holder that says whose they are (its booking first)."""

    gpus: Fraction
    holder: Allocation


def by_owner(allocs: Iterable[Allocation], sharing: Callable[[str], NodeSharing]
             ) -> dict[str, OwnerUse]:
    """owner -> what it holds: the largest of its bookings', pods' and Jobs' sums."""
    sides: dict[str, dict[str, Fraction]] = {}
    rep: dict[str, Allocation] = {}
    for a in allocs:
        side = _side(a)
        per = sides.setdefault(a.owner, {})
        per[side] = per.get(side, Fraction(0)) + holder_gpus(a, sharing)
        if a.owner not in rep or (rep[a.owner].holder and not a.holder):
            rep[a.owner] = a
    return {o: OwnerUse(max(per.values()), rep[o]) for o, per in sides.items()}


def namespace_of(a: Allocation) -> str:
    """The namespace of a holder (its name is ``namespace/name``)."""
    name = a.name.removeprefix(DEPARTING)
    return name.split("/", 1)[0] if "/" in name else ""


def used_by_queue(ledger: Ledger, queue_of: QueueOf,
                  owners: Mapping[str, OwnerUse] | None = None) -> dict[str, Fraction]:
    """queue -> GPUs its owners hold (owners in no queue are left out)."""
    if owners is None:
        owners = by_owner(ledger.allocations().values(), ledger.sharing)
    out: dict[str, Fraction] = {}
    for use in owners.values():
        q = queue_of(use.holder)
        if q is not None:
            out[q] = out.get(q, Fraction(0)) + use.gpus
    return out


_SIDES = ("booking", "pod", "job")


def _side(a: Allocation) -> str:
    """What ``a`` counts as: a victim's departing holding as the booking it was."""
    return "job" if a.job else "pod" if a.holder and not is_departing(a.key) else "booking"


class UsageIndex:
    """``used_by_queue`` and ``by_owner`` kept current from the ledger's changes
    (``Ledger.watchers``) instead of summed again at every decision: each holder's
    GPUs and each owner's queue are worked out when it is added, and its GPUs taken
    off again, exactly, when it goes.

    An owner's queue is read when one of its holders changes: a queue created or
    changed later re-attributes nothing until the index is built again (the queue
    gate builds a new one whenever a GPUQueue changes).
    """

    def __init__(self, ledger: Ledger, queue_of: QueueOf) -> None:
        self.ledger, self.queue_of = ledger, queue_of
        self.used: dict[str, Fraction] = {}
        self.owners: dict[str, OwnerUse] = {}
        self._holders: dict[str, dict[str, tuple[Allocation, Fraction]]] = {}
        self._queue: dict[str, str | None] = {}
        for a in ledger.allocations().values():
            self.on_change(a, True)
        ledger.watchers.append(self.on_change)

    def close(self) -> None:
        """Stop following the ledger."""
        if self.on_change in self.ledger.watchers:
            self.ledger.watchers.remove(self.on_change)

    def on_change(self, a: Allocation, added: bool) -> None:
        owner = a.owner
        holders = self._holders.setdefault(owner, {})
        before = self.owners.get(owner)
        if added:
            holders[a.key] = (a, holder_gpus(a, self.ledger.sharing))
        else:
            holders.pop(a.key, None)
        if before is not None:
            self._add(self._queue.get(owner), -before.gpus)
        if not holders:
            del self._holders[owner]
            self.owners.pop(owner, None)
            self._queue.pop(owner, None)
            return
        sides = dict.fromkeys(_SIDES, Fraction(0))
        for held, gpus in holders.values():
            sides[_side(held)] += gpus
        rep = next((h for h, _ in holders.values() if not h.holder and not h.job),
                   next(iter(holders.values()))[0])
        use = OwnerUse(max(sides.values()), rep)
        if before is None or before.holder is not rep:
            self._queue[owner] = self.queue_of(rep)
        self.owners[owner] = use
        self._add(self._queue.get(owner), use.gpus)

    def backed(self, owner: str) -> bool:
        """Do ``owner``'s pods (or Jobs) hold all its bookings hold? A booking not
        yet backed may still be creating its pods, on devices that only the booking
        keeps from others: a reclaim does not take it (below, quota.py)."""
        sides = dict.fromkeys(_SIDES, Fraction(0))
        for held, gpus in self._holders.get(owner, {}).values():
            sides[_side(held)] += gpus
        return max(sides["pod"], sides["job"]) >= sides["booking"] > 0

    def _add(self, queue: str | None, gpus: Fraction) -> None:
        if queue is None or not gpus:
            return
        total = self.used.get(queue, Fraction(0)) + gpus
        if total:
            self.used[queue] = total
        else:
            self.used.pop(queue, None)
