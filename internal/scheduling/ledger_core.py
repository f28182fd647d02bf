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

Not thread-safe: callers serialize schedule + assume (one lock in the controller).

Here: the transactional ``assume`` (``_check`` then ``_apply``), ``commit``,
``forget``, ``set_pod`` (never refused; its conflicts reported) and the blockers of
a nomination. The holders and their tables, the queries and the free counts are
``holdings.py``'s (``DeviceHoldings``); reading pods, Jobs, claims and workloads into
it is ``ledger.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from api.v1alpha1.types import Placement
from internal.scheduling.holdings import Allocation, DeviceHoldings
from internal.scheduling.jobs import JobHolding, job_holder_key
from internal.scheduling.pods import PodHolding, pod_holder_key
from internal.scheduling.shares import Hold, hold_of, portion_problem

#: the words of a holder's over-commit (``DeviceLedger.set_pod``)
OVERCOMMITTED = "over-committed"


def is_conflict(problem: str) -> bool:
    """Is this problem of a holder a device conflict (a device held by two owners,
    or a node over-committed), not an unreadable object?"""
    return "also held by" in problem or f": {OVERCOMMITTED}: " in problem


class LedgerConflict(Exception):
    """An assume would break an invariant; the message names node and devices."""


class DeviceLedger(DeviceHoldings):
    """The device arithmetic of the ledger: bookings assumed, committed and
    forgotten, holders recorded, nominations' blockers (``Ledger`` adds the reading
    of API objects into it)."""

    def __init__(self) -> None:
        super().__init__()
        #: holder key -> (what ``set_pod`` was given, the allocation it made): an
        #: event that changes nothing of a holding re-books nothing (a pod sees ~3
        #: updates while its holding changes once)
        self._set_as: dict[str, tuple[tuple[PodHolding, int, str], Allocation]] = {}

    def blockers(self, key: str) -> dict[str, list[str]]:
        """node -> names of the holders the booking ``key`` still waits for before
        its children may be made: whatever another owner still holds of its devices
        (named), and, where its nodes lack the GPUs it counts, the other owners'
        counted holdings there; for a nomination also every holding of the owners it
        was booked over (its victims: their pods, a pod book's booking), and their
        holdings elsewhere too (``_victims_holdings``).

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
        for held in self._victims_holdings(a):
            for node in held.nodes:
                out.setdefault(node, set()).add(held.name)
        return {n: sorted(v) for n, v in out.items()}

    def _victims_holdings(self, a: Allocation) -> list[Allocation]:
        """What the owners the nomination ``a`` was booked over still hold, wherever
        it is: their pods, Jobs and what they hold on to while departing. Their
        queue counts it until it is gone, so the preemptor starts after it, not
        beside it, on whichever devices it was given (a reclaim takes a victim for
        the quota alone, away from those devices). An owner booked again is not
        waited for here (a victim placed again keeps its owner, as an eviction
        spends no retry; a pod book's victim keeps its booking until its pods go):
        only what stands on the nomination's own devices is (above)."""
        if not a.overlap:
            return []
        held: list[Allocation] = []
        booked: set[str] = set()
        for x in self._allocs.values():
            if x.owner not in a.overlap or x.key == a.key:
                continue
            if x.holder:
                held.append(x)
            else:
                booked.add(x.owner)
        return [x for x in held if x.owner not in booked]

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
        self.stamps.held(a.nodes)

    def end_nomination(self, key: str) -> bool:
        """``key``'s booking is no longer a nomination over anybody (its children
        are made): its overlap goes, in place. The queues' usage (``usage``) does
        not read an overlap, so it is the same before and after. False when it was
        none."""
        a = self._allocs.get(key)
        if a is None or not a.overlap:
            return False
        a.overlap = frozenset()
        self.stamps.held(a.nodes)
        return True

    def forget(self, key: str) -> Allocation | None:
        """Release the booking ``key``. Its pods, if any, still hold what they hold.
        Returns what it held (None if nothing)."""
        a = self._allocs.get(key)
        if a is not None:
            self._release(a)
        return a

    def set_pod(self, h: PodHolding, priority: int = 0, *, child_of: str = "") -> list[str]:
        """Record what a pod holds (replacing what it held before). Never refused;
        returns the conflicts it makes with other owners, for a report (not with its
        kin: ``child_of`` is the workload attempt whose pod it was booked as, and an
        orphan beside that attempt's booking or its other pods is none). Also records
        an allocated ResourceClaim's holding (``resourceslices.ClaimHolding``, keyed
        ``claim:<uid>``): a claim holds its devices as a pod does.

        A holder whose arrival takes its node's named + counted GPUs above the node's
        devices over-commits it (``Allocation.overcommit``, returned while it holds
        that): the later holder, whatever kind the earlier ones are. Named devices
        are the ledger's, counted ones the device plugin's, claims the DRA driver's;
        two authorities on one node can hand out one GPU twice, and only the sum shows
        it (docs/architecture.md, invariant 2)."""
        old = self._allocs.get(h.key)
        given = (h, priority, child_of)
        last = self._set_as.get(h.key)
        if last is not None and last[1] is old and last[0] == given:
            return self._unchanged(h, old, child_of)
        # seen before on this node: it keeps its verdict (an earlier holder updated
        # is never taken for the later one)
        seen = old is not None and old.holder and old.nodes == [h.node]
        over = old.overcommit if old is not None and seen else ""
        self.remove_holder(h.key)
        before = self.held_total(h.node)
        placements = (Placement(index=0, node=h.node, devices=list(h.devices),
                                share=h.share or None, mig=h.mig or None),)
        alloc = Allocation(h.key, placements if h.devices else (), {}, priority, True, 0,
                           h.owner, holder=True, name=h.name, job=isinstance(h, JobHolding),
                           child_of=child_of)
        if h.counted:
            alloc.counted[h.node] = h.counted
        held = self._holders.get(h.node, {})
        mine = {d: hold_of(placements, h.node, d) for d in h.devices}
        conflicts = sorted({f"{h.node}: device {d} also held by {self._describe({k: o})}"
                            for d in h.devices for k, o in held.get(d, {}).items()
                            if not self._kin(k, o, h.owner, child_of)
                            and not self._nominated_over(k, h.owner)
                            and self._clash(k, h.node, d, mine[d])})
        self._apply(alloc)
        after, size = self.held_total(h.node), self.size(h.node)
        if not seen and size and after > max(before, size):
            over = self._overcommit_text(h.node, after, size)
        alloc.overcommit = over
        self._set_as[h.key] = (given, alloc)
        return conflicts + ([over] if over else [])

    def _unchanged(self, h: PodHolding, alloc: Allocation, child_of: str) -> list[str]:
        """``set_pod`` of what ``alloc`` already records: nothing is re-booked, and
        what it would report is said again (the conflicts with the other holders as
        they are now, its over-commit verdict kept)."""
        held = self._holders.get(h.node, {})
        mine = {d: hold_of(alloc.placements, h.node, d) for d in h.devices}
        conflicts = sorted({f"{h.node}: device {d} also held by {self._describe({k: o})}"
                            for d in h.devices for k, o in held.get(d, {}).items()
                            if k != h.key and not self._kin(k, o, h.owner, child_of)
                            and not self._nominated_over(k, h.owner)
                            and self._clash(k, h.node, d, mine[d])})
        return conflicts + ([alloc.overcommit] if alloc.overcommit else [])

    def _overcommit_text(self, node: str, held: int, size: int) -> str:
        """``node2: over-committed: 6 GPUs held on its 4 devices (named 0,1 by ns/w;
        counted 4: pod ns/a 2, pod ns/b 2)``."""
        named = sorted(self._holders.get(node, {}))
        keys: dict[str, dict[str, str]] = {}  # owner -> its counted holders
        for key in self._counted.get(node, {}):
            owner = self._allocs[key].owner
            keys.setdefault(owner, {})[key] = owner
        by = {self._describe(keys[o]): n for o, n in self._counted_by_owner(node).items()}
        parts = []
        if named:
            who = sorted({self._describe(self._holders[node][d]) for d in named})
            parts.append(f"named {','.join(map(str, named))} by {', '.join(who)}")
        if by:
            parts.append(f"counted {sum(by.values())} (device plugin): "
                         + ", ".join(f"{k} {v}" for k, v in sorted(by.items())))
        return f"{node}: {OVERCOMMITTED}: {held} GPUs held on its {size} devices " \
            f"({'; '.join(parts)})"

    def _kin(self, key: str, owner: str, mine: str, child_of: str) -> bool:
        """Is holder ``key`` (of ``owner``) of the group of a pod of owner ``mine``,
        booked as a pod of ``child_of``: the same owner, or the same workload attempt
        (its booking, or another of its pods, orphaned or not)?"""
        if owner == mine:
            return True
        other = self._allocs.get(key)
        return bool(child_of) and (owner == child_of or (
            other is not None and other.child_of == child_of))

    def _nominated_over(self, key: str, owner: str) -> bool:
        """Is ``key`` a booking nominated over ``owner``'s holdings (a preemption)?"""
        a = self._allocs.get(key)
        return a is not None and owner in a.overlap

    def remove_holder(self, key: str) -> bool:
        """A pod's, a Job's or a claim's holding is gone. True if it held something."""
        self._set_as.pop(key, None)
        a = self._allocs.get(key)
        if a is None or not a.holder:
            return False
        self._release(a)
        return True

    def remove_pod(self, uid: str) -> bool:
        """The pod is gone or finished. True if it held something."""
        return self.remove_holder(pod_holder_key(uid))

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
