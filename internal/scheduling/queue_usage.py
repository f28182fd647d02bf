"""What each queue uses, counted from the ledger's holders (pure).

Every holder counts (docs/architecture.md, invariant 1): our workloads' bookings,
pods and Jobs, the seed path's pods, and anybody's pod that requests
``nvidia.com/gpu``. One owner (one attempt of one workload, or a pod of nobody's)
counts once: the largest of what its bookings, its pods and its Jobs hold, as the
ledger counts a node's free GPUs. A share counts as its part of the device (a
memory share of a device whose memory is unknown counts whole), and what one owner's
shares hold on one device counts at least the share floor together (``ShareFloors.
counted``, internal/scheduling/sharefloor.py); a MIG instance counts as its profile's
compute slices out of 7 (an instance not reported counts whole).

Which queue an owner's GPUs count against: its booking's workload's queue when it
has a booking, else its namespace's queue (``QueueOf``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from api.v1alpha1.types import Placement
from internal.scheduling.ledger import DEPARTING, Allocation, Ledger, is_departing
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors
from internal.scheduling.shares import NodeSharing, format_fraction, placement_portion

ONE = Fraction(1)
#: compute slices of a whole device (A100, H100): ``3g.40gb`` is 3/7 of it
MIG_SLICES = 7

#: a shared device: (node, index)
Device = tuple[str, int]
#: (the owner's representative holder) -> its queue's name, or None
QueueOf = Callable[[Allocation], str | None]


def placement_gpus(p: Placement, sharing: NodeSharing) -> Fraction:
    """GPUs one replica's placement holds, before the share floor."""
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


@dataclass(frozen=True, slots=True)
class Held:
    """What holders hold, as a queue counts it: ``gpus`` (whole devices, MIG
    instances, GPUs counted without devices) and ``shares``, the part of each shared
    device (floored only once all of one owner's side is summed: ``count``)."""

    gpus: Fraction = Fraction(0)
    shares: Mapping[Device, Fraction] = field(default_factory=dict)

    def count(self, floors: ShareFloors) -> Fraction:
        return self.gpus + sum((floors.counted(part) for part in self.shares.values()),
                               Fraction(0))

    def floor_note(self, floors: ShareFloors) -> str:
        """`` (3 shared devices, each counts at least 0.05)`` where the floor raised
        the count, for the quota's message ('' where it did not)."""
        if not any(part < floors.fraction for part in self.shares.values()):
            return ""
        n = len(self.shares)
        return (f" ({n} shared device{'s' if n != 1 else ''}, each counts at least "
                f"{format_fraction(floors.fraction)})")


def _add_shares(into: dict[Device, Fraction], shares: Mapping[Device, Fraction]) -> None:
    for d, part in shares.items():
        into[d] = into.get(d, Fraction(0)) + part


def placements_held(placements: Iterable[Placement],
                    sharing: Callable[[str], NodeSharing]) -> Held:
    """What ``placements`` hold: their shares by device, the rest as GPUs."""
    gpus = Fraction(0)
    shares: dict[Device, Fraction] = {}
    for p in placements:
        portion = placement_portion(p)
        if portion is not None and not portion.is_mig and len(p.devices) == 1:
            part = portion.part(sharing(p.node).memory.get(p.devices[0]))
            if part is not None:
                _add_shares(shares, {(p.node, p.devices[0]): part})
                continue
        gpus += placement_gpus(p, sharing(p.node))  # whole, MIG, a share not weighed
    return Held(gpus, shares)


def holder_held(a: Allocation, sharing: Callable[[str], NodeSharing]) -> Held:
    """What ``a`` holds: its placements and what it counts without naming devices."""
    held = placements_held(a.placements, sharing)
    return Held(held.gpus + sum(a.counted.values()), held.shares)


def holder_gpus(a: Allocation, sharing: Callable[[str], NodeSharing],
                floors: ShareFloors = DEFAULT_FLOORS) -> Fraction:
    """GPUs ``a`` holds, counted alone (its owner's other holders aside)."""
    return holder_held(a, sharing).count(floors)


def _side_totals(held: Iterable[tuple[Allocation, Held]], floors: ShareFloors
           ) -> dict[str, Fraction]:
    """One owner's GPUs per side (booking, pod, job): each side summed, then its
    shares floored per device. Linear in the owner's holders and their devices."""
    gpus: dict[str, Fraction] = {}
    shares: dict[str, dict[Device, Fraction]] = {}
    for a, h in held:
        side = _side(a)
        gpus[side] = gpus.get(side, Fraction(0)) + h.gpus
        if h.shares:
            _add_shares(shares.setdefault(side, {}), h.shares)
    return {side: Held(g, shares.get(side, {})).count(floors) for side, g in gpus.items()}


def _owner_gpus(held: Iterable[tuple[Allocation, Held]], floors: ShareFloors) -> Fraction:
    """One owner's GPUs: the largest of its bookings', pods' and Jobs' sums."""
    return max(_side_totals(held, floors).values(), default=Fraction(0))


@dataclass(slots=True)
class OwnerUse:
    """One owner's GPUs and the holder that says whose they are (its booking first)."""

    gpus: Fraction
    holder: Allocation


def by_owner(allocs: Iterable[Allocation], sharing: Callable[[str], NodeSharing],
             floors: ShareFloors = DEFAULT_FLOORS) -> dict[str, OwnerUse]:
    """owner -> what it holds: the largest of its bookings', pods' and Jobs' sums."""
    held: dict[str, list[tuple[Allocation, Held]]] = {}
    rep: dict[str, Allocation] = {}
    for a in allocs:
        held.setdefault(a.owner, []).append((a, holder_held(a, sharing)))
        if a.owner not in rep or (rep[a.owner].holder and not a.holder):
            rep[a.owner] = a
    return {o: OwnerUse(_owner_gpus(h, floors), rep[o]) for o, h in held.items()}


def namespace_of(a: Allocation) -> str:
    """The namespace of a holder: its name is ``namespace/name``, or for a booking
    of the pod binding's ``Kind:namespace/name`` (``PodGroup:``, ``StatefulSet:``;
    a namespace never contains ':')."""
    name = a.name.removeprefix(DEPARTING)
    return name.split("/", 1)[0].rpartition(":")[2] if "/" in name else ""


def used_by_queue(ledger: Ledger, queue_of: QueueOf,
                  owners: Mapping[str, OwnerUse] | None = None,
                  floors: ShareFloors = DEFAULT_FLOORS) -> dict[str, Fraction]:
    """queue -> GPUs its owners hold (owners in no queue are left out)."""
    if owners is None:
        owners = by_owner(ledger.allocations().values(), ledger.sharing, floors)
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


@dataclass(slots=True)
class _Side:
    """One side (booking, pod, job) of one owner, summed as its holders come and go:
    its GPUs, its part of each shared device, and those parts floored (``total``)."""

    gpus: Fraction = Fraction(0)
    shares: dict[Device, Fraction] = field(default_factory=dict)
    floored: Fraction = Fraction(0)

    @property
    def total(self) -> Fraction:
        return self.gpus + self.floored

    def add(self, held: Held, sign: int, floors: ShareFloors) -> None:
        self.gpus += sign * held.gpus
        for d, part in held.shares.items():
            was = self.shares.get(d, Fraction(0))
            now = was + sign * part
            self.floored += floors.counted(now) - floors.counted(was)
            if now:
                self.shares[d] = now
            else:
                self.shares.pop(d, None)


class UsageIndex:
    """``used_by_queue`` and ``by_owner`` kept current by the ledger itself instead
    of summed again at every decision: the ledger that holds it (``Ledger.usage``)
    calls ``apply`` and ``release`` in its own ``_apply`` and ``_release``, in the
    same step that changes a holder (no watcher list). Each holder's GPUs and each
    owner's queue are worked out when it is added, and its GPUs taken off again,
    exactly, when it goes.

    An owner's queue is read when one of its holders changes: a queue created or
    changed later re-attributes nothing until the index is made again from the
    ledger's holders (the placement cache makes a new one, under its lock, when a
    GPUQueue or a namespace's queues changed: ``controllers/placement/queue_counts.py``).
    """

    def __init__(self, ledger: Ledger, queue_of: QueueOf,
                 floors: ShareFloors = DEFAULT_FLOORS) -> None:
        """Counts what ``ledger`` holds now (it is not told of later changes
        until it is the ledger's ``usage``)."""
        self.sharing, self.queue_of, self.floors = ledger.sharing, queue_of, floors
        self.used: dict[str, Fraction] = {}
        self.owners: dict[str, OwnerUse] = {}
        self._holders: dict[str, dict[str, tuple[Allocation, Held]]] = {}
        self._sides: dict[str, dict[str, _Side]] = {}  # owner -> side -> its sums
        self._queue: dict[str, str | None] = {}
        for a in ledger.allocations().values():
            self.apply(a)

    def apply(self, a: Allocation) -> None:
        """``a`` is added (or replaces the holder of its key)."""
        self._change(a, True)

    def release(self, a: Allocation) -> None:
        """``a`` is gone."""
        self._change(a, False)

    def _change(self, a: Allocation, added: bool) -> None:
        """``a`` added (or replaced) or gone: its owner's sides change by what it
        holds (in time linear in its devices), then its owner's GPUs and queue."""
        owner = a.owner
        holders = self._holders.setdefault(owner, {})
        sides = self._sides.setdefault(owner, {})
        before = self.owners.get(owner)
        old = holders.pop(a.key, None)
        if old is not None:
            sides[_side(old[0])].add(old[1], -1, self.floors)
        if added:
            held = holder_held(a, self.sharing)
            holders[a.key] = (a, held)
            sides.setdefault(_side(a), _Side()).add(held, 1, self.floors)
        if before is not None:
            self._add(self._queue.get(owner), -before.gpus)
        if not holders:
            del self._holders[owner], self._sides[owner]
            self.owners.pop(owner, None)
            self._queue.pop(owner, None)
            return
        rep = next((h for h, _ in holders.values() if not h.holder and not h.job),
                   next(iter(holders.values()))[0])
        use = OwnerUse(max(side.total for side in sides.values()), rep)
        if before is None or before.holder is not rep:
            self._queue[owner] = self.queue_of(rep)
        self.owners[owner] = use
        self._add(self._queue.get(owner), use.gpus)

    def backed(self, owner: str) -> bool:
        """Do ``owner``'s pods (or Jobs) hold all its bookings hold? A booking not
        yet backed may still be creating its pods, on devices that only the booking
        keeps from others: a reclaim does not take it (below, quota.py)."""
        sides = dict.fromkeys(_SIDES, Fraction(0))
        sides.update((k, v.total) for k, v in self._sides.get(owner, {}).items())
        return max(sides["pod"], sides["job"]) >= sides["booking"] > 0

    def _add(self, queue: str | None, gpus: Fraction) -> None:
        if queue is None or not gpus:
            return
        total = self.used.get(queue, Fraction(0)) + gpus
        if total:
            self.used[queue] = total
        else:
            self.used.pop(queue, None)
