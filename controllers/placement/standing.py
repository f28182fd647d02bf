"""What the GPUWorkload reconciler reads of the placement cache, each read as one
moment's and handed out as values (never the cache's own objects): a workload's
standing at the start of its reconcile (``PlacementState.standing_of``; without
the lock when nothing changed while it was read, ``read_unlocked``), what its
children wait for (``PlacementState.children_wait``), and its nodes' devices' UUIDs from a
node's snapshot record (``PlacementCache.node_records``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from internal.scheduling.holdings import Allocation
from internal.scheduling.ledger import Ledger, departing_key
from internal.scheduling.snapshot import NodeInfo

if TYPE_CHECKING:
    from controllers.placement.evictions import Evictions
    from controllers.placement.section_lock import SectionLock


@dataclass(frozen=True, slots=True)
class Standing:
    """A workload's standing in the cache."""

    #: a copy of its booking (None: it has none)
    booking: Allocation | None
    #: the eviction its reconcile is to take in (None: none)
    eviction_message: str | None
    #: it holds on to a released booking (``PlacementCache.depart``)
    departing: bool


@dataclass(frozen=True, slots=True)
class Waits:
    """What a workload's children wait for before they are made."""

    #: victims of its preemption that have not taken in their eviction
    victims: list[str]
    #: node -> pods (and holds) still on its devices
    blocking: dict[str, list[str]]
    #: it is a preemption's nomination (its victims' pods are waited for)
    nominated: bool


def uuids_of(info: NodeInfo | None, devices: Iterable[int]) -> list[str] | None:
    """The UUIDs of ``devices`` of the node ``info`` describes; None when it is
    unknown, has no GPUNode, or one device has no UUID."""
    if info is None or not info.has_gpunode:
        return None
    out = [info.devices[d].uuid if d in info.devices else "" for d in devices]
    return out if all(out) else None


def booking_copy(a: Allocation | None) -> Allocation | None:
    """A booking to hand out: the ledger's own object is changed in place."""
    return None if a is None else replace(a, counted=dict(a.counted))


def read_unlocked(lock: SectionLock, ledger_now: Callable[[], Ledger], evictions: Evictions,
                  key: str, uid: str | None) -> Standing | None:
    """Workload ``key``'s standing read without the cache's ``lock``, as one
    moment's, or None when it must be read under the lock: a section was in
    progress when it began or ended, anything of the ledger changed while it was
    read, or the cache was filled again (the ledger's stamps: every booking,
    holding, commit and nomination's end is stamped when it ends, and an eviction
    is recorded in the section that departs its victim), or a booking or hold of
    another object of that name is there to let go (``uid`` differs)."""
    if lock.busy:
        return None
    ledger = ledger_now()
    stamps = ledger.stamps
    before = stamps.changes
    a = ledger.allocation(key)
    h = ledger.holding(departing_key(key))
    message = evictions.message(key)
    if uid and ((a is not None and a.uid and a.uid != uid) or
                (h is not None and h.uid and h.uid != uid)):
        return None
    standing = Standing(booking_copy(a), message, h is not None)
    if lock.busy or ledger_now() is not ledger or stamps.changes != before:
        return None
    return standing
