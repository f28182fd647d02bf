"""What the GPUWorkload reconciler reads of the placement cache, each read in one
section and handed out as values (never the cache's own objects): a workload's
standing at the start of its reconcile (``PlacementState.standing_of``), what its
children wait for (``PlacementState.children_wait``), and its nodes' devices' UUIDs from a
node's snapshot record (``PlacementCache.node_records``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from internal.scheduling.holdings import Allocation
from internal.scheduling.snapshot import NodeInfo


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
