"""Who holds which GPU of which node: the ledger's tables and the arithmetic over
them (``DeviceHoldings``), with the holders themselves (``Allocation``).

Three tables, changed only together by ``_apply`` and ``_release`` (each
re-indexes the free counts of the nodes it touched, ``FreeIndex``):

- device -> holder key -> owner, per node: the devices held by name;
- holder key -> GPUs, per node: what is held without naming devices (device-plugin
  mode), counted;
- holder key -> ``Allocation``: every holder, pods, Jobs, claims and bookings (and
  per owner, how many of them it owns: ``holds_any``).

``free_count(node) = |usable - named-held| - counted``, where each owner's counted
GPUs on a node are the largest of what its bookings, its pods and its Jobs count (a
device-plugin workload's booking, its Job and its pod are the same GPUs, not three
times as many). What a preemption's victim holds on to (``departing:<key>``,
``Ledger.depart``) counts as the booking it was. ``usage``, when the placement
cache gives the ledger one (queues on), is each queue's usage, changed by
``_apply`` and ``_release`` in the same step as the tables (``queue_usage.UsageIndex``).

The rules of who may hold what beside whom (``assume``'s check, a pod's conflicts,
a nomination's blockers) are ``DeviceLedger``'s (``ledger_core.py``), over these
tables; the reading of API objects into them is ``Ledger``'s (``ledger.py``).
Not thread-safe: callers serialize (one lock in the controller).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from api.v1alpha1.types import Placement
from internal.scheduling.freeindex import FreeIndex
from internal.scheduling.jobs import job_holder_key
from internal.scheduling.pods import pod_holder_key
from internal.scheduling.shares import Hold, NodeSharing, compatible, hold_of, owner_use
from internal.scheduling.stamps import Stamps

if TYPE_CHECKING:
    from internal.scheduling.queue_usage import UsageIndex

#: the key prefix of what a workload holds on to after its booking was released
#: while its children may still exist (``Ledger.depart``): counted like a booking
DEPARTING = "departing:"


def is_departing(key: str) -> bool:
    return key.startswith(DEPARTING)


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """How one device is held: ``kind`` whole, share or mig; its ``holders`` by
    name; the MIG instances held of it."""

    kind: str
    holders: tuple[str, ...]
    migs: int = 0


@dataclass(slots=True)
class Allocation:
    key: str
    placements: tuple[Placement, ...]
    counted: dict[str, int] = field(default_factory=dict)  # node -> GPUs (device-plugin)
    priority: int = 0
    committed: bool = False
    gpus_per_replica: int = 0
    owner: str = ""  # the sharing group; the key itself when empty
    holder: bool = False  # a holder's (pod, Job, claim) holding, not a booking
    name: str = ""  # what messages call it: a workload key, or a pod's namespace/name
    uid: str = ""  # the workload UID of a booking
    overlap: frozenset[str] = frozenset()  # owners a nomination was booked over
    job: bool = False  # a Job's holding (counted apart from its pods')
    #: a pod's: the workload attempt (``<uid>#<attempt>``) whose pod the ledger booked
    #: it as, kept when the pod is orphaned (``Ledger.sync_pod``); "" for anybody's
    child_of: str = ""
    #: a holder's: why it over-commits its node ("": it does not). Set on the holder
    #: whose arrival took the node's named + counted GPUs above its devices (the later
    #: one: ``DeviceLedger.set_pod``), kept while it holds the same
    overcommit: str = ""

    def __post_init__(self) -> None:
        self.owner = self.owner or self.key
        self.name = self.name or self.key

    @property
    def nodes(self) -> list[str]:
        return sorted({p.node for p in self.placements} | set(self.counted))



class DeviceHoldings:
    """The holders of every device, and the free counts they leave."""

    def __init__(self) -> None:
        self._usable: dict[str, frozenset[int]] = {}
        self._size: dict[str, int] = {}  # node -> its devices, usable or not
        self._holders: dict[str, dict[int, dict[str, str]]] = {}  # node -> dev -> key -> owner
        self._counted: dict[str, dict[str, int]] = {}  # node -> key -> GPUs
        self._allocs: dict[str, Allocation] = {}
        #: owner -> how many of ``_allocs`` it owns (``holds_any``), kept by ``_apply``
        #: and ``_release``
        self._owned: dict[str, int] = {}
        self._sharing: dict[str, NodeSharing] = {}
        self.index = FreeIndex()
        #: when each node's holders and devices last changed (a pass outside the
        #: placement cache's lock is checked against them: ``stamps.py``)
        self.stamps = Stamps()
        #: each queue's usage, counted here as holders come and go (None: no queues;
        #: the placement cache gives it, ``controllers/placement/queue_counts.py``)
        self.usage: UsageIndex | None = None

    # ------------------------------------------------------------------- nodes

    def set_node_devices(self, node: str, usable: Iterable[int],
                         sharing: NodeSharing | None = None, size: int | None = None) -> None:
        """Declare the usable (healthy, not MIG-enabled) device indices of ``node``,
        and what weighs its shares: its devices' memory and MIG instances; ``size``:
        how many devices it has, usable or not (default: the usable ones), what an
        over-commit is judged against (``held_total``)."""
        self._usable[node] = frozenset(usable)
        self._size[node] = len(self._usable[node]) if size is None else size
        if sharing is not None:
            self._sharing[node] = sharing
        self._reindex(node)
        self.stamps.touch(node)

    def sharing(self, node: str) -> NodeSharing:
        return self._sharing.get(node) or NodeSharing()

    def remove_node(self, node: str) -> None:
        """The node is gone: it offers nothing. Holdings on it stay until released."""
        self._usable.pop(node, None)
        self._size.pop(node, None)
        self._sharing.pop(node, None)
        self.index.remove(node)
        self.stamps.forget(node)

    def known_nodes(self) -> list[str]:
        return sorted(self._usable)

    def _reindex(self, node: str) -> None:
        if node in self._usable:
            self.index.set(node, self.free_count(node))

    # ------------------------------------------------------------------ queries

    def usable(self, node: str) -> frozenset[int]:
        return self._usable.get(node, frozenset())

    def holders(self, node: str) -> Mapping[int, str]:
        """device index -> the name of one holder (bookings before pods), for messages."""
        out: dict[int, str] = {}
        for d, keys in self._holders.get(node, {}).items():
            out[d] = self._describe(keys)
        return out

    def holder(self, node: str, device: int) -> str | None:
        keys = self._holders.get(node, {}).get(device)
        return self._describe(keys) if keys else None

    def _describe(self, keys: Mapping[str, str]) -> str:
        allocs = [self._allocs[k] for k in keys if k in self._allocs]
        allocs.sort(key=lambda a: (a.holder, a.name))
        return allocs[0].name if allocs else next(iter(keys))

    def device_owners(self, node: str, device: int) -> frozenset[str]:
        """The owners holding ``device`` of ``node`` (empty: free)."""
        return frozenset(self._holders.get(node, {}).get(device, {}).values())

    def held_except(self, node: str, owners: frozenset[str]) -> set[int]:
        """The devices of ``node`` held by an owner not in ``owners`` (one pass over
        the node's holders, each device's owners checked at C speed: a decision asks
        it of every node it visits)."""
        return {d for d, keys in self._holders.get(node, {}).items()
                if not owners.issuperset(keys.values())}

    def device_holds(self, node: str, device: int) -> list[tuple[str, bool, Hold]]:
        """(owner, is a booking, what it holds) for each holder of ``device``."""
        keys = self._holders.get(node, {}).get(device, {})
        return [(o, not self._allocs[k].holder, self._hold(k, node, device))
                for k, o in keys.items() if k in self._allocs]

    def share_use(self, node: str) -> dict[int, tuple[Fraction, int | None]]:
        """device -> (part of it its shares take, its memory in MiB or None), for the
        devices of ``node`` held by shares only (not whole, not MIG instances)."""
        out: dict[int, tuple[Fraction, int | None]] = {}
        memory = self.sharing(node).memory
        for d in sorted(self._holders.get(node, {})):
            holds = self.device_holds(node, d)
            if holds and not any(h.whole or h.migs for _, _, h in holds):
                out[d] = (owner_use(holds, memory.get(d))[0], memory.get(d))
        return out

    def device_use(self, node: str) -> dict[int, DeviceUse]:
        """device -> how it is held and by whom, for the devices of ``node`` held by
        name (a booking and its pods are one holder, named as messages name it)."""
        out: dict[int, DeviceUse] = {}
        for d, keys in sorted(self._holders.get(node, {}).items()):
            by_owner: dict[str, dict[str, str]] = {}
            for k, o in keys.items():
                by_owner.setdefault(o, {})[k] = o
            holds = [h for _, _, h in self.device_holds(node, d)]
            migs = frozenset().union(*(h.migs for h in holds))
            kind = "whole" if any(h.whole for h in holds) else "mig" if migs else "share"
            out[d] = DeviceUse(kind, tuple(sorted(self._describe(ks)
                                                  for ks in by_owner.values())), len(migs))
        return out

    def _hold(self, key: str, node: str, device: int) -> Hold:
        return hold_of(self._allocs[key].placements, node, device)

    def _clash(self, key: str, node: str, device: int, mine: Hold) -> bool:
        """Does holder ``key`` stand in the way of ``mine`` on the device?"""
        return not compatible(mine, self._hold(key, node, device))

    def counted(self, node: str) -> Mapping[str, int]:
        """owner -> GPUs held on ``node`` without naming devices."""
        return self._counted_by_owner(node)

    def _counted_by_owner(self, node: str) -> dict[str, int]:
        counted = self._counted.get(node)
        if not counted:  # the usual node: nothing the device plugin hands out
            return {}
        booked: dict[str, int] = {}
        pods: dict[str, int] = {}
        jobs: dict[str, int] = {}
        for key, n in counted.items():
            a = self._allocs[key]
            side = jobs if a.job else pods if a.holder and not is_departing(key) else booked
            side[a.owner] = side.get(a.owner, 0) + n
        return {o: max(booked.get(o, 0), pods.get(o, 0), jobs.get(o, 0))
                for o in booked.keys() | pods.keys() | jobs.keys()}

    def counted_total(self, node: str) -> int:
        return sum(self._counted_by_owner(node).values())

    def size(self, node: str) -> int:
        """How many devices ``node`` has (0: unknown, or none)."""
        return self._size.get(node, 0)

    def held_total(self, node: str) -> int:
        """GPUs of ``node`` held: the devices held by name, plus the counted ones
        (the device plugin's, which it hands out from the same devices). Above
        ``size`` the node is over-committed: two holders use one GPU."""
        return len(self._holders.get(node, {})) + self.counted_total(node)

    def counted_holder(self, node: str, but: AbstractSet[str] = frozenset()) -> str | None:
        """One holder of GPUs of ``node`` without naming them, of an owner not in
        ``but`` (None: none)."""
        for k in self._counted.get(node, {}):
            if self._allocs[k].owner not in but:
                return self._allocs[k].name
        return None

    def named_holder(self, node: str, but: AbstractSet[str] = frozenset()) -> str | None:
        """One holder of devices of ``node`` by name, of an owner not in ``but``."""
        for keys in self._holders.get(node, {}).values():
            for k, o in keys.items():
                if o not in but:
                    return self._describe({k: o})
        return None

    def free_devices(self, node: str) -> frozenset[int]:
        held = self._holders.get(node, {})
        return frozenset(d for d in self._usable.get(node, ()) if d not in held)

    def free_count(self, node: str) -> int:
        return max(0, len(self.free_devices(node)) - self.counted_total(node))

    def free_count_without(self, node: str, owners: frozenset[str]) -> int:
        """Free GPUs of ``node`` if ``owners`` held nothing."""
        held = self._holders.get(node, {})
        free = sum(1 for d in self._usable.get(node, ())
                   if not (set(held.get(d, {}).values()) - owners))
        counted = sum(n for o, n in self._counted_by_owner(node).items() if o not in owners)
        return max(0, free - counted)

    def allocation(self, key: str) -> Allocation | None:
        return self._allocs.get(key)

    def allocations(self) -> Mapping[str, Allocation]:
        return self._allocs

    def bookings(self) -> list[Allocation]:
        """Every holder that is not a pod."""
        return [a for a in self._allocs.values() if not a.holder]

    def held_by_owner(self, owner: str) -> list[Allocation]:
        return [a for a in self._allocs.values() if a.owner == owner]

    def holds_any(self, owners: Iterable[str]) -> bool:
        """Does any of ``owners`` hold anything: a booking, a pod, a Job, a claim, what
        a departed booking holds on to (without a pass over every holder)?"""
        return any(o in self._owned for o in owners)

    def is_committed(self, key: str) -> bool:
        a = self._allocs.get(key)
        return a is not None and a.committed

    def priority_of(self, key: str) -> int:
        a = self._allocs.get(key)
        return a.priority if a is not None else 0

    def keys_on(self, node: str) -> set[str]:
        """Keys of the bookings holding something on ``node``."""
        keys = {k for devs in self._holders.get(node, {}).values() for k in devs}
        keys |= set(self._counted.get(node, {}))
        return {k for k in keys if k in self._allocs and not self._allocs[k].holder}

    def holding(self, key: str) -> Allocation | None:
        """The holding (not a booking) recorded under ``key``."""
        a = self._allocs.get(key)
        return a if a is not None and a.holder else None

    def has_pod(self, uid: str) -> bool:
        return pod_holder_key(uid) in self._allocs

    def pod(self, uid: str) -> Allocation | None:
        return self._allocs.get(pod_holder_key(uid))

    def job(self, uid: str) -> Allocation | None:
        return self._allocs.get(job_holder_key(uid))

    def _apply(self, alloc: Allocation) -> None:
        touched = set()
        for p in alloc.placements:
            if p.devices:
                h = self._holders.setdefault(p.node, {})
                for d in p.devices:
                    h.setdefault(d, {})[alloc.key] = alloc.owner
                touched.add(p.node)
        for node, n in alloc.counted.items():
            self._counted.setdefault(node, {})[alloc.key] = n
            touched.add(node)
        replaced = self._allocs.get(alloc.key)
        if replaced is not None:
            self._disown(replaced)
        self._allocs[alloc.key] = alloc
        self._owned[alloc.owner] = self._owned.get(alloc.owner, 0) + 1
        for node in touched:
            self._reindex(node)
        self.stamps.held(touched)
        if self.usage is not None:
            self.usage.apply(alloc)

    def _release(self, alloc: Allocation) -> None:
        touched = set()
        for p in alloc.placements:
            h = self._holders.get(p.node)
            if h is not None:
                for d in p.devices:
                    keys = h.get(d)
                    if keys is not None:
                        keys.pop(alloc.key, None)
                        if not keys:
                            del h[d]
                if not h:
                    del self._holders[p.node]
            touched.add(p.node)
        for node in alloc.counted:
            c = self._counted.get(node)
            if c is not None:
                c.pop(alloc.key, None)
                if not c:
                    del self._counted[node]
            touched.add(node)
        gone = self._allocs.pop(alloc.key, None)
        if gone is not None:
            self._disown(gone)
        for node in touched:
            self._reindex(node)
        self.stamps.held(touched)
        if self.usage is not None:
            self.usage.release(alloc)

    def _disown(self, alloc: Allocation) -> None:
        """``alloc`` leaves ``_allocs``: its owner owns one holder less."""
        left = self._owned.get(alloc.owner, 0) - 1
        if left > 0:
            self._owned[alloc.owner] = left
        else:
            self._owned.pop(alloc.owner, None)
