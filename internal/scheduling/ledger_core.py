"""The allocation ledger's device arithmetic: who holds which GPU of which node.

The truth lives in the API: devices are held by pods, as kube-scheduler holds a
pod's resources until the pod object is gone or has finished. The ledger is a cache
of that truth plus the decisions not yet backed by pods, never a second truth.

Holders, each an ``Allocation`` under a key:

- *pods* (``pod:<uid>``): every bound, unfinished pod that names devices or requests
  ``nvidia.com/gpu`` (see ``pods.pod_holding``): ours, the seed path's, anybody's.
  A pod is never refused: it exists whatever the ledger thinks; a pod that shares a
  device with another owner is reported as a conflict.
- *claims* (``claim:<uid>``): allocated ResourceClaims of the DRA driver, whoever
  allocated them (kube-scheduler, us), recorded like pods (``set_pod``).
- *Jobs* (``job:<uid>``): every unfinished Job of a GPUWorkload (Job mode), for what
  its bound pod template names, until the Job is gone from the API (see
  ``jobs.job_holding``): the Job controller may still make a pod of it.
- *bookings* (the workload's ``namespace/name``, or a pod book's key): a decision
  assumed before its pods exist, or committed in ``status.placements``.

A device is held whole (one owner), shared (many owners, each a memory or fraction
share, never more than the device between them) or, MIG-enabled, as its instances
(one owner each); ``shares`` has the arithmetic and says which holds may stand side
by side. A MIG-enabled device is never usable whole (``set_node_devices`` leaves it
out of ``usable``).

Each holder has an *owner*, the group that may share a device: one attempt of one
GPUWorkload (``<uid>#<attempt>``) for its booking and its pods, so that replicas of
one annotation map may name the same device while a previous attempt's terminating
pods still count as someone else.

What it keeps of docs/architecture.md's invariants (numbered as there):

- invariant 2: a device of a node is held by at most one owner, except where a
  preemptor's booking is *nominated* over its victims' pods (``overlap``): nobody
  else may take those devices, and the preemptor starts only when the victims are
  gone;
- invariants 1 and 3: a device is free only when no holder holds it: releasing a
  booking (deletion, an ended attempt, a conflict, preemption) frees nothing its
  pods still hold;
- invariant 4: ``Ledger.rebuild`` (``ledger.py``, which reads API objects into
  this arithmetic) recreates the book from the cache, pods first (what runs wins
  every conflict), then committed placements, before any new placement is made.

``free_count(node) = |usable - named-held| - counted``, where each owner's counted
GPUs on a node are the largest of what its bookings, its pods and its Jobs count (a
device-plugin workload's booking, its Job and its pod are the same GPUs, not three
times as many).
Free capacity is indexed by free count (``FreeIndex``).

Not thread-safe: callers serialize schedule + assume (one lock in the controller).

Here: the holders (``Allocation``), the transactional ``assume`` (``_check`` then
``_apply``), ``commit``, ``forget``, ``set_pod``, the free counts and the blockers of
a nomination. Reading pods, Jobs, claims and workloads into it is ``ledger.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from api.v1alpha1.types import Placement
from internal.scheduling.freeindex import FreeIndex
from internal.scheduling.jobs import JobHolding, job_holder_key
from internal.scheduling.pods import PodHolding, pod_holder_key
from internal.scheduling.shares import (
    Hold,
    NodeSharing,
    compatible,
    hold_of,
    owner_use,
    portion_problem,
)

#: the key prefix of what a workload holds on to after its booking was released
#: while its children may still exist (``Ledger.depart``): counted like a booking
DEPARTING = "departing:"


def is_departing(key: str) -> bool:
    return key.startswith(DEPARTING)


class LedgerConflict(Exception):
    """An assume would break an invariant; the message names node and devices."""


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

    def __post_init__(self) -> None:
        self.owner = self.owner or self.key
        self.name = self.name or self.key

    @property
    def nodes(self) -> list[str]:
        return sorted({p.node for p in self.placements} | set(self.counted))



class DeviceLedger:
    """The device arithmetic of the ledger (``Ledger`` adds the reading of API
    objects into it)."""

    def __init__(self) -> None:
        self._usable: dict[str, frozenset[int]] = {}
        self._holders: dict[str, dict[int, dict[str, str]]] = {}  # node -> dev -> key -> owner
        self._counted: dict[str, dict[str, int]] = {}  # node -> key -> GPUs
        self._allocs: dict[str, Allocation] = {}
        self._sharing: dict[str, NodeSharing] = {}
        self.index = FreeIndex()
        #: called with (holder, True) when a holder is added, (holder, False) when it
        #: goes (quota's usage index keeps its sums by them)
        self.watchers: list[Callable[[Allocation, bool], None]] = []

    # ------------------------------------------------------------------- nodes

    def set_node_devices(self, node: str, usable: Iterable[int],
                         sharing: NodeSharing | None = None) -> None:
        """Declare the usable (healthy, not MIG-enabled) device indices of ``node``,
        and what weighs its shares: its devices' memory and MIG instances."""
        self._usable[node] = frozenset(usable)
        if sharing is not None:
            self._sharing[node] = sharing
        self._reindex(node)

    def sharing(self, node: str) -> NodeSharing:
        return self._sharing.get(node) or NodeSharing()

    def remove_node(self, node: str) -> None:
        """The node is gone: it offers nothing. Holdings on it stay until released."""
        self._usable.pop(node, None)
        self._sharing.pop(node, None)
        self.index.remove(node)

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

    def _hold(self, key: str, node: str, device: int) -> Hold:
        return hold_of(self._allocs[key].placements, node, device)

    def _clash(self, key: str, node: str, device: int, mine: Hold) -> bool:
        """Does holder ``key`` stand in the way of ``mine`` on the device?"""
        return not compatible(mine, self._hold(key, node, device))

    def counted(self, node: str) -> Mapping[str, int]:
        """owner -> GPUs held on ``node`` without naming devices."""
        return self._counted_by_owner(node)

    def _counted_by_owner(self, node: str) -> dict[str, int]:
        booked: dict[str, int] = {}
        pods: dict[str, int] = {}
        jobs: dict[str, int] = {}
        for key, n in self._counted.get(node, {}).items():
            a = self._allocs[key]
            side = jobs if a.job else pods if a.holder and not is_departing(key) else booked
            side[a.owner] = side.get(a.owner, 0) + n
        return {o: max(booked.get(o, 0), pods.get(o, 0), jobs.get(o, 0))
                for o in booked.keys() | pods.keys() | jobs.keys()}

    def counted_total(self, node: str) -> int:
        return sum(self._counted_by_owner(node).values())

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

    def blockers(self, key: str) -> dict[str, list[str]]:
        """node -> names of the holders the booking ``key`` still waits for before
        its children may be made: whatever another owner still holds of its devices
        (named), and, where its nodes lack the GPUs it counts, the other owners'
        counted holdings there; for a nomination also every holding of the owners it
        was booked over (its victims: their pods, a pod book's booking).

        Devices, not owners, decide: a victim's pod that changed owner while it
        terminates (its workload deleted with ``--cascade=orphan``, so the garbage
        collector took its ownerReference away) still holds the device, and so does
        any pod that came to name it after the booking was made."""
        a = self._allocs.get(key)
        if a is None:
            return {}
        mine = a.owner

        def waits_for(k: str, owner: str) -> bool:
            return k != key and (owner != mine or owner in a.overlap)

        out: dict[str, set[str]] = {}
        for p in a.placements:
            held = self._holders.get(p.node, {})
            for d in p.devices:
                mine_d = self._hold(key, p.node, d)
                for k, owner in held.get(d, {}).items():
                    if waits_for(k, owner) and (owner in a.overlap
                                                or self._clash(k, p.node, d, mine_d)):
                        out.setdefault(p.node, set()).add(self._allocs[k].name)
        for node, need in a.counted.items():
            short = self.free_count_without(node, frozenset({mine})) < need + sum(
                len(p.devices) for p in a.placements if p.node == node)
            for k in self._counted.get(node, {}):
                other = self._allocs[k]
                if waits_for(k, other.owner) and (short or other.owner in a.overlap):
                    out.setdefault(node, set()).add(other.name)
        return {n: sorted(v) for n, v in out.items()}

    # --------------------------------------------------------------- mutations

    def assume(
        self,
        key: str,
        placements: Sequence[Placement],
        *,
        gpus_per_replica: int = 0,
        priority: int = 0,
        committed: bool = False,
        check_capacity: bool = True,
        owner: str = "",
        uid: str = "",
        overlap: Iterable[str] = (),
    ) -> Allocation:
        """Book ``placements`` for ``key`` (replacing what it held).

        Placements with devices are named holdings; a placement without devices
        (device-plugin mode) holds ``gpus_per_replica`` GPUs of its node, counted.
        ``overlap``: owners whose holdings this booking may share (a preemptor's
        victims, still terminating). Raises LedgerConflict, leaving the ledger
        unchanged, when a device is held by another owner or (with
        ``check_capacity``) a node lacks the capacity.
        """
        previous = self._allocs.get(key)
        if previous is not None:
            self._release(previous)
        alloc = Allocation(key, tuple(placements), {}, priority, committed, gpus_per_replica,
                           owner, uid=uid, overlap=frozenset(overlap))
        for p in placements:
            if not p.devices:
                alloc.counted[p.node] = alloc.counted.get(p.node, 0) + gpus_per_replica
        try:
            self._check(alloc, check_capacity)
        except LedgerConflict:
            if previous is not None:
                self._apply(previous)
            raise
        self._apply(alloc)
        return alloc

    def commit(self, key: str) -> None:
        """The booking of ``key`` is durable (its status written, or its pod created)."""
        a = self._allocs.get(key)
        if a is None:
            raise KeyError(key)
        a.committed = True

    def forget(self, key: str) -> Allocation | None:
        """Release the booking ``key``. Its pods, if any, still hold what they hold.
        Returns what it held (None if nothing)."""
        a = self._allocs.get(key)
        if a is not None:
            self._release(a)
        return a

    def set_pod(self, h: PodHolding, priority: int = 0) -> list[str]:
        """Record what a pod holds (replacing what it held before). Never refused;
        returns the conflicts it makes with other owners, for a report. Also records
        an allocated ResourceClaim's holding (``resourceslices.ClaimHolding``, keyed
        ``claim:<uid>``): a claim holds its devices as a pod does."""
        self.remove_holder(h.key)
        placements = (Placement(index=0, node=h.node, devices=list(h.devices),
                                share=h.share or None, mig=h.mig or None),)
        alloc = Allocation(h.key, placements if h.devices else (), {}, priority, True, 0,
                           h.owner, holder=True, name=h.name, job=isinstance(h, JobHolding))
        if h.counted:
            alloc.counted[h.node] = h.counted
        held = self._holders.get(h.node, {})
        mine = {d: hold_of(placements, h.node, d) for d in h.devices}
        conflicts = sorted({f"{h.node}: device {d} also held by {self._describe({k: o})}"
                            for d in h.devices for k, o in held.get(d, {}).items()
                            if o != h.owner and not self._nominated_over(k, h.owner)
                            and self._clash(k, h.node, d, mine[d])})
        self._apply(alloc)
        return conflicts

    def _nominated_over(self, key: str, owner: str) -> bool:
        """Is ``key`` a booking nominated over ``owner``'s holdings (a preemption)?"""
        a = self._allocs.get(key)
        return a is not None and owner in a.overlap

    def remove_holder(self, key: str) -> bool:
        """A pod's, a Job's or a claim's holding is gone. True if it held something."""
        a = self._allocs.get(key)
        if a is None or not a.holder:
            return False
        self._release(a)
        return True

    def holding(self, key: str) -> Allocation | None:
        """The holding (not a booking) recorded under ``key``."""
        a = self._allocs.get(key)
        return a if a is not None and a.holder else None

    def has_pod(self, uid: str) -> bool:
        return pod_holder_key(uid) in self._allocs

    def pod(self, uid: str) -> Allocation | None:
        return self._allocs.get(pod_holder_key(uid))

    def remove_pod(self, uid: str) -> bool:
        """The pod is gone or finished. True if it held something."""
        return self.remove_holder(pod_holder_key(uid))

    def job(self, uid: str) -> Allocation | None:
        return self._allocs.get(job_holder_key(uid))

    def remove_job(self, uid: str) -> bool:
        """The Job is gone or finished. True if it held something."""
        return self.remove_holder(job_holder_key(uid))

    # ---------------------------------------------------------------- internals

    def _check(self, alloc: Allocation, check_capacity: bool) -> None:
        ok_owners = {alloc.owner} | set(alloc.overlap)
        named: dict[str, set[int]] = {}
        for p in alloc.placements:
            if p.devices:
                named.setdefault(p.node, set()).update(p.devices)
        for node, devs in sorted(named.items()):
            held = self._holders.get(node, {})
            taken = sorted(d for d in devs if any(
                o not in ok_owners and self._clash(k, node, d, hold_of(alloc.placements, node, d))
                for k, o in held.get(d, {}).items()))
            if taken:
                others = sorted({self._describe({k: o}) for d in taken
                                 for k, o in held[d].items() if o not in ok_owners})
                raise LedgerConflict(
                    f"{node}: device(s) {','.join(map(str, taken))} held by {', '.join(others)}"
                )
        if not check_capacity:
            return
        for node in sorted(set(named) | set(alloc.counted)):
            usable = self._usable.get(node)
            if usable is None:
                raise LedgerConflict(f"{node}: unknown node")
            holds = {d: hold_of(alloc.placements, node, d) for d in named.get(node, set())}
            for d, h in sorted(holds.items()):
                why = self._portion_problem(node, d, h, frozenset(ok_owners))
                if why:
                    raise LedgerConflict(f"{node}: device {d}: {why}")
            devs = {d for d, h in holds.items() if h.whole}
            missing = sorted(devs - usable)
            if missing:
                raise LedgerConflict(f"{node}: device(s) {','.join(map(str, missing))} not usable")
            free = self.free_count_without(node, frozenset(ok_owners))
            need = len(devs) + alloc.counted.get(node, 0) + sum(
                1 for d, h in holds.items() if not h.whole and not h.migs
                and not set(self.device_owners(node, d)) - ok_owners)
            if free < need:
                raise LedgerConflict(f"{node}: {free} free GPU(s), needs {need}")

    def refuse_mig(self, p: Placement) -> None:
        """Raises LedgerConflict when ``p`` names a MIG-enabled device whole (offered
        only as its instances). A held share is refused by ``assume`` itself."""
        mig = sorted(d for d in p.devices if d in self.sharing(p.node).mig)
        if mig and not p.mig:
            raise LedgerConflict(f"{p.node}: device(s) {','.join(map(str, mig))} MIG-enabled: "
                                 "offered only as MIG instances (spec.migProfile)")

    def _portion_problem(self, node: str, device: int, h: Hold,
                         ok_owners: frozenset[str]) -> str | None:
        """Why the shares or MIG instances of ``h`` do not fit on the device."""
        others = [x for x in self.device_holds(node, device) if x[0] not in ok_owners]
        return portion_problem(self.sharing(node), self.usable(node), device, h, others)

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
        self._allocs[alloc.key] = alloc
        for node in touched:
            self._reindex(node)
        for watch in self.watchers:
            watch(alloc, True)

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
        self._allocs.pop(alloc.key, None)
        for node in touched:
            self._reindex(node)
        for watch in self.watchers:
            watch(alloc, False)


# Why this module is over 400 lines: ``DeviceLedger`` is one class whose methods keep
# one set of invariants together (every change goes through ``_check`` and
# ``_apply``/``_release`` and re-indexes the free counts); cutting it would put half
# of a transaction in another file. The reading of API objects is ``ledger.py``.
